"""How much memory a step of GRPO needs, by formula, itemised by phase (llmlab.posttrain.grpo runs
the step; llmlab.posttrain.memory measures it against this plan).

A step has three phases, and the memory of each is mostly one thing:

- generation: the policy samples every rollout with a KV cache, keys and values of every layer
  for every token so far. Its widest moments are the prompt's forward (all prompts at once,
  through the last block's MLP) and the end of sampling (the cache at its longest);
- scoring: the frozen reference (and, for the slices updated after the first, the policy before
  the update) score the rollouts' tokens without gradients: a forward through the blocks, then
  the logits of every completion token, vocabulary-wide;
- the update: a training step on a slice of the rollouts: Lab 02's plan (`estimate_memory`)
  with the slice as its batch and logits for the completion's tokens alone.

Throughout, the policy's weights and optimizer states stay (Lab 02's states; the optimizer makes
its states in the first update, so this is every step after the first), and so do the frozen
reference's weights, with no gradients and no optimizer. The step peaks at whichever
phase holds the most beside them, and that is a matter of shape: per token, the cache holds
2 x layers x key/value width numbers and a scoring pass about 3 x vocabulary per completion
token, so a small model with short rollouts peaks in its update, a small model with many long
completions in scoring, and a 7B model with long completions at the end of sampling.
"""

from dataclasses import dataclass
from typing import NamedTuple

from llmlab.memory.estimate import (
    CUDA_CONTEXT_BYTES,
    DTYPE_BYTES,
    STATES,
    MemoryEstimate,
    TrainingSetup,
    estimate_memory,
)
from llmlab.models import ModelShape, as_shape
from llmlab.tables import markdown_table
from llmlab.units import GB

GRPO_PHASES = ("generation", "scoring", "update")


def kv_cache_bytes(model: str | ModelShape, sequences: int, tokens: int, dtype: str) -> float:
    """Bytes of a KV cache: a key and a value per layer, each of key/value width (d_model, or
    less with grouped-query attention), for every token of every sequence."""
    shape = as_shape(model)
    return 2 * shape.n_layer * sequences * tokens * shape.kv_dim * DTYPE_BYTES[dtype]


def _forward_bytes_per_token(shape: ModelShape, dtype: str) -> float:
    """What a forward without gradients holds per token at its widest, in the last block's MLP
    (the cache aside). GPT-2: the token and position embeddings (generate gives each row its own
    positions), the block's input, its attention output, their sum and the MLP's normalised
    input (6 d), and the MLP's hidden layer before and after GELU (2 f). Llama: the embeddings,
    the block's input, the sum and the normalised input (4 d), the rotary cos and sin (2 head
    widths), and SwiGLU's SiLU of the gate, up projection and their product (3 f)."""
    d, f = shape.d_model, shape.ff
    if shape.family == "gpt2":
        return (6 * d + 2 * f) * DTYPE_BYTES[dtype]
    return (4 * d + 2 * shape.head_dim + 3 * f) * DTYPE_BYTES[dtype]


class Moment(NamedTuple):
    """A moment of a GRPO step and the items alive then."""

    phase: str  # one of GRPO_PHASES
    name: str
    items: tuple[str, ...]


@dataclass(frozen=True)
class GRPOMemoryEstimate:
    """Bytes per device of a GRPO step, itemised; each moment lists the items alive at it."""

    update: MemoryEstimate  # Lab 02's plan of one update, on a slice of the rollouts
    items: dict[str, float]
    moments: tuple[Moment, ...]
    overhead: float = CUDA_CONTEXT_BYTES

    def bytes_at(self, moment: Moment) -> float:
        return sum(self.items[name] for name in moment.items)

    def phase_peak(self, phase: str) -> float:
        """The most bytes allocated at any moment of `phase`."""
        if phase not in GRPO_PHASES:
            raise ValueError(f"unknown phase {phase!r}: use one of {GRPO_PHASES}")
        return max(self.bytes_at(moment) for moment in self.moments if moment.phase == phase)

    @property
    def peak_moment(self) -> Moment:
        return max(self.moments, key=self.bytes_at)

    @property
    def peak_phase(self) -> str:
        return self.peak_moment.phase

    @property
    def peak(self) -> float:
        """Peak bytes allocated by PyTorch over the step."""
        return self.bytes_at(self.peak_moment)

    @property
    def total(self) -> float:
        """The peak plus the CUDA context: about what nvidia-smi would show."""
        return self.peak + self.overhead

    def table(self) -> str:
        """The items in GB, a column per moment (blank where an item is not alive), each column
        summed; the peak's column says so."""
        columns = [f"{m.phase}: {m.name}" + (" (peak)" if m == self.peak_moment else "")
                   for m in self.moments]

        def row(label, values):
            return {"per GPU, GB": label} | dict(zip(columns, values, strict=True))

        rows = [row(name, [f"{nbytes / GB:.3f}" if name in m.items else "" for m in self.moments])
                for name, nbytes in self.items.items()]
        rows.append(row("allocated", [f"{self.bytes_at(m) / GB:.3f}" for m in self.moments]))
        rows.append(row("+ CUDA context (assumed)", [f"{self.overhead / GB:.3f}"] * len(columns)))
        rows.append(row("total per GPU",
                        [f"{(self.bytes_at(m) + self.overhead) / GB:.3f}" for m in self.moments]))
        return markdown_table(rows, aligned=True)


def _check_rollouts(shape: ModelShape, setup: TrainingSetup, rollouts: int, prompt_tokens: int,
                    completion_tokens: int, updates_per_rollout: int) -> None:
    for name, value in (("rollouts", rollouts), ("prompt_tokens", prompt_tokens),
                        ("completion_tokens", completion_tokens),
                        ("updates_per_rollout", updates_per_rollout)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if rollouts % updates_per_rollout:
        raise ValueError(f"{rollouts} rollouts do not split into {updates_per_rollout} equal "
                         "updates: make rollouts a multiple of updates_per_rollout")
    if prompt_tokens + completion_tokens > shape.context:
        raise ValueError(f"{prompt_tokens} prompt + {completion_tokens} completion tokens are "
                         f"longer than the model's context {shape.context}")
    if setup.batch != 1 or setup.seq:
        raise ValueError("the rollouts set the update's batch and length: leave setup.batch and "
                         "setup.seq at their defaults and give rollouts, prompt_tokens and "
                         "completion_tokens")
    if setup.lora_rank or setup.head_only:
        raise ValueError("this plan trains the whole policy beside a full frozen reference; "
                         "with LoRA the reference is the policy with its adapters off")
    if setup.grad_accumulation > 1:
        raise ValueError("GRPO takes an optimizer step on each slice of the rollouts: give "
                         "updates_per_rollout, not grad_accumulation")
    if setup.tensor_parallel > 1:
        raise ValueError("this plan covers one device or data parallel replicas (with ZeRO), "
                         "each sampling its own rollouts; not tensor parallelism")


def estimate_grpo_memory(
    model: str | ModelShape,
    setup: TrainingSetup | None = None,
    *,
    rollouts: int,
    prompt_tokens: int,
    completion_tokens: int,
    updates_per_rollout: int = 2,
    **changes,
) -> GRPOMemoryEstimate:
    """Itemised bytes per device of a GRPO step (see the module docstring) that samples
    `rollouts` completions of `completion_tokens` tokens after prompts of `prompt_tokens`
    (per data-parallel replica), and takes `updates_per_rollout` optimizer steps on equal slices
    of them: `estimate_grpo_memory("tiny", rollouts=64, prompt_tokens=20, completion_tokens=12,
    dtype="fp32")`. An upper bound where generation is smaller: it stops once every completion
    has stopped, and sample_groups samples prompts of each length apart (the cache then holds
    the largest such batch, not all the rollouts)."""
    shape = as_shape(model)
    setup = (setup or TrainingSetup()).replace(**changes)
    _check_rollouts(shape, setup, rollouts, prompt_tokens, completion_tokens, updates_per_rollout)
    tokens = prompt_tokens + completion_tokens
    # The update scores the completion's tokens: logits for them and the position before.
    update = estimate_memory(shape, setup.replace(batch=rollouts // updates_per_rollout,
                                                  seq=tokens, scored_tokens=completion_tokens + 1))
    items = {name: update.items[name] for name in STATES if name in update.items}
    items["reference weights"] = update.items["weights"]  # frozen: no gradients, no optimizer
    # generate() reads all the prompts in one forward, then one token at a time.
    items["prompt's KV cache"] = kv_cache_bytes(shape, rollouts, prompt_tokens, setup.dtype)
    items["prompt's forward"] = rollouts * prompt_tokens * _forward_bytes_per_token(
        shape, setup.dtype)
    # The last token sampled is never read back: the cache ends one token short.
    items["KV cache"] = kv_cache_bytes(shape, rollouts, tokens - 1, setup.dtype)
    # transformers' cache grows by torch.cat: a layer's longer keys (or values) are made
    # before the shorter ones are freed.
    items["cache growth"] = kv_cache_bytes(shape, rollouts, tokens - 2, setup.dtype) / (
        2 * shape.n_layer)
    # The last step's logits, copied to fp32, and the probabilities sampled from them.
    items["sampling buffers"] = 2 * rollouts * shape.vocab_size * 4
    # Scoring's forward through the blocks, every rollout's tokens at once (the reference's
    # pass): wider than its logits where prompts are long and completions short. GPT-2's
    # position embeddings are one row shared by the batch here (no position ids are given),
    # where generate gives each rollout its own.
    shared = (rollouts - 1) * tokens * shape.d_model * DTYPE_BYTES[setup.dtype] * (
        shape.family == "gpt2")
    items["scoring forward"] = rollouts * tokens * _forward_bytes_per_token(
        shape, setup.dtype) - shared
    # Each scoring pass (the reference's, then the policy's) holds its logits for the positions
    # that predict a completion token and the one after (llmlab.posttrain.logprobs keeps no
    # more), and cross-entropy's fp32 contiguous copy of the shifted ones and their log-softmax.
    items["log-prob logits"] = rollouts * shape.vocab_size * (
        (completion_tokens + 1) * DTYPE_BYTES[setup.dtype] + 2 * completion_tokens * 4)
    states = (*(name for name in STATES if name in items), "reference weights")
    update_items = tuple(name for name in update.peak_items if name not in states)
    items |= {name: update.items[name] for name in update_items}
    moments = (
        Moment("generation", "prompt's forward",
               (*states, "prompt's KV cache", "prompt's forward")),
        Moment("generation", "end of sampling",
               (*states, "KV cache", "cache growth", "sampling buffers")),
        Moment("scoring", "forward", (*states, "scoring forward")),
        Moment("scoring", "log-prob passes", (*states, "log-prob logits")),
        Moment("update", update.peak_phase, (*states, *update_items)),
    )
    return GRPOMemoryEstimate(update, items, moments, update.overhead)
