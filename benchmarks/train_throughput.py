"""Training throughput: llmlab.train against a bare PyTorch loop and the Hugging Face Trainer.

    python benchmarks/train_throughput.py [--rounds 3] [--steps 8] [--no-compile]

Same model shape (GPT-2 style, 4 layers, width 256, 4 heads), same data (Lab 01's smoke shards),
sequence 256, batch 8. Every variant runs `--steps` steps per round and the rounds alternate
between variants, so a slow spell of this shared machine hits them all alike. A step's time is
the interval between the ends of consecutive steps (everything the loop does is inside it);
the table shows the median over all rounds after each variant's first (warm-up) round.

MFU is measured against this machine's own matmul peak in the dtype the matmuls run in
(llmlab.bench.measure_matmul), since a CPU has no datasheet figure here.
"""

import argparse
import statistics
import tempfile
import time

import torch
import torch.nn.functional as F
from torch.utils.data import IterableDataset
from transformers import Trainer as HFTrainer
from transformers import TrainerCallback, TrainingArguments

from llmlab.bench import measure_matmul
from llmlab.course import artifacts_dir
from llmlab.data import prepare_default_dataset
from llmlab.data.loaders import RandomWindows
from llmlab.device import choose_dtype
from llmlab.models import build_model, preset, training_flops_per_token
from llmlab.train import TrainConfig, Trainer

SEQ, BATCH = 256, 8


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=8, help="timed steps per variant and round")
    parser.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
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
        self.folder = tempfile.mkdtemp(prefix="hf-trainer-")

    def run(self, steps: int) -> list[float]:
        clock = StepClock()
        args = TrainingArguments(
            output_dir=self.folder,
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


def main() -> None:
    args = parse_args()
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
    print(f"{'variant':<30} {'ms/step':>8} {'tokens/s':>9} {'vs bare fp32':>13} {'MFU':>6}")
    for name, samples in times.items():
        step = statistics.median(samples)
        tokens_per_s = SEQ * BATCH / step
        peak = peaks["bf16" if "bf16" in name else "fp32"]
        mfu = tokens_per_s * flops_per_token / peak
        print(f"{name:<30} {step * 1e3:8.1f} {tokens_per_s:9,.0f} {base / step:12.2f}x {mfu:6.1%}")


if __name__ == "__main__":
    main()
