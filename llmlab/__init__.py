"""llmlab: the helper package of the LLM Training Lab course.

Modules, bottom to top (a module imports only those below it; tests/test_layers.py enforces it):
underneath everything env (what this machine is), device, units (GB, MB), timing, matmul,
gpu_specs, tables, network, numerics, files (atomic writes, checksums), profiler and vocab_sizes;
then data -> models, kernels -> evaluate (metrics) -> memory -> scale (the planner, never
torch.distributed) -> distributed (what runs on the ranks) -> train / jobs (what surrounds a job;
never the trainer; only cli and course import it) -> prune, quant (never prune) -> inference ->
recipes -> plots, course, cli.
"""

from llmlab._quiet import silence_third_party_noise
from llmlab.kernels import use_interpreter_without_driver
from llmlab.network import apply_network_policy

__version__ = "0.1.0"

silence_third_party_noise()
apply_network_policy()  # before transformers/datasets are imported anywhere
use_interpreter_without_driver()  # before triton is imported anywhere (torch.compile imports it)
