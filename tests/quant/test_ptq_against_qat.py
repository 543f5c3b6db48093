"""PTQ against QAT: quantization-aware training beats round-to-nearest and a fine-tune of the
frozen-block model at low bits."""

import copy

import pytest
import torch
from helpers.qat import GROUP, LAG, SEQ, SHAPE, VOCAB
from torch import nn

from llmlab.evaluate import held_out_windows, perplexity
from llmlab.models import build_model
from llmlab.quant import finish_qat, prepare_qat, qat_layers
from llmlab.quant.ptq_against_qat import fine_tuned, ptq_against_qat
from llmlab.train import TrainConfig, Trainer

# ------------------------------------------------------------- QAT against PTQ, measured


def chain_stream(count: int, seed: int, lag: int = LAG) -> torch.Tensor:
    """Tokens where each one is one of 4 fixed successors (the table is seed 0's) of the token
    `lag` places back, with odds 55/25/15/5 %. With lag 2 the previous token says little: the
    model must attend two places back, so its blocks (what gets quantized) carry the skill; with
    lag 1 the embeddings and the head alone would learn the table, and rounding the blocks
    would hardly matter."""
    successors = torch.randint(0, VOCAB, (VOCAB, 4), generator=torch.Generator().manual_seed(0))
    draws = torch.multinomial(torch.tensor([0.55, 0.25, 0.15, 0.05]), count, replacement=True,
                              generator=torch.Generator().manual_seed(seed))
    ids = list(range(lag))
    for choice in draws[lag:].tolist():
        ids.append(successors[ids[-lag], choice].item())
    return torch.tensor(ids)


class Windows:
    """Random training windows of a chain stream (llmlab.train's BatchSource protocol)."""

    def __init__(self, seed: int, batch: int = 8):
        self.stream, self.batch = chain_stream(20_000, seed), batch
        self.generator = torch.Generator().manual_seed(seed)

    def next_batch(self):
        starts = torch.randint(0, len(self.stream) - SEQ - 1, (self.batch,),
                               generator=self.generator)
        ids = torch.stack([self.stream[s : s + SEQ + 1] for s in starts])
        return ids[:, :-1], ids[:, 1:]

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


def train_config(steps: int, lr: float) -> TrainConfig:
    return TrainConfig(max_steps=steps, micro_batch_size=8, seq_len=SEQ, lr=lr, warmup_steps=0,
                       schedule="constant", dtype="fp32", device="cpu", eval_interval=10**6,
                       progress=False)


def trained_tiny(steps: int = 600) -> nn.Module:
    """The model trained to its cosine schedule's end, so a fine-tune's gains are QAT's alone."""
    model = build_model(SHAPE)
    config = train_config(steps, 3e-3)
    config.schedule, config.warmup_steps = "cosine", steps // 10
    Trainer(model, config, Windows(seed=1)).fit()
    return model.eval()


def held_out(count: int = 8) -> list[torch.Tensor]:
    """Windows of SEQ tokens (SEQ - 1 predictions): the model's whole context, no more."""
    return held_out_windows(chain_stream(count * SEQ, seed=2), SEQ - 1, count)


def calibration_batches() -> list[torch.Tensor]:
    return [Windows(seed=4).next_batch()[0] for _ in range(2)]


def frozen_blocks_fine_tune(model: nn.Module, bits: int) -> float:
    """The control for the STE: the same fine-tune through the same fake quantization, but the
    block weights get no gradient (only embeddings, norms and biases adapt to the rounding)."""
    model = copy.deepcopy(model)
    prepare_qat(model, bits, GROUP)
    for layer in qat_layers(model).values():
        layer.parametrizations.weight.original.requires_grad_(False)
    fine_tuned(model, train_config(60, 3e-4), Windows(seed=3))
    finish_qat(model)
    return perplexity(model, held_out())


@pytest.fixture(scope="module")
def chain_model():
    return trained_tiny()


@pytest.mark.slow  # about 9 s to train the model once, then about 10 s for both widths
def test_qat_beats_rtn_and_a_frozen_block_fine_tune(chain_model):
    """At the same training budget, QAT beats RTN and beats the same fine-tune with the block
    weights frozen: the straight-through gradient into the rounded weights is what does it.
    At 2 bits, where rounding costs this model 20 % of its perplexity, QAT also beats GPTQ and
    wins back most of the cost; at 4 bits (a 1 % cost) GPTQ is as good as QAT here."""
    found = ptq_against_qat(chain_model, lambda: Windows(seed=3), held_out(),
                            calibration_batches(), train_config(60, 3e-4), bits=(2, 4),
                            group_size=GROUP)
    # Measured: 2 bits: float tuned 6.263, rtn 7.487, gptq 6.629, qat 6.404, frozen 6.700;
    # 4 bits: float tuned 6.263, rtn 6.325, gptq 6.268, qat 6.294, frozen 6.317.
    print(found)
    for bits in (2, 4):
        rtn, qat, gptq = found[f"rtn-{bits}"], found[f"qat-{bits}"], found[f"gptq-{bits}"]
        cost = rtn - found["float tuned"]
        assert cost > 0  # rounding does hurt
        assert qat < rtn - 0.25 * cost
        assert qat < frozen_blocks_fine_tune(chain_model, bits)
        if bits == 2:
            assert qat < gptq < rtn and qat - found["float tuned"] < 0.5 * cost
