"""Time square matmuls in fp32/tf32/bf16/fp16 and print achieved TFLOP/s and speed-ups.

    python benchmarks/matmul.py [--device cpu|cuda] [--sizes 256 512 1024 2048] [--repeats 5]

Needs the llmlab package importable (`pip install -e .` from the repository root).
"""

import argparse

import torch

from llmlab.device import choose_device
from llmlab.gpu_specs import DTYPES, GpuSpec, find_gpu_spec
from llmlab.matmul import MatmulResult, matmul_sweep
from llmlab.tables import markdown_table

WARMUP = 2  # untimed runs first: they pay for allocation, kernel selection and cold caches


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: best found)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024, 2048])
    parser.add_argument("--repeats", type=int, default=5)
    return parser.parse_args()


def gpu_spec_of(device: torch.device) -> GpuSpec | None:
    """The datasheet figures of a CUDA device, or None (CPU, or a GPU not in the table)."""
    if device.type != "cuda":
        return None
    return find_gpu_spec(torch.cuda.get_device_name(device))


def speedups_over_fp32(results: list[MatmulResult]) -> list[float | None]:
    """Each result's speed-up over fp32 at the same size, from this same run."""
    fp32_seconds = {r.size: r.seconds for r in results if r.dtype == "fp32"}
    return [
        fp32_seconds[r.size] / r.seconds if r.size in fp32_seconds else None for r in results
    ]


def format_table(results: list[MatmulResult], spec: GpuSpec | None) -> str:
    """A table for the terminal; the % of peak column appears only on a GPU in the table."""
    rows = []
    for result, speedup in zip(results, speedups_over_fp32(results), strict=True):
        row = {"size": result.size, "dtype": result.dtype,
               "median ms": f"{result.seconds * 1e3:.3f}", "TFLOP/s": f"{result.tflops:.3f}",
               "vs fp32": "-" if speedup is None else f"{speedup:.2f}x"}
        if spec:
            peak = spec.tflops[result.dtype]
            row["% peak"] = f"{100 * result.tflops / peak:.1f}%" if peak else "-"
        rows.append(row)
    return markdown_table(rows, aligned=True)


def main() -> None:
    args = parse_args()
    choice = choose_device(args.device)
    spec = gpu_spec_of(choice.device)
    print(f"device: {choice.device} ({choice.reason})")
    print(f"peak figures: {spec.name if spec else 'none (the CPU, or a GPU not in the table)'}")
    results = matmul_sweep(args.sizes, DTYPES, choice.device, warmup=WARMUP, repeats=args.repeats)
    print(f"median of {args.repeats} timed runs after {WARMUP} warm-up runs\n")
    print(format_table(results, spec))


if __name__ == "__main__":
    main()
