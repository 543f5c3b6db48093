"""An Accelerate config file for N processes on one machine, for `accelerate launch`.

What `accelerate launch` really starts on a machine without a GPU (measured with accelerate 1.15):
- `--cpu --num_processes 2`, or a config with `distributed_type: MULTI_CPU`, starts ONE process:
  Accelerate starts several CPU processes only through MPI (`--mpirun_hostfile`);
- `distributed_type: MULTI_GPU` starts N processes through torchrun (RANK and WORLD_SIZE set) on
  a CPU too, but an `Accelerator()` in each finds no GPU and trains alone (num_processes 1);
- the same launch with `Accelerator(cpu=True)` in the script joins one gloo group of N.
So the file written here is always MULTI_GPU (torchrun), and a script that may run on a CPU asks
for it: `Accelerator(cpu=not torch.cuda.is_available())`.
"""

import json
from pathlib import Path

from llmlab.files import write_atomically

MIXED_PRECISION = ("no", "fp16", "bf16")


def accelerate_config(num_processes: int, mixed_precision: str = "no", port: int = 0) -> dict:
    """The config for `num_processes` processes on this machine (port 0: Accelerate picks one)."""
    if not isinstance(num_processes, int) or num_processes < 2:
        raise ValueError(f"num_processes must be 2 or more, got {num_processes!r}: one process "
                         "needs no config (`accelerate launch script.py`, or plain python)")
    if mixed_precision not in MIXED_PRECISION:
        raise ValueError(f"mixed_precision {mixed_precision!r}: use one of {MIXED_PRECISION}")
    if not isinstance(port, int) or not 0 <= port < 65536:
        raise ValueError(f"port {port!r} is not a TCP port (0 for any free one, or 1-65535)")
    return {"compute_environment": "LOCAL_MACHINE", "distributed_type": "MULTI_GPU",
            "num_processes": num_processes, "num_machines": 1, "machine_rank": 0,
            "gpu_ids": "all", "mixed_precision": mixed_precision, "use_cpu": False,
            "main_process_port": port}


def write_accelerate_config(path: str | Path, num_processes: int, **options) -> Path:
    """Write the config as JSON (Accelerate reads .json as well as .yaml): `accelerate launch
    --config_file PATH script.py`. Returns the path."""
    path = Path(path)
    if path.suffix != ".json":
        raise ValueError(f"{path}: name it *.json (Accelerate reads a config's format from its "
                         "suffix)")
    config = accelerate_config(num_processes, **options)
    write_atomically(path, (json.dumps(config, indent=2) + "\n").encode())
    return path
