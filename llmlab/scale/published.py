"""Published large runs, as data, to check the simulator against.

Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM", SC21): GPT models with a 51,200-token vocabulary and 2048-token sequences on DGX
A100 nodes (8 GPUs on NVLink 3, one 200 Gb/s HDR InfiniBand adapter per GPU). Their eq. 4
estimates end-to-end training time as 8 T P / (n X): T tokens, P parameters, n GPUs at X
FLOP/s each, 8 = 2 (multiply-add) x 4 (forward, backward for inputs and weights, recomputed
forward). Layouts (t, p, micro-batch, batch) are their Table 2 (GPT-3 175B, PTD-P rows) and
Table 1 (1T). The 1024-GPU layout of the 34-day estimate is not printed in the paper.

Llama 3 405B (Meta 2024, "The Llama 3 Herd of Models", section 3.3.2 and Table 4): H100s on
400 Gb/s RoCE, TP 8 x PP 16 x DP (FSDP), 16M tokens a batch, 38-43% BF16 MFU.

DeepSeek-V3 (DeepSeek-AI 2024, "DeepSeek-V3 Technical Report", abstract, section 1 and Table 1):
a mixture of experts of 671B parameters, 37B active per token, pre-trained on 14.8T tokens in
2,664K H800 GPU-hours (180K per trillion tokens) on 2,048 H800s, with FP8 matmuls. The H800 is
an H100 SXM with a narrower NVLink (400 GB/s): the same tensor cores and peaks.
"""

from dataclasses import dataclass

from llmlab.models import ModelShape
from llmlab.scale.simulate import SECONDS_PER_DAY

_MEGATRON = "Narayanan et al. 2021, Table 1 / section 5: vocabulary 51,200, sequence 2048"
GPT3_175B = ModelShape("gpt2", 96, 12288, 96, 51200, 2048, source=_MEGATRON)
GPT_1T = ModelShape("gpt2", 128, 25600, 160, 51200, 2048, source=_MEGATRON)
LLAMA3_405B = ModelShape(
    "llama", 126, 16384, 128, 128256, 8192, d_ff=53248, n_kv_head=8, tied_embeddings=False,
    source="Llama 3 (Meta 2024), Table 3: 126 layers, width 16,384, FFN 53,248, 8 KV heads",
)


def narayanan_days(tokens: float, parameters: float, gpus: int, tflops_per_gpu: float) -> float:
    """Narayanan et al. 2021, eq. 4: end-to-end training time 8 T P / (n X), in days."""
    return 8 * tokens * parameters / (gpus * tflops_per_gpu * 1e12) / SECONDS_PER_DAY


@dataclass(frozen=True)
class PublishedRun:
    name: str
    model: ModelShape
    gpu: str
    gpus: int
    tp: int
    pp: int
    micro_batch: int
    batch: int  # sequences per step
    tflops_per_gpu: float  # achieved, end to end (with recomputation, for Megatron)
    tokens: float
    days: float | None = None  # what the paper estimates
    mfu: float | None = None  # what the paper reports

    @property
    def dp(self) -> int:
        return self.gpus // (self.tp * self.pp)


# The 34-day and 84-day estimates of Narayanan et al. 2021 (section 5.1), with a layout of the
# paper: the 175B row is Table 2's PTD-P layout (t=8, p=12) on its 1536 GPUs.
NARAYANAN_RUNS = (
    PublishedRun("GPT-3 175B", GPT3_175B, "a100", 1024, 8, 8, 1, 1536, 140, 300e9, days=34),
    PublishedRun("GPT 1T", GPT_1T, "a100", 3072, 8, 64, 1, 3072, 163, 450e9, days=84),
)
MEGATRON_TABLE2_175B = PublishedRun("GPT-3 175B (Table 2)", GPT3_175B, "a100", 1536, 8, 12, 1,
                                    1536, 141, 300e9, days=23)

# Llama 3 405B, Table 4, the 16K-GPU 8K-sequence stage: 16 sequences of 8192 per DP group,
# 400 TFLOP/s per GPU, 41% MFU. What the simulator needs to land there
# (tests/scale/test_simulate.py):
# - with its defaults (1F1B, full activation checkpointing, ZeRO-3 to fit, efficiency 0.6) it
#   predicts about 20%: with m = 16 micro-batches on 16 stages, 1F1B idles 48% of the step;
# - an interleaved schedule (4 chunks per GPU: the bubble falls to 19%), no full recomputation
#   (the GPUs then run only the model's FLOPs), FSDP that keeps the gathered weights from
#   forward to backward (ZeRO-2's traffic) and an efficiency of 0.55-0.6 give 40-43%;
# - but llmlab.memory then says it does not fit: Meta also needs what the planner does not
#   model (selective recomputation and sequence parallelism, Korthikanti et al. 2022; stages
#   balanced by hand). Nor does it model stragglers, congestion, or the 1:7 oversubscribed
#   links between pods that Meta's job placement works around.
LLAMA3_405B_RUN = PublishedRun("Llama 3 405B", LLAMA3_405B, "h100", 16384, 8, 16, 1, 2048, 400,
                               15.6e12, mfu=0.41)


@dataclass(frozen=True)
class PublishedMoERun:
    """A mixture of experts' reported pre-training: sizes, tokens and GPU-hours."""

    name: str
    parameters: float
    active_parameters: float  # per token
    tokens: float
    gpu_hours: float
    gpu: str  # llmlab.gpu_specs' name of a GPU with the same peak

    def achieved_tflops_per_gpu(self) -> float:
        """The rate each GPU sustained: 6 x active parameters x tokens (attention's FLOPs left
        out) over the GPU-hours."""
        return 6 * self.active_parameters * self.tokens / (self.gpu_hours * 3600) / 1e12


DEEPSEEK_V3 = PublishedMoERun("DeepSeek-V3", 671e9, 37e9, 14.8e12, 2.664e6, "h100")
