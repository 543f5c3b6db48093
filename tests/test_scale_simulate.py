"""The simulator against Narayanan et al. 2021 (Megatron-LM at scale) and Llama 3 405B."""

import pytest

from llmlab.models import count_parameters
from llmlab.scale.published import (
    LLAMA3_405B_RUN,
    MEGATRON_TABLE2_175B,
    NARAYANAN_RUNS,
    PublishedRun,
    narayanan_days,
)
from llmlab.scale.simulate import Cluster, Parallel, hardware_flops_per_token, simulate


def megatron_cluster(run: PublishedRun) -> Cluster:
    return Cluster(run.gpu, 8, run.gpus // 8, "nvlink3", "ib-hdr")


def megatron_layout(run: PublishedRun) -> Parallel:
    accumulation = run.batch // (run.dp * run.micro_batch)
    return Parallel(run.dp, run.tp, run.pp, 0, run.micro_batch, accumulation, checkpointing=True)


@pytest.mark.parametrize("run", [*NARAYANAN_RUNS, MEGATRON_TABLE2_175B], ids=lambda r: r.name)
def test_end_to_end_days_match_the_paper(run):
    prediction = simulate(run.model, megatron_cluster(run), megatron_layout(run), run.tokens,
                          achieved_tflops=run.tflops_per_gpu)  # fmt: skip
    params = count_parameters(run.model).total
    # Eq. 4 drops the attention and logit terms (s/6h, V/16lh): a few percent.
    assert narayanan_days(run.tokens, params, run.gpus, run.tflops_per_gpu) == pytest.approx(
        run.days, rel=0.03)
    assert prediction.days == pytest.approx(run.days, rel=0.03)  # 34.7, 85.0 and 23.0 days


@pytest.mark.parametrize("run", [*NARAYANAN_RUNS, MEGATRON_TABLE2_175B], ids=lambda r: r.name)
def test_the_papers_layouts_fit_in_80_gb(run):
    prediction = simulate(run.model, megatron_cluster(run), megatron_layout(run), run.tokens)
    assert prediction.fit in ("yes", "tight")
    assert prediction.memory.total < 80e9
    # Without activation checkpointing (which the paper uses) the 1T stage would not fit.
    if run.pp == 64:
        bare = Parallel(**{**vars(megatron_layout(run)), "checkpointing": False})
        assert simulate(run.model, megatron_cluster(run), bare, run.tokens).fit == "no"


def test_recomputed_flops_match_the_papers_eq_3():
    # F = 96 B s l h^2 (1 + s/6h + V/16lh) per iteration, with activation recomputation.
    run = NARAYANAN_RUNS[0]
    shape, s = run.model, 2048
    l, h, V = shape.n_layer, shape.d_model, shape.vocab_size  # noqa: E741
    per_token = 96 * l * h**2 * (1 + s / (6 * h) + V / (16 * l * h))
    assert hardware_flops_per_token(shape, s, checkpointing=True) == pytest.approx(per_token,
                                                                                   rel=0.005)
    assert hardware_flops_per_token(shape, s, False) < 0.8 * per_token  # 6N, not 8N


def test_predicted_mfu_is_in_the_range_such_runs_report():
    run = NARAYANAN_RUNS[0]
    prediction = simulate(run.model, megatron_cluster(run), megatron_layout(run), run.tokens)
    assert 0.25 < prediction.mfu < 0.6
    assert prediction.step_s > prediction.compute_s  # bubble and TP traffic are on top
    assert prediction.tp_s > prediction.pp_s  # TP all-reduces every layer; PP sends per stage


def test_llama3_405b_needs_more_than_the_default_assumptions():
    run = LLAMA3_405B_RUN
    cluster = Cluster("h100", 8, run.gpus // 8, "nvlink4", "roce-400")
    layout = Parallel(run.dp, run.tp, run.pp, 3, 1, run.batch // run.dp, checkpointing=True,
                      seq=8192)  # fmt: skip
    default = simulate(run.model, cluster, layout, run.tokens)
    assert default.fit != "no" and default.mfu < 0.25  # 1F1B, m=16 on 16 stages: 48% bubble
    tuned = Parallel(**{**vars(layout), "zero": 2, "checkpointing": False, "virtual_stages": 4})
    prediction = simulate(run.model, cluster, tuned, run.tokens, efficiency=0.6)
    assert 0.38 <= prediction.mfu <= 0.43  # the reported band
    assert prediction.fit == "no"  # needs selective recomputation, which memory does not model
    reported = simulate(run.model, cluster, tuned, run.tokens, achieved_tflops=400)
    assert reported.mfu == pytest.approx(run.mfu, abs=0.01)  # 400 TFLOP/s of 989


def test_overlap_hides_data_parallel_traffic():
    cluster = Cluster("h100", 8, 4, between_nodes="roce-400")
    layout = Parallel(dp=32, micro_batch=1, accumulation=1, zero=0, seq=2048)
    hidden = simulate("llama-1b", cluster, layout, overlap=1.0)
    exposed = simulate("llama-1b", cluster, layout, overlap=0.0)
    assert exposed.dp_s == exposed.dp_total_s > hidden.dp_s
    assert exposed.step_s > hidden.step_s


def test_days_and_cost_follow_from_the_step():
    cluster = Cluster("h100", 8, 1, dollars_per_gpu_hour=3.0)
    p = simulate("llama-7b", cluster, Parallel(dp=8, zero=3, accumulation=4), tokens=1e9)
    assert p.days == pytest.approx(1e9 / p.tokens_per_s / 86400)
    assert p.cost == pytest.approx(p.days * 24 * 8 * 3.0)
    assert p.tokens_per_step == 8 * 1 * 4 * 4096


@pytest.mark.parametrize("changes, message", [
    ({"parallel": Parallel(dp=4)}, "make the product equal"),
    ({"parallel": Parallel(dp=1, tp=16), "model": "llama-13b",  # 40 heads
      "cluster": Cluster("h100", 16, 1)}, "attention heads"),
    ({"efficiency": 1.5}, "efficiency"),
    ({"tokens": 0}, "tokens"),
    ({"achieved_tflops": -1}, "achieved_tflops"),
])  # fmt: skip
def test_bad_input_is_refused(changes, message):
    args = {"model": "llama-7b", "cluster": Cluster("h100", 8, 1), "parallel": Parallel(dp=8)}
    args.update(changes)
    with pytest.raises(ValueError, match=message):
        simulate(**args)


@pytest.mark.parametrize("kwargs, message", [
    ({"gpu": "z80"}, "unknown GPU"), ({"between_nodes": "infiniband"}, "unknown link"),
    ({"nodes": 0}, "positive integer"),
])  # fmt: skip
def test_a_bad_cluster_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Cluster(**kwargs)
