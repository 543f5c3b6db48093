"""The generated tasks: the same items for the same seed, splits from disjoint keys (no test
answer is ever trained on), answers that follow each task's rule, and a tiny model that learns
the translation, the verifiable and the question-answering task from scratch."""

import re

import pytest

from llmlab.data.tasks import (
    CITIES,
    STATEMENTS,
    TASKS,
    TaskItem,
    city_of,
    exact_match,
    fact_statements,
    number_words,
    qa_outcome,
    task_splits,
)

SIZES = {"train": 400, "validation": 50, "test": 100}


@pytest.mark.parametrize("name", sorted(TASKS))
def test_the_same_seed_gives_the_same_items_and_another_seed_others(name):
    first, again = task_splits(name, SIZES, seed=0), task_splits(name, SIZES, seed=0)
    assert first == again
    assert task_splits(name, SIZES, seed=1)["test"] != first["test"]
    assert {split: len(items) for split, items in first.items()} == SIZES


@pytest.mark.parametrize("name", sorted(TASKS))
def test_no_two_splits_share_a_key_or_a_prompt(name):
    splits = task_splits(name, SIZES)
    for a, b in (("train", "test"), ("train", "validation"), ("validation", "test")):
        assert not {i.key for i in splits[a]} & {i.key for i in splits[b]}
        assert not {i.prompt for i in splits[a]} & {i.prompt for i in splits[b]}


def test_no_test_prompt_shares_its_longest_word_ngrams_with_training():
    # Beyond equal keys: no test prompt has a training prompt's words in the same order, up to
    # the prompt's length less one word (what a near-copy would share).
    splits = task_splits("number-words", SIZES)
    def ngrams(text, n):
        words = text.split()
        return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}
    for item in splits["test"]:
        n = len(item.prompt.split())
        assert all(not ngrams(item.prompt, n) & ngrams(t.prompt, n) for t in splits["train"])


@pytest.mark.parametrize(("n", "words"), [
    (0, "zero"), (7, "seven"), (13, "thirteen"), (20, "twenty"), (42, "forty-two"),
    (100, "one hundred"), (115, "one hundred fifteen"), (4071, "four thousand seventy-one"),
    (9000, "nine thousand"), (12_345, "twelve thousand three hundred forty-five"),
    (999_999, "nine hundred ninety-nine thousand nine hundred ninety-nine"),
])
def test_number_words(n, words):
    assert number_words(n) == words


def test_number_words_refuses_what_it_cannot_say():
    with pytest.raises(ValueError, match="0 to 999,999"):
        number_words(1_000_000)


def test_each_answer_follows_its_rule():
    splits = {name: task_splits(name, SIZES)["test"] for name in TASKS}
    for item in splits["addition"]:
        a, b = map(int, re.findall(r"\d+", item.prompt))
        assert int(item.answer) == a + b and 10 <= a < 100 and 10 <= b < 100
    for item in splits["dates"]:
        year, month, day = item.key
        assert item.prompt == f"Date: {year:04d}-{month:02d}-{day:02d} ="
        assert item.answer.endswith(f" {day}, {year}")
    back = {item.key: item for item in task_splits("dates-back", SIZES, seed=0)["test"]}
    dates = {item.key: item for item in task_splits("dates", SIZES, seed=0)["test"]}
    for key in back.keys() & dates.keys():  # the same key, both ways
        assert dates[key].answer in back[key].prompt and back[key].answer in dates[key].prompt
    for item in splits["number-words"]:
        assert item.answer == number_words(item.key)
    for item in splits["facts-qa"]:
        assert item.prompt == f"Q: Where does {item.key} live?\nA:"
        assert item.answer == city_of(item.key) in CITIES
    assert all(item.target == f" {item.answer}\n" for items in splits.values() for item in items)


def test_too_many_items_for_the_task_is_refused():
    with pytest.raises(ValueError, match="ran out of distinct examples"):
        task_splits("addition", {"train": 8000, "test": 1000})  # 90 x 90 = 8,100 sums
    with pytest.raises(ValueError, match="unknown task"):
        task_splits("sums", SIZES)


def test_facts_are_stated_in_as_many_ways_as_asked_and_keep_their_person():
    test = task_splits("facts-qa", SIZES)["test"][:3]
    statements = fact_statements(test, paraphrases=len(STATEMENTS))
    assert len(statements) == 3 * len(STATEMENTS)
    for statement in statements:
        assert statement.key in statement.prompt
        assert statement.answer == city_of(statement.key) + "."
    assert [s.prompt for s in fact_statements(test[:1])] == [f"{test[0].key} lives in"]
    assert city_of("Redaka") == "Lima"  # crc32 of the name: the same city on every machine
    with pytest.raises(ValueError, match="paraphrases must be 1 to 4"):
        fact_statements(test, paraphrases=0)


def test_qa_outcomes_tell_a_hallucination_from_other_errors():
    item = TaskItem("Kalo", "Q: Where does Kalo live?\nA:", "Oslo")
    other_city = next(city for city in CITIES if city != "Oslo")
    assert qa_outcome(" Oslo", item) == "correct"
    assert qa_outcome(other_city, item) == "hallucination"  # fluent, and wrong
    assert qa_outcome("Oslo.", item) == "other" and qa_outcome("the the", item) == "other"


def test_exact_match_ignores_only_the_spaces_around_the_answer():
    item = TaskItem("key", "12 + 30 =", "42")
    assert exact_match(" 42 ", item) and exact_match("42", item)
    assert not exact_match("42.", item) and not exact_match("4 2", item)


def learn_from_scratch(
    train: list[TaskItem], test: list[TaskItem], vocab_size: int, steps: int
) -> tuple[list[str], list[str], list[float]]:
    """The test prompts' greedy completions by a tiny model before and after it learns `train`
    from scratch, and its losses: a BPE of `vocab_size` tokens trained on `train`, a GPT-2 of 2
    layers of width 64 (about 0.1 M parameters), `steps` steps of 32 examples at 3e-3."""
    from llmlab.data.tokenization import train_bpe
    from llmlab.evaluate.decoding import complete
    from llmlab.models import build_model, preset
    from llmlab.train.finetune import encode_example, finetune, task_batches

    tokenizer = train_bpe([item.prompt + item.target for item in train], vocab_size)
    shape = preset("tiny", n_layer=2, d_model=64, n_head=4, vocab_size=len(tokenizer), context=64)
    model = build_model(shape, seed=0)  # seeded: the same weights every run
    prompts = [item.prompt for item in test]
    before = complete(model, tokenizer, prompts, max_new_tokens=12)
    examples = [encode_example(lambda text: tokenizer(text).input_ids, item.prompt, item.target)
                for item in train]
    result = finetune(model, task_batches(examples, 32, seed=0), steps, 3e-3, warmup_steps=20,
                      progress=False)
    return before, complete(model, tokenizer, prompts, max_new_tokens=12), result.losses


def exact(outputs: list[str], items: list[TaskItem]) -> float:
    return sum(map(exact_match, outputs, items)) / len(items)


def test_a_tiny_model_learns_the_dates_from_scratch_in_300_steps():
    # Learnability in steps, not seconds: a BPE of 300 tokens, 300 steps: all 50 held-out dates
    # exact when measured (about 6 s on one thread), where the untrained model gets none.
    splits = task_splits("dates", {"train": 2000, "test": 50})
    before, after, losses = learn_from_scratch(splits["train"], splits["test"], 300, 300)
    assert exact(before, splits["test"]) == 0
    assert losses[-1] < losses[0] / 20
    assert exact(after, splits["test"]) >= 0.8


def test_a_tiny_model_learns_two_digit_addition_from_scratch_in_1000_steps():
    # 258 tokens, the fewest train_bpe makes: every digit stays a token of its own (at 300,
    # " 12" is one token, and seed 0 got 18% at 800 steps instead of 91%). The first digit comes
    # early, the last one suddenly, somewhere between 500 and 900 steps: at 800 steps one seed
    # of 13 scored 39%; at 1000 steps all 13 (torch and split seeds 0-12) scored 95-100% of 100
    # held-out sums exact (about 11 s on one thread), where the untrained model gets none.
    splits = task_splits("addition", {"train": 4000, "test": 100})
    before, after, losses = learn_from_scratch(splits["train"], splits["test"], 258, 1000)
    assert exact(before, splits["test"]) == 0
    assert losses[-1] < losses[0] / 20
    assert exact(after, splits["test"]) >= 0.8


def test_a_tiny_model_answers_questions_about_facts_it_only_read_in_400_steps():
    # The model reads every person's fact in all of STATEMENTS' wordings and is asked only about
    # the 100 training people; the test asks the 50 others. Measured at 400 steps over torch and
    # split seeds 0-5 (about 7 s on one thread): 40-74% right where chance is 1/14 (7%; 6% when
    # the test people's facts were left unread), while it completed the test people's statements
    # 98-100% right: reading a fact is not yet answering a question about it. All but at most
    # two wrong answers in 50 named another of the cities: fluent and wrong.
    splits = task_splits("facts-qa", {"train": 100, "test": 50})
    reading = fact_statements(splits["train"] + splits["test"], paraphrases=len(STATEMENTS))
    before, after, losses = learn_from_scratch(reading + splits["train"], splits["test"], 300, 400)
    assert exact(before, splits["test"]) == 0
    assert losses[-1] < losses[0] / 20
    outcomes = list(map(qa_outcome, after, splits["test"]))
    assert outcomes.count("correct") >= 0.25 * len(outcomes)  # 3.5 times chance
    assert outcomes.count("hallucination") >= 3 * outcomes.count("other")
