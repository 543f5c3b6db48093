"""Lab 11's experts against dense at smoke scale: a model memorises a table of random key -> value
facts (llmlab.data.key_values), a task where more parameters store more facts, so an MoE of E
experts of width F (the active parameters of a dense MLP of width F, E times its MLP parameters)
can beat the dense model of width F at the same compute per token.

`train_on_facts` trains one variant (keyword arguments for `with_experts`) and records what the
lab shows: recall (loss and accuracy over every fact), and each step's tokens per expert and
share of choices dropped.
"""

import time
from dataclasses import dataclass

import torch

from llmlab.data.key_values import KeyValueFacts, every_fact, fact_batch, key_value_facts
from llmlab.data.packing import IGNORE_INDEX
from llmlab.models import build_model, eval_mode, next_token_cross_entropy
from llmlab.models.moe import moe_layers, with_experts
from llmlab.models.presets import ModelShape
from llmlab.train.finetune import finetune_rate


@dataclass(frozen=True)
class FactsRecipe:
    """The table, the model (Llama family, two blocks) and the training run."""

    num_facts: int = 4096
    key_vocab: int = 128
    num_values: int = 64
    facts_per_row: int = 16
    rows: int = 32  # per step
    steps: int = 200
    n_layer: int = 2
    d_model: int = 64
    n_head: int = 2
    lr: float = 3e-3
    warmup_steps: int = 20
    table_seed: int = 0

    def table(self) -> KeyValueFacts:
        return key_value_facts(self.num_facts, self.key_vocab, self.num_values, self.table_seed)

    def shape(self, ff: int) -> ModelShape:
        return ModelShape("llama", self.n_layer, self.d_model, self.n_head,
                          self.key_vocab + self.num_values, context=3 * self.facts_per_row,
                          d_ff=ff)


# Dense width F against 4 experts of width F, top 1: the same active parameters per token.
# Switch-style weights (the router's probability, times E so the output starts at the dense
# scale) and Switch's capacity, 1.25 x the even share.
WIDTH, EXPERTS = 64, 4
SWITCH = dict(num_experts=EXPERTS, top_k=1, ff=WIDTH, renormalize=False,
              weight_scale=float(EXPERTS), capacity_factor=1.25)
AUX_WEIGHT = 1.0  # 100 x the weight usually quoted (0.01), which does not stop the collapse here
VARIANTS = {
    "dense F": dict(num_experts=1, top_k=1, ff=WIDTH),
    "MoE, no balancing": SWITCH,
    "MoE + aux loss": dict(SWITCH, aux_weight=AUX_WEIGHT),
    "MoE + bias": dict(SWITCH, bias_rate=0.001),  # DeepSeek-V3's auxiliary-loss-free balancing
    "dense 4F": dict(num_experts=1, top_k=1, ff=EXPERTS * WIDTH),  # the MoE's total parameters
}
# The lab's comparison, about a minute for 3 seeds: the dense model of the MoE's active size, and
# the MoE without and with balancing (benchmarks/moe_against_dense.py runs the others).
COMPARED = ("dense F", "MoE, no balancing", "MoE + aux loss")


@dataclass
class FactsRun:
    variant: str
    seed: int
    loss: float  # nats per value token, over every fact, after training
    accuracy: float  # share of facts whose value is the most likely next token
    seconds: float  # wall time of the training (build and scoring left out)
    parameters: int
    loads: torch.Tensor  # (steps, layers, E) choices per expert at each step
    dropped: torch.Tensor  # (steps, layers) share of choices dropped at each step
    losses: list[float]  # the training loss at each step (nats per value token)

    @property
    def imbalance(self) -> torch.Tensor:
        """(steps,) the busiest expert's load over the mean, averaged over the layers."""
        loads = self.loads.float()
        return (loads.max(dim=-1).values / loads.mean(dim=-1)).mean(dim=-1)


@torch.no_grad()
def recall(model: torch.nn.Module, table: KeyValueFacts,
           facts_per_row: int) -> tuple[float, float]:
    """(loss, accuracy) of the model's next-token prediction at every fact's value."""
    inputs, labels = every_fact(table, facts_per_row)
    with eval_mode(model):
        logits = model(inputs).logits[:, :-1]
    targets = labels[:, 1:]
    loss = next_token_cross_entropy(logits, targets).item()  # the values only: keys are ignored
    scored = targets != IGNORE_INDEX
    accuracy = (logits[scored].argmax(dim=-1) == targets[scored]).float().mean().item()
    return loss, accuracy


def train_on_facts(variant: str, seed: int, recipe: FactsRecipe = FactsRecipe(),
                   options: dict | None = None) -> FactsRun:
    """Train a fresh model of `variant` (its `with_experts` options: VARIANTS[variant] unless
    given) on the recipe's table with AdamW; the seed fixes the weights and the batches' order."""
    options = VARIANTS[variant] if options is None else options
    table = recipe.table()
    model = with_experts(build_model(recipe.shape(options["ff"]), seed=seed), **options)
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.lr, betas=(0.9, 0.95),
                                  weight_decay=0.0)
    generator = torch.Generator().manual_seed(1000 + seed)
    losses, seconds = [], 0.0
    for step in range(recipe.steps):
        start = time.perf_counter()
        for group in optimizer.param_groups:
            group["lr"] = finetune_rate(step, recipe.steps, recipe.lr, recipe.warmup_steps)
        inputs, labels = fact_batch(table, recipe.rows, recipe.facts_per_row, generator)
        loss = model(inputs, labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        seconds += time.perf_counter() - start
    layers = moe_layers(model)
    loads = torch.stack([torch.stack(layer.loads) for layer in layers], dim=1)
    dropped = torch.tensor([layer.dropped for layer in layers]).t()
    return FactsRun(variant, seed, *recall(model, table, recipe.facts_per_row), seconds,
                    sum(p.numel() for p in model.parameters()), loads, dropped, losses)
