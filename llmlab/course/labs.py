"""The course's labs, and the one rule per lab that picks its profile on a machine.

`profile("auto", lab=N)` and `llmlab doctor` both ask `Lab.profile_on`, so they cannot disagree.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from llmlab.env import EnvReport, GpuInfo
from llmlab.units import GB

Rule = Callable[[Sequence[GpuInfo]], tuple[str, str]]  # the GPUs torch sees -> (profile, why)

# Lab 03's full recipe (GPT-2 small, micro-batch 16 x 1024 tokens): the planner's peak is 14.1 GB
# under the trainer's torch.autocast, and torch.compile's autotuning and allocator fragmentation
# need more. A 16 GB T4 or V100 holds 15.8-16.9 GB, too tight; the 24 GB class (L4, A10) and
# larger run it.
TRAINING_GPU_GB = 20
# Below that, the consumer profile: the same recipe in micro-batches that fit (llmlab.recipes).
# Lab 03 alone would fit from 4 GB (micro-batch 1), but the labs on this rule keep their full sizes:
# Lab 08's code fine-tune (GPT-2 small in fp32, 16 x ~430 tokens) plans 9.1 GB beside the lab's
# other models, about 11 GB, and Lab 03's accumulation comparison needs a micro-batch of 4 or more.
CONSUMER_GPU_GB = 12


@dataclass(frozen=True)
class Lab:
    number: int
    slug: str
    title: str
    ready: bool  # False: planned, not written yet
    full_needs: str
    profile_on: Rule
    # The stored smoke run's wall time, alone on 2 idle CPU cores with 2 math threads (with Lab
    # 03's model there, for the labs that load it): measured, and quoted by the README's table
    # and the lab's introduction (tests/course/test_labs.py holds them to it).
    smoke_seconds: int

    @property
    def notebook(self) -> str:
        return f"{self.number:02d}_{self.slug}.ipynb"


def _any_gpu(gpus: Sequence[GpuInfo]) -> tuple[str, str]:
    if gpus:
        return "full", f"{gpus[0].name} is present"
    return "smoke", "no CUDA GPU: small sizes on the CPU"


def _training_gpu(full_gb: float, consumer_gb: float) -> Rule:
    """Full when the GPU the labs train on (cuda:0) has `full_gb` GB or more, consumer from
    `consumer_gb` GB, else smoke."""

    def rule(gpus: Sequence[GpuInfo]) -> tuple[str, str]:
        if not gpus:
            return "smoke", "no CUDA GPU: a tiny model on the CPU"
        gpu, needs = gpus[0], f"full needs {full_gb:.0f} GB"
        size = f"{gpu.name} has {gpu.total_memory_bytes / GB:.1f} GB"
        if gpu.total_memory_bytes < consumer_gb * GB:
            return "smoke", f"{size}; consumer needs {consumer_gb:.0f} GB, {needs}"
        if gpu.total_memory_bytes < full_gb * GB:
            smaller = "GPT-2 small in smaller micro-batches"
            return "consumer", f"{size} ({needs}): {smaller}{_precision(gpu)}"
        return "full", f"{size} ({needs}){_precision(gpu)}"

    return rule


def _precision(gpu: GpuInfo) -> str:
    """What the trainer's `auto` dtype does on a GPU without bf16 (nothing to say on one with)."""
    from llmlab.device import training_dtype_for  # here: `llmlab --help` must not wait for torch

    choice = training_dtype_for("cuda", capability=gpu.capability)
    if choice.name == "bf16":
        return ""
    scaler = " with a grad scaler" if choice.use_grad_scaler else ""
    major, minor = gpu.capability
    return f"; no bf16 (compute capability {major}.{minor}): the trainer runs {choice.name}{scaler}"


_on_training_gpu = _training_gpu(TRAINING_GPU_GB, CONSUMER_GPU_GB)


def _multi_gpu(gpus: Sequence[GpuInfo]) -> tuple[str, str]:
    if len(gpus) >= 2:
        return "full", f"{len(gpus)} GPUs"
    return "smoke", "fewer than 2 GPUs: 2 CPU processes over gloo stand in for them"


LABS: tuple[Lab, ...] = (
    Lab(0, "environment", "Environment setup and GPU check", True,
        "any CUDA GPU; about 1 minute", _any_gpu, smoke_seconds=10),
    Lab(1, "data", "Data preprocessing and tokenization", True,
        "no GPU needed; all of the built-in corpus (about 12 MB, 32k-token vocabulary)",
        _any_gpu, smoke_seconds=64),
    Lab(2, "memory", "Model configuration and training memory", True,
        "any CUDA GPU (measures GPT-2 124M on it)", _any_gpu, smoke_seconds=19),
    Lab(3, "training", "Training on one GPU", True,
        f"one GPU with {TRAINING_GPU_GB} GB or more (GPT-2 small, 2000 steps of 65k tokens)",
        _on_training_gpu, smoke_seconds=308),
    Lab(4, "multi_gpu", "Multi-GPU training", True,
        "2 or more GPUs (DDP, ZeRO/FSDP, tensor and pipeline parallelism)", _multi_gpu,
        smoke_seconds=84),
    Lab(5, "at_scale", "Training at scale", True,
        "2 or more GPUs (launchers, failures and restarts; the cluster planner needs none)",
        _multi_gpu, smoke_seconds=100),
    Lab(6, "pruning", "Pruning", True,
        f"one GPU with {TRAINING_GPU_GB} GB or more (prunes and fine-tunes Lab 03's GPT-2 small)",
        _on_training_gpu, smoke_seconds=68),
    Lab(7, "quantization", "4-bit quantization", True,
        f"one GPU with {TRAINING_GPU_GB} GB or more (quantizes and fine-tunes Lab 03's GPT-2 "
        "small; GPTQ's GPU kernels timed)", _on_training_gpu, smoke_seconds=116),
    Lab(8, "finetuning", "Fine-tuning and evaluation", True,
        f"one GPU with {TRAINING_GPU_GB} GB or more (fine-tunes Lab 03's GPT-2 small four ways: "
        "full, LoRA, QLoRA, head only; augments a tenth of the pairs)", _on_training_gpu,
        smoke_seconds=305),
    Lab(9, "kernels", "Kernels and profiling", True,
        "any CUDA GPU (profiles and times Lab 03's model; Triton kernels run compiled)", _any_gpu,
        smoke_seconds=111),
    Lab(10, "post_training", "Post-training: SFT, DPO and RLVR", True,
        f"one GPU with {TRAINING_GPU_GB} GB or more (post-trains Lab 03's GPT-2 small: SFT, DPO "
        "and GRPO over seeds)", _on_training_gpu, smoke_seconds=283),
    Lab(11, "experts_and_context", "Experts and long context", True,
        "2 or more GPUs (expert and context parallelism; the checks run CPU processes)",
        _multi_gpu, smoke_seconds=61),
)


def find_lab(number: int) -> Lab:
    """The lab with this number; a ValueError that lists the labs otherwise."""
    for lab in LABS:
        if lab.number == number:
            return lab
    raise ValueError(f"there is no lab {number}; the labs are numbered 0 to {LABS[-1].number}")


def capability_table(report: EnvReport) -> list[tuple[Lab, str, str]]:
    """(lab, profile, why) for every lab on the machine of `report`."""
    return [(lab, *lab.profile_on(report.gpus)) for lab in LABS]
