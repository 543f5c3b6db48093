"""Checks for Lab 05 (training at scale), and the versions the lab falls back to.

Each check compares the learner's function with llmlab's answer on random inputs (SLURM
environments, links, layouts, candidate runs) and, when they differ, computes the likely mistakes
on the same input to say which one was made, without showing the code.
"""

import math
import numbers
import random
import statistics
from collections.abc import Callable

from llmlab.course.checks import (
    ExerciseFailed,
    call,
    call_or_fail,
    exercise,
    failure_from,
    passed,
    real_number,
)
from llmlab.distributed.launcher_env import launcher_env
from llmlab.distributed.stragglers import find_stragglers_over_steps
from llmlab.models import count_parameters, preset
from llmlab.scale.collectives import ring_seconds
from llmlab.scale.comm_cost import dp_collectives
from llmlab.scale.layout import Parallel
from llmlab.scale.links import Link, gbit_to_bytes, link
from llmlab.scale.search import search_layouts
from llmlab.scale.simulate import Cluster, Prediction, simulate

REL = 1e-6  # the same formula in another order differs by rounding only

# ---------------------------------------------------------------- Exercise 1: the launcher's place

PLACE_KEYS = ("rank", "local_rank", "world_size", "node_rank", "master_addr")
HOSTS = ("gpu[01-04]", "node[7-9,12]", "a100-[003-006]", "trn1,trn2,trn3,trn4", "cn0[1-4]")


def _slurm_environment(rng: random.Random) -> dict[str, str]:
    """What srun gives one task of a job of `nodes` x `per_node` tasks (no torchrun)."""
    nodes, per_node = rng.choice([(2, 4), (4, 8), (3, 2), (2, 8), (4, 1)])
    node, local = rng.randrange(nodes), rng.randrange(per_node)
    return {"SLURM_PROCID": str(node * per_node + local), "SLURM_LOCALID": str(local),
            "SLURM_NODEID": str(node), "SLURM_NTASKS": str(nodes * per_node),
            "SLURM_NNODES": str(nodes), "SLURM_NTASKS_PER_NODE": str(per_node),
            "SLURM_JOB_NODELIST": rng.choice(HOSTS), "SLURM_JOB_ID": str(rng.randrange(10**6)),
            "SLURM_CPUS_PER_TASK": "8"}


def _srun_torchrun_environment(rng: random.Random) -> dict[str, str]:
    """`srun torchrun ...`: srun started one torchrun per node (SLURM_PROCID numbers the nodes),
    and torchrun set its own variables for each of the processes it started."""
    nodes, per_node = rng.choice([(2, 4), (4, 8), (2, 8), (3, 2)])
    node, local = rng.randrange(1, nodes), rng.randrange(1, per_node)
    environ = _slurm_environment(rng)
    environ.update(SLURM_PROCID=str(node), SLURM_LOCALID="0", SLURM_NODEID=str(node),
                   SLURM_NTASKS=str(nodes), SLURM_NNODES=str(nodes), SLURM_NTASKS_PER_NODE="1")
    environ.update(RANK=str(node * per_node + local), LOCAL_RANK=str(local),
                   WORLD_SIZE=str(nodes * per_node), GROUP_RANK=str(node),
                   MASTER_ADDR="10.0.0.17", MASTER_PORT="29500")
    return environ


def _as_place(got) -> dict | None:
    if isinstance(got, dict):
        values = {key: got.get(key) for key in PLACE_KEYS}
    else:
        values = {key: getattr(got, key, None) for key in PLACE_KEYS}
    if any(values[key] is None for key in PLACE_KEYS):
        return None
    try:
        numbers = {key: int(values[key]) for key in PLACE_KEYS[:4]}
    except (TypeError, ValueError):
        return None
    return {**numbers, "master_addr": str(values["master_addr"])}


def _place_hint(got: dict, want: dict, environ: dict) -> str:
    slurm = {key: environ.get(key) for key in environ if key.startswith("SLURM_")}
    both = "RANK" in environ
    if both and got["rank"] == int(environ["SLURM_PROCID"]) != want["rank"]:
        return ("this process was started by torchrun, which srun started: read the variables "
                "of the launcher closest to the process first. Which one numbers the training "
                "processes, and which one numbers the torchrun agents?")
    if got["rank"] == int(slurm["SLURM_NODEID"]) != want["rank"]:
        return "the rank numbers every process of the job; which variable numbers the nodes?"
    if got["rank"] == int(slurm["SLURM_LOCALID"]) != want["rank"]:
        return ("rank and local rank look swapped: one counts the processes of the whole job, "
                "the other those of one node (which GPU to drive).")
    if got["world_size"] == int(slurm["SLURM_NNODES"]) != want["world_size"]:
        return "the world size counts processes (tasks), not nodes."
    if got["rank"] != want["rank"]:
        return "the rank is this task's number among all the job's tasks."
    if got["local_rank"] != want["local_rank"]:
        return "the local rank is this process's number on its own node."
    if got["world_size"] != want["world_size"]:
        return "the world size is the number of processes in the whole job."
    if got["node_rank"] != want["node_rank"]:
        return "the node rank is the number of the node this process runs on."
    return ("rank 0 listens on the first host of the job's node list (SLURM compresses the list: "
            "read llmlab.distributed.launcher_env.first_host), unless MASTER_ADDR is set.")


def place_from_environment_reference(environ: dict) -> dict:
    """The lab's fallback for Exercise 1: llmlab.distributed.launcher_env, as a dict."""
    place = launcher_env(environ)
    return {key: getattr(place, key) for key in PLACE_KEYS}


@exercise(fallback=place_from_environment_reference,
          fallback_name="llmlab.distributed.launcher_env.launcher_env")
def exercise_place_from_environment(place_from_environment: Callable) -> None:
    """Exercise 1: place_from_environment(environ) -> rank, local_rank, world_size, node_rank,
    master_addr (a dict, or an object with those attributes)."""
    name = "Exercise 1 (the launcher's environment)"
    rng = random.Random(5)
    cases = [_slurm_environment(rng) for _ in range(20)]
    cases += [_srun_torchrun_environment(rng) for _ in range(10)]
    for environ in cases:
        shown = ", ".join(f"{k}={v}" for k, v in sorted(environ.items()))
        got = call_or_fail(name, f"place_from_environment({{{shown}}})", place_from_environment,
                           dict(environ))
        place = _as_place(got)
        if place is None:
            raise ExerciseFailed(f"{name}: returned {got!r}; return a dict with the integers "
                                 "rank, local_rank, world_size, node_rank and the string "
                                 "master_addr.")
        want = place_from_environment_reference(environ)
        if place != want:
            raise ExerciseFailed(f"{name}: for the environment {shown}\nyou returned {place},\n"
                                 f"expected {want}.\nHint: {_place_hint(place, want, environ)}")
    passed(name, f"the place of {len(cases)} processes: 20 started by srun alone, 10 by torchrun "
                 "under srun")


# ---------------------------------------------------------------- Exercise 3: the straggler


def find_stragglers_reference(step_seconds: list, threshold: float) -> list[tuple[int, float]]:
    """The lab's fallback for Exercise 3: llmlab.distributed.stragglers, as (rank, slowdown)."""
    return [(s.rank, s.slowdown) for s in find_stragglers_over_steps(step_seconds, threshold)]


def _straggler_cases(rng: random.Random) -> list[tuple[str, list, float]]:
    """(what it tests, step_seconds[step][rank], threshold): edge cases, then random runs."""
    def steady(times, steps=4):
        return [list(times) for _ in range(steps)]

    cases = [
        ("nobody slow", steady([1.0, 1.0, 1.0, 1.0]), 0.2),
        ("one rank, its own median", steady([7.0]), 0.2),
        ("one step", [[1.0, 1.0, 2.0]], 0.2),
        ("exactly at the threshold", steady([1.0, 1.0, 1.25]), 0.25),
        ("just past the threshold", steady([1.0, 1.0, 1.2501]), 0.25),
        ("a straggler the mean would hide", steady([1.0, 1.0, 1.3]), 0.2),
        ("an even number of ranks", steady([1.0, 1.0, 1.1, 1.5, 0.9, 1.0]), 0.2),
        ("two stragglers, slowest first", steady([1.0, 1.6, 1.0, 2.5, 1.0]), 0.2),
        ("a fast rank is no straggler", steady([1.0, 1.0, 0.2]), 0.2),
        ("one disturbed step", [[1.0, 1.0, 1.0]] * 4 + [[1.0, 4.0, 1.0]], 0.2),
    ]
    for index in range(12):
        ranks, steps = rng.choice([3, 4, 8, 16, 64]), rng.choice([1, 3, 5, 8])
        base = rng.uniform(0.05, 2.0)
        slow = {rng.randrange(ranks): rng.uniform(1.1, 3.0) for _ in range(rng.choice([0, 1, 2]))}
        times = [[base * rng.uniform(0.95, 1.05) * slow.get(rank, 1.0) for rank in range(ranks)]
                 for _ in range(steps)]
        if steps > 2:  # the operating system steals one step from one rank
            times[rng.randrange(steps)][rng.randrange(ranks)] *= 5
        cases.append((f"random run {index + 1}", times, rng.choice([0.1, 0.2, 0.5])))
    return cases


def _as_pairs(got) -> list[tuple[int, float]] | None:
    """The learner's answer as (rank, slowdown) pairs (tuples or lists, any integer and real
    types); None when it is not a list of such pairs."""
    if not isinstance(got, list | tuple):
        return None
    pairs = []
    for item in got:
        if not isinstance(item, list | tuple) or len(item) != 2:
            return None
        rank, slowdown = item[0], real_number(item[1])
        if isinstance(rank, bool) or not isinstance(rank, numbers.Integral) or slowdown is None:
            return None
        pairs.append((int(rank), slowdown))
    return pairs


def _straggler_hint(got: list, want: list, step_seconds: list, threshold: float) -> str:
    per_rank = [statistics.median(column) for column in zip(*step_seconds, strict=True)]
    middle = statistics.median(per_rank)
    got_ranks, want_ranks = [r for r, _ in got], [r for r, _ in want]
    if sorted(got_ranks) == sorted(want_ranks) and got_ranks != want_ranks:
        return "put the slowest rank first: it is the one that sets the job's pace."
    at_boundary = [r for r in got_ranks if per_rank[r] == middle * (1 + threshold)]
    if at_boundary and set(got_ranks) - set(want_ranks) == set(at_boundary):
        return ("a rank exactly at the threshold is not slower than it: is your comparison "
                "strict?")
    # An extra rank that is slow at one step only: its mean (or worst) step crossed the line.
    if any(max(row[r] for row in step_seconds) > middle * (1 + threshold)
           for r in set(got_ranks) - set(want_ranks)):
        return ("you flagged a rank whose typical step is within the threshold: one unlucky step "
                "should not make a straggler. What is a rank's typical step over several steps, "
                "robust to one outlier?")
    ratios = [(g, w) for (_, g), (_, w) in zip(got, want, strict=False)]
    if got_ranks == want_ranks and all(math.isclose(g, w + 1, rel_tol=REL) for g, w in ratios):
        return ("the slowdown is how much slower, as a fraction: 0.5 for a rank that takes 1.5 "
                "times the typical step.")
    return ("compare each rank with the typical rank, a statistic one slow rank cannot drag "
            "towards itself; with an even number of ranks, which value is in the middle?")


@exercise(fallback=find_stragglers_reference,
          fallback_name="llmlab.distributed.stragglers.find_stragglers_over_steps")
def exercise_find_stragglers(find_stragglers: Callable) -> None:
    """Exercise 3: find_stragglers(step_seconds, threshold) -> [(rank, slowdown), ...], slowest
    first, from step_seconds[step][rank]."""
    name = "Exercise 3 (find the straggler)"
    cases = _straggler_cases(random.Random(7))
    for what, step_seconds, threshold in cases:
        text = f"find_stragglers(<{len(step_seconds)} steps x {len(step_seconds[0])} ranks: " \
               f"{what}>, {threshold})"
        got = call_or_fail(name, text, find_stragglers, [list(row) for row in step_seconds],
                           threshold)
        want = find_stragglers_reference(step_seconds, threshold)
        pairs = _as_pairs(got)
        if pairs is None:
            raise ExerciseFailed(f"{name}: {text} returned {got!r}; return a list of (rank, "
                                 "slowdown) pairs, slowest first ([] when nobody is slow).")
        if len(pairs) == len(want) and all(
                g[0] == w[0] and math.isclose(g[1], w[1], rel_tol=REL)
                for g, w in zip(pairs, want, strict=True)):
            continue
        ranks = len(step_seconds[0])
        missing = next((rank for rank, _ in pairs if not 0 <= rank < ranks), None)
        if missing is not None:
            raise ExerciseFailed(f"{name}: {text} returned {pairs}: rank {missing} does not "
                                 f"exist: step_seconds has {ranks} ranks, numbered 0 to "
                                 f"{ranks - 1}. Which rank is a column of step_seconds?")
        shown = "\n".join(f"  step {step}: " + ", ".join(f"{t:.4g}" for t in row)
                          for step, row in enumerate(step_seconds[:5]))
        raise ExerciseFailed(
            f"{name}: {text}\n{shown}\nyou returned {pairs}, expected "
            f"{[(rank, round(slowdown, 4)) for rank, slowdown in want]}.\n"
            f"Hint: {_straggler_hint(pairs, want, step_seconds, threshold)}")
    broken = [[1.0, 1.0, 1.0], [1.0, math.nan, 1.0]]
    try:
        call(name, find_stragglers, broken, 0.2)
    except ValueError:  # what the exercise asks for
        pass
    except Exception as error:
        raise failure_from(name, f"find_stragglers({broken}, 0.2)", error) from error
    else:
        raise ExerciseFailed(
            f"{name}: find_stragglers({broken}, 0.2) returned without an error. A rank whose "
            "timer broke reports NaN, and NaN compares False with everything: that rank would "
            "never be flagged. Raise a ValueError that names the bad time.")
    passed(name, f"{len(cases)} runs of 1 to 64 ranks (the boundary, an even count, one "
                 "disturbed step, several stragglers) and a NaN time refused")


# ---------------------------------------------------------------- Exercise 4a: ring all-reduce time


def ring_all_reduce_time_reference(nbytes: float, ranks: int, latency_s: float,
                                   gbit_per_s: float) -> float:
    """The lab's fallback for Exercise 4: llmlab.scale.ring_seconds on a link of that speed."""
    return ring_seconds("all_reduce", nbytes, ranks, Link("link", gbit_to_bytes(gbit_per_s),
                                                          latency_s))


def _ring_mistakes(nbytes, ranks, latency, gbit) -> list[tuple[float, str]]:
    beta = gbit_to_bytes(gbit)
    steps, share = 2 * (ranks - 1), 2 * (ranks - 1) / ranks
    return [
        (steps * latency + nbytes / beta, "each rank sends more than the tensor's size: how many "
         "chunks of 1/N does it send in the two phases?"),
        (steps * latency + 2 * nbytes / beta, "each rank sends a little less than twice the "
         "tensor: count the chunks it sends, and their size."),
        (steps * latency + share * nbytes * 8 / beta, "the bandwidth term is off by 8: a "
         "network card's speed is quoted in bits per second, the tensor in bytes."),
        (steps * latency + share * nbytes / (gbit * 1e9), "the bandwidth term is off by 8: a "
         "network card's speed is quoted in bits per second, the tensor in bytes."),
        (latency + share * nbytes / beta, "the latency counts once per message: how many "
         "messages does each rank send one after the other?"),
        (2 * latency + share * nbytes / beta, "the latency counts once per message: how many "
         "steps does each phase take?"),
        (2 * ranks * latency + share * nbytes / beta, "a ring of N ranks takes N-1 steps per "
         "phase, not N."),
        (share * nbytes / beta, "a small message takes the link's latency however small it is: "
         "where is alpha?"),
    ]


@exercise(fallback=ring_all_reduce_time_reference,
          fallback_name="llmlab.scale.ring_seconds")
def exercise_ring_all_reduce_time(ring_all_reduce_time: Callable) -> None:
    """Exercise 4: ring_all_reduce_time(nbytes, ranks, latency_s, gbit_per_s) -> seconds."""
    name = "Exercise 4 (a ring all-reduce's time)"
    rng = random.Random(3)
    cases = [(1e9, 8, 5e-6, 400.0), (4096.0, 1024, 10e-6, 200.0), (2e8, 2, 3e-6, 100.0),
             (0.0, 16, 5e-6, 400.0), (1e6, 1, 5e-6, 400.0)]
    cases += [(10 ** rng.uniform(3, 10), rng.choice([2, 3, 4, 8, 64, 512]),
               rng.choice([2e-6, 5e-6, 2e-5]), rng.choice([100.0, 200.0, 400.0, 3200.0]))
              for _ in range(12)]
    for nbytes, ranks, latency, gbit in cases:
        text = f"ring_all_reduce_time({nbytes:.6g}, {ranks}, {latency:g}, {gbit:g})"
        got = call_or_fail(name, text, ring_all_reduce_time, nbytes, ranks, latency, gbit)
        number = real_number(got)
        expected = ring_all_reduce_time_reference(nbytes, ranks, latency, gbit)
        if number is not None and math.isclose(number, expected, rel_tol=REL, abs_tol=1e-15):
            continue
        hint = ""
        if number is not None and ranks > 1:
            hint = next((text for value, text in _ring_mistakes(nbytes, ranks, latency, gbit)
                         if math.isclose(number, value, rel_tol=REL)), "")
        if ranks == 1 and number is not None:
            hint = "one rank has nobody to talk to."
        raise ExerciseFailed(f"{name}: {text} returned {got!r}, expected {expected:.6g} s. "
                             f"{hint}".strip())
    passed(name, f"{len(cases)} tensors from 0 bytes to 10 GB on 1 to 1024 ranks")


# ---------------------------------------------------------------- Exercise 4b: a step's traffic


def step_communication_reference(model, cluster: Cluster, parallel: Parallel) -> float:
    """The lab's fallback: the simulator's TP + PP + DP communication of a step, before overlap."""
    prediction = simulate(model, cluster, parallel)
    return prediction.tp_s + prediction.pp_s + prediction.dp_total_s


def _parts(shape, cluster: Cluster, p: Parallel, *, recompute=True, half_phases=True,
           pp_shard=True, dp_link=True) -> dict[str, float]:
    """The step's communication by dimension, with one switch per likely mistake (all True:
    right), computed without the simulator so a mistake can be named."""
    seq = p.seq or shape.context

    def ring(nbytes: float, ranks: int, over: str) -> float:
        return ring_seconds("all_reduce", nbytes, ranks, over)

    activations = p.micro_batch * seq * shape.d_model * 2  # bf16
    layers = math.ceil(shape.n_layer / p.pp)
    per_layer = 6 if (p.checkpointing and recompute) else 4
    tp = per_layer * layers * p.accumulation * ring(activations, p.tp, cluster.link_for("tp", p))
    pp = 0.0
    if p.pp > 1:
        message = activations / (p.tp if pp_shard else 1)
        pp = 2 * (p.accumulation + p.pp - 1) * link(cluster.link_for("pp", p)).seconds(message)
    stage = count_parameters(shape.replace(n_layer=layers)).total / p.tp
    over = cluster.link_for("dp", p) if dp_link else cluster.inside_node
    dp = sum(ring(n, p.dp, over) * (1 if kind == "all_reduce" or not half_phases else 0.5)
             for kind, n in dp_collectives(stage, p.zero, p.accumulation))
    return {"tp": tp, "pp": pp, "dp": dp}


STEP_MISTAKES = {
    "recompute": "tensor parallelism's all-reduces are too few: with activation checkpointing "
                 "each block's forward runs twice. What does the recomputed forward send?",
    "half_phases": "data parallelism's traffic is too large: a reduce-scatter or an all-gather "
                   "is one phase of a ring all-reduce, not a whole one.",
    "pp_shard": "pipeline parallelism's messages are too large: each GPU of a tensor-parallel "
                "group passes on only its share of the activations.",
    "dp_link": "a data-parallel group whose ranks sit on different nodes is as slow as the link "
               "between nodes: read Cluster.link_for.",
}


def _random_layout(rng: random.Random) -> tuple[str, Cluster, Parallel]:
    model = rng.choice(["gpt2-350m", "llama-7b", "llama-13b", "llama-70b"])
    shape = preset(model)
    nodes = rng.choice([1, 2, 4, 8])
    cluster = Cluster(rng.choice(["h100", "a100"]), 8, nodes, rng.choice(["nvlink4", "pcie5"]),
                      rng.choice(["ib-ndr", "ib-hdr", "roce-400"]))
    tp = rng.choice([d for d in (1, 2, 4, 8) if shape.n_head % d == 0])
    pp = rng.choice([d for d in (1, 2, 4, 8) if (cluster.gpus // tp) % d == 0])
    dp = cluster.gpus // (tp * pp)
    parallel = Parallel(dp, tp, pp, rng.choice([0, 1, 2, 3]), rng.choice([1, 2, 4]),
                        rng.choice([1, 4, 16]), rng.choice([True, False]),
                        rng.choice([0, 512]))
    return model, cluster, parallel


def random_layouts(count: int, seed: int = 11) -> list[tuple[str, Cluster, Parallel]]:
    """`count` layouts with every dimension used somewhere: TP, PP over nodes, DP, ZeRO 0-3."""
    rng = random.Random(seed)
    fixed = [("llama-70b", Cluster("h100", 8, 4), Parallel(2, 8, 2, 1, 1, 16, True)),
             ("llama-7b", Cluster("a100", 8, 2, "nvlink3", "ib-hdr"), Parallel(8, 2, 1, 3, 2, 4))]
    return fixed + [_random_layout(rng) for _ in range(count - len(fixed))]


@exercise(fallback=step_communication_reference,
          fallback_name="llmlab.scale.simulate (tp_s + pp_s + dp_total_s)")
def exercise_step_communication(step_communication: Callable) -> None:
    """Exercise 4: step_communication(model, cluster, parallel) -> seconds, before overlap."""
    name = "Exercise 4 (a step's communication)"
    for model, cluster, parallel in random_layouts(24):
        text = f"step_communication({model!r}, {cluster}, {parallel})"
        got = call_or_fail(name, text, step_communication, model, cluster, parallel)
        number = real_number(got)
        expected = step_communication_reference(model, cluster, parallel)
        if number is not None and math.isclose(number, expected, rel_tol=REL):
            continue
        hint = ""
        if number is not None:
            shape, right = preset(model), _parts(preset(model), cluster, parallel)
            for switch, text_hint in STEP_MISTAKES.items():
                wrong = sum(_parts(shape, cluster, parallel, **{switch: False}).values())
                if math.isclose(number, wrong, rel_tol=REL) and not math.isclose(
                        wrong, expected, rel_tol=REL):
                    hint = text_hint
                    break
            else:
                parts = ", ".join(f"{k.upper()} {v:.4g} s" for k, v in right.items())
                hint = f"the simulator's parts: {parts}. Which one is yours missing or adding?"
        raise ExerciseFailed(f"{name}: {text} returned {got!r}, expected {expected:.6g} s. "
                             f"{hint}".strip())
    passed(name, "equal to the simulator's TP + PP + DP communication on 24 random layouts "
                 "(1 to 8 nodes, ZeRO 0-3, with and without checkpointing)")


# ---------------------------------------------------------------- Exercise 5: the cheapest run


def candidate_runs(model: str, tokens: float, node_counts=(4, 8, 16, 32, 64)) -> list[Prediction]:
    """The best few layouts that fit (comfortably or tightly) on each cluster size, and some
    that do not fit at all: what a person choosing a run would compare."""
    runs: list[Prediction] = []
    for nodes in node_counts:
        cluster = Cluster("h100", 8, nodes)
        found = search_layouts(model, cluster, tokens)
        comfortable = [p for p in found if p.fit == "yes"][:3]
        tight = [p for p in found if p.fit == "tight"][:2]
        runs += comfortable + tight
        too_big = simulate(model, cluster, Parallel(cluster.gpus, micro_batch=4,
                                                    checkpointing=False), tokens)
        if too_big.fit == "no":
            runs.append(too_big)
    return runs


def cheapest_run_reference(runs: list, budget_dollars: float, deadline_days: float):
    """The lab's fallback for Exercise 5: the cheapest run that fits with room to spare, ends by
    the deadline and stays within the budget; None when no run does."""
    allowed = [r for r in runs if r.fit == "yes" and r.days <= deadline_days
               and r.cost <= budget_dollars]
    return min(allowed, key=lambda r: r.cost, default=None)


def _describe(run) -> str:
    if not isinstance(run, Prediction):
        return repr(run)
    return (f"{run.parallel.describe()} on {run.gpus} GPUs ({run.days:.1f} days, "
            f"${run.cost:,.0f}, fit {run.fit!r})")


def _decision_hint(got, want, runs, budget, deadline) -> str:
    if want is not None and (want.cost == budget or want.days == deadline) and (
            got is None or got.cost > want.cost):
        return ("a run that costs exactly the budget, or ends exactly on the deadline, meets it: "
                "is your comparison strict?")
    if got is None:
        return "a run that meets every condition exists: return it, not None."
    if got not in runs:
        return "return one of the runs you were given (a Prediction), not a copy or a number."
    if got.fit != "yes":
        return (f"the run you chose has fit={got.fit!r}: 'tight' leaves less than the 10% the "
                "allocator needs, 'no' does not fit at all.")
    if got.cost > budget:
        return (f"the run you chose costs ${got.cost:,.0f}, over the budget of ${budget:,.0f}.")
    if got.days > deadline:
        return f"the run you chose takes {got.days:.1f} days, past the deadline of {deadline} days."
    if want is None:
        return "no run meets every condition here: return None."
    allowed = [r for r in runs if r.fit == "yes" and r.days <= deadline and r.cost <= budget]
    if got == min(allowed, key=lambda r: r.days):
        return ("the fastest run is not the cheapest one: more GPUs finish sooner but each idles "
                "more of the step. Compare the cost.")
    return "another run that meets every condition costs less."


@exercise(fallback=cheapest_run_reference,
          fallback_name="llmlab.course.checks.lab05.cheapest_run_reference")
def exercise_cheapest_run(cheapest_run: Callable) -> None:
    """Exercise 5: cheapest_run(runs, budget_dollars, deadline_days) -> a run, or None."""
    name = "Exercise 5 (the cheapest run)"
    rng = random.Random(4)
    scenarios = 0
    for model, tokens in (("llama-13b", 1e12), ("llama-70b", 2e12)):
        runs = candidate_runs(model, tokens)
        costs = sorted(r.cost for r in runs if r.fit == "yes")
        days = sorted(r.days for r in runs if r.fit == "yes")
        # The last two sit exactly on a limit: the cheapest run costs the budget to the cent,
        # the fastest ends on the deadline. A limit met exactly is met.
        limits = [(costs[-1] * 2, days[-1] * 2), (costs[-1] * 2, days[len(days) // 3]),
                  (costs[len(costs) // 2], days[-1] * 2), (costs[0] * 0.5, days[-1] * 2),
                  (costs[-1] * 2, days[0] * 0.5), (costs[0], days[-1] * 2),
                  (costs[-1] * 2, days[0])]
        for budget, deadline in limits:
            order = list(runs)
            rng.shuffle(order)  # the answer must not depend on the order of the list
            got = call_or_fail(name, f"cheapest_run(<the {len(runs)} candidate runs of {model}>, "
                               f"{budget:,.0f}, {deadline:.1f})", cheapest_run, order, budget,
                               deadline)
            want = cheapest_run_reference(runs, budget, deadline)
            scenarios += 1
            # Layouts whose traffic all hides can cost the same to the cent: any of them is right.
            ties = [r for r in runs if want is not None and r.cost == want.cost
                    and cheapest_run_reference([r], budget, deadline) is r]
            if got is want or got in ties:
                continue
            raise ExerciseFailed(
                f"{name}: {model}, {tokens:.0e} tokens, budget ${budget:,.0f}, deadline "
                f"{deadline:.1f} days: you chose {_describe(got)}, expected {_describe(want)}."
                f"\nHint: {_decision_hint(got, want, runs, budget, deadline)}"
            )
    passed(name, f"{scenarios} budgets and deadlines over runs on 32 to 512 H100s")


NOTEBOOK = "05_at_scale.ipynb"
# The function each exercise asks for -> its check
# (tests/course/checks/test_every_lab.py runs them all).
EXERCISES = {
    "place_from_environment": exercise_place_from_environment,
    "find_stragglers": exercise_find_stragglers,
    "ring_all_reduce_time": exercise_ring_all_reduce_time,
    "step_communication": exercise_step_communication,
    "cheapest_run": exercise_cheapest_run,
}
# The notebook's other definitions those functions call: Exercise 4's ring for the whole step.
HELPERS = ("ring_all_reduce_time",)
