"""Lab 04's checks accept correct answers and reject likely mistakes, each with a message that
points at the mistake. The distributed ones run the code for real in forked gloo processes.
(tests/course/checks/test_every_lab.py proves they pass on the solution notebook and say "not
done yet" on the generated stub.)"""

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from llmlab.course.checks import ExerciseFailed
from llmlab.course.checks import lab04 as check

# ---------------------------------------------------------------- Exercise 1: ring all-reduce


def _ring(tensor, *, gather=True, divide=False, chunking="split", neighbour=1, overwrite=False):
    """A ring all-reduce with one switch per likely mistake (all off: a correct one)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    work = tensor.detach().flatten().clone()
    chunks = work.tensor_split(world) if chunking == "split" else work.chunk(world)
    right, left = (rank + neighbour) % world, (rank - neighbour) % world
    for step in range(world - 1):
        send, receive = (rank - step) % world, (rank - step - 1) % world
        incoming = torch.empty_like(chunks[receive])
        request = dist.isend(chunks[send], right)
        dist.recv(incoming, left)
        request.wait()
        if overwrite:
            chunks[receive].copy_(incoming)
        else:
            chunks[receive].add_(incoming)
    for step in range(world - 1 if gather else 0):
        send, receive = (rank + 1 - step) % world, (rank - step) % world
        request = dist.isend(chunks[send], right)
        dist.recv(chunks[receive], left)
        request.wait()
    if divide:
        work /= world
    tensor.copy_(work.view_as(tensor))


def ring_right(tensor):
    _ring(tensor)


def ring_with_blocking_sends_ordered_by_rank(tensor):
    """Another correct form: even ranks send first, odd ranks receive first."""
    rank, world = dist.get_rank(), dist.get_world_size()
    chunks = list(tensor.detach().flatten().clone().tensor_split(world))
    right, left = (rank + 1) % world, (rank - 1) % world

    def exchange(outgoing, incoming):
        if rank % 2 == 0:
            dist.send(outgoing, right)
            dist.recv(incoming, left)
        else:
            dist.recv(incoming, left)
            dist.send(outgoing, right)

    for step in range(world - 1):
        receive = (rank - step - 1) % world
        buffer = torch.empty_like(chunks[receive])
        exchange(chunks[(rank - step) % world], buffer)
        chunks[receive] = chunks[receive] + buffer
    for step in range(world - 1):
        receive = (rank - step) % world
        buffer = torch.empty_like(chunks[receive])
        exchange(chunks[(rank + 1 - step) % world], buffer)
        chunks[receive] = buffer
    tensor.copy_(torch.cat(chunks).view_as(tensor))


def ring_only_reduce_scatter(tensor):
    _ring(tensor, gather=False)


def ring_averaging(tensor):
    _ring(tensor, divide=True)


def ring_with_torch_chunk(tensor):
    _ring(tensor, chunking="chunk")  # 6 elements in 4 chunks: torch.chunk makes 3 of 2


def ring_overwriting_instead_of_adding(tensor):
    _ring(tensor, overwrite=True)


def ring_sending_to_the_wrong_neighbour(tensor):
    _ring(tensor, neighbour=-1)


def ring_returning_a_new_tensor(tensor):
    result = tensor.clone()
    _ring(result)
    return result


def ring_with_batched_point_to_point(tensor):
    """Another correct form: each step's send and receive as one dist.batch_isend_irecv."""
    rank, world = dist.get_rank(), dist.get_world_size()
    work = tensor.detach().flatten().clone()
    chunks = work.tensor_split(world)
    right, left = (rank + 1) % world, (rank - 1) % world

    def exchange(outgoing, incoming):
        ops = [dist.P2POp(dist.isend, outgoing, right), dist.P2POp(dist.irecv, incoming, left)]
        for request in dist.batch_isend_irecv(ops):
            request.wait()

    for step in range(world - 1):
        receive = (rank - step - 1) % world
        incoming = torch.empty_like(chunks[receive])
        exchange(chunks[(rank - step) % world], incoming)
        chunks[receive].add_(incoming)
    for step in range(world - 1):
        exchange(chunks[(rank + 1 - step) % world], chunks[(rank - step) % world])
    tensor.copy_(work.view_as(tensor))


def ring_going_left(tensor):
    """Also correct: the ring runs the other way round (send left, receive from the right)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    work = tensor.detach().flatten().clone()
    chunks = work.tensor_split(world)
    right, left = (rank + 1) % world, (rank - 1) % world
    for step in range(world - 1):
        send, receive = (rank + step) % world, (rank + step + 1) % world
        incoming = torch.empty_like(chunks[receive])
        request = dist.isend(chunks[send], left)
        dist.recv(incoming, right)
        request.wait()
        chunks[receive].add_(incoming)
    for step in range(world - 1):
        send, receive = (rank - 1 + step) % world, (rank + step) % world
        request = dist.isend(chunks[send], left)
        dist.recv(chunks[receive], right)
        request.wait()
    tensor.copy_(work.view_as(tensor))


def star_through_the_last_rank(tensor):
    """Every rank sends its tensor to the last one, which sums and sends the total back: right
    sums, and 2(n-1) tensors sent in all, like a ring; but the last rank sends n-1 of them."""
    rank, world = dist.get_rank(), dist.get_world_size()
    hub = world - 1
    if rank != hub:
        dist.send(tensor.contiguous(), hub)
        dist.recv(tensor, hub)
        return
    incoming = torch.empty_like(tensor)
    for other in range(hub):
        dist.recv(incoming, other)
        tensor += incoming
    for other in range(hub):
        dist.send(tensor.contiguous(), other)


def direct_reduce_scatter_then_all_gather(tensor):
    """Each rank sends chunk j straight to rank j, then its summed chunk straight to everyone:
    the ring's bytes per rank, but every rank talks to every other (no ring)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    work = tensor.detach().flatten().clone()
    chunks = work.tensor_split(world)
    others = [j for j in range(world) if j != rank]
    requests = [dist.isend(chunks[j], j) for j in others]
    for j in others:
        incoming = torch.empty_like(chunks[rank])
        dist.recv(incoming, j)
        chunks[rank].add_(incoming)
    for request in requests:
        request.wait()
    requests = [dist.isend(chunks[rank], j) for j in others]
    for j in others:
        dist.recv(chunks[j], j)
    for request in requests:
        request.wait()
    tensor.copy_(work.view_as(tensor))


def ring_with_a_plain_bug(tensor):
    raise KeyError("a bug in the learner's own code")


def all_reduce_itself(tensor):
    dist.all_reduce(tensor)


def everyone_sends_everything(tensor):
    rank, world = dist.get_rank(), dist.get_world_size()
    total = tensor.clone()
    for step in range(1, world):
        incoming = torch.empty_like(tensor)
        request = dist.isend(tensor.contiguous(), (rank + step) % world)
        dist.recv(incoming, (rank - step) % world)
        request.wait()
        total += incoming
    tensor.copy_(total)


@pytest.mark.parametrize("right", [ring_right, ring_with_blocking_sends_ordered_by_rank,
                                   ring_with_batched_point_to_point, ring_going_left],
                         ids=lambda f: f.__name__)
def test_ring_all_reduce_accepts_correct_forms(right, capsys):
    check.exercise_ring_all_reduce(right)
    assert "PASSED" in capsys.readouterr().out


@pytest.mark.parametrize(("mistake", "message"), [
    (ring_only_reduce_scatter, "all-gather phase"),
    (ring_averaging, "the mean, not the sum"),
    (ring_with_torch_chunk, "with 4 processes your code raised an exception(.|\\n)*index out "
                            "of range"),
    (ring_overwriting_instead_of_adding, "added to your own"),
    (ring_sending_to_the_wrong_neighbour, "failed or hung"),
    (ring_returning_a_new_tensor, "in place"),
    (all_reduce_itself, "point-to-point"),
    (everyone_sends_everything, "does a rank send its whole tensor"),
    (star_through_the_last_rank, "sent \\[7, 7, 14\\] elements(.|\\n)*carry the others"),
    (direct_reduce_scatter_then_all_gather, "rank 0 sent to rank\\(s\\) \\[2\\]"),
    (ring_with_a_plain_bug, "raised an exception on rank \\d:(.|\\n)*KeyError(.|\\n)*own code"),
], ids=lambda value: getattr(value, "__name__", ""))
def test_ring_all_reduce_rejects_likely_mistakes(mistake, message):
    with pytest.raises(ExerciseFailed, match=message):
        check.exercise_ring_all_reduce(mistake)


# ---------------------------------------------------------------- Exercise 2: DDP by hand


class HandDDP:
    """A correct answer, with one switch per likely mistake."""

    broadcast, divide, only_rank_0, skip = "state_dict", True, False, ""

    def __init__(self, model):
        self.model = model
        if self.broadcast == "state_dict":  # parameters and buffers
            tensors = model.state_dict().values()
        else:
            tensors = [p.detach() for p in model.parameters()] if self.broadcast else []
        for tensor in tensors:
            dist.broadcast(tensor, src=0)

    def average_gradients(self):
        world = dist.get_world_size()
        for name, parameter in self.model.named_parameters():
            if self.skip and self.skip in name:
                continue
            if self.only_rank_0:
                dist.reduce(parameter.grad, dst=0)
                if dist.get_rank() == 0:
                    parameter.grad /= world
                continue
            dist.all_reduce(parameter.grad)
            if self.divide:
                parameter.grad /= world


class DDPWithAllReduceAverage(HandDDP):
    """Also correct: the AVG reduction does the division."""

    def average_gradients(self):
        for parameter in self.model.parameters():
            dist.all_reduce(parameter.grad, op=dist.ReduceOp.AVG)


class DDPBroadcastingParametersThenBuffers(HandDDP):
    """Also correct: parameters and buffers listed separately."""

    def __init__(self, model):
        self.model = model
        for tensor in [*model.parameters(), *model.buffers()]:
            dist.broadcast(tensor.detach(), src=0)


class SumWithoutDividing(HandDDP):
    divide = False


class NoInitialBroadcast(HandDDP):
    broadcast = ""


class BroadcastingParametersOnly(HandDDP):
    broadcast = "parameters"


class AveragedOnlyOnRank0(HandDDP):
    only_rank_0 = True


class ForgettingTheBiases(HandDDP):
    skip = "bias"


class BroadcastFromTheLastRank(HandDDP):
    def __init__(self, model):
        self.model = model
        for parameter in model.parameters():
            dist.broadcast(parameter.detach(), src=dist.get_world_size() - 1)


@pytest.mark.parametrize("right", [HandDDP, DDPWithAllReduceAverage,
                                   DDPBroadcastingParametersThenBuffers,
                                   check.DataParallelReference], ids=lambda c: c.__name__)
def test_data_parallel_accepts_correct_forms(right, capsys):
    check.exercise_data_parallel(right)
    assert "PASSED" in capsys.readouterr().out


@pytest.mark.parametrize(("mistake", "message"), [
    (SumWithoutDividing, "too big"),
    (NoInitialBroadcast, "weights differ between ranks"),
    (AveragedOnlyOnRank0, "the other ranks do not"),
    (ForgettingTheBiases, "hidden.bias"),
    (BroadcastFromTheLastRank, "not from rank 0"),
    (BroadcastingParametersOnly, "buffer \\(position_code\\) differs"),
], ids=lambda value: getattr(value, "__name__", ""))
def test_data_parallel_rejects_likely_mistakes(mistake, message):
    with pytest.raises(ExerciseFailed, match=message):
        check.exercise_data_parallel(mistake)


# ---------------------------------------------------------------- Exercise 3: tensor parallel


def _sum_across_ranks(tensor):
    tensor = tensor.clone()
    dist.all_reduce(tensor)
    return tensor


class Copy(torch.autograd.Function):
    """f: identity forward, sum of the ranks' gradients backward."""

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        return _sum_across_ranks(grad)


class Reduce(torch.autograd.Function):
    """g: sum of the ranks' outputs forward, identity backward."""

    @staticmethod
    def forward(ctx, x):
        return _sum_across_ranks(x)

    @staticmethod
    def backward(ctx, grad):
        return grad


class Identity(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


class ReduceBothWays(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return _sum_across_ranks(x)

    @staticmethod
    def backward(ctx, grad):
        return _sum_across_ranks(grad)


def _tp(x, w1, b1, w2, b2, *, f=Copy, g=Reduce, bias_inside=False, whole=False):
    rank, world = dist.get_rank(), dist.get_world_size()
    part = w1.shape[0] // world
    mine = slice(None) if whole else slice(rank * part, (rank + 1) * part)
    hidden = F.gelu(F.linear(f.apply(x), w1[mine], b1[mine]))
    if bias_inside:
        return g.apply(F.linear(hidden, w2[:, mine], b2))
    return g.apply(F.linear(hidden, w2[:, mine])) + b2


def tp_right(x, w1, b1, w2, b2):
    return _tp(x, w1, b1, w2, b2)


def tp_with_strided_parts(x, w1, b1, w2, b2):
    """Also correct: rank r keeps hidden units r, r + N, r + 2N, ..."""
    rank, world = dist.get_rank(), dist.get_world_size()
    mine = torch.arange(rank, w1.shape[0], world)
    hidden = F.gelu(F.linear(Copy.apply(x), w1[mine], b1[mine]))
    return Reduce.apply(hidden @ w2[:, mine].T) + b2


def tp_without_the_backward_all_reduce(x, w1, b1, w2, b2):
    return _tp(x, w1, b1, w2, b2, f=Identity)


def tp_adding_the_bias_before_the_all_reduce(x, w1, b1, w2, b2):
    return _tp(x, w1, b1, w2, b2, bias_inside=True)


def tp_reducing_in_both_directions(x, w1, b1, w2, b2):
    return _tp(x, w1, b1, w2, b2, g=ReduceBothWays)


def tp_splitting_the_input_dimension(x, w1, b1, w2, b2):
    """The first layer split by its input features: its outputs are partial sums, and the GELU
    of a partial sum is not a part of the GELU of the sum."""
    rank, world = dist.get_rank(), dist.get_world_size()
    part = w1.shape[1] // world
    mine = slice(rank * part, (rank + 1) * part)
    hidden = F.gelu(F.linear(Copy.apply(x)[..., mine], w1[:, mine], b1 / world))
    return Reduce.apply(F.linear(hidden, w2)) / world + b2


def tp_computing_the_whole_mlp(x, w1, b1, w2, b2):
    return _tp(x, w1, b1, w2, b2, whole=True, f=Identity, g=Identity)


@pytest.mark.parametrize("right", [tp_right, tp_with_strided_parts,
                                   check.tensor_parallel_reference], ids=lambda f: f.__name__)
def test_tensor_parallel_mlp_accepts_correct_forms(right, capsys):
    check.exercise_tensor_parallel_mlp(right)
    assert "PASSED" in capsys.readouterr().out


@pytest.mark.parametrize(("mistake", "message"), [
    (tp_without_the_backward_all_reduce, "input's gradient on each rank is only its own part"),
    (tp_adding_the_bias_before_the_all_reduce, "second bias 2 times"),
    (tp_reducing_in_both_directions, "too big"),
    (tp_splitting_the_input_dimension, "Which dimension of each weight"),
    (tp_computing_the_whole_mlp, "every rank computed the whole MLP"),
], ids=lambda value: getattr(value, "__name__", ""))
def test_tensor_parallel_mlp_rejects_likely_mistakes(mistake, message):
    with pytest.raises(ExerciseFailed, match=message):
        check.exercise_tensor_parallel_mlp(mistake)


# ---------------------------------------------------------------- Exercise 4: pipeline timelines


def _timeline(stages, micro_batches, schedule, *, in_flight=None, wait_for_inputs=True):
    """Slot by slot; `in_flight(stage)` caps a stage's held micro-batches (None: GPipe)."""
    forwards, backwards, done = [0] * stages, [0] * stages, {}
    timeline = [[] for _ in range(stages)]
    slot = 0
    while min(backwards) < micro_batches:
        for s in range(stages):
            f, b = forwards[s], backwards[s]
            source = ("B", s + 1, b) if s < stages - 1 else ("F", s, b)
            backward = b < f and done.get(source, slot) < slot
            forward = f < micro_batches and (
                s == 0 or not wait_for_inputs or done.get(("F", s - 1, f), slot) < slot)
            if in_flight is None:
                backward = backward and f == micro_batches
            else:
                forward = forward and f - b < in_flight(stages, s)
            op = ("B", b) if backward and (in_flight or not forward) else (
                ("F", f) if forward else None)
            if op:
                (backwards if op[0] == "B" else forwards)[s] += 1
                done[(op[0], s, op[1])] = slot
            timeline[s].append(op)
        slot += 1
    return timeline


def one_f_one_b(stages, s):
    return stages - s


def timeline_right(stages, micro_batches, schedule):
    return _timeline(stages, micro_batches, schedule,
                     in_flight=None if schedule == "gpipe" else one_f_one_b)


def timeline_with_lists_and_no_idle_tail(stages, micro_batches, schedule):
    """Also correct: ops as lists, and each stage's idle slots after its last op left out."""
    rows = [[list(op) if op else None for op in row]
            for row in timeline_right(stages, micro_batches, schedule)]
    for row in rows:
        while row[-1] is None:
            row.pop()
    return rows


def timeline_one_f_one_b_as_gpipe(stages, micro_batches, schedule):
    return _timeline(stages, micro_batches, schedule)


def timeline_one_f_one_b_both_ways(stages, micro_batches, schedule):
    return _timeline(stages, micro_batches, schedule, in_flight=one_f_one_b)


def timeline_one_warm_up_forward_too_many(stages, micro_batches, schedule):
    return _timeline(stages, micro_batches, schedule,
                     in_flight=None if schedule == "gpipe" else lambda p, s: p - s + 1)


def timeline_one_warm_up_forward_too_few(stages, micro_batches, schedule):
    return _timeline(stages, micro_batches, schedule,
                     in_flight=None if schedule == "gpipe" else lambda p, s: max(1, p - s - 1))


def timeline_without_waiting_for_the_previous_stage(stages, micro_batches, schedule):
    return _timeline(stages, micro_batches, schedule, wait_for_inputs=False,
                     in_flight=None if schedule == "gpipe" else one_f_one_b)


def timeline_one_micro_batch_at_a_time(stages, micro_batches, schedule):
    if schedule == "gpipe":
        return timeline_right(stages, micro_batches, schedule)
    timeline = [[] for _ in range(stages)]
    for i in range(micro_batches):
        order = [(s, ("F", i)) for s in range(stages)] + [
            (s, ("B", i)) for s in reversed(range(stages))]
        for s, op in order:
            for row in range(stages):
                timeline[row].append(op if row == s else None)
    return timeline


@pytest.mark.parametrize("right", [timeline_right, timeline_with_lists_and_no_idle_tail,
                                   check.pipeline_timeline_reference], ids=lambda f: f.__name__)
def test_pipeline_timeline_accepts_correct_forms(right, capsys):
    check.exercise_pipeline_timeline(right)
    assert "PASSED" in capsys.readouterr().out


@pytest.mark.parametrize(("mistake", "message"), [
    (timeline_one_f_one_b_as_gpipe, "holds .* micro-batches' activations"),
    (timeline_one_warm_up_forward_too_many, "holds .* micro-batches' activations"),
    (timeline_one_warm_up_forward_too_few, "can finish in"),
    (timeline_without_waiting_for_the_previous_stage, "before stage 0 has finished it"),
    (timeline_one_micro_batch_at_a_time, "can finish in"),
    (timeline_one_f_one_b_both_ways, "GPipe runs all forwards"),
], ids=lambda value: getattr(value, "__name__", ""))
def test_pipeline_timeline_rejects_likely_mistakes(mistake, message):
    with pytest.raises(ExerciseFailed, match=message):
        check.exercise_pipeline_timeline(mistake)


def test_the_measures_a_timeline_gives():
    gpipe = check.pipeline_timeline_reference(2, 4, "gpipe")
    one_f_one_b = check.pipeline_timeline_reference(2, 4, "1f1b")
    assert check.timeline_bubble(gpipe) == check.timeline_bubble(one_f_one_b) == pytest.approx(0.2)
    assert check.peak_in_flight({("F", 0): 0, ("F", 1): 1, ("B", 0): 2, ("B", 1): 3}) == 2
    with pytest.raises(ValueError, match="unknown schedule 'zb'"):
        check.pipeline_timeline_reference(2, 4, "zb")


# ---------------------------------------------------------------- Exercise 5: choosing a layout


def _first_fit(model, gpu_gb, per_node, nodes, inside, *, zeros=(0, 1, 2, 3), tps=None,
               use_all=True, check_memory=True, room=("yes",), tp_links=("nvlink",),
               whole_heads=True):
    """DP, then ZeRO 1 to 3, then TP inside an NVLink node: the first that fits with room to
    spare, or None (a switch per likely mistake)."""
    from llmlab.memory import estimate_memory, fits

    total = per_node * nodes if use_all else per_node
    if tps is None:
        tps = [1] + [t for t in range(2, per_node + 1) if inside in tp_links and per_node % t == 0
                     and (model.n_head % t == 0 or not whole_heads)]
    for tp in tps:
        for zero in zeros if total // tp > 1 else (0,):
            setup = check.LAYOUT_SETUP.replace(zero=zero, gpus=total, tensor_parallel=tp)
            if not check_memory or fits(estimate_memory(model, setup), gpu_gb) in room:
                return {"dp": total // tp, "tp": tp, "pp": 1, "zero": zero}
    return None


def layout_right(model, gpu_gb, per_node, nodes, inside, between):
    return _first_fit(model, gpu_gb, per_node, nodes, inside)


class LayoutAsObject:
    def __init__(self, **values):
        self.__dict__.update(values)


def layout_as_an_object_with_numpy_ints(model, gpu_gb, per_node, nodes, inside, between):
    import numpy as np

    values = _first_fit(model, gpu_gb, per_node, nodes, inside)
    return values and LayoutAsObject(**{k: np.int64(v) for k, v in values.items()})


def layout_always_zero3(model, gpu_gb, per_node, nodes, inside, between):
    return _first_fit(model, gpu_gb, per_node, nodes, inside, zeros=(3,))


def layout_ignoring_memory(model, gpu_gb, per_node, nodes, inside, between):
    return _first_fit(model, gpu_gb, per_node, nodes, inside, check_memory=False)


def layout_tensor_parallel_over_two_nodes(model, gpu_gb, per_node, nodes, inside, between):
    if nodes == 1:
        return layout_right(model, gpu_gb, per_node, nodes, inside, between)
    return {"dp": nodes // 2, "tp": 2 * per_node, "pp": 1, "zero": 0}


def layout_tensor_parallel_not_dividing_the_heads(model, gpu_gb, per_node, nodes, inside,
                                                  between):
    return {"dp": per_node * nodes // 8, "tp": 8, "pp": 1, "zero": 0}  # GPT-2 has 12 heads


def layout_one_node_only(model, gpu_gb, per_node, nodes, inside, between):
    return _first_fit(model, gpu_gb, per_node, nodes, inside, use_all=False)


def layout_tensor_parallel_first(model, gpu_gb, per_node, nodes, inside, between):
    return _first_fit(model, gpu_gb, per_node, nodes, inside, tps=[2, 1])


def layout_accepting_a_tight_fit(model, gpu_gb, per_node, nodes, inside, between):
    return _first_fit(model, gpu_gb, per_node, nodes, inside, room=("yes", "tight"))


def layout_tensor_parallel_over_pcie(model, gpu_gb, per_node, nodes, inside, between):
    return _first_fit(model, gpu_gb, per_node, nodes, inside, tp_links=("nvlink", "pcie"))


def layout_any_tp_dividing_the_node(model, gpu_gb, per_node, nodes, inside, between):
    return _first_fit(model, gpu_gb, per_node, nodes, inside, whole_heads=False)


def layout_without_tensor_parallel(model, gpu_gb, per_node, nodes, inside, between):
    return _first_fit(model, gpu_gb, per_node, nodes, inside, tps=[1])


def layout_never_none(model, gpu_gb, per_node, nodes, inside, between):
    found = _first_fit(model, gpu_gb, per_node, nodes, inside)
    return found or {"dp": per_node * nodes, "tp": 1, "pp": 1, "zero": 3}


def layout_as_a_string(model, gpu_gb, per_node, nodes, inside, between):
    return "DP 8"


@pytest.mark.parametrize("right", [layout_right, layout_as_an_object_with_numpy_ints,
                                   check.choose_layout_reference], ids=lambda f: f.__name__)
def test_choose_layout_accepts_correct_forms(right, capsys):
    check.exercise_choose_layout(right)
    assert "PASSED" in capsys.readouterr().out


@pytest.mark.parametrize(("mistake", "message"), [
    (layout_always_zero3, "ZeRO-3 fits, but ZeRO-0 does too"),
    (layout_ignoring_memory, "does not fit: the planner needs about"),
    (layout_tensor_parallel_over_two_nodes, "crosses nodes"),
    (layout_tensor_parallel_not_dividing_the_heads, "must divide the model's 12 heads"),
    (layout_one_node_only, "should use all 16 GPUs"),
    (layout_tensor_parallel_first, "without splitting the model"),
    (layout_as_a_string, "return a dict"),
    (layout_accepting_a_tight_fit, "DP 16 ZeRO-1 needs .* GB of the GPU's 48 GB: it fits only"),
    (layout_tensor_parallel_over_pcie, "pcie', 'infiniband'\\): tensor parallel over PCIE"),
    (layout_any_tp_dividing_the_node, "raised ValueError: tensor parallel degree 3 does not "
                                      "divide the model's 32 attention heads"),
    (layout_without_tensor_parallel, "returned None \\(nothing fits\\), but DP 8 ZeRO-3 x TP 2"),
    (layout_never_none, "DP 16 ZeRO-3 needs .* GB of the GPU's 24 GB: it fits only"),
], ids=lambda value: getattr(value, "__name__", ""))
def test_choose_layout_rejects_likely_mistakes(mistake, message):
    with pytest.raises(ExerciseFailed, match=message):
        check.exercise_choose_layout(mistake)
