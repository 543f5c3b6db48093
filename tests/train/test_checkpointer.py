"""The trainer's checkpointing component on its own, without a Trainer: what it saves comes back
whole into freshly built parts (step, tokens seen, optimizer and scaler states, the random
generators and the data position); a run folder is planned under its lock; without an out_dir it
does nothing. (Killed runs resuming bit for bit through the Trainer:
tests/train/test_loop_restart.py.)
"""

import pytest
import torch
from helpers.train_fakes import RandomWindows, tiny_gpt2, token_stream

from llmlab.distributed import DistInfo
from llmlab.train import EarlierRun, RunFolderBusy, TrainConfig
from llmlab.train.checkpointer import Checkpointer

ONE_PROCESS = DistInfo(rank=0, local_rank=0, world_size=1)


def checkpointer(out_dir, seed=0) -> Checkpointer:
    """A checkpointer over a tiny model, its AdamW, an enabled CPU grad scaler and random windows
    (every part built from `seed`: different seeds give different parts)."""
    model = tiny_gpt2(seed=seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**(10 + seed))
    data = RandomWindows(token_stream(), batch_size=2, seed=seed)
    return Checkpointer(TrainConfig(out_dir=out_dir), model, optimizer, scaler, data, "none",
                        ONE_PROCESS)


def take_a_step(parts: Checkpointer) -> None:
    inputs, targets = parts.train_data.next_batch()
    logits = parts.model(inputs).logits
    torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten()).backward()
    parts.optimizer.step()
    parts.optimizer.zero_grad()


def test_what_is_saved_comes_back_whole_into_fresh_parts(tmp_path, capsys):
    saved = checkpointer(tmp_path)
    take_a_step(saved)
    path = saved.save(step=3, tokens_seen=96, val_loss=4.5)
    assert path == tmp_path / "checkpoints" / "step_0000003"
    after_save = (torch.rand(3), saved.train_data.next_batch()[0])  # what a run draws next

    fresh = checkpointer(tmp_path, seed=1)
    assert fresh.load(path) == (3, 96)
    assert "resumed from step 3" in capsys.readouterr().out
    for name, weight in saved.model.state_dict().items():
        assert torch.equal(fresh.model.state_dict()[name], weight), name
    saved_moments = saved.optimizer.state_dict()["state"]
    for index, moments in fresh.optimizer.state_dict()["state"].items():
        assert torch.equal(moments["exp_avg"], saved_moments[index]["exp_avg"])
    assert fresh.scaler.get_scale() == saved.scaler.get_scale() == 2.0**10
    assert torch.equal(torch.rand(3), after_save[0])  # the random generators, as saved
    assert torch.equal(fresh.train_data.next_batch()[0], after_save[1])  # the data position


def test_a_run_folder_is_planned_under_its_lock(tmp_path, capsys):
    first = checkpointer(tmp_path)
    assert first.plan_start(resume=False, fresh=False) is None  # an empty folder: step 1
    first.save(step=2, tokens_seen=64)
    with pytest.raises(RunFolderBusy, match="in use by another run"):
        checkpointer(tmp_path).plan_start(resume=True, fresh=False)
    first.release()
    refused = checkpointer(tmp_path)
    with pytest.raises(EarlierRun, match="holds an earlier run's checkpoints"):
        refused.plan_start(resume=False, fresh=False)
    refused.release()  # the lock is held until the run ends, refused or not (Trainer.fit's finally)
    resumed = checkpointer(tmp_path)
    assert resumed.plan_start(resume=True, fresh=False) == tmp_path / "checkpoints" / "step_0000002"
    resumed.release()
    fresh = checkpointer(tmp_path)
    assert fresh.plan_start(resume=False, fresh=True) is None
    assert "the earlier checkpoints are now in" in capsys.readouterr().out
    assert fresh.newest_verified() is None and fresh.last_good() is None
    fresh.release()


def test_without_an_out_dir_nothing_is_saved_or_locked():
    parts = checkpointer(None)
    assert parts.plan_start(resume=True, fresh=False) is None
    assert parts.save(step=1, tokens_seen=32) is None
    assert parts.newest_verified() is None and parts.last_good() is None
    parts.release()  # nothing held: nothing to do
