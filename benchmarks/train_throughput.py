"""Training throughput: llmlab.train against a bare PyTorch loop and the Hugging Face Trainer;
with --recipes, Lab 03's smoke recipe against the one it replaced, trained in full.

    python benchmarks/train_throughput.py [--rounds 3] [--steps 8] [--no-compile]
    python benchmarks/train_throughput.py --recipes

Same model shape (GPT-2 style, 4 layers, width 256, 4 heads), same data (Lab 01's smoke shards),
sequence 256, batch 8. Every variant runs `--steps` steps per round and the rounds alternate
between variants, so a slow spell of this shared machine hits them all alike. A step's time is
the interval between the ends of consecutive steps (everything the loop does is inside it);
the table shows the median over all rounds after each variant's first (warm-up) round.

MFU is measured against this machine's own matmul peak in the dtype the matmuls run in
(llmlab.matmul.measure_matmul), since a CPU has no datasheet figure here.
"""

import argparse
import statistics
import tempfile
import time
from dataclasses import replace

import torch
import torch.nn.functional as F
from torch.utils.data import IterableDataset
from transformers import Trainer as HFTrainer
from transformers import TrainerCallback, TrainingArguments

from llmlab.data import prepare_default_dataset
from llmlab.data.loaders import RandomWindows
from llmlab.data.pipeline import PROFILE_SPECS, prepare_dataset
from llmlab.data.shards import read_tokens
from llmlab.device import choose_dtype
from llmlab.evaluate import (
    bits_per_byte,
    compressor_bits_per_byte,
    held_out_windows,
    score_tokens,
    token_byte_lengths,
)
from llmlab.matmul import measure_matmul
from llmlab.models import build_model, preset, training_flops_per_token
from llmlab.recipes import artifacts_dir, lab03_config
from llmlab.tables import markdown_table
from llmlab.timing import warn_if_busy
from llmlab.train import TrainConfig, Trainer

SEQ, BATCH = 256, 8


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=8, help="timed steps per variant and round")
    parser.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    parser.add_argument("--recipes", action="store_true",
                        help="train Lab 03's smoke recipe and the old one in full (about 6 min)")
    return parser.parse_args()


class BareLoop:
    """The least a training step can be: forward, loss, backward, AdamW, zero the gradients."""

    def __init__(self, model, data):
        self.model, self.data = model, data
        model.config.use_cache = False  # as llmlab.train does: a key/value cache is for generation
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def run(self, steps: int) -> list[float]:
        ends = [time.perf_counter()]
        for _ in range(steps):
            x, y = self.data.next_batch()
            loss = F.cross_entropy(self.model(x).logits.flatten(0, 1), y.flatten())
            loss.backward()
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            loss.item()  # like any real loop, look at the loss
            ends.append(time.perf_counter())
        return intervals(ends)


class LlmlabLoop:
    """llmlab.train's Trainer; each round extends max_steps and calls fit() again."""

    def __init__(self, model, data, **settings):
        self.ends: list[float] = []
        config = TrainConfig(
            micro_batch_size=BATCH,
            seq_len=SEQ,
            device="cpu",
            log_interval=1,
            eval_interval=10**9,
            progress=False,
            **settings,
        )
        self.trainer = Trainer(model, config, data, callbacks=[self.clock])

    def clock(self, metrics) -> None:
        self.ends.append(time.perf_counter())

    def run(self, steps: int) -> list[float]:
        self.ends = [time.perf_counter()]
        self.trainer.config.max_steps = self.trainer.step + steps
        self.trainer.fit()
        return intervals(self.ends)


class WindowDataset(IterableDataset):
    """Single examples for the HF Trainer; it shifts the labels itself, so labels = input_ids."""

    def __init__(self, data):
        self.data = data

    def __iter__(self):
        while True:
            x, y = self.data.next_batch()
            for row in torch.cat([x, y[:, -1:]], dim=1):  # seq + 1 tokens: seq predictions
                yield {"input_ids": row, "labels": row}


class StepClock(TrainerCallback):
    def __init__(self):
        self.ends = []

    def on_step_end(self, args, state, control, **kwargs):
        self.ends.append(time.perf_counter())


class HFLoop:
    """The Hugging Face Trainer on the same model and data, a fresh train() per round."""

    def __init__(self, model, data, bf16: bool):
        self.model, self.dataset, self.bf16 = model, WindowDataset(data), bf16
        model.config.use_cache = False  # the same work as the other variants
        self.folder = tempfile.TemporaryDirectory(prefix="hf-trainer-")  # removed with self

    def run(self, steps: int) -> list[float]:
        clock = StepClock()
        args = TrainingArguments(
            output_dir=self.folder.name,
            max_steps=steps + 1,
            learning_rate=1e-3,
            per_device_train_batch_size=BATCH,
            bf16=self.bf16,
            use_cpu=True,
            report_to=[],
            save_strategy="no",
            logging_strategy="no",
            disable_tqdm=True,
            dataloader_num_workers=0,
        )
        HFTrainer(
            model=self.model, args=args, train_dataset=self.dataset, callbacks=[clock]
        ).train()
        return intervals(clock.ends)  # the first train() step's setup is not in an interval


def intervals(ends: list[float]) -> list[float]:
    return [b - a for a, b in zip(ends, ends[1:], strict=False)]


# Lab 03's smoke recipe until the model had to learn enough to show the later labs' effects: an
# 8192-token vocabulary, one pass over the smoke subset; it barely beat gzip on held-out text.
OLD_SMOKE = {"vocab_size": 8192, "max_steps": 300, "micro_batch_size": 8, "warmup_steps": 30}


def held_out_bits_per_byte(model, dataset) -> float:
    """Bits per byte over the whole validation split (consecutive windows of 128 tokens)."""
    windows = held_out_windows(read_tokens(dataset.val), 128)
    lengths = token_byte_lengths(dataset.load_tokenizer())
    return bits_per_byte(score_tokens(model, windows), windows, lengths)


def compare_recipes() -> None:
    """Train the old and today's smoke recipe in full; tokens/s and held-out bits per byte."""
    rows = []
    for name, changes in [("old smoke recipe", OLD_SMOKE), ("Lab 03's smoke recipe", {})]:
        changes = dict(changes)
        vocab = changes.pop("vocab_size", PROFILE_SPECS["smoke"].vocab_size)
        spec = replace(PROFILE_SPECS["smoke"], vocab_size=vocab)
        dataset = prepare_dataset(artifacts_dir(), spec)
        config = lab03_config("smoke", progress=False, eval_interval=10**9, **changes)
        data = RandomWindows(dataset.train, config.seq_len, config.micro_batch_size,
                             tokenizer=dataset.fingerprint, seed=0)
        model = build_model(preset("tiny", vocab_size=dataset.vocab_size))
        start = time.perf_counter()
        Trainer(model, config, data).fit()
        seconds = time.perf_counter() - start
        tokens = config.max_steps * config.micro_batch_size * config.seq_len
        rows.append({
            "recipe": name, "vocabulary": vocab,
            "steps x batch": f"{config.max_steps} x {config.micro_batch_size} x {config.seq_len}",
            "seconds": f"{seconds:.0f}", "tokens/s": f"{tokens / seconds:,.0f}",
            "held-out bits/byte": f"{held_out_bits_per_byte(model, dataset):.3f}",
        })
    text = dataset.load_tokenizer().decode(read_tokens(dataset.val), skip_special_tokens=True)
    compressors = compressor_bits_per_byte(text.encode("utf-8"))
    print(markdown_table(rows))
    print("the same held-out bytes: " + ", ".join(f"{k} {v:.3f}" for k, v in compressors.items())
          + " bits per byte")
    warn_if_busy()


def main() -> None:
    args = parse_args()
    if args.recipes:
        compare_recipes()
        return
    torch.manual_seed(0)
    dataset = prepare_default_dataset(artifacts_dir(), "smoke")
    # context SEQ + 1: the HF Trainer gets rows of SEQ + 1 tokens (it shifts labels itself).
    shape = preset("tiny", vocab_size=dataset.vocab_size, context=SEQ + 1)
    flops_per_token = training_flops_per_token(shape, SEQ).total

    def data(seed: int) -> RandomWindows:
        return RandomWindows(dataset.train, SEQ, BATCH, tokenizer=dataset.fingerprint, seed=seed)

    auto = choose_dtype("cpu").name
    variants = {
        "bare loop, fp32": BareLoop(build_model(shape), data(1)),
        "llmlab, fp32, no clipping": LlmlabLoop(
            build_model(shape), data(2), dtype="fp32", grad_clip=None
        ),
        f"llmlab, defaults ({auto})": LlmlabLoop(build_model(shape), data(3)),
        f"HF Trainer, {auto}": HFLoop(build_model(shape), data(4), bf16=auto == "bf16"),
    }
    if not args.no_compile:
        variants[f"llmlab, {auto} + compile"] = LlmlabLoop(
            build_model(shape), data(5), compile=True
        )
    times: dict[str, list[float]] = {name: [] for name in variants}
    for round_number in range(args.rounds + 1):  # round 0 warms up (and compiles)
        for name, variant in variants.items():
            step_times = variant.run(args.steps)
            if round_number > 0:
                times[name] += step_times
        print(f"round {round_number} done", flush=True)

    peaks = {
        dtype: measure_matmul(1024, dtype, "cpu", repeats=10).tflops * 1e12
        for dtype in ("fp32", "bf16")
    }
    base = statistics.median(times["bare loop, fp32"])
    print(f"\nmodel: {shape}")
    print(
        f"sequence {SEQ}, batch {BATCH}, {flops_per_token / 1e6:.1f} MFLOPs per token; "
        f"matmul peak here: fp32 {peaks['fp32'] / 1e12:.3f}, bf16 {peaks['bf16'] / 1e12:.3f} "
        f"TFLOP/s (n=1024)\n"
    )
    rows = []
    for name, samples in times.items():
        step = statistics.median(samples)
        tokens_per_s = SEQ * BATCH / step
        peak = peaks["bf16" if "bf16" in name else "fp32"]
        rows.append({"variant": name, "ms/step": f"{step * 1e3:.1f}",
                     "tokens/s": f"{tokens_per_s:,.0f}", "vs bare fp32": f"{base / step:.2f}x",
                     "MFU": f"{tokens_per_s * flops_per_token / peak:.1%}"})
    print(markdown_table(rows, aligned=True))

if __name__ == "__main__":
    main()
