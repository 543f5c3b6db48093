"""Plan training at scale in plain arithmetic (no process group; no torch.distributed here).

One concern per module:
- `layout`: the layout type (`Parallel`), the one rank order, and the layouts that fit in memory.
- `comm_cost`: the bytes each parallelism sends (ring, DP, TP, EP, PP) and the pipeline bubble.
- `links`: interconnect presets (latency, bandwidth); `collectives`: alpha-beta times.
- `simulate`: one step of a layout on a cluster: memory, time, MFU, days, cost.
- `search`: the cheapest layout for a budget, and scaling curves.
- `published`: published runs to check the simulator against.
"""

from llmlab.scale.collectives import ring_seconds, send_seconds, tree_all_reduce_seconds
from llmlab.scale.comm_cost import dp_bytes, tp_bytes
from llmlab.scale.layout import Parallel
from llmlab.scale.links import LINKS, Link, link
from llmlab.scale.search import plan_table, scaling_curve, search_layouts
from llmlab.scale.simulate import Cluster, Prediction, hardware_flops_per_token, simulate

__all__ = [
    "LINKS", "Cluster", "Link", "Parallel", "Prediction", "dp_bytes", "hardware_flops_per_token",
    "link", "plan_table", "ring_seconds", "scaling_curve", "search_layouts", "send_seconds",
    "simulate", "tp_bytes", "tree_all_reduce_seconds",
]
