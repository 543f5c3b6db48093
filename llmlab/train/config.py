"""The trainer's settings: one dataclass, checked when it is made."""

from dataclasses import asdict, dataclass, fields
from pathlib import Path

from llmlab.distributed.data_parallel import STRATEGIES
from llmlab.memory.optimizers import TRAINER_OPTIMIZERS

SCHEDULES = ("cosine", "constant", "cyclical")
DTYPES = ("auto", "fp32", "bf16", "fp16")
NAN_POLICIES = ("stop", "skip")


@dataclass
class TrainConfig:
    """Every setting of a training run, checked when it is made (a bad value is refused at once,
    naming the field, rather than minutes into a run). The groups, in the order below:

    - how much to train: `max_steps` optimizer steps, each over `grad_accum_steps` micro-batches
      of `micro_batch_size` sequences of `seq_len` tokens per process;
    - the optimizer: AdamW (or bitsandbytes' 8-bit AdamW, or Muon for the blocks' matrices
      with AdamW for the rest), its learning rate, weight decay (matrices only) and betas, and
      `grad_clip`, the largest global gradient norm allowed;
    - the learning-rate schedule: cosine (a linear warm-up over `warmup_steps`, then down to
      lr * min_lr_ratio at max_steps), constant, or cyclical (triangles of `cycle_steps` between
      lr * min_lr_ratio and lr);
    - speed and memory: `dtype` (auto picks bf16, fp16 with a grad scaler, or fp32 for the
      device), gradient checkpointing (recompute activations in backward), torch.compile;
    - several processes: `parallel`, how the ranks share the model ("ddp", "zero1", "fsdp");
      the trainer runs data parallel only, so in the planner's terms (llmlab.scale's one layout
      type) a run on N processes is Parallel(dp=N, zero=ZERO_STAGE[parallel],
      micro_batch=micro_batch_size, accumulation=grad_accum_steps,
      checkpointing=gradient_checkpointing, seq=seq_len), ZERO_STAGE being
      llmlab.distributed.data_parallel's (ddp 0, zero1 1, fsdp 3);
    - evaluation, logging and checkpoints: every `eval_interval` steps the loss on
      `eval_batches` fixed validation batches (and a sample from `sample_prompt`); metrics every
      `log_interval` steps; with `out_dir`, metrics.jsonl/metrics.csv and a checkpoint every
      `checkpoint_interval` steps and at the end, the last `keep_last` (and the best) kept;
    - the rest: what a NaN loss does (`nan_policy`), the seed, the device, the progress bar, and
      when a rank counts as a straggler.

    `to_dict`/`from_dict` give the JSON form saved in each checkpoint's meta.json.
    """

    # How much to train: an optimizer step sees micro_batch_size * grad_accum_steps sequences
    # per process, times the number of processes.
    max_steps: int = 200
    micro_batch_size: int = 8
    grad_accum_steps: int = 1
    seq_len: int = 256
    # Optimizer: "adamw", "adam-8bit" or "muon", with decoupled weight decay on matrices only
    # (see optim.py); "sgd-momentum" and "adam" add weight_decay * weight to the gradient instead.
    optimizer: str = "adamw"
    lr: float = 1e-3
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float | None = 1.0  # max global gradient norm; None turns clipping off
    # Learning-rate schedule (see schedule.py).
    schedule: str = "cosine"
    warmup_steps: int = 20
    min_lr_ratio: float = 0.1  # the cosine decays to lr * min_lr_ratio
    cycle_steps: int = 100  # cyclical: length of one triangle, up and down
    # Speed and memory switches.
    dtype: str = "auto"  # auto: llmlab.device.choose_dtype (bf16, fp16 + scaler, or fp32)
    gradient_checkpointing: bool = False
    compile: bool = False
    # How several processes share the work (ignored in one process): "ddp" replicates
    # everything, "zero1" shards the optimizer states, "fsdp" shards weights, gradients and
    # states (llmlab.distributed.data_parallel).
    parallel: str = "ddp"
    # Evaluation, logging and checkpoints.
    eval_interval: int = 50
    eval_batches: int = 8
    log_interval: int = 10
    sample_prompt: str | None = None  # generate a short sample at each evaluation when set
    out_dir: Path | None = None  # metrics and checkpoints; None keeps everything in memory
    checkpoint_interval: int = 0  # 0: only at the end (when out_dir is set)
    keep_last: int = 2
    tensorboard: bool = False
    nan_policy: str = "stop"  # stop: raise and keep the last good checkpoint; skip: drop the step
    seed: int = 1337
    device: str | None = None  # None: the best device present (llmlab.device.choose_device)
    progress: bool = True
    # Several processes: a rank is flagged as a straggler at a logged step when it made the step
    # this fraction longer than the median rank's pace would have (metrics.flag_stragglers).
    straggler_threshold: float = 0.2

    def __post_init__(self) -> None:
        positive = (
            "max_steps",
            "micro_batch_size",
            "grad_accum_steps",
            "seq_len",
            "eval_interval",
            "eval_batches",
            "log_interval",
            "keep_last",
            "cycle_steps",
        )
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(
                    f"TrainConfig.{name} must be at least 1, got {getattr(self, name)}"
                )
        for name, value, allowed in [
            ("schedule", self.schedule, SCHEDULES),
            ("dtype", self.dtype, DTYPES),
            ("optimizer", self.optimizer, TRAINER_OPTIMIZERS),
            ("nan_policy", self.nan_policy, NAN_POLICIES),
            ("parallel", self.parallel, STRATEGIES),
        ]:
            if value not in allowed:
                raise ValueError(f"TrainConfig.{name}={value!r} is not one of {allowed}")
        if self.lr <= 0 or not 0 <= self.min_lr_ratio <= 1:
            raise ValueError(
                f"need lr > 0 and 0 <= min_lr_ratio <= 1, got {self.lr}, {self.min_lr_ratio}"
            )
        if self.warmup_steps < 0 or self.checkpoint_interval < 0:
            raise ValueError("warmup_steps and checkpoint_interval cannot be negative")
        if not 0 < self.straggler_threshold < float("inf"):
            raise ValueError(
                "straggler_threshold must be a positive fraction such as 0.2 (20 % slower than "
                f"the median rank), got {self.straggler_threshold}"
            )
        if self.grad_clip is not None and self.grad_clip <= 0:
            raise ValueError(f"grad_clip must be positive or None, got {self.grad_clip}")
        if self.parallel != "ddp" and self.optimizer == "adam-8bit":
            raise ValueError(
                f"parallel={self.parallel!r} shards a torch optimizer; bitsandbytes' 8-bit AdamW "
                "is not one: use optimizer='adamw', or parallel='ddp'"
            )
        if self.parallel == "zero1" and self.optimizer in ("sgd-momentum", "adam"):
            raise ValueError(
                f"parallel='zero1' shards AdamW's or Muon's states; optimizer={self.optimizer!r} "
                "would keep all of its states on every rank: use optimizer='adamw' or 'muon', or "
                "parallel='ddp'"
            )
        if self.out_dir is not None:
            self.out_dir = Path(self.out_dir)

    def to_dict(self) -> dict:
        """JSON-ready: paths as strings, tuples as lists."""
        data = asdict(self)
        data["out_dir"] = None if self.out_dir is None else str(self.out_dir)
        data["betas"] = list(self.betas)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "TrainConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown TrainConfig fields: {', '.join(unknown)}")
        data = dict(data)
        if "betas" in data:
            data["betas"] = tuple(data["betas"])
        return cls(**data)
