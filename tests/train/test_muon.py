"""Muon: the reference Newton-Schulz against torch.optim.Muon, and training with optimizer="muon"
(Muon for the blocks' matrices, AdamW for the rest) through the Trainer: the split, the schedule,
an exact resume, and the strategies that would shard it refused."""

import pytest
import torch
from helpers.train_fakes import RandomWindows, config, tiny_gpt2, token_stream

from llmlab.device import DtypeChoice
from llmlab.models import block_matrices, build_model, preset
from llmlab.train import Trainer
from llmlab.train.muon import BF16_TOLERANCE, FP32Muon, MuonWithAdamW, muon_update, newton_schulz
from llmlab.train.optim import build_optimizer

SHAPES = {"wide": (32, 128), "tall": (128, 32), "square": (64, 64)}


def random_matrix(shape, seed=0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def well_spread(n: int) -> torch.Tensor:
    """An n x n matrix whose singular values spread evenly over 0.01-1 (a random square matrix
    has some near 0, which five steps cannot lift: the iteration multiplies a small one by
    3.4445 per step)."""
    u, _, v = torch.linalg.svd(random_matrix((n, n)))
    return u @ torch.diag(torch.logspace(-2, 0, n)) @ v


@pytest.mark.parametrize("kind", SHAPES)
def test_newton_schulz_puts_every_singular_value_in_the_quintics_band(kind):
    """The band is the quintic's own: its local minimum 0.682 (at 1.05) and maximum 1.2025 (at
    0.55), between which it sends every singular value it has lifted."""
    matrix = well_spread(64) if kind == "square" else random_matrix(SHAPES[kind])
    result = newton_schulz(matrix)
    values = torch.linalg.svdvals(result)
    assert result.shape == matrix.shape
    assert 0.68 <= values.min() and values.max() <= 1.21


@pytest.mark.parametrize("steps", [5, 2, 8])
@pytest.mark.parametrize("kind", SHAPES)
def test_newton_schulz_is_torch_muons_update_up_to_bf16(kind, steps):
    matrix = random_matrix(SHAPES[kind], seed=steps) * 100  # a gradient's scale does not matter
    expected = muon_update(matrix, ns_steps=steps)
    gap = (newton_schulz(matrix, steps) - expected).norm() / expected.norm()
    assert gap <= BF16_TOLERANCE


def test_a_zero_gradient_gives_a_zero_update():
    assert not newton_schulz(torch.zeros(8, 4)).any() and not muon_update(torch.zeros(8, 4)).any()


# ---------------------------------------------------------------- training with Muon


def muon_trainer(model=None, **overrides) -> Trainer:
    return Trainer(model or tiny_gpt2(), config(optimizer="muon", **overrides),
                   RandomWindows(token_stream(), 4))


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_muon_takes_exactly_the_blocks_matrices_and_adamw_the_rest(family):
    model = build_model(preset("tiny", family=family, n_layer=2, d_model=32, n_head=2,
                               vocab_size=64, context=16))
    optimizer = build_optimizer(model, config(optimizer="muon"))
    on_muon = [p for group in optimizer.muon.param_groups for p in group["params"]]
    on_adamw = [p for group in optimizer.adamw.param_groups for p in group["params"]]
    matrices = {id(layer.weight) for layer in block_matrices(model).values()}
    assert {id(p) for p in on_muon} == matrices and len(on_muon) == len(matrices)
    others = [p for p in model.parameters() if id(p) not in matrices]
    assert {id(p) for p in on_adamw} == {id(p) for p in others} and len(on_adamw) == len(others)


def test_a_muon_run_changes_every_parameter():
    trainer = muon_trainer(max_steps=3)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.fit()
    assert isinstance(trainer.optimizer, MuonWithAdamW)
    assert all(not torch.equal(b, p) for b, p in zip(before, trainer.model.parameters(),
                                                       strict=True))


def test_the_schedules_rate_reaches_both_optimizers():
    """The first step of a warm-up over 2 steps runs at half the rate: every parameter, on Muon
    or on AdamW, moves half as far as at the full constant rate (the same gradient; no decay)."""
    moves = []
    for schedule in ("constant", "cosine"):
        trainer = muon_trainer(max_steps=1, schedule=schedule, warmup_steps=2, weight_decay=0.0)
        before = [p.detach().clone() for p in trainer.model.parameters()]
        trainer.fit()
        moves.append([p.detach() - b for b, p in zip(before, trainer.model.parameters(),
                                                       strict=True)])
    for full, half in zip(*moves, strict=True):
        # atol: a move is read as a difference of weights, each rounded to fp32 (1e-9 here)
        torch.testing.assert_close(half, full / 2, rtol=1e-4, atol=1e-8)


def test_muons_steps_are_the_size_of_adamws():
    """Moonshot's "match_rms_adamw": a block matrix's step has an RMS of about 0.2 lr, the RMS of
    a typical AdamW step, whatever the matrix's shape (the "original" scaling gives a 32 x 128
    one about lr / sqrt(128), less than half that), so AdamW's learning rate serves both."""
    trainer = muon_trainer(max_steps=1, schedule="constant", weight_decay=0.0)
    before = {name: layer.weight.detach().clone()
              for name, layer in block_matrices(trainer.model).items()}
    trainer.fit()
    for name, layer in block_matrices(trainer.model).items():
        rms = (layer.weight.detach() - before[name]).pow(2).mean().sqrt()
        assert 0.15 * trainer.config.lr < rms < 0.25 * trainer.config.lr, name


def test_a_resumed_muon_run_takes_the_same_steps_bit_for_bit(tmp_path):
    """Both optimizers' states come back, and the schedule's rate still reaches them after
    load_state_dict (which gives each optimizer new group dicts)."""
    straight = muon_trainer(max_steps=4, out_dir=tmp_path / "straight", checkpoint_interval=2)
    losses = [m.loss for m in straight.fit().history]
    muon_trainer(max_steps=2, out_dir=tmp_path / "resumed").fit()
    # A new process: another initialisation, then the checkpoint (state.pt, read weights_only).
    resumed = muon_trainer(tiny_gpt2(seed=9), max_steps=4, out_dir=tmp_path / "resumed")
    assert [m.loss for m in resumed.fit(resume=True).history] == losses[2:]
    for mine, theirs in zip(resumed.model.parameters(), straight.model.parameters(),
                            strict=True):
        assert torch.equal(mine, theirs)


def test_fsdp_which_cuts_matrices_into_flat_shards_is_refused_and_ddp_is_not():
    """(ZeRO-1, which shards by whole matrices, trains with Muon on 2 ranks:
    tests/train/test_loop_parallel.py.)"""
    model = tiny_gpt2()
    assert isinstance(build_optimizer(model, config(optimizer="muon"), "ddp"), MuonWithAdamW)
    with pytest.raises(ValueError, match="needs each matrix whole.*parallel='zero1'"):
        build_optimizer(model, config(optimizer="muon"), "fsdp")


def fp32_zeropower(grad, ns_coefficients, ns_steps, eps):
    """torch's iteration as it is, but in fp32: what FP32Muon must then equal."""
    return newton_schulz(grad, ns_steps, ns_coefficients)


@pytest.mark.parametrize("options", [dict(), dict(nesterov=False, adjust_lr_fn="original"),
                                     dict(adjust_lr_fn="match_rms_adamw", weight_decay=0.1)])
def test_fp32_muon_takes_torchs_steps_with_the_iteration_in_fp32(monkeypatch, options):
    """Three steps on a wide and a tall matrix: equal to torch.optim.Muon whose iteration is made
    fp32, and within bf16's distance of torch's own."""
    start = [random_matrix(SHAPES["wide"], 1), random_matrix(SHAPES["tall"], 2)]
    grads = [[random_matrix(w.shape, 10 * step + i) for i, w in enumerate(start)]
             for step in range(3)]

    def train(optimizer_class):
        weights = [torch.nn.Parameter(w.clone()) for w in start]
        optimizer = optimizer_class(weights, lr=0.02, **options)
        for step_grads in grads:
            for weight, grad in zip(weights, step_grads, strict=True):
                weight.grad = grad.clone()
            optimizer.step()
        return [w.detach() - s for w, s in zip(weights, start, strict=True)], optimizer

    ours, optimizer = train(FP32Muon)
    torchs, _ = train(torch.optim.Muon)
    for mine, theirs in zip(ours, torchs, strict=True):
        assert (mine - theirs).norm() / theirs.norm() < BF16_TOLERANCE
    monkeypatch.setattr(torch.optim._muon, "_zeropower_via_newtonschulz", fp32_zeropower)
    torchs_fp32, _ = train(torch.optim.Muon)
    for mine, theirs in zip(ours, torchs_fp32, strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-7)
    reloaded = torch.optim.Muon([torch.nn.Parameter(w.clone()) for w in start], lr=0.02)
    reloaded.load_state_dict(optimizer.state_dict())  # one momentum buffer each, as torch keeps
    assert [s["momentum_buffer"].shape for s in reloaded.state.values()] == [w.shape for w in start]


@pytest.mark.parametrize(("dtype", "expected"), [(torch.bfloat16, torch.optim.Muon),
                                                 (torch.float32, FP32Muon)])
def test_muon_iterates_in_fp32_where_bf16_would_be_emulated(monkeypatch, dtype, expected):
    import llmlab.train.optim as optim

    monkeypatch.setattr(optim, "choose_dtype", lambda device: DtypeChoice(dtype, False, "test"))
    optimizer = build_optimizer(tiny_gpt2(), config(optimizer="muon"))
    assert type(optimizer.muon) is expected
