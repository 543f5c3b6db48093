"""The engines' table: the first engine is the reference (difference 0, every argmax the same),
uniform logits have the vocabulary's size as perplexity, a moved argmax is counted; the speed-up
is the range of the paired rounds (times injected: the machine's speed is never asserted on); bad
input is refused."""

import pytest
import torch

from llmlab.inference import engines
from llmlab.inference.engines import engine_rows, engine_table
from llmlab.timing import Timing

VOCAB = 8


def reference(ids):
    return torch.nn.functional.one_hot(ids, VOCAB).float() * 3  # predicts the token it reads


def test_the_reference_row_the_others_and_the_table():
    ids = torch.arange(12).reshape(2, 6) % VOCAB

    def one_moved(x):
        logits = reference(x)
        logits[0, 0, 7] = 9.0  # one position of 12 now prefers token 7
        return logits

    rows = engine_rows({"reference": (reference, 2_000_000),
                        "uniform": (lambda x: torch.zeros(*x.shape, VOCAB), 1_000_000),
                        "one moved": (one_moved, 0)}, ids, repeats=1)
    first, uniform, moved = rows
    assert (first.max_abs_diff, first.same_argmax, first.size_mb) == (0, 1, 2.0)
    assert uniform.perplexity == pytest.approx(VOCAB) and uniform.max_abs_diff == 3
    assert moved.same_argmax == pytest.approx(11 / 12) and moved.max_abs_diff == 9
    table = engine_table(rows).splitlines()
    assert table[0] == ("engine | size_mb | latency_ms | speedup_in_rounds | max_abs_diff | "
                        "same_argmax | perplexity")
    assert table[3].startswith("uniform | 1.00 |") and table[3].endswith("| 8.000")


def test_the_speedup_is_the_range_of_the_paired_rounds(monkeypatch):
    def rounds(*medians):
        return [Timing(m, m, m, (m,), 0) for m in medians]

    def fake_rounds(fns, **_):
        assert list(fns) == ["reference", "faster"]
        return {"reference": rounds(0.30, 0.40, 0.33), "faster": rounds(0.20, 0.20, 0.30)}

    monkeypatch.setattr(engines, "time_rounds", fake_rounds)
    ids = torch.arange(12).reshape(2, 6) % VOCAB
    first, faster = engine_rows({"reference": (reference, 0), "faster": (reference, 0)}, ids)
    assert (first.speedup_low, first.speedup_high) == (1.0, 1.0)
    assert (faster.speedup_low, faster.speedup_high) == pytest.approx((1.1, 2.0))
    assert faster.latency_ms == pytest.approx(200.0)  # the median round
    assert "| 1.10-2.00x |" in engine_table([first, faster])


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match=r"no engines to compare"):
        engine_rows({}, torch.zeros(1, 4).long())
    with pytest.raises(ValueError, match=r"length >= 2\), got \(1, 1\)"):
        engine_rows({"reference": (reference, 0)}, torch.zeros(1, 1).long())
