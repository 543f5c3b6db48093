"""How sparse a model is: per matrix and over all of them."""

from dataclasses import asdict, dataclass

from torch import nn

from llmlab.prune.keep import current_weight
from llmlab.prune.targets import prunable_weights
from llmlab.tables import markdown_table


@dataclass(frozen=True)
class SparsityRow:
    tensor: str  # a parameter name, or "global"
    parameters: int
    zeros: int

    @property
    def sparsity(self) -> float:
        return self.zeros / self.parameters


def sparsity_report(model: nn.Module, include_embeddings: bool = False) -> list[SparsityRow]:
    """One row per prunable matrix (zeros counted in the weight the model computes with, mask
    included), then a "global" row over all of them."""
    rows = []
    for name, module in prunable_weights(model, include_embeddings).items():
        weight = current_weight(module)
        rows.append(SparsityRow(name, weight.numel(), int((weight == 0).sum())))
    total = SparsityRow("global", sum(r.parameters for r in rows), sum(r.zeros for r in rows))
    return [*rows, total]


def sparsity_table(rows: list[SparsityRow]) -> str:
    """The report as Markdown, sparsity in percent."""
    return markdown_table(
        [{**asdict(row), "sparsity": f"{100 * row.sparsity:.1f}%"} for row in rows]
    )
