"""GSM8K's format and checker, offline: records as GSM8K writes them parse into their final
answer, and the reward reads a completion's final number. Mistakes caught: a number inside the
reasoning (or a calculator note) taken for the answer, "1,000" read as 1 or as other than 1000,
a minus or decimals dropped, a completion with no answer rewarded. The Hub path refuses offline
without touching the network, and reads a local folder laid out as the Hub's."""

import re
import socket

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from llmlab.data import gsm8k
from llmlab.data.errors import DataError
from llmlab.data.gsm8k import (
    SYSTEM_PROMPT,
    final_number,
    grpo_prompts,
    gsm8k_reward,
    hub_gsm8k,
    parse_record,
    problem_messages,
)

# Two records as GSM8K's train split writes them (its first two), and one in its format with a
# thousands comma and a negative number in the reasoning.
NATALIA = {
    "question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many "
                "clips to her friends in May. How many clips did Natalia sell altogether in April "
                "and May?",
    "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = "
              "<<48+24=72>>72 clips altogether in April and May.\n#### 72",
}
WENG = {
    "question": "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of "
                "babysitting. How much did she earn?",
    "answer": "Weng earns 12/60 = $<<12/60=0.2>>0.2 per minute.\nWorking 50 minutes, she earned "
              "0.2 x 50 = $<<0.2*50=10>>10.\n#### 10",
}
SAVINGS = {
    "question": "A shop's account is at -200 dollars. It takes in 1,200 dollars. What is it at?",
    "answer": "-200 + 1,200 = <<-200+1200=1000>>1,000\n#### 1,000",
}


def test_a_record_parses_into_its_question_solution_and_final_answer():
    problem = parse_record(NATALIA)
    assert problem.question == NATALIA["question"]
    assert problem.solution == NATALIA["answer"]
    assert problem.answer == "72"  # not 48 or 24, from the reasoning
    assert parse_record(WENG).answer == "10"
    assert parse_record(SAVINGS).answer == "1000"  # commas removed, not cut at them


@pytest.mark.parametrize("answer", ["She sold 72 clips.", "#### seventy-two", "72\n#### 72 clips",
                                    "She sold 72 clips.\n72", ""])
def test_a_record_without_a_last_line_of_mark_and_number_is_refused(answer):
    with pytest.raises(DataError, match="ends with a line '#### <number>'"):
        parse_record({"question": "How many?", "answer": answer})


def test_the_final_number_is_the_one_after_the_mark_not_one_in_the_reasoning():
    assert final_number(NATALIA["answer"]) == 72  # not 48, 2, 24 or the notes' numbers
    assert final_number("48 + 24 = 72 clips\n#### 72\nThat took 2 steps.") == 72
    assert final_number("#### 7 #### 72") == 72  # the last mark counts


def test_without_the_mark_the_final_number_is_the_last_one():
    assert final_number("In May she sold 24, so 48 + 24 = 72.") == 72  # a full stop, no decimals
    assert final_number("The answer is 72 and not 70") == 70  # the last, whatever the words


@pytest.mark.parametrize(("text", "number"), [
    ("#### 1,000", 1000), ("#### 1000", 1000), ("She pays $1,234,567.", 1234567),
    ("#### -3", -3), ("It fell by 5 to -3", -3), ("#### 0.5", 0.5), ("costs $2.50 each", 2.5),
    ("ages 1,2 and 3,4", 4),  # a list, not thousands
])
def test_commas_minus_signs_and_decimals_are_read(text, number):
    assert final_number(text) == number


@pytest.mark.parametrize("text", ["I do not know.", "", "Seventy-two clips: 48 + 24\n#### seventy"])
def test_no_number_is_none(text):
    assert final_number(text) is None


def test_the_reward_is_one_for_the_same_number_in_any_form():
    assert gsm8k_reward("48 + 24 = 72\n#### 72", "72") == 1.0
    assert gsm8k_reward("#### 72.0", "72") == 1.0
    assert gsm8k_reward("so she saves $1000.\n#### 1000", "1,000") == 1.0
    assert gsm8k_reward("#### 1,000", SAVINGS["answer"]) == 1.0  # a whole solution as reference
    assert isinstance(gsm8k_reward("#### 72", "72"), float)


@pytest.mark.parametrize("completion", [
    "48 + 24 = 72, then 72 - 2 = 70\n#### 70",  # wrong
    "I am not sure.",  # no answer at all
    "72 clips in all? No: #### 70",  # the right number in the reasoning, not as the answer
    "#### seventy-two (48 + 24 = 72)",  # words after the mark: 72 is not the answer given
    "#### -72",
])
def test_the_reward_is_zero_for_a_wrong_or_missing_answer(completion):
    assert gsm8k_reward(completion, "72") == 0.0


def test_no_answer_is_never_right_even_against_a_reference_without_one():
    assert gsm8k_reward("I am not sure.", "unknown") == 0.0  # None is not an answer to match


def test_the_prompt_asks_for_reasoning_then_the_marked_answer():
    messages = problem_messages(NATALIA["question"])
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[1]["content"] == NATALIA["question"]
    assert "step by step" in SYSTEM_PROMPT and "'#### '" in SYSTEM_PROMPT


def test_the_grpo_prompts_are_conversations_with_their_answers():
    dataset = grpo_prompts([parse_record(NATALIA), parse_record(WENG)])
    assert dataset.column_names == ["prompt", "answer"]
    assert dataset["answer"] == ["72", "10"]
    assert dataset[1]["prompt"] == problem_messages(WENG["question"])


def test_the_hub_needs_the_online_switch_and_is_not_reached_without_it(monkeypatch):
    import datasets

    def network(*args, **kwargs):
        pytest.fail("the offline path reached for the network")

    monkeypatch.delenv("LLMLAB_ONLINE", raising=False)
    monkeypatch.setattr(socket.socket, "connect", network)
    monkeypatch.setattr(datasets, "load_dataset", network)
    with pytest.raises(DataError, match="openai/gsm8k .* set LLMLAB_ONLINE=1"):
        hub_gsm8k("train", 10)


def test_the_hub_with_a_local_stand_in(tmp_path, monkeypatch):
    """A folder laid out as the Hub's dataset stands in for openai/gsm8k: streamed, cut at the
    limit, parsed; a record out of format is reported with the dataset's name."""
    folder = tmp_path / "gsm8k"
    folder.mkdir()
    records = [NATALIA, WENG, SAVINGS]
    pq.write_table(pa.table({key: [r[key] for r in records] for key in ("question", "answer")}),
                   folder / "test.parquet")
    monkeypatch.setattr(gsm8k, "HUB_DATASET", (str(folder), None))
    monkeypatch.setenv("LLMLAB_ONLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert [p.answer for p in hub_gsm8k("test")] == ["72", "10", "1000"]
    assert [p.answer for p in hub_gsm8k("test", limit=2)] == ["72", "10"]
    pq.write_table(pa.table({"question": ["How many?"], "answer": ["About ten."]}),
                   folder / "test.parquet")
    with pytest.raises(DataError, match=re.escape(f"could not read {folder}")):
        hub_gsm8k("test")
