"""torch.compile measured: graph breaks counted and fixed, recompiles counted, timings bookkept
(never asserted on: they depend on the machine)."""

import pytest
import torch
from torch import nn
from torch._dynamo.utils import counters

from llmlab.kernels.compiled import (
    CompileTiming,
    count_compiles,
    graph_breaks,
    time_compiled,
    time_modes,
)
from llmlab.timing import Timing


class Logged(nn.Module):
    """A forward with the three habits that break a graph: a branch on a tensor's value, a
    print, and .item() to log a number."""

    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(8, 8)
        self.largest = 0.0

    def forward(self, x):
        y = self.layer(x).relu()
        if y.sum() > 0:  # Python must know the value to pick a branch
            y = y * 2
        print("forward done")
        self.largest = y.max().item()
        return y


class Fixed(Logged):
    """The same numbers with no break: the branch as torch.where, the logging left to the caller."""

    def forward(self, x):
        y = self.layer(x).relu()
        return torch.where(y.sum() > 0, y * 2, y)


def test_graph_breaks_are_counted_with_their_reasons_and_fixing_them_leaves_one_graph(capsys):
    torch.manual_seed(0)
    model, x = Logged(), torch.randn(4, 8)
    found = graph_breaks(model, x)
    assert (found.graphs, found.breaks) == (3, 3)  # nothing is traced between print and .item()
    assert any("print" in reason for reason in found.reasons)
    assert any("item()" in reason for reason in found.reasons)
    assert any(reason.startswith("a Python branch on a tensor's value (line")
               and "y.sum() > 0" in reason for reason in found.reasons)
    fixed = Fixed()
    fixed.load_state_dict(model.state_dict())
    clean = graph_breaks(fixed, x)
    assert (clean.graphs, clean.breaks) == (1, 0)
    assert graph_breaks(model, x) == found  # a fresh trace each time, not the cached one
    torch.testing.assert_close(fixed(x), model(x))
    capsys.readouterr()


def test_a_new_shape_recompiles_unless_the_dimension_is_dynamic():
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8))
    calls = [(torch.randn(batch, 8),) for batch in (2, 3, 4)]
    assert count_compiles(model, calls, dynamic=False) == 3  # one per shape
    assert count_compiles(model, calls) == 2  # then the batch dimension is made symbolic
    assert count_compiles(model, calls, dynamic=True) == 1
    torch._dynamo.mark_dynamic(calls[0][0], 0)  # the batch dimension only, told in advance
    assert count_compiles(model, calls) == 1
    same = [(torch.randn(2, 8),)] * 3
    assert count_compiles(model, same, dynamic=False) == 1  # same shape: the guards pass


def test_a_new_dtype_recompiles_even_when_shapes_are_dynamic():
    calls = [(torch.randn(4),), (torch.randn(4, dtype=torch.float64),)]
    assert count_compiles(torch.sin, calls, dynamic=True) == 2


def test_time_compiled_times_the_first_call_apart_and_counts_cache_hits():
    calls = []

    def compiled():
        if not calls:  # the first call stands for one that found its graph in inductor's cache
            counters["inductor"]["fxgraph_cache_hit"] += 1
        calls.append("compiled")

    result = time_compiled(lambda: calls.append("eager"), compiled, warmup=1, repeats=3, rounds=2)
    assert calls[0] == "compiled"  # the first call, timed alone
    assert calls[1:] == (["eager"] * 4 + ["compiled"] * 4) * 2  # in turn, round after round
    assert result.cache_hits == 1
    assert result.compile_s >= 0 and len(result.compiled) == 2
    assert len(result.compiled[0].times_s) == 3


def test_the_speedup_is_the_median_of_the_rounds_and_shows_their_range():
    def timing(median):
        return Timing(median, median, median, (median,), 0)

    result = CompileTiming(1.0, 0, tuple(map(timing, (0.3, 0.3, 0.3))),
                           tuple(map(timing, (0.2, 0.3, 0.1))))
    assert result.round_speedups == pytest.approx((1.5, 1.0, 3.0))
    assert result.speedup == pytest.approx(1.5)  # the median round, not a mean of the times
    assert (result.eager_s, result.compiled_s) == (0.3, 0.2)
    assert result.speedup_line() == "1.50x (1.00-3.00x in 3 rounds)"


def test_the_modes_are_compared_on_a_gpu_only():
    with pytest.raises(ValueError, match="CUDA GPU"):
        time_modes(nn.Linear(4, 4), [torch.randn(2, 4)])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="the compile modes need a CUDA GPU")
def test_every_mode_compiles_and_is_timed_on_a_gpu():
    model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64)).cuda()
    x = torch.randn(32, 64, device="cuda")
    results = time_modes(model, [x], repeats=3)
    assert set(results) == {"default", "max-autotune", "reduce-overhead"}
    assert all(r.compiled.median_s > 0 and r.eager.median_s > 0 for r in results.values())
