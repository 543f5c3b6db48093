"""llmlab: the helper package of the LLM Training Lab course.

Modules, bottom to top (a module imports only those below it):
env, device, bench, network, distributed -> data -> models -> memory -> train -> prune, quant
-> evaluate -> plots, course, cli.
"""

from llmlab._quiet import silence_third_party_noise
from llmlab.network import apply_network_policy

__version__ = "0.1.0"

silence_third_party_noise()
apply_network_policy()  # before transformers/datasets are imported anywhere
