"""Lab 03's model in every format of Lab 07, in one table: perplexity on held-out windows, bits per
weight of the block matrices (scales and zero points counted), the size of the files each variant
would ship, and CPU latency; with how long making each variant took.

    python benchmarks/quant_table.py [--profile smoke] [--windows 8] [--calibration 4]

Lab 03's model is loaded from the course's artifacts (trained first if missing: about 3 minutes
at smoke). Calibration batches for GPTQ come from the training shards, windows from validation.
"""

import argparse
import copy
import time

import torch

from llmlab.course.pretrained import trained_model
from llmlab.data.shards import read_tokens
from llmlab.evaluate import held_out_windows, size_on_disk
from llmlab.quant import (
    Variant,
    fake_quant_variant,
    float_variant,
    int8_bits_per_weight,
    int8_model,
    nf4_bits_per_weight,
    nf4_model,
    quant_rows,
    quant_table,
    quantize_model,
    torch_save_bytes,
)
from llmlab.recipes import lab03_config, lab03_data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="smoke")
    parser.add_argument("--windows", type=int, default=8, help="held-out windows to score")
    parser.add_argument("--calibration", type=int, default=4, help="GPTQ batches of 8 windows")
    parser.add_argument("--group-size", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5, help="timed forward passes per variant")
    args = parser.parse_args()

    config = lab03_config(args.profile)
    dataset = lab03_data(args.profile, config).dataset
    model, _ = trained_model(args.profile, progress=False)
    model.eval()
    val_ids = read_tokens(dataset.val, tokenizer=dataset.fingerprint)
    windows = held_out_windows(val_ids, config.seq_len, args.windows)
    needed = args.calibration * 8 * config.seq_len
    train = torch.as_tensor(read_tokens(dataset.train, tokenizer=dataset.fingerprint)[:needed])
    calibration = list(train.view(args.calibration, 8, config.seq_len))

    seconds = {}

    def timed(name, make):
        start = time.perf_counter()
        result = make()
        seconds[name] = time.perf_counter() - start
        return result

    variants = [float_variant("fp32", model),
                float_variant("bf16", copy.deepcopy(model).to(torch.bfloat16))]
    int8 = timed("int8 (torchao)", lambda: int8_model(model, "weight-only"))
    variants.append(Variant("int8 (torchao, weight-only)", int8, int8_bits_per_weight(int8),
                            torch_save_bytes(int8)))
    for method, name in (("rtn", "RTN-4"), ("gptq", "GPTQ-4 (reference)")):
        quantized = copy.deepcopy(model)
        report = timed(name, lambda q=quantized, m=method: quantize_model(
            q, m, calibration if m == "gptq" else None, bits=4,
            group_size=args.group_size))
        variants.append(fake_quant_variant(f"{name} g{args.group_size}", quantized, report))
    nf4 = timed("NF4 (bitsandbytes)", lambda: nf4_model(model))
    variants.append(Variant("NF4 (bitsandbytes)", nf4, nf4_bits_per_weight(nf4),
                            size_on_disk(nf4)))

    start = time.perf_counter()
    rows = quant_rows(variants, windows, repeats=args.repeats)
    print(f"profile {args.profile}: {len(windows)} windows of {config.seq_len} tokens, "
          f"measured in {time.perf_counter() - start:.1f} s")
    print(quant_table(rows))
    print("seconds to make each variant:", {k: round(v, 2) for k, v in seconds.items()})


if __name__ == "__main__":
    main()
