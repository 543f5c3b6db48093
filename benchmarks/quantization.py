"""GPTQ, the course's reference against GPTQModel's, layer by layer: output error and time.

    python benchmarks/quantization.py [--bits 4] [--group-size 128] [--batches 8]

On a shared CPU, run it with OMP_NUM_THREADS=1: with more math threads than free cores the
times measure the other work on the machine more than the code.

The model is the one Lab 03 trains (llmlab.course.pretrained.trained_model(), trained now if
missing: minutes), and the calibration inputs are windows of Lab 01's corpus. Every Linear /
Conv1D of its blocks is quantized from the same recorded inputs by both implementations, with
the same settings (asymmetric int grid, min/max per group, 1% damping, no act-order). Columns:
the relative output error ||W X - Q X|| / ||W X|| of RTN, the reference and GPTQModel on those
inputs, the reference's error and time as ratios to GPTQModel's, and both times (the
quantization itself: Hessian inverse and column updates, not the accumulation of the Hessian).
The last column is GPTQModel with its default extra, group-aware reordering (GAR), on.
Needs the llmlab package importable (`pip install -e .` from the repository root).
"""

import argparse
import statistics
import time

import torch

from llmlab.course.pretrained import trained_model
from llmlab.prune import prunable_weights
from llmlab.quant import gptq, hessian, record_inputs, rtn
from llmlab.quant.library import library_gptq_layer
from llmlab.quant.model import matrix
from llmlab.recipes import lab03_config, lab03_data
from llmlab.tables import markdown_table
from llmlab.timing import warn_if_busy


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bits", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=128)
    parser.add_argument("--batches", type=int, default=8, help="calibration batches of 8 windows")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per layer (median)")
    return parser.parse_args()


def median_seconds(fn, repeats: int) -> tuple[object, float]:
    """(the last result, the median wall time) of `repeats` calls."""
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return result, statistics.median(times)


def main() -> None:
    args = parse_args()
    warn_if_busy()
    model, _ = trained_model("smoke")
    model.eval()
    config = lab03_config("smoke")
    train = lab03_data("smoke", config).train
    batches = [train.next_batch()[0] for _ in range(args.batches)]
    layers = {name.removesuffix(".weight"): module
              for name, module in prunable_weights(model).items()}  # the blocks' matrices
    inputs = record_inputs(model, layers, batches)
    rows, ref_total, lib_total = [], 0.0, 0.0
    for name, module in layers.items():
        weight = matrix(module).detach().float()
        x = torch.cat(inputs[name])
        exact = x @ weight.T

        def error(w, x=x, exact=exact):
            return float((x @ w.T - exact).norm() / exact.norm())

        h = hessian(inputs[name])
        reference, ref_s = median_seconds(
            lambda w=weight, h=h: gptq(w, h, args.bits, args.group_size), args.repeats)
        library = [library_gptq_layer(weight, inputs[name], args.bits, args.group_size)
                   for _ in range(args.repeats)]
        lib_s = statistics.median(result.seconds for result in library)
        gar = library_gptq_layer(weight, inputs[name], args.bits, args.group_size, group_aware=True)
        ref_error, lib_error = error(reference.dequantize()), error(library[-1].weight)
        ref_total, lib_total = ref_total + ref_s, lib_total + lib_s
        rows.append({
            "layer": name, "shape": "x".join(map(str, weight.shape)),
            "RTN error": f"{error(rtn(weight, args.bits, args.group_size).dequantize()):.4f}",
            "reference error": f"{ref_error:.4f}", "GPTQModel error": f"{lib_error:.4f}",
            "error ratio": f"{ref_error / lib_error:.3f}",
            "GPTQModel + GAR error": f"{error(gar.weight):.4f}",
            "reference ms": f"{ref_s * 1000:.1f}", "GPTQModel ms": f"{lib_s * 1000:.1f}",
            "time ratio": f"{ref_s / lib_s:.2f}",
        })
    print(f"{args.bits}-bit GPTQ, groups of {args.group_size}, {len(batches)} calibration "
          f"batches of {tuple(batches[0].shape)} tokens, on Lab 03's model")
    print(markdown_table(rows))
    ratios = [float(row["error ratio"]) for row in rows]
    print(f"\nerror ratio (reference / GPTQModel): mean {statistics.mean(ratios):.3f}, "
          f"worst {max(ratios):.3f}; total time ratio {ref_total / lib_total:.2f} "
          f"({ref_total * 1000:.0f} ms against {lib_total * 1000:.0f} ms)")


if __name__ == "__main__":
    main()
