"""The trainer's checkpointing component: where a run starts, and saving and resuming it.

The trainer calls it at three points (as torchtitan's trainer calls its CheckpointManager):
- before the first step, `plan_start`: rank 0 locks out_dir (one run at a time) and chooses the
  checkpoint to resume from, or none; every rank follows its choice;
- to resume, `load`: the weights, optimizer and grad-scaler states, and each rank's own data
  position and random state;
- every `checkpoint_interval` steps and at the end, `save`: the same state, written by rank 0
  (an FSDP run's shards by every rank, through torch.distributed.checkpoint).
The files themselves (folders, checksums, best.json, which to keep) are llmlab.train.checkpoint's.
"""

from datetime import UTC, datetime
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from llmlab.distributed import DistInfo
from llmlab.train.checkpoint import (
    SHARDED_DIR,
    CheckpointMismatch,
    capture_rng,
    checkpoint_folders,
    is_sharded,
    load_checkpoint,
    newest_verified_checkpoint,
    restore_rng,
    save_checkpoint,
    sharded_checkpoint_folder,
    sweep_stale_temporaries,
)
from llmlab.train.config import TrainConfig
from llmlab.train.run_folder import RunFolderBusy, RunLock


class EarlierRun(RuntimeError):
    """out_dir holds an earlier run's checkpoints, and nothing said whether to continue it or to
    start again."""


class Checkpointer:
    """Saves and resumes the state of a Trainer's run in out_dir/checkpoints (nothing without an
    out_dir). `train_data` is the trainer's batch source (its position is saved); `strategy` is
    the trainer's ("none", "ddp", "zero1" or "fsdp")."""

    def __init__(self, config: TrainConfig, model: torch.nn.Module,
                 optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler, train_data,
                 strategy: str, dist_info: DistInfo):
        self.config, self.model, self.optimizer, self.scaler = config, model, optimizer, scaler
        self.train_data, self.strategy, self.dist = train_data, strategy, dist_info
        out_dir = config.out_dir
        self.folder = None if out_dir is None else out_dir / "checkpoints"
        # Rank 0 alone holds out_dir's lock (plan_start takes it, release drops it).
        self.lock = RunLock(out_dir) if dist_info.is_main and out_dir is not None else None

    # ------------------------------------------------------------------ saving

    def save(self, step: int, tokens_seen: int, val_loss: float | None = None) -> Path | None:
        """Checkpoint the whole training state (rank 0 writes; the others wait)."""
        if self.folder is None:
            return None
        rank_states = self._gather_rank_states()
        shards = self._save_shards(step) if self.strategy == "fsdp" else None
        if self.strategy == "zero1":
            # Each rank holds 1/N of the AdamW states: gather them on rank 0, which writes them.
            self.optimizer.consolidate_state_dict(to=0)
        path = None
        if self.dist.is_main:
            state = {
                # A sharded run's optimizer states are in its shards (dcp/), not here.
                "optimizer": None if shards else self.optimizer.state_dict(),
                "scaler": self.scaler.state_dict(),
                "ranks": rank_states,
                "tokens_seen": tokens_seen,
            }
            path = save_checkpoint(
                self.folder,
                step,
                self.model,
                state,
                val_loss=val_loss,
                train_config=self.config.to_dict(),
                keep_last=self.config.keep_last,
                shards=shards,
            )
        if self.dist.distributed:
            dist.barrier()
        return path

    def _rank_state(self) -> dict:
        """What differs between processes: each draws its own data windows and random numbers."""
        return {"rng": capture_rng(), "data": self.train_data.state_dict()}

    def _gather_rank_states(self) -> list[dict] | None:
        """Every rank's state, in rank order, on rank 0 (None elsewhere): rank 0 alone writes
        checkpoints, so this works without a file system shared for writing."""
        if not self.dist.distributed:
            return [self._rank_state()]
        states = [None] * self.dist.world_size if self.dist.is_main else None
        dist.gather_object(self._rank_state(), states, dst=0)  # a few KB per rank
        return states

    def _sharded_state(self) -> dict:
        """This rank's shards of the weights and AdamW states, as DCP saves and loads them."""
        model_state, optimizer_state = get_state_dict(self.model, self.optimizer)
        return {"model": model_state, "optimizer": optimizer_state}

    def _save_shards(self, step: int) -> Path:
        """Every rank writes its shards into one new temporary folder that rank 0 names."""
        folder = [None]
        if self.dist.is_main:
            folder = [sharded_checkpoint_folder(self.folder, step)]
        dist.broadcast_object_list(folder, src=0)
        dcp.save(self._sharded_state(), checkpoint_id=folder[0] / SHARDED_DIR)
        return folder[0]

    # ------------------------------------------------------------------ resuming

    def load(self, checkpoint: Path) -> tuple[int, int]:
        """Restore the state saved in `checkpoint` into the model, optimizer, scaler, RNGs and
        this rank's data source; return the (step, tokens_seen) it was saved at."""
        if is_sharded(checkpoint) != (self.strategy == "fsdp"):
            kind = "sharded (fsdp)" if is_sharded(checkpoint) else "unsharded (one weights file)"
            raise CheckpointMismatch(
                f"{checkpoint} is {kind} and this run's strategy is {self.strategy!r}: resume "
                "with the strategy that saved it (meta.json's train_config.parallel), or start "
                "fresh in another out_dir"
            )
        state = load_checkpoint(checkpoint, self.model)
        saved_by = len(state["ranks"])
        if saved_by != self.dist.world_size:
            raise CheckpointMismatch(
                f"{checkpoint} was saved by {saved_by} process(es) and this run has "
                f"{self.dist.world_size}: each process resumes its own data position and random "
                f"state, so resume with {saved_by} (torchrun --nproc_per_node {saved_by}), or "
                f"start fresh in another out_dir"
            )
        if self.strategy == "fsdp":
            self._load_shards(checkpoint)
        else:
            self.optimizer.load_state_dict(state["optimizer"])
        self.scaler.load_state_dict(state["scaler"])
        mine = state["ranks"][self.dist.rank]
        restore_rng(mine["rng"])
        self.train_data.load_state_dict(mine["data"])
        self._say(f"resumed from step {state['step']} (checkpoint {checkpoint})")
        return state["step"], state["tokens_seen"]

    def _load_shards(self, checkpoint: Path) -> None:
        state = self._sharded_state()
        dcp.load(state, checkpoint_id=checkpoint / SHARDED_DIR)  # fills the tensors in place
        set_state_dict(self.model, self.optimizer, model_state_dict=state["model"],
                       optim_state_dict=state["optimizer"])

    def newest_verified(self) -> Path | None:
        """The newest checkpoint whose files match their checksums and that was saved from a model
        like this one; says which were skipped."""
        if self.folder is None:
            return None
        checkpoint, skipped = newest_verified_checkpoint(self.folder, self.model)
        for reason in skipped:
            self._say(reason)
        return checkpoint

    def last_good(self) -> Path | None:
        """The newest checkpoint that verifies, whatever model saved it (for an error message)."""
        return self.folder and newest_verified_checkpoint(self.folder)[0]

    def _say(self, message: str) -> None:
        if self.dist.is_main:
            print(message, flush=True)

    # ------------------------------------------------------------------ the start of a run

    def plan_start(self, resume: bool, fresh: bool) -> Path | None:
        """Rank 0 locks out_dir and chooses where to start; the others follow, so every rank
        loads the same checkpoint or stops with the same error. Call `release` when the run
        ends, however it ends."""
        plan = [None, None]
        if self.lock is not None:
            try:
                self.lock.acquire()
                plan = [self._choose_start(resume, fresh), None]
            except (RunFolderBusy, EarlierRun) as problem:
                plan = [None, problem]
        if self.dist.distributed:
            dist.broadcast_object_list(plan, src=0)
        checkpoint, problem = plan
        if problem is not None:
            raise problem
        return checkpoint

    def release(self) -> None:
        """Drop out_dir's lock (nothing on the other ranks, or when it is not held)."""
        if self.lock is not None:
            self.lock.release()

    def _choose_start(self, resume: bool, fresh: bool) -> Path | None:
        """The checkpoint to resume from (None: start at step 1), decided by rank 0 while it
        holds out_dir's lock. EarlierRun when starting at step 1 could lose earlier checkpoints;
        a folder without any has nothing to lose, so a run killed before its first checkpoint
        starts again with the same command (a restarted torchrun worker, a requeued job)."""
        for stale in sweep_stale_temporaries(self.folder):
            print(f"removed {stale.name}, left by an interrupted save", flush=True)
        if fresh:
            self._set_aside_checkpoints()
            return None
        found = self.newest_verified() if resume else None
        if found is not None:
            return found
        if checkpoint_folders(self.folder):
            raise EarlierRun(self._start_problem(resume))
        if (self.config.out_dir / "metrics.jsonl").exists():
            print(f"no checkpoint in {self.config.out_dir}: starting at step 1 (the metrics so "
                  "far are kept, then a restart record)", flush=True)
        return None

    def _start_problem(self, resume: bool) -> str:
        """Why this run does not start at step 1 in an out_dir that holds checkpoints."""
        if resume:
            return (
                f"{self.folder} holds checkpoints but none this run can resume from "
                "(the lines above say why): start again at step 1 with fresh=True (llmlab train "
                "--fresh; they are set aside, the metrics appended to), or use another out_dir"
            )
        return (
            f"{self.folder} holds an earlier run's checkpoints: continue it with "
            "resume=True, start again with fresh=True (they are set aside, the metrics appended "
            "to), or use another out_dir"
        )

    def _set_aside_checkpoints(self) -> None:
        """A fresh run in a used out_dir keeps the earlier checkpoints under another name."""
        if not checkpoint_folders(self.folder):
            return  # nothing to keep: no empty checkpoints-before-* folder
        stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
        aside = self.folder.with_name(f"checkpoints-before-{stamp}")
        self.folder.rename(aside)
        print(f"starting fresh: the earlier checkpoints are now in {aside}", flush=True)
