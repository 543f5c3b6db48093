"""Lab 00's checks reject likely mistakes, each with a message that points at the mistake.
(tests/course/checks/test_every_lab.py proves they pass on the solution and fail on the stub.)"""

import statistics
import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers.fake_clock import ManualClock

from llmlab import timing
from llmlab.course.checks import ExerciseFailed
from llmlab.course.checks import lab00 as check

# ---------------------------------------------------------------- Exercise 1: an honest timer


def _timer(fn, warmup, repeats, device, clock, *, sync_before=True, sync_after=True,
           summary=statistics.median, time_warmup=False):
    """An honest timer whose steps can each be left out or changed."""
    times = []
    for _ in range(warmup):
        if not time_warmup:
            fn()
            continue
        start = clock()
        fn()
        device.synchronize()
        times.append(clock() - start)
    for _ in range(repeats):
        if sync_before:
            device.synchronize()
        start = clock()
        fn()
        if sync_after:
            device.synchronize()
        times.append(clock() - start)
    return summary(times)


def timer_with(**mistake):
    def honest_time(fn, *, warmup=2, repeats=5, device=torch.cpu, clock=time.perf_counter):
        return _timer(fn, warmup, repeats, device, clock, **mistake)

    return honest_time


def _sync_only_at_start(fn, *, warmup=2, repeats=5, device=torch.cpu, clock=time.perf_counter):
    device.synchronize()
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = clock()
        fn()
        times.append(clock() - start)
    return statistics.median(times)


def _own_clock(fn, *, warmup=2, repeats=5, device=torch.cpu, clock=time.perf_counter):
    return _timer(fn, warmup, repeats, device, time.perf_counter)


def _no_warmup(fn, *, warmup=2, repeats=5, device=torch.cpu, clock=time.perf_counter):
    return _timer(fn, 0, repeats, device, clock)


def _one_repeat_too_many(fn, *, warmup=2, repeats=5, device=torch.cpu, clock=time.perf_counter):
    return _timer(fn, warmup, repeats + 1, device, clock)


@pytest.mark.parametrize(
    "wrong, hint",
    [
        pytest.param(_no_warmup, "untimed warm-up", id="no-warm-up"),
        pytest.param(_one_repeat_too_many, "called fn 8 times", id="one-repeat-too-many"),
        pytest.param(timer_with(sync_before=False, sync_after=False), "synchronize",
                     id="no-synchronize"),
        pytest.param(_sync_only_at_start, "synchronize", id="synchronize-only-at-the-start"),
        pytest.param(timer_with(sync_after=False), "synchronize",
                     id="no-synchronize-before-reading-the-clock"),
        pytest.param(timer_with(sync_before=False), "while the GPU was still running",
                     id="warm-up-work-still-running-when-the-clock-starts"),
        pytest.param(timer_with(summary=statistics.fmean), "That is the mean", id="mean"),
        pytest.param(timer_with(summary=min), "fastest repeat", id="min"),
        pytest.param(timer_with(summary=sum), "total", id="total-not-per-call"),
        pytest.param(timer_with(summary=lambda t: 1e3 * statistics.median(t)), "milliseconds",
                     id="milliseconds"),
        pytest.param(timer_with(time_warmup=True), "includes the warm-up", id="warm-up-timed"),
        pytest.param(_own_clock, "never called clock", id="ignores-the-given-clock"),
        pytest.param(timer_with(summary=list), "return a number", id="returns-the-list"),
    ],
)
def test_honest_time_rejects_likely_mistakes(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check.exercise_honest_time(wrong)


@pytest.mark.parametrize("middle", [statistics.median_low, statistics.median_high])
def test_honest_time_accepts_either_middle_value_and_numpy_numbers(middle, capsys):
    check.exercise_honest_time(timer_with(summary=lambda t: np.float64(middle(t))))
    assert "PASSED" in capsys.readouterr().out


def test_honest_time_accepts_one_synchronize_after_the_warm_up(capsys):
    def honest_time(fn, *, warmup=2, repeats=5, device=torch.cpu, clock=time.perf_counter):
        for _ in range(warmup):
            fn()
        device.synchronize()  # once: each timed call below ends with its own synchronize
        times = []
        for _ in range(repeats):
            start = clock()
            fn()
            device.synchronize()
            times.append(clock() - start)
        return float(np.median(times))

    check.exercise_honest_time(honest_time)
    assert "PASSED" in capsys.readouterr().out


def test_the_fallback_timer_is_llmlabs_median_of_the_timed_calls(monkeypatch):
    clock = ManualClock()  # llmlab's timer reads it; each call below moves it by its duration
    monkeypatch.setattr(timing, "time", SimpleNamespace(perf_counter=clock))
    durations = iter([9.0, 0.001, 0.004, 0.002])  # a slow warm-up call, then three timed calls
    seconds = check.time_fn_median(lambda: clock.sleep(next(durations)), warmup=1, repeats=3)
    assert seconds == pytest.approx(0.002)  # the median, in seconds, without the warm-up


# ---------------------------------------------------------------- Exercise 2: measured TFLOP/s


def _tflops(n, dtype, device, timer, *, flops=lambda n: 2 * n**3, inputs_inside=False,
            make_dtype=None, unit=1e12):
    make = dict(dtype=make_dtype or dtype, device=device)
    if inputs_inside:
        seconds = timer(lambda: torch.randn(n, n, **make) @ torch.randn(n, n, **make))
    else:
        a, b = torch.randn(n, n, **make), torch.randn(n, n, **make)
        seconds = timer(lambda: a.to(dtype) @ b.to(dtype) if make_dtype else a @ b)
    return flops(n) / seconds / unit


def tflops_with(**mistake):
    return lambda n, dtype, device, timer: _tflops(n, dtype, device, timer, **mistake)


def _two_matmuls(n, dtype, device, timer):
    a = torch.randn(n, n, dtype=dtype, device=device)
    return 2 * n**3 / timer(lambda: a @ a @ a) / 1e12


def _not_using_the_timer(n, dtype, device, timer):
    a = torch.randn(n, n, dtype=dtype, device=device)
    return 2 * n**3 / timing.time_fn(lambda: a @ a).median_s / 1e12


@pytest.mark.parametrize(
    "wrong, hint",
    [
        pytest.param(tflops_with(inputs_inside=True), "makes or copies tensors",
                     id="inputs-made-inside-the-timed-function"),
        pytest.param(tflops_with(make_dtype=torch.float32), "makes or copies tensors",
                     id="dtype-conversion-timed"),
        pytest.param(lambda n, dtype, device, timer: _tflops(n, torch.float32, device, timer),
                     "expected 33 x 33 inputs in torch.bfloat16", id="dtype-ignored"),
        pytest.param(tflops_with(flops=lambda n: n**3), "2 FLOPs", id="one-flop-per-multiply-add"),
        pytest.param(tflops_with(unit=1e9), "1e12", id="gflops-not-tflops"),
        pytest.param(_two_matmuls, "ran 2 matmuls", id="more-than-one-matmul"),
        pytest.param(_not_using_the_timer, "never called `timer`", id="own-timer"),
    ],
)
def test_matmul_tflops_rejects_likely_mistakes(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check.exercise_matmul_tflops(wrong)


def test_matmul_tflops_accepts_other_spellings_of_a_matmul(capsys):
    def einsum_version(n, dtype, device, timer):
        a, b = (torch.randn(n, n, dtype=dtype, device=device) for _ in range(2))
        return np.float32(2 * n**3 / timer(lambda: torch.einsum("ij,jk->ik", a, b)) / 1e12)

    check.exercise_matmul_tflops(einsum_version)
    assert "PASSED" in capsys.readouterr().out


def test_the_fallback_measurement_is_llmlabs():
    assert check.measure_matmul_tflops(64, torch.float32, "cpu") > 0


# ---------------------------------------------------------------- Exercise 3: training dtype


@pytest.mark.parametrize(
    "wrong, hint",
    [
        pytest.param(lambda cap: "bf16" if cap[0] >= 7 else "fp32", "no bf16",
                     id="bf16-on-volta-and-turing"),
        pytest.param(lambda cap: "fp16" if cap >= (7, 0) else "fp32", "Ampere", id="never-bf16"),
        pytest.param(lambda cap: "bf16" if cap > (8, 0) else "fp16", "tensor cores",
                     id="boundary-excludes-8.0"),
        pytest.param(lambda cap: "bf16" if cap[0] == 8 else "fp16" if cap[0] == 7 else "fp32",
                     "Ampere", id="only-major-8-is-bf16"),  # Hopper (9.0), Blackwell (10.0, 12.0)
        pytest.param(lambda cap: "bf16" if cap >= (8, 0) else "fp16", "P100",
                     id="fp16-on-pascal-and-older"),
    ],
)
def test_training_dtype_rejects_likely_mistakes(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check.exercise_training_dtype(wrong)


def test_training_dtype_accepts_torch_dtypes_too(capsys):
    def as_dtype(cap):
        if cap >= (8, 0):
            return torch.bfloat16
        return torch.float16 if cap >= (7, 0) else torch.float32

    check.exercise_training_dtype(as_dtype)
    assert "PASSED" in capsys.readouterr().out


def test_the_fp32_reason_no_longer_says_half_precision_never_saves_time():
    assert "saves memory but not time" not in check.WHY_DTYPE["fp32"]
    assert "P100" in check.WHY_DTYPE["fp32"]


# ---------------------------------------------------------------- Exercise 4: the roofline


def _roofline(m, n, k, spec, dtype, *, combine=max, write_c=True, element_bytes=None,
              flops_per_mac=2, gb=1e9, invent_peak=False):
    peak = spec.tflops[dtype] or (1.0 if invent_peak else None)
    if peak is None:
        return None
    size = element_bytes or {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2}[dtype]
    compute = flops_per_mac * m * n * k / (peak * 1e12)
    memory = size * (m * k + k * n + (m * n if write_c else 0)) / (spec.bandwidth_gbs * gb)
    return combine(compute, memory), "compute" if compute >= memory else "memory"


def roofline_with(**mistake):
    return lambda m, n, k, spec, dtype: _roofline(m, n, k, spec, dtype, **mistake)


def _bound_backwards(m, n, k, spec, dtype):
    answer = _roofline(m, n, k, spec, dtype)
    return answer and (answer[0], "memory" if answer[1] == "compute" else "compute")


@pytest.mark.parametrize(
    "wrong, hint",
    [
        pytest.param(roofline_with(combine=lambda c, b: c), "compute time alone",
                     id="ignores-memory"),
        pytest.param(roofline_with(combine=lambda c, b: b), "memory time alone",
                     id="ignores-compute"),
        pytest.param(roofline_with(combine=lambda c, b: c + b), "adds the two", id="sum"),
        pytest.param(roofline_with(combine=min), "faster of the two", id="min"),
        pytest.param(roofline_with(write_c=False), "C .* is written", id="forgets-writing-c"),
        pytest.param(roofline_with(element_bytes=1), "bytes, not elements",
                     id="elements-not-bytes"),
        pytest.param(lambda m, n, k, spec, dtype: _roofline(
            m, n, k, spec, dtype, element_bytes=2 if dtype != "fp32" else 4), "TF32 is a math mode",
            id="tf32-as-two-bytes"),
        pytest.param(roofline_with(flops_per_mac=1), "2 FLOPs", id="one-flop-per-multiply-add"),
        pytest.param(roofline_with(gb=2**30), "not 2\\*\\*30", id="gib-not-gb"),
        pytest.param(roofline_with(invent_peak=True), "must return None", id="invents-a-peak"),
        pytest.param(_bound_backwards, "whichever", id="bound-label-backwards"),
        pytest.param(lambda *args: _roofline(*args)[0] if _roofline(*args) else None,
                     "return a pair", id="seconds-only"),
    ],
)
def test_matmul_roofline_rejects_likely_mistakes(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check.exercise_matmul_roofline(wrong)


def test_matmul_roofline_accepts_bound_spellings_and_numpy_seconds(capsys):
    def spelled(m, n, k, spec, dtype):
        answer = _roofline(m, n, k, spec, dtype)
        return answer and [np.float64(answer[0]), f"{answer[1].upper()}-bound"]

    check.exercise_matmul_roofline(spelled)
    assert "PASSED" in capsys.readouterr().out


def test_the_roofline_cases_cover_both_bounds_and_a_missing_format():
    answers = [check.matmul_roofline(*case) for case in check._roofline_cases()]
    assert {a[1] for a in answers if a} == {"compute", "memory"}
    assert None in answers


# ---------------------------------------------------------- Exercise 5: this machine's roofline


def _measure(timer, device, dtype, *, numbers=2**25, counted=2, per_number=None, n=2048,
             flops_per_mac=2, gb=1e9, ridge=lambda flops, bandwidth: flops / bandwidth,
             allocate_inside=False, op="copy", in_dtype=None, einsum=False):
    """A learner's measurement, right by default; each argument swaps in one mistake."""
    dtype = in_dtype or dtype
    source = torch.ones(numbers, dtype=dtype, device=device)
    target = torch.empty_like(source)
    size = per_number or source.element_size()
    if op == "add":  # a + b reads two tensors and writes a third: three streams of bytes
        seconds, streams = timer(lambda: source + target), 3
    elif op == "clone":  # a copy into a new tensor: its allocation is timed too
        seconds, streams = timer(lambda: source.clone()), counted
    elif allocate_inside:
        seconds, streams = timer(lambda: torch.empty_like(source).copy_(source)), counted
    else:
        seconds, streams = timer(lambda: target.copy_(source)), counted
    bandwidth = streams * numbers * size / seconds / gb
    a, b = (torch.ones(n, n, dtype=dtype, device=device) for _ in range(2))
    product = (lambda: torch.einsum("ij,jk->ik", a, b)) if einsum else (lambda: a @ b)
    tflops = flops_per_mac * n**3 / timer(product) / 1e12
    return bandwidth, tflops, ridge(tflops * 1e12, bandwidth * 1e9)


def measure_with(**mistake):
    return lambda timer, device, dtype: _measure(timer, device, dtype, **mistake)


def _peak_from_a_datasheet(timer, device, dtype):
    source = torch.ones(2**25, dtype=dtype, device=device)
    target = torch.empty_like(source)
    bandwidth = 2 * source.numel() * source.element_size() / timer(lambda: target.copy_(source))
    return bandwidth / 1e9, 0.5, 0.5e12 / bandwidth


@pytest.mark.parametrize(
    "wrong, hint",
    [
        pytest.param(measure_with(counted=1), "reads every byte and writes it again",
                     id="copy-counted-once"),
        pytest.param(measure_with(per_number=1), "Count bytes, not numbers",
                     id="numbers-not-bytes"),
        pytest.param(measure_with(numbers=2**16), "fits in this machine's caches",
                     id="copy-small-enough-for-the-cache"),
        pytest.param(measure_with(n=64), "too small to keep this machine's compute busy",
                     id="memory-bound-matmul"),
        pytest.param(measure_with(flops_per_mac=1), "2 FLOPs", id="one-flop-per-multiply-add"),
        pytest.param(measure_with(gb=2**30), "not 2\\*\\*30", id="gib-not-gb"),
        pytest.param(measure_with(ridge=lambda flops, bandwidth: bandwidth / flops),
                     "That is bytes per FLOP", id="ridge-upside-down"),
        pytest.param(measure_with(ridge=lambda flops, bandwidth: flops / 1e12 / (bandwidth / 1e9)),
                     "same units", id="ridge-of-tflops-over-gbs"),
        pytest.param(measure_with(allocate_inside=True), "makes a tensor",
                     id="allocation-timed"),
        pytest.param(measure_with(op="clone"), "runs clone: it makes a tensor",
                     id="clone-timed"),
        pytest.param(measure_with(in_dtype=torch.float32), "multiplied torch.float32 tensors",
                     id="dtype-ignored"),
        pytest.param(measure_with(n=256), "too small to keep this machine's compute busy",
                     id="peak-from-a-256-matmul"),
        pytest.param(measure_with(n=1024), "too small to keep this machine's compute busy",
                     id="peak-from-a-1024-matmul"),  # under half an H100's peak in practice
        pytest.param(_peak_from_a_datasheet, "never timed a matmul", id="no-matmul-timed"),
        pytest.param(lambda *args: _measure(*args)[:2], "three numbers", id="two-numbers"),
    ],
)
def test_measure_roofline_rejects_likely_mistakes(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check.exercise_measure_roofline(wrong)


@pytest.mark.parametrize(
    "right",
    [
        pytest.param(measure_with(op="add"), id="bandwidth-of-an-add"),
        # einsum reshapes its operands (views: no bytes moved) around the matmul it runs
        pytest.param(measure_with(einsum=True), id="matmul-by-einsum"),
        pytest.param(lambda *args: [np.float64(v) for v in _measure(*args)], id="numpy-list"),
        pytest.param(lambda *args: tuple(torch.tensor(v) for v in _measure(*args)),
                     id="0-d-tensors"),
    ],
)
def test_measure_roofline_accepts_any_copy_and_number_type(right, capsys):
    check.exercise_measure_roofline(right)
    assert "PASSED" in capsys.readouterr().out


def test_the_fake_machine_charges_each_operation_at_its_roofline():
    machine = check.FakeMachine(bandwidth_gbs=100.0, tflops={torch.float32: 1.0}, units=4)
    big, small = torch.ones(2**23), torch.ones(2**10)  # 32 MiB and 4 KiB of fp32
    target = torch.empty_like(big)
    assert machine.timer(lambda: target.copy_(big)) == pytest.approx(2 * 2**25 / 100e9)
    in_cache = machine.timer(lambda: small.clone())
    assert in_cache == pytest.approx(2 * 2**12 / (check.CACHE_SPEEDUP * 100e9))
    a = torch.ones(1024, 1024)
    assert machine.timer(lambda: a @ a) == pytest.approx(2 * 1024**3 / 1e12)  # compute-bound


def test_the_fake_machine_has_a_peak_per_dtype_and_small_matmuls_miss_it():
    peaks = {torch.float32: 1.0, torch.bfloat16: 8.0}
    machine = check.FakeMachine(bandwidth_gbs=1e6, tflops=peaks, units=16)  # never memory-bound
    a, b = torch.ones(512, 512), torch.ones(512, 512, dtype=torch.bfloat16)
    assert machine.timer(lambda: a @ a) == pytest.approx(2 * 512**3 / 1e12)  # 16 blocks: peak
    assert machine.timer(lambda: b @ b) == pytest.approx(2 * 512**3 / 8e12)
    small = torch.ones(256, 256)  # 4 blocks of output for 16 units: a quarter of the peak
    assert machine.timer(lambda: small @ small) == pytest.approx(4 * 2 * 256**3 / 1e12)


def test_the_fake_machine_charges_a_matmul_without_computing_it():
    machine = check.FakeMachine(bandwidth_gbs=100.0, tflops={torch.bfloat16: 1.0}, units=4)
    a = torch.ones(2048, 2048, dtype=torch.bfloat16)
    with check.RecordOps() as outside:  # sees what the fake machine runs
        machine.timer(lambda: a @ a)
    multiplied = [op.inputs[0].device.type for op in outside.ops if op.name in check.MATMUL_OPS]
    assert multiplied == ["meta"]  # shapes and dtypes checked, no arithmetic
    (matmul,) = machine.calls[0]
    assert (matmul.output.shape, matmul.output.dtype) == ((2048, 2048), torch.bfloat16)


def test_the_fake_machine_still_refuses_a_matmul_of_wrong_shapes():
    machine = check.FakeMachine(bandwidth_gbs=100.0, tflops={torch.float32: 1.0}, units=4)
    a, b = torch.ones(8, 4), torch.ones(8, 4)
    with pytest.raises(RuntimeError):  # the meta kernel words it differently from the CPU one
        machine.timer(lambda: a @ b)
