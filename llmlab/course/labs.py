"""The course's labs and the scale each one runs at on a given machine (for `llmlab doctor`)."""

from collections.abc import Callable
from dataclasses import dataclass

from llmlab.env import EnvReport

GIB = 1024**3


@dataclass(frozen=True)
class Lab:
    number: int
    slug: str
    title: str
    ready: bool  # False: planned, not written yet
    full_needs: str
    scale_on: Callable[[EnvReport], tuple[str, str]]  # -> (scale, why)

    @property
    def notebook(self) -> str:
        return f"{self.number:02d}_{self.slug}.ipynb"


def _largest_gpu_gib(report: EnvReport) -> float:
    return max((gpu.total_memory_bytes / GIB for gpu in report.gpus), default=0.0)


def _any_gpu(report: EnvReport) -> tuple[str, str]:
    if report.gpus:
        return "full", f"{report.gpus[0].name} is present"
    return "smoke", "no CUDA GPU: small sizes on the CPU"


def _training_gpu(min_gib: float) -> Callable[[EnvReport], tuple[str, str]]:
    def scale(report: EnvReport) -> tuple[str, str]:
        if not report.gpus:
            return "smoke", "no CUDA GPU: a tiny model on the CPU"
        if _largest_gpu_gib(report) < min_gib:
            return "smoke", f"full needs a GPU with {min_gib:.0f} GiB; the largest here is smaller"
        return "full", f"{report.gpus[0].name} has enough memory"

    return scale


def _multi_gpu(report: EnvReport) -> tuple[str, str]:
    if len(report.gpus) >= 2:
        return "full", f"{len(report.gpus)} GPUs"
    return "simulated", "fewer than 2 GPUs: 2 CPU processes talk over gloo instead of NCCL"


def _quantization(report: EnvReport) -> tuple[str, str]:
    if report.gpus:
        return "full", "CUDA kernels for GPTQ and NF4"
    return "smoke", "no CUDA GPU: NF4 and GPTQ on a tiny model on the CPU"


LABS: tuple[Lab, ...] = (
    Lab(0, "environment", "Environment setup and GPU check", True,
        "any CUDA GPU; about 1 minute", _any_gpu),
    Lab(1, "data", "Data preprocessing and tokenization", True,
        "no GPU needed; all of the built-in corpus (about 12 MB, 32k-token vocabulary)",
        _any_gpu),
    Lab(2, "memory", "Model configuration and training memory", True,
        "any CUDA GPU (measures GPT-2 124M on it)", _any_gpu),
    Lab(3, "training", "Training on one GPU", True,
        "one GPU with 16 GiB or more (GPT-2 small, 2000 steps of 65k tokens)", _training_gpu(16)),
    Lab(4, "multi_gpu", "Multi-GPU training", False,
        "2 or more GPUs", _multi_gpu),
    Lab(5, "pruning", "Magnitude pruning", False,
        "one GPU with 16 GiB or more", _training_gpu(16)),
    Lab(6, "quantization", "4-bit quantization (GPTQ, NF4/QLoRA)", False,
        "one CUDA GPU", _quantization),
)  # fmt: skip


def capability_table(report: EnvReport) -> list[tuple[Lab, str, str]]:
    """(lab, scale, why) for every lab; scale is 'full', 'smoke' or 'simulated'."""
    return [(lab, *lab.scale_on(report)) for lab in LABS]
