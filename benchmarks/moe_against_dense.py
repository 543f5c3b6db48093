"""Lab 11's experts against dense, beyond what the lab runs: the lab's three variants (dense width
F, an MoE of 4 experts of width F, top 1, without and with the balancing loss) and the others of
llmlab.recipes.experts.VARIANTS (DeepSeek-V3's bias; a dense model of the MoE's total
parameters), each over 3 seeds; the balancing loss's weight swept; and the lab's comparison on a
second table. One thread; every run is deterministic. Its output:
benchmarks/measured/moe_against_dense.txt

    python benchmarks/moe_against_dense.py
"""

import dataclasses
import statistics
import time

import torch

from llmlab.recipes.experts import SWITCH, VARIANTS, FactsRecipe, train_on_facts

SEEDS = (0, 1, 2)


def row(name: str, options: dict, recipe: FactsRecipe) -> None:
    start = time.perf_counter()
    runs = [train_on_facts(name, seed, recipe, options) for seed in SEEDS]
    tail = slice(-recipe.steps // 5, None)  # the last fifth of the steps
    accuracy = " / ".join(f"{run.accuracy:.3f}" for run in runs)
    load = " / ".join(f"{run.imbalance[tail].mean():.2f}" for run in runs)
    dropped = " / ".join(f"{run.dropped[tail].mean():.0%}" for run in runs)
    print(f"{name:<24} accuracy {accuracy} (mean {statistics.mean(r.accuracy for r in runs):.3f})"
          f"  busiest/mean {load}  dropped {dropped}  {time.perf_counter() - start:.0f} s",
          flush=True)


torch.set_num_threads(1)
recipe = FactsRecipe()
table = recipe.table()
print(f"{len(table.facts)} facts ({table.bits:.0f} bits), {recipe.steps} steps of {recipe.rows} "
      f"rows x {recipe.facts_per_row} facts; seeds {SEEDS}; load and drops over the last "
      f"{recipe.steps // 5} steps\n")
for name, options in VARIANTS.items():
    row(name, options, recipe)
print("\nthe balancing loss's weight:")
for weight in (0.01, 0.1, 0.3, 1.0, 3.0):
    row(f"MoE + aux loss {weight}", dict(SWITCH, aux_weight=weight), recipe)
print("\na second table (its facts drawn with another seed):")
other = dataclasses.replace(recipe, table_seed=1)
for name in ("dense F", "MoE, no balancing", "MoE + aux loss"):
    row(name, VARIANTS[name], other)
