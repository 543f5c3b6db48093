"""The published runs as data: the models have the papers' parameter counts, the layouts divide
the GPUs and the batch as the papers say, eq. 4 of Narayanan et al. 2021 gives the paper's
days, Llama 3's throughput is its reported MFU, and DeepSeek-V3's GPU-hours give a rate its
GPUs can sustain. (The simulator against these runs:
tests/scale/test_simulate.py.)"""

import pytest

from llmlab.models import count_parameters
from llmlab.scale.published import (
    DEEPSEEK_V3,
    GPT3_175B,
    GPT_1T,
    LLAMA3_405B,
    LLAMA3_405B_RUN,
    MEGATRON_TABLE2_175B,
    NARAYANAN_RUNS,
    narayanan_days,
)
from llmlab.scale.simulate import gpu_spec

RUNS = [*NARAYANAN_RUNS, MEGATRON_TABLE2_175B, LLAMA3_405B_RUN]


@pytest.mark.parametrize("run", [*NARAYANAN_RUNS, MEGATRON_TABLE2_175B], ids=lambda r: r.name)
def test_end_to_end_days_match_the_paper(run):
    params = count_parameters(run.model).total
    # Eq. 4 drops the attention and logit terms (s/6h, V/16lh): a few percent.
    assert narayanan_days(run.tokens, params, run.gpus, run.tflops_per_gpu) == pytest.approx(
        run.days, rel=0.03)


def test_the_models_have_the_papers_parameter_counts():
    # Narayanan et al. 2021, Table 1: 174.6 and 1008.0 billion; Meta 2024: 405 billion.
    assert count_parameters(GPT3_175B).total == pytest.approx(174.6e9, rel=1e-3)
    assert count_parameters(GPT_1T).total == pytest.approx(1008.0e9, rel=1e-3)
    assert count_parameters(LLAMA3_405B).total == pytest.approx(405e9, rel=0.005)


@pytest.mark.parametrize("run", RUNS, ids=lambda r: r.name)
def test_each_layout_splits_its_gpus_and_its_batch_evenly(run):
    assert run.dp * run.tp * run.pp == run.gpus
    assert run.batch % (run.dp * run.micro_batch) == 0


def test_the_layouts_are_the_papers():
    assert MEGATRON_TABLE2_175B.dp == 16  # Table 2: 1536 GPUs as t=8 x p=12 x d=16
    llama = LLAMA3_405B_RUN
    assert llama.dp == 128 and llama.batch // llama.dp == 16  # 16 sequences per DP group
    assert llama.batch * llama.model.context == pytest.approx(16e6, rel=0.05)  # 16M tokens
    # 400 TFLOP/s per GPU is the 41% MFU of the H100's dense bf16 peak
    assert llama.tflops_per_gpu / gpu_spec(llama.gpu).tflops["bf16"] == pytest.approx(
        llama.mfu, abs=0.01)


def test_deepseek_v3s_gpu_hours_give_a_third_of_the_bf16_peak():
    """By hand: 6 x 37e9 x 14.8e12 = 3.29e24 FLOPs over 2.664e6 x 3600 GPU-seconds: 343 TFLOP/s,
    35% of the H800's (an H100's) 989 TFLOP/s dense bf16 peak, in the range large runs report
    (Llama 3: 38-43%). Counted with all 671B parameters, the same hours would need 6.2 PFLOP/s a
    GPU: six times the peak."""
    rate = DEEPSEEK_V3.achieved_tflops_per_gpu()
    assert rate == pytest.approx(6 * 37e9 * 14.8e12 / (2.664e6 * 3600) / 1e12)
    assert 0.3 < rate / gpu_spec(DEEPSEEK_V3.gpu).tflops["bf16"] < 0.4
    assert 18 * rate > 6 * gpu_spec(DEEPSEEK_V3.gpu).tflops["bf16"]
