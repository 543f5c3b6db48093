"""The training loop: mixed precision, gradient accumulation, clipping, schedules, evaluation and
metrics; one process or many (DDP, ZeRO-1 or FSDP2 under torchrun). Saving and resuming are the
checkpointing component's (llmlab.train.checkpointer), which the trainer calls."""

import contextlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

import torch
import torch.distributed as dist
from tqdm.auto import tqdm

from llmlab.device import (
    TORCH_DTYPES,
    DtypeChoice,
    autocast,
    choose_device,
    choose_dtype,
    seed_everything,
)
from llmlab.distributed import dist_info
from llmlab.distributed.data_parallel import wrap_model
from llmlab.evaluate.next_token import perplexity_of
from llmlab.matmul import mfu
from llmlab.models import (
    enable_activation_checkpointing,
    eval_mode,
    generate_continuation,
    next_token_loss,
)
from llmlab.train.checkpointer import Checkpointer
from llmlab.train.config import TrainConfig
from llmlab.train.metrics import (
    DeviceMonitor,
    MetricsWriter,
    StepMetrics,
    datasheet_peak_flops,
    flag_stragglers,
    gather_rank_readings,
    measured_peak_flops,
)
from llmlab.train.optim import build_optimizer
from llmlab.train.schedule import learning_rate

FIXED_DTYPES = {
    "fp32": DtypeChoice(TORCH_DTYPES["fp32"], False, "asked for fp32"),
    "bf16": DtypeChoice(TORCH_DTYPES["bf16"], False, "asked for bf16"),
    "fp16": DtypeChoice(TORCH_DTYPES["fp16"], True, "asked for fp16 (with a grad scaler)"),
}
MAX_SKIPPED_IN_A_ROW = 10


class BatchSource(Protocol):
    """Where batches come from: (inputs, targets) token ids, each (micro_batch, seq_len), with
    targets the inputs shifted by one. Its state is the data position saved in checkpoints."""

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]: ...
    def state_dict(self) -> dict: ...
    def load_state_dict(self, state: dict) -> None: ...


class TimedBatches:
    """A batch source that adds up the seconds spent in its next_batch (`seconds`).

    That time is each rank's straggler signal in a multi-process run. Not the step's time: every
    collective waits for the slowest rank, so all ranks' steps last as long as the slowest one's.
    Not the forward and backward either: FSDP all-gathers weights in the forward and DDP
    all-reduces gradients in the backward, so their time includes waiting for the others. A
    batch fetch never waits on another rank: its time is the rank's own. It catches what a host
    causes (a slow disk or loader, a busy CPU); a slow GPU shows only in its kernels' times
    (CUDA events around the compute), which this trainer does not take.
    """

    def __init__(self, source: BatchSource):
        self.source, self.seconds = source, 0.0

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        start = time.perf_counter()
        batch = self.source.next_batch()
        self.seconds += time.perf_counter() - start
        return batch

    def state_dict(self) -> dict:
        return self.source.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.source.load_state_dict(state)


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite."""


@dataclass
class TrainResult:
    history: list[StepMetrics]
    final_step: int
    val_loss: float | None
    checkpoint: Path | None

    @property
    def perplexity(self) -> float | None:
        return perplexity_of(self.val_loss)


class Trainer:
    """Trains a language model on next-token prediction: `Trainer(model, config, train_data,
    val_data).fit()` runs `config.max_steps` optimizer steps and returns a TrainResult.

    Built once: the device and dtype are chosen, everything is seeded, the model is wrapped for
    several processes (DDP, ZeRO-1 or FSDP2 under torchrun; as it is in one), and the optimizer,
    the fp16 grad scaler and the checkpointing component (`self.checkpointer`) are made.

    One step of `fit` (`train_step`, read it beside nanoGPT's train.py), in order:
    1. set this step's learning rate from the schedule;
    2. for each of the grad_accum_steps micro-batches: forward under autocast, loss / k, scaled
       backward (the ranks' gradients are averaged on the last micro-batch only);
    3. unscale the gradients, measure their global norm and clip it to grad_clip;
    4. the optimizer step (skipped on every rank when the mean loss is not finite), the grad
       scaler's update, gradients cleared.
    Around the step: every eval_interval steps the validation loss (and a sample), every
    log_interval steps the metrics (tokens/s, MFU, memory, stragglers).

    Checkpointing (with an out_dir) happens in three places, all in `self.checkpointer`
    (llmlab.train.checkpointer): before the first step (rank 0 locks out_dir and chooses the
    checkpoint to resume from: with resume=True the newest intact one), on resuming (weights,
    optimizer, scaler, each rank's RNG and data position), and after every
    checkpoint_interval-th step and the last one (`save`). A run killed at any point and resumed
    ends with the same weights, bit for bit, as one never stopped (tests/train/test_loop_restart.py
    kills runs with SIGKILL to check it).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        config: TrainConfig,
        train_data: BatchSource,
        val_data: BatchSource | None = None,
        *,
        tokenizer=None,
        flops_per_token: float | None = None,
        peak_flops: float | None = None,
        measure_peak: bool = False,
        callbacks: Sequence[Callable[[StepMetrics], None]] = (),
    ):
        """peak_flops: one device's FLOP/s for MFU; None takes the GPU's datasheet peak. Where
        there is none (a CPU), measure_peak=True measures the matmul rate here (about a second),
        so the run still shows its MFU."""
        self.config, self.tokenizer = config, tokenizer
        self.train_data = TimedBatches(train_data)
        self.dist = dist_info()
        self.device = choose_device(config.device).device
        if self.device.type == "cuda" and self.dist.distributed:
            self.device = torch.device("cuda", self.dist.local_rank)
        auto = config.dtype == "auto"
        self.precision = choose_dtype(self.device) if auto else FIXED_DTYPES[config.dtype]
        seed_everything(config.seed)
        self.model = model.to(self.device)
        if hasattr(getattr(model, "config", None), "use_cache"):
            model.config.use_cache = False  # a key/value cache only helps generation
        if config.gradient_checkpointing:
            enable_activation_checkpointing(self.model)
        # One process trains the model as it is; several share it as config.parallel says.
        self.strategy = config.parallel if self.dist.distributed else "none"
        if self.strategy == "fsdp" and self.precision.use_grad_scaler:
            raise ValueError(
                "fp16 with parallel='fsdp' needs a sharded grad scaler, which this trainer does "
                "not have: use dtype='bf16' (no scaler needed), or parallel='ddp'"
            )
        # FSDP shards self.model in place (the same object); DDP wraps it.
        self.forward_model = wrap_model(self.model, self.strategy)
        if config.compile:
            self.forward_model = torch.compile(self.forward_model)
        self.optimizer = build_optimizer(self.model, config, self.strategy)
        # Loss scaling keeps small fp16 gradients from underflowing; a no-op otherwise.
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.precision.use_grad_scaler)
        self.checkpointer = Checkpointer(config, self.model, self.optimizer, self.scaler,
                                         self.train_data, self.strategy, self.dist)
        self.flops_per_token = flops_per_token
        self.peak_flops = peak_flops or datasheet_peak_flops(self.device, self.precision.name)
        if self.peak_flops is None and measure_peak:
            self.peak_flops = measured_peak_flops(self.device, self.precision.name)
        self.callbacks = list(callbacks)
        self.monitor = DeviceMonitor(self.device)
        self.step, self.tokens_seen, self.skipped_in_a_row = 0, 0, 0
        # Fixed validation batches: every evaluation sees the same tokens, so curves compare.
        self.val_batches = []
        if val_data is not None:
            self.val_batches = [val_data.next_batch() for _ in range(config.eval_batches)]

    @property
    def tokens_per_step(self) -> int:
        c = self.config
        return c.micro_batch_size * c.grad_accum_steps * c.seq_len * self.dist.world_size

    # ------------------------------------------------------------------ the step

    def train_step(self) -> tuple[torch.Tensor, torch.Tensor]:
        """One optimizer step over grad_accum_steps micro-batches: (mean loss, grad norm)."""
        k = self.config.grad_accum_steps
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate(self.step, self.config)
        total_loss = torch.zeros((), device=self.device)
        for micro_step in range(k):
            inputs, targets = (t.to(self.device) for t in self.train_data.next_batch())
            # DDP all-reduces gradients during backward; only the last micro-step needs that.
            last = micro_step == k - 1
            with self._gradient_sync(last):
                with autocast(self.device, self.precision.dtype):
                    loss = next_token_loss(self.forward_model, inputs, targets)
                # Divide by k so the summed gradients equal the gradient of the mean loss.
                self.scaler.scale(loss / k).backward()
            total_loss += loss.detach() / k
        self.scaler.unscale_(self.optimizer)  # clip the true gradients, not the scaled ones
        max_norm = self.config.grad_clip or math.inf
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
        if hasattr(grad_norm, "full_tensor"):  # FSDP: a norm over shards, summed over ranks
            grad_norm = grad_norm.full_tensor()
        # Averaged first, so a NaN on any rank makes every rank skip the same step.
        mean_loss = self._mean_over_ranks(total_loss)
        if torch.isfinite(mean_loss):
            self.scaler.step(self.optimizer)  # skips the step itself if fp16 grads overflowed
        # Also after a dropped step: fp16 lowers its scale, and unscale_ may run again next step.
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        return mean_loss, grad_norm

    def _gradient_sync(self, sync: bool):
        """Communicate this backward's gradients only when `sync` (the last micro-step)."""
        if self.strategy in ("ddp", "zero1") and not sync:
            return self.forward_model.no_sync()
        if self.strategy == "fsdp":
            # FSDP2's switch: without sync, keep unsharded gradients and skip the reduce-scatter.
            self.model.set_requires_gradient_sync(sync)
        return contextlib.nullcontext()

    def _mean_over_ranks(self, value: torch.Tensor) -> torch.Tensor:
        if self.dist.distributed:
            value = value.clone()
            dist.all_reduce(value)  # gloo has no AVG: sum, then divide
            value /= self.dist.world_size
        return value

    @torch.no_grad()
    def evaluate(self) -> float | None:
        """Mean loss over the fixed validation batches (None without validation data)."""
        if not self.val_batches:
            return None
        total = torch.zeros((), device=self.device)
        with eval_mode(self.model):  # no dropout
            for inputs, targets in self.val_batches:
                with autocast(self.device, self.precision.dtype):
                    total += next_token_loss(
                        self.model, inputs.to(self.device), targets.to(self.device)
                    )
        return self._mean_over_ranks(total / len(self.val_batches)).item()

    @torch.no_grad()
    def sample(self, prompt: str, max_new_tokens: int = 40) -> str | None:
        """A short generated continuation (needs a Hugging Face model and a tokenizer)."""
        if self.tokenizer is None or not hasattr(self.model, "generate"):
            return None
        with torch.random.fork_rng(devices=[]):  # sampling must not shift the training RNG
            prompt_ids, new = generate_continuation(
                self.model, self.tokenizer, prompt, seed=self.config.seed,
                max_new_tokens=max_new_tokens, do_sample=True, top_k=50,
            )
        # decoded as one piece with its prompt: the text a reader would see
        return self.tokenizer.decode(torch.cat([prompt_ids, new]), skip_special_tokens=True)

    # ------------------------------------------------------------------ checkpoints

    def save(self, val_loss: float | None = None) -> Path | None:
        """Checkpoint the whole training state at this step (self.checkpointer.save)."""
        return self.checkpointer.save(self.step, self.tokens_seen, val_loss)

    def resume(self, checkpoint: Path | None = None) -> bool:
        """Continue from `checkpoint`, or the newest one in out_dir that verifies; False when
        there is none. Every rank takes its own data position and RNG state from it."""
        checkpoint = checkpoint or self.checkpointer.newest_verified()
        if not checkpoint:
            return False
        self.step, self.tokens_seen = self.checkpointer.load(checkpoint)
        return True

    # ------------------------------------------------------------------ the run

    def fit(self, resume: bool = False, fresh: bool = False) -> TrainResult:
        """Train until max_steps.

        resume=True first continues from the newest checkpoint in out_dir. An out_dir that holds
        an earlier run's checkpoints is never restarted silently: without one to resume,
        fresh=True must say to start again at step 1 (the earlier checkpoints are set aside,
        never overwritten). The metrics are appended to, never truncated: a restart record
        marks where this run takes over (llmlab.train.metrics). One run at a time: rank 0 holds
        out_dir's lock until the run ends, and a second run there is refused (RunFolderBusy).
        """
        try:
            checkpoint = self.checkpointer.plan_start(resume, fresh)
            if checkpoint is not None:
                self.resume(checkpoint)
            if self.step >= self.config.max_steps:
                return self._already_complete(checkpoint)
            return self._train(checkpoint)
        finally:
            self.checkpointer.release()

    def _train(self, resumed_from: Path | None) -> TrainResult:
        c = self.config
        writer = MetricsWriter(c.out_dir if self.dist.is_main else None)
        if writer.continues_history:  # an earlier attempt's records: say where this one goes on
            writer.write_restart(self.step, resumed_from)
        tensorboard = self._tensorboard() if c.tensorboard and self.dist.is_main else None
        bar = tqdm(
            total=c.max_steps,
            initial=self.step,
            desc="train",
            disable=not (c.progress and self.dist.is_main),
        )
        val_loss, checkpoint = None, None
        self.model.train()
        try:
            while self.step < c.max_steps:
                metrics = self._timed_step()
                self.step += 1
                bar.update(1)
                at_end = self.step == c.max_steps
                if self.step % c.eval_interval == 0 or at_end:
                    val_loss = metrics.val_loss = self.evaluate()
                    self._print_sample()
                if self.step % c.log_interval == 0 or at_end or metrics.val_loss is not None:
                    self._add_rank_readings(metrics)  # every rank logs the same steps
                    self._log(metrics, writer, tensorboard, bar)
                every = c.checkpoint_interval
                if c.out_dir is not None and (at_end or (every and self.step % every == 0)):
                    checkpoint = self.save(metrics.val_loss)
        finally:
            bar.close()
            writer.close()
            if tensorboard is not None:
                tensorboard.close()
        return TrainResult(writer.history, self.step, val_loss, checkpoint)

    def _already_complete(self, checkpoint: Path | None) -> TrainResult:
        """A resumed run that has nothing left to do: say so, and report its validation loss."""
        if self.dist.is_main:
            print(f"the run in {self.config.out_dir} is already complete (step {self.step}, "
                  f"max_steps {self.config.max_steps}): nothing to train. Ask for more steps to "
                  "continue it.", flush=True)
        return TrainResult([], self.step, self.evaluate(), checkpoint)

    def _timed_step(self) -> StepMetrics:
        self.train_data.seconds = 0.0
        start = time.perf_counter()
        loss, grad_norm = self.train_step()
        loss_value = loss.item()  # waits for the GPU, so the time below is the step's real time
        seconds = time.perf_counter() - start
        skipped = not math.isfinite(loss_value)
        if skipped:
            self._handle_non_finite(loss_value)
        else:
            self.skipped_in_a_row = 0
            self.tokens_seen += self.tokens_per_step
        tokens_per_s = self.tokens_per_step / seconds
        utilization = None
        if self.flops_per_token is not None and self.peak_flops is not None:
            # tokens_per_s counts every process, so the peak is one device's times their number.
            all_devices = self.peak_flops * self.dist.world_size
            utilization = mfu(tokens_per_s, self.flops_per_token, all_devices)
        return StepMetrics(
            step=self.step + 1,
            loss=loss_value,
            lr=learning_rate(self.step, self.config),
            grad_norm=grad_norm.item(),
            tokens_per_s=tokens_per_s,
            tokens_seen=self.tokens_seen,
            step_seconds=seconds,
            data_seconds=self.train_data.seconds,
            mfu=utilization,
            skipped=skipped,
            **self.monitor.read(),
        )

    def _add_rank_readings(self, metrics: StepMetrics) -> None:
        """Every rank's readings and the stragglers among them, into `metrics` (one small
        all_gather; nothing in one process). Every rank must call it at the same steps."""
        metrics.ranks = gather_rank_readings(asdict(metrics))
        if metrics.ranks is not None:
            metrics.stragglers = flag_stragglers(
                metrics.ranks["data_seconds"], metrics.step_seconds,
                self.config.straggler_threshold,
            )

    def _handle_non_finite(self, loss_value: float) -> None:
        self.skipped_in_a_row += 1
        last_good = self.checkpointer.last_good()
        where = f"the last good checkpoint is {last_good}" if last_good else "no checkpoint yet"
        if self.config.nan_policy == "stop" or self.skipped_in_a_row > MAX_SKIPPED_IN_A_ROW:
            raise TrainingDiverged(
                f"loss is {loss_value} at step {self.step + 1}; the step was not applied and "
                f"{where}. Lower the learning rate, check the data, or use bf16 instead of fp16 "
                f"(nan_policy='skip' drops such steps, up to {MAX_SKIPPED_IN_A_ROW} in a row)."
            )

    def _log(self, metrics: StepMetrics, writer: MetricsWriter, tensorboard, bar) -> None:
        if not self.dist.is_main:
            return
        writer.write(metrics)
        bar.set_postfix(loss=f"{metrics.loss:.3f}", tok_s=f"{metrics.tokens_per_s:,.0f}")
        if tensorboard is not None:
            for key in ("loss", "lr", "grad_norm", "tokens_per_s", "val_loss"):
                value = getattr(metrics, key)
                if value is not None:
                    tensorboard.add_scalar(key, value, metrics.step)
        for callback in self.callbacks:
            callback(metrics)

    def _print_sample(self) -> None:
        # FSDP's forward is collective (it all-gathers weights): then every rank generates.
        if self.config.sample_prompt and (self.dist.is_main or self.strategy == "fsdp"):
            text = self.sample(self.config.sample_prompt)
            if text is not None and self.dist.is_main:
                tqdm.write(f"[step {self.step}] {text!r}")

    def _tensorboard(self):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as error:
            raise ImportError(
                "tensorboard=True needs the tensorboard package: "
                "`pip install tensorboard`, or leave it off"
            ) from error
        return SummaryWriter(str(self.config.out_dir / "tensorboard"))
