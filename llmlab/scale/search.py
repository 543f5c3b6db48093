"""Search layouts for the cheapest run that fits, and trace scaling curves.

The candidates are llmlab.scale.layout's (TP inside a node over NVLink, PP across whole
nodes, any ZeRO stage, and only what fits in memory); each is tried with a few micro-batch sizes,
with activation checkpointing on and off, and simulated. A global batch fixes the accumulation:
batch = dp x micro-batch x accumulation, rounded to the nearest whole number of micro-batches
per replica (so the batch a layout runs can differ a little from the one asked for).
On a fixed number of GPUs the cheapest run is the fastest one.
"""

from dataclasses import replace

from llmlab.memory import TrainingSetup
from llmlab.models import ModelShape, as_shape
from llmlab.scale.layout import choose_layouts
from llmlab.scale.simulate import Cluster, Prediction, simulate
from llmlab.tables import markdown_table

MICRO_BATCHES = (1, 2, 4)


def _layout_links(cluster: Cluster) -> tuple[str, str]:
    """llmlab.scale.layout's coarser link names for the cluster's presets."""
    inside = "nvlink" if cluster.inside_node.startswith("nvlink") else "pcie"
    between = "infiniband" if cluster.between_nodes.startswith("ib") else "ethernet"
    return inside, between


def search_layouts(
    model: str | ModelShape,
    cluster: Cluster,
    tokens: float,
    batch_tokens: float = 4e6,  # Llama 2's global batch (Touvron et al. 2023)
    seq: int = 0,
    efficiency: float | None = None,
) -> list[Prediction]:
    """Every layout of the cluster that fits, simulated, cheapest first. `batch_tokens` is the
    global batch (rounded to whole sequences of `seq` tokens; 0: the model's context)."""
    shape = as_shape(model)
    seq = seq or shape.context
    batch = round(batch_tokens / seq)
    if batch < 1:
        raise ValueError(f"a batch of {batch_tokens:g} tokens is less than one {seq}-token "
                         "sequence: give a larger batch_tokens")
    inside, between = _layout_links(cluster)
    extra = {} if efficiency is None else {"efficiency": efficiency}
    predictions, replicas = [], set()
    for checkpointing in (False, True):
        for micro in MICRO_BATCHES:
            setup = TrainingSetup(batch=micro, seq=seq, checkpointing=checkpointing)
            layouts = choose_layouts(shape, cluster.gpu, cluster.gpus_per_node, cluster.nodes,
                                     inside, between, setup)
            for layout in layouts:
                dp = layout.parallel.dp
                replicas.add(dp)
                if dp * micro > batch:  # every replica needs a micro-batch
                    continue
                accumulation = max(1, round(batch / (dp * micro)))
                parallel = replace(layout.parallel, accumulation=accumulation)
                prediction = simulate(shape, cluster, parallel, tokens, **extra)
                if prediction.fit != "no":
                    predictions.append(prediction)
    if replicas and min(replicas) > batch:  # it is the batch that is too small, not the GPUs
        raise ValueError(f"a batch of {batch} sequences is too small for {cluster.gpus} GPUs: "
                         f"every layout that fits has {min(replicas)} or more data-parallel "
                         "replicas, each needing a sequence; give a larger batch_tokens or fewer "
                         "GPUs")
    # A tight fit (the last 10% of memory) ranks after every comfortable one.
    return sorted(predictions, key=lambda p: (p.fit != "yes", p.cost, p.memory.total))


def plan_table(predictions: list[Prediction], limit: int = 5) -> str:
    """The best `limit` predictions as text: layout, memory, step time and where it goes."""
    if not predictions:
        return "nothing fits: more GPUs, a GPU with more memory, or shorter sequences"
    shown = predictions[:limit]
    experts = any(p.parallel.ep > 1 for p in shown)  # an EP column only where there is EP
    rows = [{"#": i, "layout": p.parallel.describe(),
             "ckpt": "yes" if p.parallel.checkpointing else "no",
             "GB/GPU": f"{p.memory.total / 1e9:.1f}", "step s": f"{p.step_s:.2f}",
             "bubble": f"{p.bubble:.0%}", "TP s": f"{p.tp_s:.2f}", "PP s": f"{p.pp_s:.2f}",
             "DP s": f"{p.dp_s:.2f}", **({"EP s": f"{p.ep_s:.2f}"} if experts else {}),
             "MFU": f"{p.mfu:.0%}", "days": f"{p.days:.1f}", "cost $": f"{p.cost:,.0f}"}
            for i, p in enumerate(shown, 1)]
    return markdown_table(rows, aligned=True)


def scaling_curve(
    model: str | ModelShape,
    gpu_counts: tuple[int, ...] = (8, 64, 512, 4096, 16384),
    mode: str = "weak",
    tokens: float = 1e12,
    batch_tokens: float = 16e6,
    cluster: Cluster | None = None,
) -> list[dict]:
    """The best layout at each GPU count. Strong scaling keeps the global batch at
    `batch_tokens`; weak scaling keeps the tokens per GPU per step (`batch_tokens` is the batch
    at the largest count), so the batch grows with the GPUs. A count where nothing fits is
    left out."""
    if mode not in ("weak", "strong"):
        raise ValueError(f"mode={mode!r}: use 'weak' or 'strong'")
    cluster = cluster or Cluster()
    rows = []
    for gpus in gpu_counts:
        if gpus % cluster.gpus_per_node:
            raise ValueError(f"{gpus} GPUs are not whole nodes of {cluster.gpus_per_node}")
        scaled = batch_tokens * (gpus / max(gpu_counts) if mode == "weak" else 1)
        found = search_layouts(model, replace(cluster, nodes=gpus // cluster.gpus_per_node),
                               tokens, scaled)
        if found:
            best = found[0]
            rows.append({"gpus": gpus, "layout": best.parallel.describe(), "mfu": best.mfu,
                         "tokens_per_s": best.tokens_per_s, "days": best.days,
                         "cost": best.cost, "batch_tokens": best.tokens_per_step})
    return rows
