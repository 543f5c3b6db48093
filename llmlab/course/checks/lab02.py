"""Checks for Lab 02 (model configuration and training memory), and the helpers the lab uses with
them: `record_trace` (the allocations and frees of a real training step, as events), `replay_peak`
(llmlab's answer to Exercise 3, the fallback while it is not done) and `prediction`."""

import functools
import itertools
import math
import random
from collections.abc import Callable

from llmlab import memory
from llmlab.course.checks import (
    ExerciseFailed,
    call,
    exercise,
    expect_number,
    expect_real,
    passed,
)
from llmlab.memory import GB, MemoryTracker, TrainingSetup, model_states
from llmlab.models import ModelShape, build_model, count_parameters

# ---------------------------------------------------------------- Exercise 1: parameter count


def _total_parameters(shape: ModelShape) -> int:
    return count_parameters(shape).total


def _count(shape: ModelShape, biases=True, kv=None, positions=True, final_norm=True,
           head_if_untied=True, head_always=False, gated=None, norm_values=None) -> int:
    """The parameter count with one convention changed: each keyword is a likely mistake."""
    d, f, vocab = shape.d_model, shape.ff, shape.vocab_size
    kv = shape.kv_dim if kv is None else kv
    gpt2 = shape.family == "gpt2"
    gated = not gpt2 if gated is None else gated
    norm = (2 * d if gpt2 else d) if norm_values is None else norm_values
    attention = d * (d + 2 * kv) + d * d + (d + 2 * kv + d) * (gpt2 and biases)
    mlp = (3 if gated else 2) * d * f + (f + d) * (gpt2 and biases)
    embeddings = vocab * d + shape.context * d * (gpt2 and positions)
    head = vocab * d * (head_always or (head_if_untied and not shape.tied_embeddings))
    return shape.n_layer * (attention + mlp + 2 * norm) + norm * final_norm + embeddings + head


def _count_mistakes(shape: ModelShape) -> list[tuple[int, str]]:
    """(wrong count, hint) for each likely mistake; the first matching hint is shown."""
    d = shape.d_model
    gpt2 = shape.family == "gpt2"
    mistakes = [
        (_count(shape, head_always=True), "A tied LM head is the token embedding itself: one "
         "matrix, counted once."),
        (_count(shape, head_if_untied=False), "An untied LM head is a matrix of its own."),
        (_count(shape, final_norm=False), "After the last block comes one more norm."),
        (_count(shape, kv=d), "Grouped-query attention: how wide are the key and value "
         "projections when there are fewer key/value heads than query heads?"),
        (_count(shape, gated=gpt2), "GPT-2's MLP has two matrices; Llama's SwiGLU MLP has three."),
    ]
    if gpt2:
        mistakes += [
            (_count(shape, biases=False), "GPT-2's linear layers have biases."),
            (_count(shape, positions=False), "GPT-2 learns a position embedding: a vector for "
             "each position of the context."),
            (_count(shape, norm_values=d), "A LayerNorm has a shift as well as a scale."),
        ]
    else:
        mistakes.append((_count(shape, norm_values=2 * d), "RMSNorm has a scale and no shift."))
    return mistakes


def _random_shapes(seed: int, count: int) -> list[ModelShape]:
    """Small shapes of both families, with and without tied heads, GQA and custom MLP widths."""
    rng = random.Random(seed)
    shapes = []
    for index in range(count):
        family = ("gpt2", "llama")[index % 2]
        n_head = rng.choice([2, 4, 6, 8])
        kv_head = rng.choice([h for h in range(1, n_head + 1) if n_head % h == 0 and h < n_head])
        shapes.append(ModelShape(
            family, n_layer=rng.randint(1, 4), d_model=n_head * rng.choice([8, 16]),
            n_head=n_head, vocab_size=rng.randint(50, 3000), context=rng.randint(8, 600),
            d_ff=rng.choice([0, rng.randint(16, 200)]),
            n_kv_head=kv_head if family == "llama" else 0,
            tied_embeddings=rng.random() < 0.5,
        ))
    return shapes


def _built_count(shape: ModelShape) -> int:
    """The reference: parameters of the `transformers` model, built without memory."""
    return sum(p.numel() for p in build_model(shape, device="meta").parameters())


@exercise(fallback=_total_parameters, fallback_name="llmlab.models.count_parameters")
def exercise_count_params(count_params) -> None:
    """Exercise 1: count_params(shape) -> parameters of the model a ModelShape describes."""
    name = "Exercise 1 (parameters from a config)"
    # Named cases first, so that the first failure tells the likely mistakes apart.
    gpt2_tied = ModelShape("gpt2", 2, 64, 4, 500, 128)
    llama_gqa = ModelShape("llama", 2, 64, 8, 500, 128, d_ff=176, n_kv_head=2,
                           tied_embeddings=False)
    shapes = [gpt2_tied, gpt2_tied.replace(tied_embeddings=False, d_ff=100), llama_gqa,
              llama_gqa.replace(n_kv_head=0, tied_embeddings=True)]
    for shape in shapes + _random_shapes(seed=2, count=8):
        got = call(name, count_params, shape)
        expected = _built_count(shape)
        mistakes = [(wrong / expected, hint) for wrong, hint in _count_mistakes(shape)]
        text = f"count_params({shape!r})".replace(", source=''", "")
        expect_number(name, text, got, expected, rel=1e-12,
                      mistakes=mistakes)
    passed(name, "your count matches the built transformers model on 12 configurations of both "
           "families, tied and untied, with and without grouped-query attention")


# ---------------------------------------------------------------- Exercise 2: model states

PRECISIONS = {  # precision -> how TrainingSetup spells it
    "fp32": {"dtype": "fp32"},
    "mixed": {"dtype": "bf16"},  # 16-bit weights and gradients, fp32 master weights and states
    "bf16": {"dtype": "bf16", "master_weights": False},  # pure bf16: everything in 16 bits
}


def _model_state_bytes(n_params: float, optimizer: str, precision: str) -> float:
    setup = TrainingSetup(optimizer=optimizer, **PRECISIONS[precision])
    return sum(model_states(n_params, setup).values())


def _state_mistakes(n: float, optimizer: str, precision: str) -> list[tuple[float, str]]:
    """(wrong bytes, hint), the classic mistakes first."""
    states = {"adamw": 2, "sgd-momentum": 1, "sgd": 0}[optimizer]
    expected = _model_state_bytes(n, optimizer, precision)
    mistakes = [(expected / 1e9, "Return bytes, not GB."), (expected / 2**30, "Return bytes, "
                "not GiB.")]
    if precision == "bf16":
        mistakes += [
            (_model_state_bytes(n, optimizer, "fp32"), "Pure bf16 keeps everything in 2 bytes: "
             "no fp32 master copy, and the optimizer's states in bf16 too (PyTorch keeps them in "
             "the weights' dtype). Did you treat it like fp32 or mixed, or ignore `precision`?"),
            (n * (2 + 2 + 4 * states), "In pure bf16 the optimizer's states are bf16 too, like "
             "the weights they belong to."),
        ]
    if precision == "mixed":
        mistakes += [
            (n * (2 + 2 + 4 * states), "Mixed precision keeps an fp32 master copy of the weights "
             "for the update (4 bytes per parameter)."),
            (n * (2 + 2 + 4 + 2 * states), "In mixed precision the optimizer's states are fp32."),
            (n * (2 + 4 + 4 * states), "Gradients count too: 2 bytes each in 16-bit."),
        ]
    if precision == "fp32":
        mistakes += [
            (n * (4 + 4 * states), "Gradients count too: 4 bytes each in fp32."),
            (n * (4 + 4 + 4 + 4 * states), "fp32 training keeps no separate master copy: the "
             "weights themselves are fp32."),
        ]
    if states:
        mistakes.append((expected - n * states * (2 if precision == "bf16" else 4), "The "
                         "optimizer's states count too: Adam keeps 2 numbers per parameter, SGD "
                         "with momentum 1, plain SGD none."))
    return mistakes


@exercise(fallback=_model_state_bytes, fallback_name="llmlab.memory.model_states")
def exercise_model_state_bytes(model_state_bytes) -> None:
    """Exercise 2: model_state_bytes(n_params, optimizer, precision) -> bytes of weights,
    gradients, optimizer states and (in mixed precision) fp32 master weights."""
    name = "Exercise 2 (bytes of the model states)"
    # Ordered so that the first failing case tells the likely mistakes apart.
    cases = [(1e9, "adamw", "fp32"), (1e9, "adamw", "bf16"), (124e6, "sgd-momentum", "mixed"),
             (1.5e9, "sgd-momentum", "bf16"), (7.5e9, "adamw", "mixed"), (3e9, "sgd", "mixed"),
             (7e9, "sgd", "bf16"), (2e6, "sgd-momentum", "fp32")]
    for n, optimizer, precision in cases:
        got = call(name, model_state_bytes, n, optimizer, precision)
        expected = _model_state_bytes(n, optimizer, precision)
        mistakes = [(wrong / expected, hint) for wrong, hint in _state_mistakes(n, optimizer,
                                                                                 precision)]
        text = f"model_state_bytes({n:g}, {optimizer!r}, {precision!r})"
        expect_number(name, text, got, expected, rel=1e-6, mistakes=mistakes)
    passed(name, "AdamW needs 16 bytes per parameter in fp32 and in mixed precision alike, 8 in "
           "pure bf16: 1B parameters need 16 GB before a single activation")


# ---------------------------------------------------------------- Exercise 3: peak from a trace


class TraceRecorder(MemoryTracker):
    """A MemoryTracker that also writes down what it sees, as the events Exercise 3 replays:
    ("phase", name), ("alloc", storage, nbytes) for every tensor an op returns (a view repeats
    its base's storage), ("free", storage). Storages are numbered in order of appearance."""

    def __init__(self, model, optimizer=None):
        super().__init__(model, optimizer)
        self.trace: list[tuple] = [("phase", self.phase)]
        self._numbers: dict[int, int] = {}  # id(storage) -> its number in the trace
        self._next_number = itertools.count()
        self._recording = True

    def __exit__(self, *exc) -> None:
        self._recording = False  # storages still alive are freed later, outside the step
        super().__exit__(*exc)

    def start(self, phase: str) -> None:
        super().start(phase)
        self._write("phase", phase)

    def _add_all(self, tensors, category: str) -> None:
        for tensor in tensors:
            storage = tensor.untyped_storage()
            if id(storage) not in self._numbers:
                self._numbers[id(storage)] = next(self._next_number)
            number = self._numbers[id(storage)]
            self._write("alloc", number, storage.nbytes())
            super()._add_all([tensor], category)

    def _free(self, key: int) -> None:
        super()._free(key)
        self._write("free", self._numbers.pop(key))

    def _write(self, *event) -> None:
        if self._recording:
            self.trace.append(event)


def record_trace(model: str | ModelShape, setup: TrainingSetup) -> tuple[list, MemoryTracker]:
    """The events of one real training step of `model` on the CPU (after a first step that
    creates the optimizer's state), and the tracker that measured the same step."""
    built, optimizer, input_ids, autocast_dtype = memory.prepare(model, setup)
    memory.training_step(built, optimizer, input_ids, autocast_dtype)
    with TraceRecorder(built, optimizer) as recorder:
        memory.training_step(built, optimizer, input_ids, autocast_dtype, recorder)
    return recorder.trace, recorder


def replay_peak(trace: list[tuple]) -> tuple[int, str]:
    """llmlab's answer to Exercise 3: (peak live bytes, the phase it was first reached in)."""
    live: dict[int, int] = {}
    total = peak = 0
    phase = peak_phase = ""
    for kind, *rest in trace:
        if kind == "phase":
            phase = rest[0]
        elif kind == "alloc" and rest[0] not in live:
            live[rest[0]] = rest[1]
            total += rest[1]
            if total > peak:
                peak, peak_phase = total, phase
        elif kind == "free":
            total -= live.pop(rest[0])
    return peak, peak_phase


# Small traces, each with what it tests: the message shown when the answer differs.
HAND_TRACES = [
    ([("phase", "forward"), ("alloc", 0, 100), ("alloc", 1, 50), ("free", 0), ("alloc", 2, 30),
      ("phase", "backward"), ("alloc", 3, 120), ("free", 1), ("free", 2), ("free", 3)],
     "Keep a running total: add the bytes of an allocation, take them away when it is freed, "
     "and remember the largest total and the phase it happened in."),
    ([("phase", "forward"), ("alloc", 0, 100), ("alloc", 0, 100), ("alloc", 1, 10),
      ("alloc", 0, 100), ("free", 1)],
     "Storage 0 is allocated again while it is still alive: that is a view of it (a reshape, a "
     "slice), and it takes no new memory. Count a storage once while it lives."),
    ([("phase", "forward"), ("alloc", 0, 100), ("free", 0), ("phase", "backward"),
      ("alloc", 0, 60), ("alloc", 1, 50), ("free", 0), ("free", 1)],
     "Storage 0 is freed, then its number is used again for a new allocation: that one takes "
     "memory again."),
    ([("phase", "forward"), ("alloc", 0, 80), ("free", 0), ("phase", "backward"),
      ("alloc", 1, 80), ("free", 1), ("phase", "optimizer"), ("alloc", 2, 40)],
     "The peak of 80 bytes is reached twice: report the phase where it was reached first."),
    ([("phase", "optimizer"), ("alloc", 5, 7), ("phase", "forward")],
     "The phase is the one in force when the peak happened, not the last one."),
]

# Real steps of the tiny model: the peak lands in a different phase in each.
REAL_STEPS = {
    "tiny, batch 1 x 32, AdamW": TrainingSetup(batch=1, seq=32, dtype="fp32"),
    "tiny, batch 2 x 64, eager attention, SGD with momentum": TrainingSetup(
        batch=2, seq=64, dtype="fp32", attention="eager", optimizer="sgd-momentum"),
}


@functools.cache
def _real_trace(label: str) -> tuple[list, int, str]:
    trace, tracker = record_trace("tiny", REAL_STEPS[label])
    return trace, sum(tracker.peak.values()), tracker.peak_phase


def _expect_peak(name: str, text: str, got, peak: int, phase: str, why: str) -> None:
    if not (isinstance(got, (tuple, list)) and len(got) == 2):
        raise ExerciseFailed(f"{name}: {text} returned {got!r}; return a pair (peak bytes, phase).")
    got_peak = expect_real(name, text, got[0])
    if any(math.isclose(got_peak, peak / unit) for unit in (1e6, 2**20, 1e9, 2**30)):
        why = "Return the peak in bytes, the unit of the trace."
    if got_peak != peak or got[1] != phase:
        raise ExerciseFailed(f"{name}: {text} returned {got!r}, expected ({peak}, {phase!r}). "
                             f"{why}")


@exercise(fallback=replay_peak, fallback_name="llmlab.course.checks.lab02.replay_peak")
def exercise_peak_from_trace(peak_from_trace: Callable) -> None:
    """Exercise 3: peak_from_trace(trace) -> (peak live bytes, phase of the peak)."""
    name = "Exercise 3 (the peak of a trace)"
    for index, (trace, why) in enumerate(HAND_TRACES):
        got = call(name, peak_from_trace, list(trace))
        peak, phase = replay_peak(trace)
        _expect_peak(name, f"peak_from_trace(check.HAND_TRACES[{index}])", got, peak, phase, why)
    for label in REAL_STEPS:
        trace, peak, phase = _real_trace(label)
        got = call(name, peak_from_trace, list(trace))
        _expect_peak(name, f"peak_from_trace(<{len(trace):,} events of a real step: {label}>)",
                     got, peak, phase, "The small traces pass, so look at what a real trace "
                     "has that they do not.")
    passed(name, "your replay finds the same peak, to the byte, and the same phase as llmlab's "
           "tracker on two real training steps")


def prediction(guess: Callable[[], float]) -> float | None:
    """The learner's prediction, or None while its cell still holds the stub (Run All goes on)."""
    try:
        return guess()
    except NotImplementedError:
        return None


# ---------------------------------------------------------------- Exercise 4: ZeRO stage


def _zero_states_gb(n_params: float, gpus: int, stage: int) -> float:
    setup = TrainingSetup(dtype="fp16", optimizer="adam", zero=stage, gpus=gpus)
    return sum(model_states(n_params, setup).values()) / GB


def _smallest_zero_stage(n_params: float, gpus: int, gpu_gb: float) -> int | None:
    sizes = [_zero_states_gb(n_params, gpus, stage) for stage in range(4)]
    return next((stage for stage, size in enumerate(sizes) if size <= gpu_gb), None)


@exercise(fallback=_smallest_zero_stage, fallback_name="llmlab.memory.model_states")
def exercise_smallest_zero_stage(smallest_zero_stage) -> None:
    """Exercise 4: smallest_zero_stage(n_params, gpus, gpu_gb) -> the smallest ZeRO stage whose
    mixed-precision Adam model states fit in gpu_gb per GPU, or None."""
    name = "Exercise 4 (smallest ZeRO stage that fits)"
    # Every answer (0, 1, 2, 3, None) appears; 31.40625 GB is stage 1's size exactly.
    cases = [(7.5e9, 64, 32), (7.5e9, 64, 20), (7.5e9, 64, 16), (1.5e9, 8, 40), (13e9, 8, 80),
             (13e9, 16, 40), (70e9, 8, 80), (70e9, 16, 80), (7.5e9, 64, 31.40625),
             (6.7e9, 1, 80), (6.7e9, 1, 120)]
    for n, gpus, gpu_gb in cases:
        got = call(name, smallest_zero_stage, n, gpus, gpu_gb)
        sizes = [_zero_states_gb(n, gpus, stage) for stage in range(4)]
        expected = _smallest_zero_stage(n, gpus, gpu_gb)
        if got != expected:
            listing = ", ".join(f"stage {s}: {size:.2f} GB" for s, size in enumerate(sizes))
            hint = (" Even stage 3 does not fit, so the answer is None: more GPUs are needed."
                    if expected is None else "")
            raise ExerciseFailed(
                f"{name}: smallest_zero_stage({n:g}, {gpus}, {gpu_gb}) returned {got!r}, expected "
                f"{expected!r}. Per GPU ({listing}); a stage fits when its size is at most "
                f"gpu_gb.{hint}"
            )
    passed(name, "7.5B parameters on 64 GPUs: 120 GB at stage 0, 31.4 at stage 1, 16.6 at "
           "stage 2, 1.9 at stage 3 (the ZeRO paper's figure 1)")


NOTEBOOK = "02_memory.ipynb"
# The function each exercise asks for -> its check
# (tests/course/checks/test_every_lab.py runs them all).
EXERCISES = {
    "count_params": exercise_count_params,
    "model_state_bytes": exercise_model_state_bytes,
    "peak_from_trace": exercise_peak_from_trace,
    "smallest_zero_stage": exercise_smallest_zero_stage,
}
