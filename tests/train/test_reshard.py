"""A checkpoint moves between process counts with its weights and AdamW states intact: an FSDP
checkpoint written by 2 ranks loads into 1 plain process, and a 1-process checkpoint into 2 FSDP
ranks; both hold exactly the tensors the saving run had. A checkpoint of another model shape is
refused before anything is loaded.
"""

import pytest
import torch
from helpers.train_fakes import FixedRows, global_rows, tiny_gpt2
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
)

from llmlab.distributed import launch
from llmlab.distributed.data_parallel import wrap_model
from llmlab.train import CheckpointMismatch, TrainConfig, Trainer
from llmlab.train.checkpoint import is_sharded, latest_checkpoint
from llmlab.train.optim import build_optimizer
from llmlab.train.reshard import load_resharded

FULL_ON_CPU = StateDictOptions(full_state_dict=True, cpu_offload=True)


def settings(out_dir=None, parallel="ddp") -> TrainConfig:
    return TrainConfig(max_steps=2, micro_batch_size=2, seq_len=16, dtype="fp32", device="cpu",
                       warmup_steps=1, lr=1e-2, log_interval=1, eval_interval=100,
                       out_dir=out_dir, parallel=parallel, progress=False)


def full_states(model, optimizer) -> tuple[dict, dict]:
    """Weights and AdamW states as whole tensors keyed by name (collective under FSDP, whose
    ranks other than 0 get empty dicts: cpu_offload gathers on rank 0 alone)."""
    weights = get_model_state_dict(model, options=FULL_ON_CPU)
    optimizer_state = get_optimizer_state_dict(model, optimizer, options=FULL_ON_CPU)
    return weights, optimizer_state.get("state", {})


def assert_equal_states(got: tuple[dict, dict], expected: tuple[dict, dict]) -> None:
    for found, wanted in zip(got, expected, strict=True):
        assert found.keys() == wanted.keys() and found
        for name, value in wanted.items():
            if isinstance(value, dict):  # one parameter's AdamW states: step, exp_avg, exp_avg_sq
                assert found[name].keys() == value.keys()
                assert all(torch.equal(torch.as_tensor(found[name][k]), torch.as_tensor(v))
                           for k, v in value.items()), name
            else:
                assert torch.equal(found[name], value), name


def train_fsdp(out_dir: str) -> tuple[dict, dict]:
    """On each of 2 ranks: train with FSDP, checkpoint (dcp/), return the states saved."""
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    data = FixedRows(global_rows(8), 2, rank, world)
    trainer = Trainer(tiny_gpt2(), settings(out_dir, "fsdp"), data)
    trainer.fit()
    return full_states(trainer.model, trainer.optimizer)


def load_into_fsdp(checkpoint: str) -> tuple[dict, dict]:
    """On each of 2 ranks: a fresh FSDP model and optimizer take the checkpoint."""
    model = tiny_gpt2(seed=1)  # other initial weights: the checkpoint must replace every one
    wrap_model(model, "fsdp")
    optimizer = build_optimizer(model, settings(), "fsdp")
    assert load_resharded(checkpoint, model, optimizer) == 2
    return full_states(model, optimizer)


@pytest.fixture(scope="module")
def fsdp_run(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("fsdp")
    saved = launch(train_fsdp, 2, args=(str(out_dir),))[0]
    checkpoint = latest_checkpoint(out_dir / "checkpoints")
    assert is_sharded(checkpoint)
    return checkpoint, saved


def test_two_fsdp_ranks_checkpoint_loads_into_one_process(fsdp_run):
    checkpoint, saved = fsdp_run
    model = tiny_gpt2(seed=1)
    optimizer = build_optimizer(model, settings())
    assert load_resharded(checkpoint, model, optimizer) == 2
    assert_equal_states(full_states(model, optimizer), saved)


def test_one_process_checkpoint_loads_into_two_fsdp_ranks(tmp_path):
    trainer = Trainer(tiny_gpt2(), settings(tmp_path), FixedRows(global_rows(8), 2))
    trainer.fit()
    saved = full_states(trainer.model, trainer.optimizer)
    checkpoint = latest_checkpoint(tmp_path / "checkpoints")
    assert not is_sharded(checkpoint)
    # Rank 0's full states are gathered from both ranks' shards: each shard is checked.
    assert_equal_states(launch(load_into_fsdp, 2, args=(str(checkpoint),))[0], saved)


def test_the_weights_alone_can_be_loaded(fsdp_run):
    checkpoint, (weights, _) = fsdp_run
    model = tiny_gpt2(seed=1)
    load_resharded(checkpoint, model)
    assert all(torch.equal(model.state_dict()[name], weights[name]) for name in weights)


def test_a_checkpoint_of_another_model_shape_is_refused(fsdp_run):
    checkpoint, _ = fsdp_run
    wider = tiny_gpt2(width=64)
    before = {name: t.clone() for name, t in wider.state_dict().items()}
    with pytest.raises(CheckpointMismatch, match=r"config.n_embd: checkpoint 32, model 64"):
        load_resharded(checkpoint, wider, build_optimizer(wider, settings()))
    assert all(torch.equal(wider.state_dict()[name], t) for name, t in before.items())
