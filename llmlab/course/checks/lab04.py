"""Checks for Lab 04 (multi-GPU training), and the versions the lab falls back to.

The distributed exercises run the learner's code for real: `launch` forks a few processes joined in
a gloo group, each runs the learner's function on random inputs next to the library's answer, and
sends back numbers; the verdict is given here, in the notebook's process.
"""

import math
import random
from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from llmlab.course.checks import (
    ExerciseFailed,
    call,
    exercise,
    passed,
    real_number,
    run_on_ranks,
)
from llmlab.distributed import launch
from llmlab.distributed.tensor_parallel import CopyToTensorParallel, ReduceFromTensorParallel
from llmlab.memory import TrainingSetup
from llmlab.models import next_token_loss, preset
from llmlab.numerics import relative_error
from llmlab.scale.layout import Parallel, choose_layouts, stage_estimate
from llmlab.units import GB

# ---------------------------------------------------------------- Exercise 1: ring all-reduce


def all_reduce_reference(tensor: torch.Tensor) -> None:
    """The lab's fallback for Exercise 1: the library's all-reduce (a sum, in place)."""
    dist.all_reduce(tensor)


COLLECTIVES = ("all_reduce", "reduce_scatter", "reduce_scatter_single", "reduce_scatter_tensor",
               "all_gather", "all_gather_single", "all_gather_into_tensor", "broadcast",
               "reduce")
POINT_TO_POINT = {"send": "dst", "isend": "dst", "recv": "src", "irecv": "src"}  # -> the peer
SHAPES = [(7,), (10,), (2, 3), (5, 13)]  # few divide by 3 or 4 ranks; 6 in 4: chunk makes 3


class _Watch:
    """Counts the elements this rank sends, notes the ranks it sends to and receives from, and
    any collective called.

    The functions are replaced both in `torch.distributed` and in the module that defines them,
    so that `P2POp(dist.isend, ...)`, which checks its op against that module's own `isend`, and
    `batch_isend_irecv`, which calls the op it was given, are watched like direct calls.
    """

    def __init__(self):
        self.sent = 0
        self.peers: dict[str, set[int]] = {"to": set(), "from": set()}
        self.collectives: set[str] = set()
        # hasattr: torch 2.10 has no reduce_scatter_single yet; what a torch lacks, no one calls.
        self.saved = {name: getattr(dist, name) for name in (*POINT_TO_POINT, *COLLECTIVES)
                      if hasattr(dist, name)}
        self.replaced: list[tuple[object, str, Callable]] = []  # (module, name, original)
        self.inside = False  # within a watched call

    def __enter__(self):
        for name, original in self.saved.items():
            wrapped = self._wrap(name, original)
            for module in (dist, dist.distributed_c10d):
                if getattr(module, name, None) is original:
                    self.replaced.append((module, name, original))
                    setattr(module, name, wrapped)
        return self

    def _wrap(self, name, original):
        def wrapped(tensor, *args, **kwargs):
            if self.inside:  # dist.send calls isend: one message, counted once
                return original(tensor, *args, **kwargs)
            if name in POINT_TO_POINT:
                key = POINT_TO_POINT[name]
                peer = args[0] if args else kwargs.get(key, kwargs.get(f"group_{key}"))
                if peer is not None:  # recv(src=None) takes a message from anyone
                    self.peers["to" if key == "dst" else "from"].add(int(peer))
                if key == "dst":
                    self.sent += tensor.numel()
            else:
                self.collectives.add(name)
            self.inside = True
            try:
                return original(tensor, *args, **kwargs)
            finally:
                self.inside = False

        return wrapped

    def __exit__(self, *exc):
        for module, name, original in self.replaced:
            setattr(module, name, original)


def _ring_worker(ring_all_reduce: Callable, seed: int) -> list[dict]:
    rank = dist.get_rank()
    outcomes = []
    for index, shape in enumerate(SHAPES):
        generator = torch.Generator().manual_seed(seed + 1000 * rank + index)
        mine = torch.randn(shape, generator=generator)
        expected = mine.clone()
        dist.all_reduce(expected)
        got = mine.clone()
        with _Watch() as watch:
            returned = ring_all_reduce(got)
        dist.barrier()  # every rank done with this shape before the next one starts
        if isinstance(returned, torch.Tensor) and returned is not got and torch.equal(got, mine):
            got = returned  # a new tensor returned instead of the input changed: noted below
            in_place = False
        else:
            in_place = True
        outcomes.append(dict(shape=shape, mine=mine, got=got, expected=expected, in_place=in_place,
                             sent=watch.sent, peers=watch.peers,
                             collectives=sorted(watch.collectives)))
    return outcomes


def ring_elements_sent(numel: int, world: int) -> tuple[int, int]:
    """The fewest and the most elements one rank sends in a ring all-reduce: 2(n-1) chunks, each
    of the tensor's n near-equal chunks (their sizes differ by one when n does not divide it)."""
    return 2 * (world - 1) * (numel // world), 2 * (world - 1) * math.ceil(numel / world)


def _ring_verdict(name: str, world: int, outcomes: list[list[dict]]) -> None:
    for rank, by_rank in enumerate(outcomes):
        for outcome in by_rank:
            shape, got, expected = outcome["shape"], outcome["got"], outcome["expected"]
            where = f"with {world} ranks, a tensor of shape {tuple(shape)}, rank {rank}"
            if outcome["collectives"]:
                raise ExerciseFailed(
                    f"{name}: your function called dist.{outcome['collectives'][0]}: build the "
                    "all-reduce from point-to-point messages only (dist.send/recv, isend/irecv)."
                )
            if not outcome["in_place"]:
                raise ExerciseFailed(
                    f"{name}: {where}: the tensor passed in was left unchanged. Like "
                    "dist.all_reduce, change it in place (a new tensor you return is not seen "
                    "by code that holds the old one)."
                )
            if got.shape != expected.shape:
                raise ExerciseFailed(f"{name}: {where}: the result has shape {tuple(got.shape)}.")
            if torch.allclose(got, expected, rtol=1e-5, atol=1e-5):
                continue
            raise ExerciseFailed(f"{name}: {where}: {_ring_hint(got, expected, outcome, world)}")
    for rank, by_rank in enumerate(outcomes):
        neighbours = {(rank - 1) % world, (rank + 1) % world}
        for direction in ("to", "from"):
            others = sorted(set().union(*(o["peers"][direction] for o in by_rank)) - neighbours)
            if others:
                verb = "sent to" if direction == "to" else "received from"
                raise ExerciseFailed(
                    f"{name}: with {world} ranks, rank {rank} {verb} rank(s) {others}. In a "
                    f"ring each rank talks only to its two neighbours (here "
                    f"{sorted(neighbours)}): which rank is on your right, which on your left?"
                )
    for index, shape in enumerate(SHAPES):
        numel = math.prod(shape)
        fewest, most = ring_elements_sent(numel, world)
        sent = [by_rank[index]["sent"] for by_rank in outcomes]
        # Every chunk travels n-1 times in each phase, whoever sends it: 2(n-1) tensors in all.
        if sum(sent) == 2 * (world - 1) * numel and all(fewest <= s <= most for s in sent):
            continue
        raise ExerciseFailed(
            f"{name}: with {world} ranks and {numel} elements, the ranks sent {sent} elements; "
            f"a ring sends {fewest} to {most} from every rank (2(n-1) chunks of 1/n of the "
            "tensor) and no rank more than its neighbours. Does one rank carry the others' "
            "traffic, or does a rank send its whole tensor?"
        )


def _ring_hint(got: torch.Tensor, expected: torch.Tensor, outcome: dict, world: int) -> str:
    size = f"largest difference {float((got - expected).abs().max()):.3g}"
    if torch.allclose(got * world, expected, rtol=1e-5, atol=1e-5):
        return (f"the result is the mean, not the sum ({size}). dist.all_reduce sums "
                "(ReduceOp.SUM); averaging is a separate step that DDP takes afterwards.")
    flat_got, flat_expected = got.flatten(), expected.flatten()
    right = torch.isclose(flat_got, flat_expected, rtol=1e-5, atol=1e-5)
    if 0 < right.float().mean() < 1:
        chunks = right.tensor_split(world)
        whole = [i for i, chunk in enumerate(chunks) if len(chunk) and chunk.all()]
        if len(whole) == 1:
            return (f"only chunk {whole[0]} of {world} holds the full sum ({size}): after the "
                    "reduce-scatter phase each rank owns one finished chunk; the all-gather "
                    "phase must pass the finished chunks around the ring.")
        return (f"some elements are right and some are not ({size}): check which chunk each "
                "step sends and which it receives into, and that the chunks cover the whole "
                "tensor when its size does not divide by the number of ranks "
                "(torch.chunk may make fewer chunks than you ask for; read torch.tensor_split).")
    if torch.allclose(got, outcome["mine"]):
        return f"the tensor is unchanged ({size}): nothing was received and added."
    return (f"the result differs from dist.all_reduce's sum ({size}). Is a received chunk added to "
            "your own, not written over it, and is a buffer you are still sending left alone "
            "until its send has completed?")


def _traffic_worker(ring_all_reduce: Callable, numel: int) -> int:
    with _Watch() as watch:
        ring_all_reduce(torch.randn(numel))
    return watch.sent


def elements_sent(ring_all_reduce: Callable, world: int, numel: int = 1 << 16) -> list[int]:
    """The elements each of `world` ranks sends in point-to-point messages during one call of
    `ring_all_reduce` on a tensor of `numel` (0 for the library's, whose messages are in C++)."""
    return launch(_traffic_worker, nprocs=world, args=(ring_all_reduce, numel))


@exercise(fallback=all_reduce_reference, fallback_name="torch.distributed.all_reduce")
def exercise_ring_all_reduce(ring_all_reduce) -> None:
    """Exercise 1: ring_all_reduce(tensor) sums `tensor` over all ranks, in place."""
    name = "Exercise 1 (ring all-reduce)"
    seed = random.randrange(10_000)
    for world in tqdm((2, 3, 4), desc="ranks", leave=False):  # each a fresh set of processes
        outcomes = run_on_ranks(name, _ring_worker, world, ring_all_reduce, seed)
        _ring_verdict(name, world, outcomes)
    passed(name, f"equal to dist.all_reduce for 2, 3 and 4 ranks on shapes {SHAPES}, sending "
                 "2(n-1)/n of the tensor per rank")


# ---------------------------------------------------------------- Exercise 2: DDP by hand


class DataParallelReference:
    """The lab's fallback for Exercise 2: the same two steps, with the library's collectives."""

    def __init__(self, model: nn.Module):
        self.model = model
        for tensor in model.state_dict().values():
            dist.broadcast(tensor, src=0)

    def average_gradients(self) -> None:
        for parameter in self.model.parameters():
            if parameter.grad is not None:
                dist.all_reduce(parameter.grad)
                parameter.grad /= dist.get_world_size()


class TinyTiedModel(nn.Module):
    """A small language model with what real ones have: tied embedding and head, biases, a norm,
    and a buffer (state that is not a parameter: here a fixed random code per position, drawn
    at construction like the weights)."""

    def __init__(self, vocab: int = 23, width: int = 12, positions: int = 8):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.register_buffer("position_code", torch.randn(positions, width))
        self.hidden = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.embed.weight  # tied, as in GPT-2: one tensor, two uses

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.position_code[: tokens.shape[-1]]
        return self.head(self.norm(F.gelu(self.hidden(x))))


DDP_STEPS, GLOBAL_BATCH, LR = 3, 12, 0.5


def _batches(seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    return [(torch.randint(0, 23, (GLOBAL_BATCH, 5), generator=generator),
             torch.randint(0, 23, (GLOBAL_BATCH, 5), generator=generator))
            for _ in range(DDP_STEPS)]


def _flat(tensors) -> torch.Tensor:
    return torch.cat([t.detach().flatten() for t in tensors])


def _train(model, batches, rank: int, world: int, sync: Callable[[], None] | None) -> list:
    """Plain SGD (not Adam, which hides a gradient's scale): `sync` after each backward."""
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    grads = []
    share = GLOBAL_BATCH // world
    for inputs, targets in batches:
        optimizer.zero_grad()
        mine = slice(rank * share, (rank + 1) * share)
        next_token_loss(model, inputs[mine], targets[mine]).backward()
        if sync is not None:
            sync()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
        optimizer.step()
    return grads


def _ddp_worker(data_parallel: Callable, seed: int) -> dict:
    rank, world = dist.get_rank(), dist.get_world_size()
    batches = _batches(seed)
    torch.manual_seed(seed + 1 + rank)  # every rank starts from different weights
    model = TinyTiedModel()
    wrapper = data_parallel(model)
    start, buffers = _flat(model.parameters()), _flat(model.buffers())
    grads = _train(model, batches, rank, world, wrapper.average_gradients)
    torch.manual_seed(seed + 1)  # the library's DDP, from rank 0's start
    library = nn.parallel.DistributedDataParallel(TinyTiedModel())
    _train(library, batches, rank, world, None)
    return dict(start=start, buffers=buffers, final=_flat(model.parameters()), grads=grads,
                ddp_final=_flat(library.module.parameters()))


def _single_process(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list]:
    """Rank 0's start, trained alone on the whole global batch: what DDP must reproduce."""
    torch.manual_seed(seed + 1)
    model = TinyTiedModel()
    start, buffers = _flat(model.parameters()), _flat(model.buffers())
    grads = _train(model, _batches(seed), 0, 1, None)
    return start, buffers, _flat(model.parameters()), grads


def _gradient_hint(world: int, by_rank: list[dict], expected: dict) -> str | None:
    """What is wrong with the first step's averaged gradients, or None when they are right."""
    def close(a, b):  # the ranks add in another order than one process: rounding differs
        return torch.allclose(a, b, rtol=1e-4, atol=1e-5 * float(b.abs().max()))

    wrong = {rank: [n for n in expected if not close(grads[n], expected[n])]
             for rank, grads in enumerate(by_rank)}
    if not any(wrong.values()):
        return None
    if all(close(grads[n], world * expected[n]) for grads in by_rank for n in expected):
        return (f"the gradients are {world}x too big: all_reduce sums the ranks' gradients; "
                "DDP averages them, so that N ranks make the same step as one process.")
    if not wrong[0]:
        return ("rank 0 has the averaged gradients but the other ranks do not: every rank steps "
                "its own optimizer, so every rank needs the average.")
    names = sorted(set.intersection(*(set(names) for names in wrong.values() if names)))
    if names and len(names) < len(expected):
        return (f"{', '.join(names)} did not get the averaged gradient: every parameter with "
                "a gradient must be averaged (how do you list all of a model's parameters?).")
    return "the gradients after average_gradients() are not the mean of the ranks' gradients."


def _ddp_verdict(name: str, world: int, results: list[dict], seed: int) -> None:
    start, buffers, final, grads = _single_process(seed)
    starts = [r["start"] for r in results]
    if not all(torch.equal(s, starts[0]) for s in starts):
        raise ExerciseFailed(
            f"{name}: with {world} ranks the model's weights differ between ranks after "
            "DataParallel(model): each rank built its model from its own random seed. Copy "
            "rank 0's weights to every rank first."
        )
    if not torch.allclose(starts[0], start):
        raise ExerciseFailed(
            f"{name}: with {world} ranks all ranks start equal, but not from rank 0's weights: "
            "which rank's weights should everyone take?"
        )
    if not all(torch.equal(r["buffers"], buffers) for r in results):
        raise ExerciseFailed(
            f"{name}: with {world} ranks the parameters may agree, but the model's buffer "
            "(position_code) differs from rank 0's on some rank after DataParallel(model). A "
            "model's state is more than its parameters: which of its methods lists all of it?"
        )
    hint = _gradient_hint(world, [r["grads"][0] for r in results], grads[0])
    if hint:
        raise ExerciseFailed(f"{name}: with {world} ranks, the first step: {hint}")
    for rank, result in enumerate(results):
        for label, got in (("your", result["final"]), ("the library's DDP", result["ddp_final"])):
            error = relative_error(got, final)
            if error > 1e-5:
                raise ExerciseFailed(
                    f"{name}: with {world} ranks, rank {rank}: after {DDP_STEPS} steps {label} "
                    f"weights differ from one process's by {error:.2g} (relative)."
                )


@exercise(fallback=DataParallelReference,
          fallback_name="llmlab.course.checks.lab04.DataParallelReference")
def exercise_data_parallel(data_parallel) -> None:
    """Exercise 2: DataParallel(model) makes the ranks equal; .average_gradients() averages."""
    name = "Exercise 2 (DDP by hand)"
    seed = random.randrange(10_000)
    for world in tqdm((2, 3), desc="ranks", leave=False):
        results = run_on_ranks(name, _ddp_worker, world, data_parallel, seed)
        _ddp_verdict(name, world, results, seed)
    passed(name, f"with 2 and 3 ranks, {DDP_STEPS} SGD steps give one process's weights on the "
                 "same global batch (and the library's DDP's), tied, bias and buffer included")


# ---------------------------------------------------------------- Exercise 3: tensor parallel MLP

WIDTH, HIDDEN = 6, 24  # HIDDEN divides by 2, 3 and 4 ranks
MLP_WEIGHTS = ("fc_weight", "fc_bias", "proj_weight", "proj_bias")


def mlp(x, fc_weight, fc_bias, proj_weight, proj_bias) -> torch.Tensor:
    """The unsplit MLP the tensor-parallel one must equal (nn.Linear's weight layout: out x in)."""
    return F.linear(F.gelu(F.linear(x, fc_weight, fc_bias)), proj_weight, proj_bias)


def _mlp_inputs(seed: int) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    weights = {
        "fc_weight": torch.randn(HIDDEN, WIDTH, generator=generator) / WIDTH**0.5,
        "fc_bias": torch.randn(HIDDEN, generator=generator),
        "proj_weight": torch.randn(WIDTH, HIDDEN, generator=generator) / HIDDEN**0.5,
        "proj_bias": torch.randn(WIDTH, generator=generator),
    }
    x = torch.randn(2, 3, WIDTH, generator=generator)
    upstream = torch.randn(2, 3, WIDTH, generator=generator)  # d(loss)/d(output), random
    return x, weights, upstream


def _forward_backward(fn: Callable, seed: int) -> dict[str, torch.Tensor]:
    x, weights, upstream = _mlp_inputs(seed)
    x.requires_grad_()
    for tensor in weights.values():
        tensor.requires_grad_()
    out = fn(x, *weights.values())
    (out * upstream).sum().backward()
    grads = {name: (t.grad if t.grad is not None else torch.zeros_like(t))
             for name, t in [("x", x), *weights.items()]}
    return {"out": out.detach(), **grads}


def _tp_worker(tensor_parallel_mlp: Callable, seed: int) -> dict:
    return _forward_backward(tensor_parallel_mlp, seed)


def _tp_hint(world: int, results: list[dict], expected: dict, seed: int) -> str | None:
    """What is wrong with the learner's forward or backward, or None when both are right."""
    def close(a, b):
        return torch.allclose(a, b, rtol=1e-4, atol=1e-5)

    if not all(close(r["out"], expected["out"]) for r in results):
        extra_bias = expected["out"] + (world - 1) * _mlp_inputs(seed)[1]["proj_bias"]
        if close(results[0]["out"], extra_bias):
            return (f"the output holds the second bias {world} times: each rank added it before "
                    "the all-reduce summed the ranks' outputs.")
        return ("the forward output differs from the unsplit MLP's. Which dimension of each "
                "weight does a rank keep? The first layer can be split so that each rank's part "
                "of the hidden layer needs no communication before the activation; the second "
                "then takes exactly that part as its input.")
    summed = {n: sum(r[n] for r in results) for n in ("fc_weight", "fc_bias", "proj_weight")}
    if all(close(summed[n], world * expected[n]) for n in summed) and close(
        results[0]["x"], world * expected["x"]
    ):
        return (f"the weight and input gradients are {world}x too big: in the backward pass "
                "every rank already holds the full gradient of the output; the op that summed "
                "in the forward pass passes it through unchanged in the backward pass.")
    if all(close(summed[n], world * expected[n]) for n in summed):
        return ("every rank computed the whole MLP: each rank must keep only its 1/N part of "
                "both weight matrices (and of the first bias).")
    if not all(close(r["x"], expected["x"]) for r in results):
        if close(sum(r["x"] for r in results), expected["x"]):
            return ("the input's gradient on each rank is only its own part: in the backward "
                    "pass the gradients of all ranks' parts must be summed (the conjugate of "
                    "the forward pass's identity).")
        return "the input's gradient differs from the unsplit MLP's."
    for n in summed:
        if not close(summed[n], expected[n]):
            return f"the gradient of {n} (summed over the ranks' parts) differs."
    if not all(close(r["proj_bias"], expected["proj_bias"]) for r in results):
        return "the second bias's gradient differs: every rank adds it once, after the sum."
    return None


def tensor_parallel_reference(x, fc_weight, fc_bias, proj_weight, proj_bias) -> torch.Tensor:
    """The lab's fallback for Exercise 3: rank r's contiguous share of the hidden units, with the
    two conjugate operations of llmlab.distributed.tensor_parallel."""
    rank, world = dist.get_rank(), dist.get_world_size()
    part = fc_weight.shape[0] // world
    mine = slice(rank * part, (rank + 1) * part)
    x = CopyToTensorParallel.apply(x, None)  # None: the default group, every rank
    hidden = F.gelu(F.linear(x, fc_weight[mine], fc_bias[mine]))
    return ReduceFromTensorParallel.apply(F.linear(hidden, proj_weight[:, mine]), None) + proj_bias


@exercise(fallback=tensor_parallel_reference,
          fallback_name="llmlab.course.checks.lab04.tensor_parallel_reference")
def exercise_tensor_parallel_mlp(tensor_parallel_mlp) -> None:
    """Exercise 3: a column- then row-parallel MLP equals the unsplit one, forward and backward."""
    name = "Exercise 3 (column- then row-parallel MLP)"
    seed = random.randrange(10_000)
    expected = _forward_backward(mlp, seed)
    for world in tqdm((2, 3), desc="ranks", leave=False):
        results = run_on_ranks(name, _tp_worker, world, tensor_parallel_mlp, seed)
        hint = _tp_hint(world, results, expected, seed)
        if hint:
            raise ExerciseFailed(f"{name}: with {world} ranks: {hint}")
    passed(name, "with 2 and 3 ranks: the output, the input's gradient and every weight's "
                 "gradient equal the unsplit MLP's")


# ---------------------------------------------------------------- Exercise 4: pipeline schedules

SCHEDULES = ("gpipe", "1f1b")


def _slots(name: str, timeline, stages: int, micro_batches: int, call_text: str) -> list[dict]:
    """Each stage's {(kind, micro-batch): slot}; a failure for anything malformed or missing."""
    if not isinstance(timeline, (list, tuple)) or len(timeline) != stages:
        raise ExerciseFailed(f"{name}: {call_text} must return one list of slots per stage "
                             f"({stages} lists); got {type(timeline).__name__}.")
    by_stage = []
    for stage, row in enumerate(timeline):
        seen = {}
        for slot, op in enumerate(row):
            if op is None:
                continue
            if not (isinstance(op, (tuple, list)) and len(op) == 2 and op[0] in ("F", "B")):
                raise ExerciseFailed(f"{name}: {call_text}: stage {stage}, slot {slot} holds "
                                     f"{op!r}; use None, ('F', i) or ('B', i).")
            key = (op[0], int(op[1]))
            if key in seen:
                raise ExerciseFailed(f"{name}: {call_text}: stage {stage} runs {key} twice.")
            seen[key] = slot
        wanted = {(kind, i) for kind in "FB" for i in range(micro_batches)}
        if set(seen) != wanted:
            missing = sorted(wanted - set(seen))[:3]
            raise ExerciseFailed(f"{name}: {call_text}: stage {stage} never runs {missing}: "
                                 "every stage runs each micro-batch's forward and backward.")
        by_stage.append(seen)
    return by_stage


def _dependency_error(by_stage: list[dict], micro_batches: int) -> str | None:
    last = len(by_stage) - 1
    for stage, slots in enumerate(by_stage):
        for i in range(micro_batches):
            if stage > 0 and slots[("F", i)] <= by_stage[stage - 1][("F", i)]:
                return (f"stage {stage} runs F{i} at slot {slots[('F', i)]}, before stage "
                        f"{stage - 1} has finished it: a stage's input is the previous stage's "
                        "output.")
            if stage < last and slots[("B", i)] <= by_stage[stage + 1][("B", i)]:
                return (f"stage {stage} runs B{i} at slot {slots[('B', i)]}, before stage "
                        f"{stage + 1} has finished B{i}: the gradient flows from the last stage "
                        "back to the first.")
            if slots[("B", i)] <= slots[("F", i)]:
                return f"stage {stage} runs B{i} before F{i}."
    return None


def peak_in_flight(slots: dict) -> int:
    """The most micro-batches whose activations a stage holds at once (forward done, backward
    not yet): what the schedule costs in memory."""
    events = sorted((slot, +1 if kind == "F" else -1) for (kind, _), slot in slots.items())
    held = peak = 0
    for _, change in events:
        held += change
        peak = max(peak, held)
    return peak


def timeline_bubble(timeline) -> float:
    """The share of all stage-slots, up to the last one used, that stand idle: the bubble a drawn
    timeline shows (llmlab.scale.comm_cost.bubble_fraction is the formula's, from p and m)."""
    length = max(len(row) for row in timeline)
    busy = sum(op is not None for row in timeline for op in row)
    return 1 - busy / (length * len(timeline))


def _pipeline_verdict(name, schedule, timeline, stages, micro_batches) -> None:
    call_text = f"pipeline_timeline({stages}, {micro_batches}, {schedule!r})"
    by_stage = _slots(name, timeline, stages, micro_batches, call_text)
    error = _dependency_error(by_stage, micro_batches)
    if error:
        raise ExerciseFailed(f"{name}: {call_text}: {error}")
    shortest = 2 * (micro_batches + stages - 1)  # each slot-long op, with the pipeline kept full
    length = 1 + max(slot for slots in by_stage for slot in slots.values())
    peaks = [peak_in_flight(slots) for slots in by_stage]
    if schedule == "gpipe" and any(
        slots[("B", 0)] < slots[("F", micro_batches - 1)] for slots in by_stage
    ):
        raise ExerciseFailed(f"{name}: {call_text}: GPipe runs all forwards of a step before "
                             "any backward (1F1B is the one that interleaves them).")
    if schedule == "1f1b":
        limits = [min(stages - stage, micro_batches) for stage in range(stages)]
        over = [s for s in range(stages) if peaks[s] > limits[s]]
        if over:
            s = over[0]
            raise ExerciseFailed(
                f"{name}: {call_text}: stage {s} holds {peaks[s]} micro-batches' activations at "
                f"once. 1F1B's point is memory: after its warm-up forwards, a stage runs one "
                "backward for each forward. How many forwards must stage s run before the first "
                "backward reaches it?"
            )
    if length > shortest:
        raise ExerciseFailed(
            f"{name}: {call_text}: the step takes {length} slots; the schedule can finish in "
            f"{shortest}. Is a stage waiting when it has work whose inputs are ready?"
        )


def pipeline_timeline_reference(stages: int, micro_batches: int, schedule: str) -> list[list]:
    """The lab's fallback for Exercise 4: a slot-by-slot simulation of GPipe or 1F1B."""
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}: use one of {SCHEDULES}")
    done: dict[tuple[str, int, int], int] = {}  # (kind, stage, micro-batch) -> slot

    def ready(key, slot):
        return key in done and done[key] < slot

    forwards, backwards = [0] * stages, [0] * stages
    timeline: list[list] = [[] for _ in range(stages)]
    slot = 0
    while min(backwards) < micro_batches:
        for stage in range(stages):
            f, b = forwards[stage], backwards[stage]
            source = ("B", stage + 1, b) if stage < stages - 1 else ("F", stage, b)
            can_backward = b < f and ready(source, slot)
            can_forward = f < micro_batches and (stage == 0 or ready(("F", stage - 1, f), slot))
            if schedule == "gpipe":
                can_backward = can_backward and f == micro_batches  # all forwards first
            else:
                can_forward = can_forward and f - b < stages - stage  # 1F1B: bounded in flight
            if can_backward and (schedule == "1f1b" or not can_forward):
                op = ("B", b)
                backwards[stage] += 1
            elif can_forward:
                op = ("F", f)
                forwards[stage] += 1
            else:
                timeline[stage].append(None)
                continue
            done[(op[0], stage, op[1])] = slot
            timeline[stage].append(op)
        slot += 1
    return timeline


@exercise(fallback=pipeline_timeline_reference,
          fallback_name="llmlab.course.checks.lab04.pipeline_timeline_reference")
def exercise_pipeline_timeline(pipeline_timeline) -> None:
    """Exercise 4: pipeline_timeline(stages, micro_batches, schedule) -> one op list per stage."""
    name = "Exercise 4 (GPipe and 1F1B timelines)"
    cases = [(2, 4), (4, 4), (3, 8), (4, 1), (1, 3), (4, 6)]
    for stages, micro_batches in cases:
        for schedule in SCHEDULES:
            timeline = call(name, pipeline_timeline, stages, micro_batches, schedule)
            _pipeline_verdict(name, schedule, timeline, stages, micro_batches)
    passed(name, f"valid, as short as the pipeline allows, and 1F1B within its memory bound, "
                 f"for (stages, micro-batches) in {cases}")


# ---------------------------------------------------------------- Exercise 5: choosing a layout

# Every scenario trains with this set-up; the layout decides zero, gpus and tensor_parallel.
# No activation checkpointing: the activations are then large enough that splitting the layers
# (which splits them too) can fit where sharding alone does not.
LAYOUT_SETUP = TrainingSetup(batch=1, seq=1024, dtype="bf16", optimizer="adamw",
                             checkpointing=False)
LAYOUT_SCENARIOS = [  # model, GB per GPU, GPUs per node, nodes, link inside a node, between nodes
    ("gpt2-124m", 80.0, 8, 1, "nvlink", "infiniband"),
    ("llama-7b", 40.0, 8, 1, "nvlink", "infiniband"),
    ("llama-7b", 48.0, 8, 2, "nvlink", "infiniband"),  # ZeRO-1 fits, but only tightly
    ("llama-13b", 40.0, 8, 1, "nvlink", "infiniband"),
    ("llama-13b", 24.0, 8, 2, "nvlink", "infiniband"),  # sharding alone does not fit: TP
    ("llama-13b", 24.0, 8, 2, "pcie", "infiniband"),  # the same over PCIe: nothing fits
    ("llama-7b", 24.0, 6, 1, "nvlink", "infiniband"),  # 6 GPUs: tp 3 and 6 split no 32 heads
    ("llama-70b", 80.0, 8, 4, "nvlink", "infiniband"),
]


def _roomy(layouts: list) -> object | None:
    """The planner's best layout that fits with room to spare, or None."""
    return layouts[0] if layouts and layouts[0].fit == "yes" else None  # "tight" ones rank last


def _as_layout(got) -> dict | None:
    """A dict with dp, tp, pp, zero, or an object with those attributes, as a dict of ints."""
    keys = ("dp", "tp", "pp", "zero")
    got = getattr(got, "parallel", got)  # a planner's Layout holds its degrees in .parallel
    values = [got.get(k) if isinstance(got, dict) else getattr(got, k, None) for k in keys]
    if any(v is None or isinstance(v, bool) or real_number(v) != int(real_number(v) or 0)
           for v in values):
        return None
    return dict(zip(keys, (int(v) for v in values), strict=True))


def _layout_hint(layout: dict, best, scenario: tuple, layouts: list) -> str | None:
    model, gpu_gb, per_node, nodes, inside, between = scenario
    dp, tp, pp, zero = (layout[k] for k in ("dp", "tp", "pp", "zero"))
    if dp * tp * pp != per_node * nodes or min(dp, tp, pp) < 1 or not 0 <= zero <= 3:
        return (f"dp x tp x pp = {dp} x {tp} x {pp} should use all {per_node * nodes} GPUs, "
                "each degree at least 1, and ZeRO's stage is 0 to 3.")
    if tp > per_node:
        return (f"tensor parallel over {tp} GPUs crosses nodes: its all-reduces, inside every "
                f"layer, would travel over {between}. Keep tp within one node's {per_node} GPUs.")
    if tp > 1 and inside != "nvlink":
        return (f"tensor parallel over {inside.upper()}: it all-reduces activations inside every "
                "layer, which needs NVLink's bandwidth.")
    if model.n_head % tp or per_node % tp:
        return (f"tensor parallel degree {tp} must divide the model's {model.n_head} heads (each "
                f"rank computes whole heads) and the node's {per_node} GPUs.")
    if pp > 1 and nodes % pp:
        return (f"{pp} pipeline stages over {nodes} node(s): stages go across nodes, one or more "
                "whole nodes each, so pp divides the number of nodes.")
    if best is not None and _as_layout(best) == layout:
        return None
    chosen = next((c for c in layouts if _as_layout(c) == layout), None)
    if chosen is None:
        parallel = Parallel.for_setup(LAYOUT_SETUP, dp, tp, pp, zero)
        planned = stage_estimate(model, LAYOUT_SETUP, parallel)
        return (f"{dp=} {tp=} {pp=} ZeRO-{zero} does not fit: the planner needs about "
                f"{planned.total / GB:.1f} GB per GPU (on the most loaded pipeline stage), "
                f"and a GPU has {gpu_gb:g} GB with 10% kept free.")
    if chosen.fit != "yes":
        return (f"{chosen.describe()} needs {chosen.estimate.total / GB:.1f} GB of the GPU's "
                f"{gpu_gb:g} GB: it fits only in the last 10%, where the allocator's "
                "fragmentation can tip it over. The exercise asks for room to spare: what does "
                "llmlab.memory.fits answer for this plan?")
    if best.parallel.tp * best.parallel.pp < tp * pp:
        return (f"{chosen.describe()} fits, but so does {best.describe()} without splitting the "
                "model: splitting it adds communication inside every step's layers.")
    if (best.parallel.tp, best.parallel.pp) == (tp, pp) and best.parallel.zero < zero:
        return (f"ZeRO-{zero} fits, but ZeRO-{best.parallel.zero} does too, with less "
                f"communication: {best.reason}.")
    return f"the planner's rule prefers {best.describe()}: {best.reason}."


def choose_layout_reference(model, gpu_gb, gpus_per_node, nodes, inside_node, between_nodes):
    """The lab's fallback for Exercise 5: the first layout of llmlab.scale.layout that fits with
    room to spare, or None."""
    layouts = choose_layouts(model, gpu_gb, gpus_per_node, nodes, inside_node, between_nodes,
                             setup=LAYOUT_SETUP)
    best = _roomy(layouts)
    return None if best is None else _as_layout(best)


def _layout_verdict(name: str, call_text: str, got, scenario: tuple) -> None:
    layouts = choose_layouts(*scenario, setup=LAYOUT_SETUP)
    best = _roomy(layouts)
    if got is None:
        if best is None:
            return
        raise ExerciseFailed(f"{name}: {call_text} returned None (nothing fits), but "
                             f"{best.describe()} fits with room to spare.")
    layout = _as_layout(got)
    if layout is None:
        raise ExerciseFailed(f"{name}: {call_text} returned {got!r}; return a dict with "
                             "integer dp, tp, pp and zero, or None when nothing fits.")
    hint = _layout_hint(layout, best, scenario, layouts)
    if hint is None and best is None:
        hint = "nothing fits here with room to spare: return None."
    if hint:
        raise ExerciseFailed(f"{name}: {call_text}: {hint}")


@exercise(fallback=choose_layout_reference,
          fallback_name="llmlab.scale.layout.choose_layouts")
def exercise_choose_layout(choose_layout) -> None:
    """Exercise 5: choose_layout(model, gpu_gb, gpus_per_node, nodes, inside, between)."""
    name = "Exercise 5 (choosing a layout)"
    for scenario in LAYOUT_SCENARIOS:
        model, *rest = scenario
        call_text = f"choose_layout(preset({model!r}), {', '.join(map(repr, rest))})"
        try:
            got = call(name, choose_layout, preset(model), *rest)
        except ValueError as error:  # the planner refusing a layout (a tp that splits no heads)
            raise ExerciseFailed(f"{name}: {call_text} raised ValueError: {error}") from None
        _layout_verdict(name, call_text, got, (preset(model), *rest))
    passed(name, f"the simplest layout that fits with room to spare, or None, for "
                 f"{len(LAYOUT_SCENARIOS)} clusters from one node of 6 GPUs to 4 nodes of 8, "
                 "over NVLink and PCIe")


NOTEBOOK = "04_multi_gpu.ipynb"
# The function each exercise asks for -> its check
# (tests/course/checks/test_every_lab.py runs them all).
EXERCISES = {
    "ring_all_reduce": exercise_ring_all_reduce,
    "DataParallel": exercise_data_parallel,
    "tensor_parallel_mlp": exercise_tensor_parallel_mlp,
    "pipeline_timeline": exercise_pipeline_timeline,
    "choose_layout": exercise_choose_layout,
}
# The notebook's other definitions those functions call: Exercise 3's two conjugate operations.
HELPERS = ("CopyToTensorParallel", "ReduceFromTensorParallel")
