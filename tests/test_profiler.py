"""llmlab.profiler: a profiled step's events as plain records (top operators, timeline, memory,
a GPU's idle gaps) and operator costs against hand counts. Times are injected where a result
depends on them; nothing asserts on how fast this machine is."""

import json
import subprocess
import sys

import pytest
import torch

from llmlab import profiler
from llmlab.profiler import OpEvent


def tiny_step():
    """A linear layer trained one step per call, and a count of the calls."""
    layer = torch.nn.Linear(8, 4)
    optimizer = torch.optim.AdamW(layer.parameters(), lr=1e-3)
    batch = torch.randn(16, 8)
    calls = []

    def step():
        calls.append(1)
        layer(batch).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step, calls


def test_profile_step_warms_up_then_profiles_one_step_and_writes_a_trace(tmp_path):
    step, calls = tiny_step()
    trace = tmp_path / "traces" / "step.json"
    result = profiler.profile_step(step, warmup=2, trace_path=trace)
    assert len(calls) == 3
    assert "traceEvents" in json.loads(trace.read_text())
    phases = {e.name: e.phase for e in result.ops if e.outer}
    assert phases["aten::linear"] == "forward"
    assert any(e.phase == "backward" and e.name == "aten::mm" for e in result.ops)
    assert any(e.phase == "optimizer" for e in result.ops)
    assert result.kernels == []  # no CUDA activity asked for
    assert set(profiler.phase_spans(result.ops)) == {"forward", "backward", "optimizer"}
    assert "matmul" in profiler.timeline_bars(result.ops)


def test_profile_step_counts_the_flops_and_memory_of_its_operators():
    a, b = torch.randn(32, 16), torch.randn(16, 8)
    kept = []
    result = profiler.profile_step(lambda: kept.append(a @ b), warmup=0)
    mm = next(e for e in result.ops if e.name == "aten::mm")
    assert mm.flops == 2 * 32 * 16 * 8
    _, levels = profiler.memory_curve(result.ops)
    assert levels[-1] == 32 * 8 * 4  # the product is still alive after the step


def test_profile_step_rejects_a_negative_warmup():
    with pytest.raises(ValueError, match="warmup"):
        profiler.profile_step(lambda: None, warmup=-1)


def test_importing_llmlab_silences_the_profiler_s_start_and_stop_lines():
    code = ("import llmlab, torch\nwith torch.profiler.profile():\n    torch.ones(2) + 1\n"
            "print('profiled')")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "profiled"
    assert "profiler_start" not in run.stderr and "USDT" not in run.stderr


def op(name, start, duration, self_us=None, **fields):
    return OpEvent(name, start, duration, duration if self_us is None else self_us, **fields)


def test_top_operators_sums_self_time_over_calls_and_sorts():
    events = [op("aten::mm", 0, 600, flops=3_000_000_000), op("aten::gelu", 600, 100),
              op("aten::mm", 700, 200, flops=1_000_000_000), op("aten::add", 900, 100)]
    rows = profiler.top_operators(events, k=2)
    assert rows == [
        {"operator": "aten::mm", "calls": 2, "self ms": "0.80", "share": "80.0%", "GFLOP": "4.00"},
        {"operator": "aten::gelu", "calls": 1, "self ms": "0.10", "share": "10.0%", "GFLOP": "-"},
    ]


def test_top_operators_uses_self_time_not_the_time_of_children():
    events = [op("aten::linear", 0, 1000, self_us=10), op("aten::addmm", 5, 990)]
    assert profiler.top_operators(events, k=1)[0]["operator"] == "aten::addmm"


def test_top_operators_says_when_nothing_was_profiled():
    with pytest.raises(ValueError, match="no self time"):
        profiler.top_operators([op("aten::view", 0, 0)])


def test_categories_by_name_and_phase():
    kinds = {name: profiler.category(op(name, 0, 1, phase=phase)) for name, phase in [
        ("aten::addmm", "forward"), ("aten::_scaled_dot_product_flash_attention_for_cpu",
                                     "forward"),
        ("aten::native_layer_norm_backward", "backward"), ("aten::_log_softmax", "forward"),
        ("aten::gelu_backward", "backward"), ("aten::addcdiv_", "optimizer"),
        ("aten::add", "forward"), ("aten::copy_", "forward"),
        ("cudaMemcpyAsync", "forward")]}
    assert list(kinds.values()) == ["matmul", "attention", "layer norm", "softmax and loss",
                                    "GELU", "optimizer", "other element-wise",
                                    "copies and allocation", "CUDA runtime"]


def test_category_shares_add_up_to_one():
    events = [op("aten::mm", 0, 300), op("aten::bmm", 300, 100), op("aten::gelu", 400, 100)]
    assert profiler.category_shares(events) == {"matmul": 0.8, "GELU": 0.2}


def test_timeline_bars_keep_the_outer_operators_in_milliseconds_in_category_order():
    events = [op("aten::gelu", 3000, 1000), op("aten::linear", 0, 2000),
              op("aten::addmm", 100, 1800, outer=False), op("aten::mm", 5000, 500)]
    bars = profiler.timeline_bars(events)
    assert bars == {"matmul": [(0.0, 2.0), (5.0, 0.5)], "GELU": [(3.0, 1.0)]}
    assert list(bars) == ["matmul", "GELU"]


def test_phase_spans_run_from_each_phase_to_the_next():
    events = [op("aten::linear", 0, 1000), op("aten::mm", 1000, 2000, phase="backward"),
              op("aten::detach", 3500, 10),  # the loss's detach, outside any phase's range
              op("aten::add_", 3100, 400, phase="optimizer")]
    assert profiler.phase_spans(events) == {"forward": (0.0, 1.0), "backward": (1.0, 3.1),
                                            "optimizer": (3.1, 3.51)}


def test_memory_curve_adds_allocations_and_frees_in_start_order():
    events = [op("aten::empty", 2000, 1, memory_bytes=-100), op("aten::mm", 0, 1, memory_bytes=400),
              op("aten::view", 500, 1), op("aten::gelu", 1000, 1, memory_bytes=300)]
    assert profiler.memory_curve(events) == ([0.0, 1.0, 2.0], [400, 700, 600])


def test_gpu_gaps_count_idle_time_between_kernels_and_overlaps_once():
    kernels = [op("gemm", 0, 10), op("gelu", 15, 5), op("copy on stream 2", 17, 6),
               op("softmax", 30, 4), op("inside the copy", 18, 1)]
    idle = profiler.gpu_gaps(kernels)
    assert idle.gaps_us == (5, 7)  # 10 -> 15, 23 -> 30
    assert idle.busy_us == 10 + 8 + 4  # the gelu and the copy overlap: busy from 15 to 23
    assert idle.idle_us == 12
    assert idle.idle_fraction == pytest.approx(12 / 34)
    assert profiler.gpu_gaps([]).idle_fraction == 0.0


@pytest.mark.parametrize(
    "name, shape, dtype, flops, moved",
    [
        ("matmul", (2, 3, 4), torch.float32, 48, 4 * (6 + 12 + 8)),
        ("matmul", (5, 7, 3), torch.bfloat16, 210, 2 * (35 + 21 + 15)),
        ("layer_norm", (5, 8), torch.bfloat16, 8 * 40, 2 * (40 + 40 + 8 + 8)),
        ("softmax", (2, 3, 4), torch.float32, 5 * 24, 4 * (24 + 24)),
        ("gelu", (6,), torch.float16, 8 * 6, 2 * 12),
        ("adamw", (10,), torch.float32, 12 * 10, 4 * 10 * 7),  # reads p, g, m, v; writes p, m, v
    ],
)
def test_operator_cost_against_hand_counts(name, shape, dtype, flops, moved):
    assert profiler.operator_cost(name, shape, dtype) == (flops, moved)


def test_operator_cost_names_the_operators_it_knows():
    with pytest.raises(ValueError, match="unknown operator 'conv'.*matmul"):
        profiler.operator_cost("conv", (3, 3), torch.float32)


def test_roofline_point_and_the_roof():
    point = profiler.RooflinePoint("gelu", flops=8e6, bytes=8e6, seconds=1e-3)
    assert (point.intensity, point.gflops_per_s, point.gbytes_per_s) == (1.0, 8.0, 8.0)
    assert profiler.attainable_gflops(1.0, bandwidth_gbs=10, peak_tflops=0.03) == 10
    assert profiler.attainable_gflops(100.0, bandwidth_gbs=10, peak_tflops=0.03) == 30
    assert profiler.bound_by(1.0, 10, 0.03) == "memory"
    assert profiler.bound_by(90.0, 10, 0.03) == "compute"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_profile_step_on_a_gpu_records_kernels_and_their_gaps():
    a = torch.randn(512, 512, device="cuda")
    result = profiler.profile_step(lambda: (a @ a).relu().sum(), warmup=1, cuda=True)
    assert result.kernels
    idle = profiler.gpu_gaps(result.kernels)
    assert idle.busy_us > 0 and 0 <= idle.idle_fraction < 1
