"""Tiny models and batch sources for the trainer's tests (fast on a CPU), and the short DDP run
that the resume tests kill and resume."""

import os
import signal

import torch
import torch.distributed as dist
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

from llmlab.train import TrainConfig, Trainer

VOCAB, CONTEXT = 128, 16


def tiny_gpt2(
    dropout: float = 0.0, width: int = 32, seed: int = 0, context: int = CONTEXT
) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    config = GPT2Config(
        n_layer=2, n_embd=width, n_head=2, n_positions=context, vocab_size=VOCAB,
        resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout,
        bos_token_id=0, eos_token_id=0,
    )
    return GPT2LMHeadModel(config)


def token_stream(length: int = 4096, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, VOCAB, (length,), generator=torch.Generator().manual_seed(seed))


def token_ids(batch: int, length: int, seed: int = 0) -> torch.Tensor:
    """Random token ids of shape (batch, length), the same for the same seed."""
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


class RandomWindows:
    """Random (inputs, targets) windows from one token stream; its generator is its position."""

    def __init__(self, tokens: torch.Tensor, batch_size: int, seq_len: int = CONTEXT, seed=0):
        self.tokens, self.batch_size, self.seq_len = tokens, batch_size, seq_len
        self.generator = torch.Generator().manual_seed(seed)

    def next_batch(self):
        starts = torch.randint(0, len(self.tokens) - self.seq_len - 1, (self.batch_size,),
                               generator=self.generator)
        rows = torch.stack([self.tokens[s : s + self.seq_len + 1] for s in starts.tolist()])
        return rows[:, :-1], rows[:, 1:]

    def state_dict(self):
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state):
        self.generator.set_state(state["generator"])


class FixedRows:
    """Serves the rows of a fixed global batch in order, `batch_size` at a time, then repeats;
    with rank/world_size each process serves its own contiguous share of every global batch."""

    def __init__(self, rows: torch.Tensor, batch_size: int, rank: int = 0, world_size: int = 1):
        share = len(rows) // world_size
        self.rows = rows[rank * share : (rank + 1) * share]
        self.batch_size, self.position = batch_size, 0

    def next_batch(self):
        start = self.position % len(self.rows)
        batch = self.rows[start : start + self.batch_size]
        self.position += self.batch_size
        return batch[:, :-1], batch[:, 1:]

    def state_dict(self):
        return {"position": self.position}

    def load_state_dict(self, state):
        self.position = state["position"]


def global_rows(count: int = 8, seed: int = 1) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (count, CONTEXT + 1), generator=generator)


def config(**overrides) -> TrainConfig:
    """Small, fp32, quiet: the settings every test starts from."""
    base = dict(max_steps=6, micro_batch_size=4, seq_len=16, dtype="fp32", device="cpu",
                eval_interval=3, eval_batches=2, log_interval=1, warmup_steps=2, lr=3e-3,
                progress=False)
    return TrainConfig(**{**base, **overrides})


class NaNAt(torch.nn.Module):
    """Wraps a model; from the `bad_call`-th forward pass on, its logits are NaN."""

    def __init__(self, model, bad_call: int, once: bool = False):
        super().__init__()
        self.model, self.bad_call, self.once, self.calls = model, bad_call, once, 0

    def forward(self, inputs):
        self.calls += 1
        logits = self.model(inputs).logits
        bad = self.calls == self.bad_call if self.once else self.calls >= self.bad_call
        return logits * float("nan") if bad else logits


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(["def add(a, b):\n    return a + b\n"] * 20, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|endoftext|>",
                                   pad_token="<|endoftext|>")


def ddp_resume_config(out_dir) -> TrainConfig:
    """The run that tests/train/test_loop_ddp_resume.py and elastic_worker.py kill and resume:
    8 steps with a checkpoint every 4 and a loss logged every step."""
    return TrainConfig(max_steps=8, micro_batch_size=4, seq_len=16, dtype="fp32", device="cpu",
                       warmup_steps=2, lr=3e-3, log_interval=1, eval_interval=100,
                       checkpoint_interval=4, out_dir=out_dir, progress=False)


def ddp_resume_run(out_dir: str, kill_at: int = 0) -> None:
    """One rank of that run under llmlab.distributed.launch, with dropout and per-rank random
    windows, resuming from `out_dir`'s checkpoints; with `kill_at`, rank 0 (the one that logs)
    is killed (SIGKILL) right after logging that step, as a crash would."""

    def kill(metrics):
        if metrics.step == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    data = RandomWindows(token_stream(), 4, seed=dist.get_rank())  # each rank its own windows
    model = tiny_gpt2(dropout=0.1)
    Trainer(model, ddp_resume_config(out_dir), data, callbacks=[kill]).fit(resume=True)
