"""Augmentation: EDA's operations keep what they promise under a seeded generator, and
back-translation's generate-filter-mix loop never leaks a test answer, filters the right way
round and mixes in the ratio it is asked for."""

import random

import pytest

from llmlab.data.augment import (
    back_translate,
    drop_tokens,
    eda_pairs,
    extra_targets,
    is_iso_date,
    mix,
    noisy_text,
    numbers_agree,
    split_tokens,
    swap_tokens,
)
from llmlab.data.tasks import task_splits


def test_tokens_split_a_date_into_numbers_and_marks():
    assert split_tokens("2021-03-04") == ["2021", "-", "03", "-", "04"]
    assert split_tokens("March 4, 2021") == ["March", "4", ",", "2021"]


@pytest.mark.parametrize("seed", range(20))
def test_dropping_keeps_order_and_never_empties(seed):
    rng = random.Random(seed)
    tokens = [str(i) for i in range(rng.randrange(1, 12))]
    kept = drop_tokens(tokens, rng.random(), rng)
    assert kept, "never empty"
    positions = [tokens.index(t) for t in kept]
    assert positions == sorted(positions), "deletion keeps the tokens' order"
    assert drop_tokens(tokens, 0.0, rng) == tokens
    assert len(drop_tokens(tokens, 1.0, rng)) == 1


@pytest.mark.parametrize("seed", range(20))
def test_swapping_permutes_and_leaves_the_input_alone(seed):
    rng = random.Random(seed)
    tokens = [str(i) for i in range(rng.randrange(0, 12))]
    before = list(tokens)
    swapped = swap_tokens(tokens, rng.randrange(0, 4), rng)
    assert tokens == before, "the input list is not changed in place"
    assert sorted(swapped) == sorted(tokens), "a swap only reorders"
    assert swap_tokens(tokens, 0, rng) == tokens


def test_one_seed_gives_the_same_noise_and_another_seed_other_noise():
    sources, targets = [f"20{i:02d}-0{i % 9 + 1}-1{i % 9}" for i in range(30)], ["t"] * 30
    first = eda_pairs(sources, targets, 2, random.Random(0), drop=0.2, swaps=1)
    assert first == eda_pairs(sources, targets, 2, random.Random(0), drop=0.2, swaps=1)
    assert first != eda_pairs(sources, targets, 2, random.Random(1), drop=0.2, swaps=1)
    assert len(first) == 60 and all(t == "t" for _, t in first), "the target is never noised"


def test_noisy_text_joins_as_asked():
    assert noisy_text("a b c", random.Random(0), drop=0, swaps=0, join=" ") == "a b c"
    assert noisy_text("2021-03-04", random.Random(0), drop=0, swaps=0) == "2021-03-04"


def test_extra_targets_hold_no_answer_of_the_splits_to_avoid():
    splits = task_splits("dates", {"train": 300, "validation": 50, "test": 100})
    share = splits["train"][:30]
    # a pool that also holds the test items, as a careless one would
    pool = splits["train"] + splits["test"]
    extra = extra_targets(pool, avoid=[share, splits["validation"], splits["test"]])
    assert not set(extra) & {i.answer for i in splits["test"]}, "a test answer leaked"
    assert not set(extra) & {i.answer for i in share}, "a real pair was repeated"
    assert len(extra) == len(set(extra)) == 270


def test_back_translate_keeps_what_the_filter_accepts():
    targets = ["A", "B", "C", "D"]
    sources = {"A": "2021-03-04", "B": "2021-02-30", "C": "garbage", "D": " 1999-12-31 "}
    pairs, dropped = back_translate(targets, lambda ts: [sources[t] for t in ts],
                                    keep=lambda s, _: is_iso_date(s))
    assert pairs == [("2021-03-04", "A"), ("1999-12-31", "D")]
    assert dropped == 2
    with pytest.raises(ValueError):
        back_translate(targets, lambda ts: ts[:2], keep=lambda s, t: True)


@pytest.mark.parametrize("ratio", [0, 0.5, 1, 4])
def test_mix_holds_every_real_example_once_and_ratio_synthetic(ratio):
    real, synthetic = [f"r{i}" for i in range(20)], [f"s{i}" for i in range(100)]
    mixed = mix(real, synthetic, ratio, random.Random(0))
    assert sorted(x for x in mixed if x.startswith("r")) == sorted(real)
    drawn = [x for x in mixed if x.startswith("s")]
    assert len(drawn) == round(ratio * len(real)) and len(set(drawn)) == len(drawn)
    assert len(mix(real, synthetic[:5], 4, random.Random(0))) == 25, "all, when there are fewer"


def test_iso_date_filter():
    assert is_iso_date("2021-03-04") and is_iso_date("2000-02-29")
    assert not any(map(is_iso_date, ["2021-3-4", "1900-02-29", "2021-13-01", "March 4, 2021", ""]))


def test_numbers_agree_checks_day_and_year_not_the_month():
    assert numbers_agree("2021-03-04", "March 4, 2021")
    assert numbers_agree("2021-05-04", "March 4, 2021"), "the month is a word: it cannot check it"
    assert not numbers_agree("2021-03-05", "March 4, 2021")
    assert not numbers_agree("2012-03-04", "March 4, 2021")
    assert not numbers_agree("2021-03-01", "March 1, 2021 1"), "each number as often as written"
