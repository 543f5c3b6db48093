"""Checks for Lab 02 (model configuration and training memory)."""

from llmlab.course.checks import ExerciseFailed, call, exercise, expect_number, passed
from llmlab.memory import GB, TrainingSetup, layer_activations, model_states
from llmlab.models import ModelShape, block_parameters


def _gpt2_block(d_model: int, d_ff: int, n_head: int) -> ModelShape:
    return ModelShape("gpt2", 1, d_model, n_head, 1000, 1024, d_ff=d_ff)


@exercise()
def exercise_block_params(block_params) -> None:
    """Exercise 1: block_params(d_model, d_ff, n_head) -> parameters of one GPT-2 block."""
    name = "Exercise 1 (parameters of a GPT-2 block)"
    for d, f, h in [(768, 3072, 12), (256, 1024, 4), (1600, 6400, 25), (512, 1536, 8)]:
        got = call(name, block_params, d, f, h)
        expected = block_parameters(_gpt2_block(d, f, h))
        mistakes = [
            (1 - (3 * d + d + f + d) / expected, "Count the biases: every Conv1D/Linear here has "
             "one (3d for q,k,v, d for the output, d_ff and d for the MLP)."),
            (1 - 4 * d / expected, "Count the two LayerNorms: each has a scale and a shift (2 d)."),
            (1 - 2 * d / expected, "A LayerNorm has a shift as well as a scale: 2 d each."),
            ((12 * d * d + 13 * d) / expected, "The MLP's width is d_ff, not always 4 d_model."),
        ]  # fmt: skip
        text = f"block_params({d}, {f}, {h})"
        expect_number(name, text, got, expected, rel=1e-9, mistakes=mistakes)
    passed(name, "GPT-2 small's block has 7,087,872 parameters (12 d^2 + 13 d); the heads only "
           "split d_model, they add none")  # fmt: skip


@exercise()
def exercise_model_state_bytes(model_state_bytes) -> None:
    """Exercise 2: model_state_bytes(n_params, optimizer, mixed) -> bytes of weights, gradients,
    optimizer states (and fp32 master weights when mixed), the ZeRO paper's convention."""
    name = "Exercise 2 (bytes of the model states)"
    # Ordered so that the first failing case tells the likely mistakes apart.
    cases = [(1e9, "adamw", False), (124e6, "sgd-momentum", False), (1.5e9, "sgd-momentum", True),
             (7.5e9, "adamw", True), (3e9, "sgd", True)]  # fmt: skip
    for n, optimizer, mixed in cases:
        got = call(name, model_state_bytes, n, optimizer, mixed)
        setup = TrainingSetup(dtype="bf16" if mixed else "fp32", optimizer=optimizer)
        expected = sum(model_states(n, setup).values())
        states = {"adamw": 2, "sgd-momentum": 1, "sgd": 0}[optimizer]
        mistakes = [(1e-9, "Return bytes, not GB."), (2**-30, "Return bytes, not GiB.")]
        if mixed:  # the first matching hint is shown: the classic mistake first
            mistakes += [
                (1 - 4 * n / expected, "Mixed precision keeps an fp32 master copy of the weights "
                 "for the update (4 bytes per parameter)."),
                (1 - 2 * n / expected, "Gradients count too: 2 bytes each in 16-bit."),
            ]  # fmt: skip
        else:
            mistakes += [
                (1 - 4 * n / expected, "Gradients count too: 4 bytes each in fp32."),
                (1 + 4 * n / expected, "fp32 training keeps no separate master copy: the "
                 "weights themselves are fp32."),
            ]  # fmt: skip
        if states:
            mistakes.append(
                (
                    1 - 4 * states * n / expected,
                    "The optimizer's states count too: "
                    "Adam keeps 2 numbers per parameter, SGD with momentum 1.",
                )
            )
        text = f"model_state_bytes({n:g}, {optimizer!r}, mixed={mixed})"
        expect_number(name, text, got, expected, rel=1e-6, mistakes=mistakes)
    passed(name, "AdamW needs 16 bytes per parameter in fp32 and in mixed precision alike: "
           "1B parameters need 16 GB before a single activation")  # fmt: skip


@exercise()
def exercise_layer_activation_bytes(layer_activation_bytes) -> None:
    """Exercise 3: layer_activation_bytes(batch, seq, d_model, n_head, bytes_per_value, eager)
    -> bytes one GPT-2 block keeps for the backward pass."""
    name = "Exercise 3 (activation bytes of one layer)"
    # Ordered so that the first failing case tells the likely mistakes apart.
    cases = [
        (2, 512, 1024, 16, 4, False),
        (8, 2048, 768, 12, 2, True),
        (8, 1024, 768, 12, 2, True),
        (8, 1024, 768, 12, 2, False),
        (4, 256, 256, 4, 4, True),
        (1, 2048, 1600, 25, 2, True),
    ]
    for batch, seq, d, h, nbytes, eager in cases:  # fmt: skip
        got = call(name, layer_activation_bytes, batch, seq, d, h, nbytes, eager)
        setup = TrainingSetup(batch=batch, seq=seq, dtype="fp32" if nbytes == 4 else "bf16",
                              attention="eager" if eager else "sdpa")  # fmt: skip
        per_token = sum(layer_activations(_gpt2_block(d, 4 * d, h), setup).values())
        expected = batch * seq * per_token
        scores = batch * h * seq * seq * nbytes
        mistakes = [(1 / nbytes, "Multiply the number of values by bytes_per_value.")]
        if batch > 1:
            mistakes.append((1 / batch, "Multiply by the batch: every sequence keeps its own."))
        if eager:
            mistakes += [
                (1 - scores / expected, "Eager attention keeps the softmax output: n_head x seq "
                 "x seq values per sequence."),
                (1 - scores * (h - 1) / h / expected, "The seq x seq scores exist for every head:"
                 " n_head x seq x seq values per sequence."),
            ]  # fmt: skip
        else:
            mistakes.append((1 + scores / expected, "A fused kernel does not keep the seq x seq "
                             "scores: it recomputes them in the backward pass."))  # fmt: skip
        text = f"layer_activation_bytes({batch}, {seq}, {d}, {h}, {nbytes}, eager={eager})"
        expect_number(name, text, got, expected, rel=1e-9, mistakes=mistakes)
    passed(name, "a GPT-2 small block keeps 16 d + heads x seq values per token: 403 MB with "
           "eager attention at batch 8 x 1024 in bf16, 201 MB fused")  # fmt: skip


def _zero_states_gb(n_params: float, gpus: int, stage: int) -> float:
    setup = TrainingSetup(dtype="fp16", optimizer="adam", zero=stage, gpus=gpus)
    return sum(model_states(n_params, setup).values()) / GB


@exercise()
def exercise_smallest_zero_stage(smallest_zero_stage) -> None:
    """Exercise 4: smallest_zero_stage(n_params, gpus, gpu_gb) -> the smallest ZeRO stage whose
    mixed-precision Adam model states fit in gpu_gb per GPU, or None."""
    name = "Exercise 4 (smallest ZeRO stage that fits)"
    cases = [(7.5e9, 64, 32), (7.5e9, 64, 16), (1.5e9, 8, 40), (13e9, 8, 80), (70e9, 8, 80),
             (70e9, 16, 80), (7.5e9, 64, 31.40625), (6.7e9, 1, 80)]  # fmt: skip
    for n, gpus, gpu_gb in cases:
        got = call(name, smallest_zero_stage, n, gpus, gpu_gb)
        sizes = [_zero_states_gb(n, gpus, stage) for stage in range(4)]
        expected = next((stage for stage, size in enumerate(sizes) if size <= gpu_gb), None)
        if got != expected:
            listing = ", ".join(f"stage {s}: {size:.2f} GB" for s, size in enumerate(sizes))
            hint = (
                ""
                if expected is not None
                else (" Even stage 3 does not fit, so the answer is None: more GPUs are needed.")
            )
            raise ExerciseFailed(
                f"{name}: smallest_zero_stage({n:g}, {gpus}, {gpu_gb}) returned {got!r}, expected "
                f"{expected!r}. Per GPU ({listing}); a stage fits when its size is at most "
                f"gpu_gb.{hint}"
            )
    passed(name, "7.5B parameters on 64 GPUs: 120 GB at stage 0, 31.4 at stage 1, 16.6 at "
           "stage 2, 1.9 at stage 3 (the ZeRO paper's figure 1)")  # fmt: skip


NOTEBOOK = "02_memory.ipynb"
# The function each exercise asks for -> its check (tests/test_checks.py runs them all).
EXERCISES = {
    "block_params": exercise_block_params,
    "model_state_bytes": exercise_model_state_bytes,
    "layer_activation_bytes": exercise_layer_activation_bytes,
    "smallest_zero_stage": exercise_smallest_zero_stage,
}
