"""Lab 02's checks reject likely mistakes, each with a message that points at the mistake.
(tests/course/checks/test_every_lab.py proves they pass on the solution and fail on the stub.)"""

import numpy as np
import pytest

from llmlab.course.checks import ExerciseFailed
from llmlab.course.checks import lab02 as check
from llmlab.memory import TrainingSetup

# ---------------------------------------------------------------- Exercise 1: parameter count


def _params(shape, biases=True, gqa=True, positions=True, final_norm=True, tied=True,
            gated=True, layernorm_shift=True, rmsnorm_shift=False):
    """A parameter count with switches for the mistakes; all defaults give the right answer."""
    d, f, vocab = shape.d_model, shape.ff, shape.vocab_size
    kv = shape.kv_dim if gqa else d
    if shape.family == "gpt2":
        attention = d * (d + 2 * kv) + d * d + (d + 2 * kv + d) * biases
        mlp = 2 * d * f + (f + d) * biases
        norm = 2 * d if layernorm_shift else d
        embeddings = vocab * d + shape.context * d * positions
    else:
        attention = d * (d + 2 * kv) + d * d
        mlp = (3 if gated else 2) * d * f
        norm = 2 * d if rmsnorm_shift else d
        embeddings = vocab * d
    head = vocab * d if (not shape.tied_embeddings or not tied) else 0
    return shape.n_layer * (attention + mlp + 2 * norm) + norm * final_norm + embeddings + head


@pytest.mark.parametrize(
    "wrong, hint",
    [
        pytest.param(lambda s: _params(s, biases=False), "have biases", id="no-biases"),
        pytest.param(lambda s: _params(s, gqa=False), "Grouped-query", id="ignores-gqa"),
        pytest.param(lambda s: _params(s, positions=False), "position embedding",
                     id="no-position-embedding"),
        pytest.param(lambda s: _params(s, final_norm=False), "one more norm", id="no-final-norm"),
        pytest.param(lambda s: _params(s, tied=False), "counted once", id="tied-head-twice"),
        pytest.param(lambda s: _params(s.replace(tied_embeddings=True)), "matrix of its own",
                     id="untied-head-missing"),
        pytest.param(lambda s: _params(s, gated=False), "three", id="swiglu-as-two-matrices"),
        pytest.param(lambda s: _params(s, layernorm_shift=False), "shift as well",
                     id="layernorm-scale-only"),
        pytest.param(lambda s: _params(s, rmsnorm_shift=True), "no shift", id="rmsnorm-shift"),
        pytest.param(lambda s: _params(s.replace(d_ff=0) if s.family == "gpt2" else s),
                     "expected about", id="mlp-always-4d"),
    ],
)
def test_count_params_rejects_likely_mistakes(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check.exercise_count_params(wrong)


def test_count_params_accepts_numpy_integers(capsys):
    check.exercise_count_params(lambda shape: np.int64(_params(shape)))
    assert "PASSED" in capsys.readouterr().out


def test_random_shapes_cover_both_families_gqa_and_untied_heads():
    shapes = check._random_shapes(seed=2, count=8)
    assert {s.family for s in shapes} == {"gpt2", "llama"}
    assert any(s.kv_heads < s.n_head for s in shapes)
    assert {s.tied_embeddings for s in shapes} == {True, False}
    assert any(s.d_ff for s in shapes) and any(not s.d_ff for s in shapes)


# ---------------------------------------------------------------- Exercise 2: model states

STATES = {"adamw": 2, "sgd-momentum": 1, "sgd": 0}


def _states(n, optimizer, precision, master=4, grads=True, state_bytes=None, unit=1):
    k = STATES[optimizer]
    if precision == "fp32":
        nbytes = 4 + 4 * grads + (4 if state_bytes is None else state_bytes) * k
    elif precision == "mixed":
        nbytes = 2 + 2 * grads + master + (4 if state_bytes is None else state_bytes) * k
    else:
        nbytes = 2 + 2 * grads + (2 if state_bytes is None else state_bytes) * k
    return n * nbytes / unit


@pytest.mark.parametrize(
    "wrong, hint",
    [
        pytest.param(lambda n, o, p: _states(n, o, "fp32"), "ignore `precision`",
                     id="precision-ignored"),
        pytest.param(lambda n, o, p: _states(n, o, "mixed" if p == "bf16" else p), "no fp32 master",
                     id="pure-bf16-as-mixed"),
        pytest.param(lambda n, o, p: _states(n, o, p, master=0), "master copy",
                     id="no-master-copy"),
        pytest.param(lambda n, o, p: _states(n, o, p, grads=False), "Gradients count too",
                     id="no-gradients"),
        pytest.param(lambda n, o, p: _states(n, o, p, state_bytes=0), "optimizer's states count",
                     id="no-optimizer-states"),
        pytest.param(lambda n, o, p: _states(n, o, p, state_bytes=4), "bf16 too",
                     id="pure-bf16-fp32-states"),
        pytest.param(lambda n, o, p: _states(n, o, p, unit=1e9), "not GB", id="gigabytes"),
        pytest.param(lambda n, o, p: n * 16, "expected about", id="always-16-bytes"),
    ],
)
def test_model_state_bytes_rejects_likely_mistakes(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check.exercise_model_state_bytes(wrong)


# ---------------------------------------------------------------- Exercise 3: peak of a trace


def _replay(trace, views_count=False, forget_frees=False, reuse_never=False, ties_last=False,
            last_phase=False, final=False, unit=1):
    """A replay with switches for the mistakes; all defaults give the right answer."""
    live, seen = {}, set()
    total = peak = 0
    phase = peak_phase = ""
    for kind, *rest in trace:
        if kind == "phase":
            phase = rest[0]
        elif kind == "alloc":
            number, nbytes = rest
            if (number in live and not views_count) or (reuse_never and number in seen):
                continue
            seen.add(number)
            live[number] = live.get(number, 0) + nbytes
            total += nbytes
            if total > peak or (ties_last and total == peak):
                peak, peak_phase = total, phase
        elif not forget_frees:
            total -= live.pop(rest[0], 0)  # a skipped allocation frees nothing
    if final:
        peak = total
    return peak / unit, (phase if last_phase else peak_phase)


@pytest.mark.parametrize(
    "wrong, hint",
    [
        pytest.param(lambda t: _replay(t, views_count=True), "a view", id="views-counted"),
        pytest.param(lambda t: _replay(t, forget_frees=True), "running total", id="no-frees"),
        pytest.param(lambda t: _replay(t, reuse_never=True), "takes memory again",
                     id="reused-number-skipped"),
        pytest.param(lambda t: _replay(t, ties_last=True), "reached first", id="tie-last-phase"),
        pytest.param(lambda t: _replay(t, last_phase=True), "phase", id="phase-at-the-end"),
        pytest.param(lambda t: _replay(t, final=True), "running total", id="final-not-peak"),
        pytest.param(lambda t: _replay(t, unit=2**20), "in bytes", id="mebibytes"),
        pytest.param(lambda t: _replay(t)[0], "return a pair", id="peak-without-phase"),
        pytest.param(lambda t: max(e[2] for e in t if e[0] == "alloc"), "return a pair",
                     id="largest-allocation"),
    ],
)
def test_peak_from_trace_rejects_likely_mistakes(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check.exercise_peak_from_trace(wrong)


def test_peak_from_trace_accepts_a_list_and_numpy_numbers(capsys):
    check.exercise_peak_from_trace(lambda t: [np.int64(check.replay_peak(t)[0]),
                                              check.replay_peak(t)[1]])
    assert "PASSED" in capsys.readouterr().out


def test_a_recorded_trace_replays_to_the_trackers_peak_and_holds_views():
    trace, tracker = check.record_trace("tiny", TrainingSetup(batch=1, seq=16, dtype="fp32"))
    assert check.replay_peak(trace) == (sum(tracker.peak.values()), tracker.peak_phase)
    allocs = [event[1] for event in trace if event[0] == "alloc"]
    assert len(allocs) > len(set(allocs))  # some allocations are views of a live storage
    assert [event[1] for event in trace if event[0] == "phase"] == [
        "forward", "forward", "backward", "optimizer", "forward"]


def test_the_real_steps_peak_in_different_phases():
    phases = {check._real_trace(label)[2] for label in check.REAL_STEPS}
    assert phases == {"backward", "optimizer"}


# ---------------------------------------------------------------- Exercise 4: ZeRO stage


def _zero(n, gpus, gpu_gb, unit=1e9, strict=False, last=None, stages=(0, 1, 2, 3)):
    sizes = [16 * n, 4 * n + 12 * n / gpus, 2 * n + 14 * n / gpus, 16 * n / gpus]
    for stage in stages:
        nbytes = sizes[stage]
        if nbytes < gpu_gb * unit or (not strict and nbytes == gpu_gb * unit):
            return stage
    return last


@pytest.mark.parametrize(
    "wrong, hint",
    [
        pytest.param(lambda n, g, gb: _zero(n, g, gb, last=3), "Even stage 3 does not fit",
                     id="never-none"),
        pytest.param(lambda n, g, gb: _zero(n, g, gb, unit=2**30), "expected", id="gibibytes"),
        pytest.param(lambda n, g, gb: _zero(n, g, gb, strict=True), "at most gpu_gb",
                     id="strictly-less"),
        pytest.param(lambda n, g, gb: 3, "stage 0: 120.00 GB", id="always-stage-3"),
        pytest.param(lambda n, g, gb: _zero(n, g, gb, stages=(0, 1, 3)), "expected 2",
                     id="never-stage-2"),
    ],
)
def test_smallest_zero_stage_rejects_likely_mistakes(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        check.exercise_smallest_zero_stage(wrong)

