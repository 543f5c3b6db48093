"""Plan training at scale: interconnects, alpha-beta collectives, a step simulator, a layout
search and scaling curves, checked against published runs (llmlab.scale.published)."""

from llmlab.scale.collectives import ring_seconds, send_seconds, tree_all_reduce_seconds
from llmlab.scale.links import LINKS, Link, link
from llmlab.scale.search import plan_table, scaling_curve, search_layouts
from llmlab.scale.simulate import (
    Cluster,
    Parallel,
    Prediction,
    dp_bytes,
    hardware_flops_per_token,
    simulate,
    tp_bytes,
)

__all__ = [
    "LINKS", "Cluster", "Link", "Parallel", "Prediction", "dp_bytes", "hardware_flops_per_token",
    "link", "plan_table", "ring_seconds", "scaling_curve", "search_layouts", "send_seconds",
    "simulate", "tp_bytes", "tree_all_reduce_seconds",
]  # fmt: skip
