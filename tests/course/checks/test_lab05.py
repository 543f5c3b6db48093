"""Lab 05's checks accept correct answers and reject likely mistakes, each with a message that
points at the mistake without giving the code. (tests/course/checks/test_every_lab.py proves they
pass on the solution notebook and say "not done yet" on the generated stub.)"""

import math
import statistics
from types import SimpleNamespace

import numpy as np
import pytest
from helpers.checks import BUG_NAMED, buggy, fails

from llmlab.course.checks import ExerciseFailed
from llmlab.course.checks import lab05 as check
from llmlab.distributed.launcher_env import first_host
from llmlab.models import count_parameters, preset
from llmlab.scale.comm_cost import dp_collectives
from llmlab.scale.links import link

# ---------------------------------------------------------------- Exercise 1: the launcher's place


def _place(environ, *, torchrun_first=True, rank="SLURM_PROCID", local="SLURM_LOCALID",
           world="SLURM_NTASKS", host=first_host):
    """A place reader with one switch per likely mistake (defaults: a correct one)."""
    if torchrun_first and "RANK" in environ:
        return dict(rank=int(environ["RANK"]), local_rank=int(environ["LOCAL_RANK"]),
                    world_size=int(environ["WORLD_SIZE"]), node_rank=int(environ["GROUP_RANK"]),
                    master_addr=environ["MASTER_ADDR"])
    return dict(rank=int(environ[rank]), local_rank=int(environ[local]),
                world_size=int(environ[world]), node_rank=int(environ["SLURM_NODEID"]),
                master_addr=host(environ["SLURM_JOB_NODELIST"]))


def place_right(environ):
    return _place(environ)


def place_as_an_object_with_string_numbers(environ):
    return SimpleNamespace(**{k: str(v) for k, v in _place(environ).items()})


def place_node_as_rank(environ):
    return _place(environ, rank="SLURM_NODEID")


def place_nodes_as_world(environ):
    return _place(environ, world="SLURM_NNODES")


def place_swapped(environ):
    return _place(environ, rank="SLURM_LOCALID", local="SLURM_PROCID")


def place_slurm_only(environ):
    return _place(environ, torchrun_first=False)


def place_raw_node_list(environ):
    return _place(environ, host=lambda nodelist: nodelist)


def place_a_tuple(environ):
    return tuple(_place(environ).values())


@pytest.mark.parametrize("right", [place_right, place_as_an_object_with_string_numbers])
def test_place_accepts_correct_forms(right, capsys):
    check.exercise_place_from_environment(right)
    assert "PASSED" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("mistake", "message"),
    [(place_node_as_rank, "which variable numbers the nodes"),
     (place_nodes_as_world, r"counts processes \(tasks\), not nodes"),
     (place_swapped, "rank and local rank look swapped"),
     (place_slurm_only, "read the variables of the launcher closest to the process"),
     (place_raw_node_list, "SLURM compresses the list"),
     (place_a_tuple, "return a dict with the integers")],
)
def test_place_rejects_likely_mistakes(mistake, message):
    with pytest.raises(ExerciseFailed, match=message):
        check.exercise_place_from_environment(mistake)


# ---------------------------------------------------------------- Exercise 3: the straggler


def _upper_median(values):
    return sorted(values)[len(values) // 2]


def _stragglers(steps, threshold, *, per_rank=statistics.median, typical=statistics.median,
                strict=True, ordered=True, fraction=True, refuse_nan=True, shape=tuple):
    """A straggler finder with one switch per likely mistake (defaults: a correct one)."""
    if refuse_nan and any(math.isnan(t) for row in steps for t in row):
        raise ValueError("a step time is NaN")
    times = [per_rank(column) for column in zip(*steps, strict=True)]
    middle = typical(times)
    limit = middle * (1 + threshold)
    found = [(rank, t / middle - (1 if fraction else 0))
             for rank, t in enumerate(times) if (t > limit if strict else t >= limit)]
    return [shape(pair) for pair in (sorted(found, key=lambda pair: -times[pair[0]])
                                     if ordered else found)]


def stragglers_right(steps, threshold):
    return _stragglers(steps, threshold)


def stragglers_as_numpy_lists(steps, threshold):
    return [[np.int64(r), np.float64(slowdown)] for r, slowdown in _stragglers(steps, threshold)]


@pytest.mark.parametrize("right", [stragglers_right, stragglers_as_numpy_lists])
def test_stragglers_accepts_correct_forms(right, capsys):
    check.exercise_find_stragglers(right)
    assert "PASSED" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("switches", "message"),
    [({"typical": statistics.mean}, "a statistic one slow rank cannot drag"),
     ({"typical": _upper_median}, "with an even number of ranks"),
     ({"typical": min}, "a statistic one slow rank cannot drag"),
     ({"per_rank": statistics.mean}, "one unlucky step should not make a straggler"),
     ({"per_rank": max}, "one unlucky step should not make a straggler"),
     ({"strict": False}, "exactly at the threshold .* is your comparison strict"),
     ({"ordered": False}, "put the slowest rank first"),
     ({"fraction": False}, "as a fraction"),
     ({"refuse_nan": False}, "NaN compares False"),
     ({"shape": lambda pair: pair[0]}, r"return a list of \(rank, slowdown\) pairs"),
     ({"shape": lambda pair: {"rank": pair[0], "slowdown": pair[1]}}, "pairs")],
    ids=["mean of ranks", "upper median", "fastest rank", "mean of steps", "slowest step",
         ">= at the boundary", "unsorted", "ratio not fraction", "NaN accepted", "ranks only",
         "dicts"],
)
def test_stragglers_rejects_likely_mistakes(switches, message):
    with pytest.raises(ExerciseFailed, match=message):
        check.exercise_find_stragglers(lambda steps, threshold: _stragglers(steps, threshold,
                                                                            **switches))


def test_stragglers_ranks_out_of_range_are_named_not_an_index_error():
    def counted_from_one(steps, threshold):
        return [(rank + 1, slowdown) for rank, slowdown in _stragglers(steps, threshold)]

    fails(check.exercise_find_stragglers, counted_from_one,
          r"rank 3 does not exist: .* 3 ranks, numbered 0 to 2")


def test_stragglers_an_error_other_than_the_asked_value_error_on_nan_is_named():
    def type_error_on_nan(steps, threshold):
        if any(math.isnan(t) for row in steps for t in row):
            raise TypeError("NaN")
        return _stragglers(steps, threshold)

    fails(check.exercise_find_stragglers, type_error_on_nan,
          r"find_stragglers\(\[\[1.0, 1.0, 1.0\], \[1.0, nan, 1.0\]\], 0.2\) raised TypeError")


@pytest.mark.parametrize("exercise", list(check.EXERCISES.values()),
                         ids=list(check.EXERCISES))
def test_an_error_in_an_answer_is_named_with_its_input(exercise):
    fails(exercise, buggy, BUG_NAMED)


# ---------------------------------------------------------------- Exercise 3a: ring time


def _ring(nbytes, ranks, latency, gbit, *, share=True, bits=False, latency_steps=True):
    if ranks == 1:
        return 0.0
    bandwidth = gbit * 1e9 / (1 if bits else 8)
    sent = nbytes * (2 * (ranks - 1) / ranks if share else 1)
    return (2 * (ranks - 1) if latency_steps else 1) * latency + sent / bandwidth


def ring_right(*args):
    return _ring(*args)


def ring_as_numpy(nbytes, ranks, latency, gbit):
    return np.float32(_ring(nbytes, ranks, latency, gbit)) * np.float64(1.0)


@pytest.mark.parametrize("right", [ring_right, ring_as_numpy])
def test_ring_time_accepts_correct_forms(right, capsys):
    check.exercise_ring_all_reduce_time(right)
    assert "PASSED" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("mistake", "message"),
    [(lambda *a: _ring(*a, share=False), "how many chunks of 1/N"),
     (lambda *a: _ring(*a, bits=True), "quoted in bits per second"),
     (lambda *a: _ring(*a, latency_steps=False), "once per message"),
     (lambda n, r, lat, g: _ring(n, r, lat, g) if r > 1 else lat, "nobody to talk to"),
     (lambda *a: str(_ring(*a)), "returned '")],
    ids=["no 2(N-1)/N", "bits for bytes", "one latency", "one rank", "a string"],
)
def test_ring_time_rejects_likely_mistakes(mistake, message):
    with pytest.raises(ExerciseFailed, match=message):
        check.exercise_ring_all_reduce_time(mistake)


# ---------------------------------------------------------------- Exercise 3b: a step's traffic


def _step(model, cluster, p, *, recompute=True, half=True, shard=True, dp_link=True,
          pipeline=True):
    """Written from the lab's text (not from llmlab.scale.simulate), with mistake switches."""
    shape = preset(model)
    seq = p.seq or shape.context

    def ring(nbytes, ranks, name):
        over = link(name)
        return _ring(nbytes, ranks, over.latency, over.bandwidth * 8 / 1e9)

    activations = p.micro_batch * seq * shape.d_model * 2
    layers = math.ceil(shape.n_layer / p.pp)
    count = (6 if p.checkpointing and recompute else 4) * layers * p.accumulation
    total = count * ring(activations, p.tp, cluster.link_for("tp", p))
    if p.pp > 1 and pipeline:
        over = link(cluster.link_for("pp", p))
        message = activations / (p.tp if shard else 1)
        total += 2 * (p.accumulation + p.pp - 1) * (over.latency + message / over.bandwidth)
    parameters = count_parameters(shape.replace(n_layer=layers)).total / p.tp
    where = cluster.link_for("dp", p) if dp_link else cluster.inside_node
    for kind, nbytes in dp_collectives(parameters, p.zero, p.accumulation):
        total += ring(nbytes, p.dp, where) / (2 if kind != "all_reduce" and half else 1)
    return total


def test_step_communication_accepts_one_written_from_the_text(capsys):
    check.exercise_step_communication(_step)
    assert "PASSED" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("switch", "message"),
    [("recompute", "the recomputed forward"), ("half", "one phase of a ring all-reduce"),
     ("shard", "only its share of the activations"), ("dp_link", "Cluster.link_for")],
)
def test_step_communication_rejects_likely_mistakes(switch, message):
    with pytest.raises(ExerciseFailed, match=message):
        check.exercise_step_communication(lambda *a: _step(*a, **{switch: False}))


def test_step_communication_without_a_dimension_is_shown_the_parts():
    with pytest.raises(ExerciseFailed, match="the simulator's parts: TP .* PP .* DP"):
        check.exercise_step_communication(lambda *a: _step(*a, pipeline=False))


# ---------------------------------------------------------------- Exercise 4: the cheapest run


def cheapest_right(runs, budget, deadline):
    best = None
    for run in runs:
        if run.fit == "yes" and run.days <= deadline and run.cost <= budget:
            if best is None or run.cost < best.cost:
                best = run
    return best


def fastest(runs, budget, deadline):
    allowed = [r for r in runs if r.fit == "yes" and r.days <= deadline and r.cost <= budget]
    return min(allowed, key=lambda r: r.days, default=None)


def tight_allowed(runs, budget, deadline):
    allowed = [r for r in runs if r.fit != "no" and r.days <= deadline and r.cost <= budget]
    return min(allowed, key=lambda r: r.cost, default=None)


def fit_ignored(runs, budget, deadline):
    allowed = [r for r in runs if r.days <= deadline and r.cost <= budget]
    return min(allowed, key=lambda r: r.cost, default=None)


def budget_ignored(runs, budget, deadline):
    allowed = [r for r in runs if r.fit == "yes" and r.days <= deadline]
    return min(allowed, key=lambda r: r.cost, default=None)


def strict_limits(runs, budget, deadline):
    allowed = [r for r in runs if r.fit == "yes" and r.days < deadline and r.cost < budget]
    return min(allowed, key=lambda r: r.cost, default=None)


def strict_deadline(runs, budget, deadline):
    allowed = [r for r in runs if r.fit == "yes" and r.days < deadline and r.cost <= budget]
    return min(allowed, key=lambda r: r.cost, default=None)


def strict_budget(runs, budget, deadline):
    allowed = [r for r in runs if r.fit == "yes" and r.days <= deadline and r.cost < budget]
    return min(allowed, key=lambda r: r.cost, default=None)


def first_listed(runs, budget, deadline):
    return next((r for r in runs if r.fit == "yes" and r.days <= deadline and r.cost <= budget),
                None)


def cheapest_last_of_ties(runs, budget, deadline):
    allowed = [r for r in runs if r.fit == "yes" and r.days <= deadline and r.cost <= budget]
    return max(allowed, key=lambda r: (-r.cost, id(r)), default=None)


@pytest.mark.parametrize("answer", [cheapest_right, cheapest_last_of_ties])
def test_cheapest_run_accepts_a_loop_whichever_tie_it_keeps(answer, capsys):
    # DP inside a node hides all its traffic: ZeRO-2 and ZeRO-3 can cost the same to the cent.
    check.exercise_cheapest_run(answer)
    assert "PASSED" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("mistake", "message"),
    [(fastest, "the fastest run is not the cheapest"), (tight_allowed, "fit='tight'"),
     (fit_ignored, "fit='no'"), (budget_ignored, "over the budget"),
     (first_listed, "costs less"), (strict_limits, "is your comparison strict"),
     (strict_deadline, "is your comparison strict"),
     (strict_budget, "is your comparison strict")],
)
def test_cheapest_run_rejects_likely_mistakes(mistake, message):
    with pytest.raises(ExerciseFailed, match=message):
        check.exercise_cheapest_run(mistake)


def test_the_candidates_hold_every_kind_of_run():
    runs = check.candidate_runs("llama-70b", 2e12)
    assert {run.fit for run in runs} == {"yes", "tight", "no"}
    assert len({run.gpus for run in runs}) >= 4
    cheapest, quickest = min(runs, key=lambda r: r.cost), min(runs, key=lambda r: r.days)
    assert cheapest is not quickest  # else "fastest, not cheapest" could not be caught
