"""How the GPUs and machines are linked: NVLink or PCIe between the GPUs (`nvidia-smi topo -m`,
NVML), and the network interfaces and InfiniBand/RoCE adapters that NCCL and gloo would use.

Its own module because multi-GPU and multi-node training (and `llmlab.jobs.nccl_env`'s advice)
turn on these links, while a single-GPU learner never needs them.
"""

import re
from pathlib import Path
from types import ModuleType

INFINIBAND_ROOT = Path("/sys/class/infiniband")  # one entry per InfiniBand/RoCE adapter (Linux)


def _is_square_gpu_matrix(rows: list[list[str]]) -> bool:
    """Each GPU row has a cell per GPU, with "X" (itself) on the diagonal."""
    return len(rows) >= 2 and all(
        len(row) > len(rows) and row[1 + index] == "X" for index, row in enumerate(rows)
    )


def summarize_topology(matrix_text: str) -> str:
    """One line about the GPU-to-GPU links in `nvidia-smi topo -m`; the raw matrix if unparsable."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", matrix_text)  # newer nvidia-smi underlines the headers
    rows = [line.split() for line in text.splitlines() if re.match(r"GPU\d+\s", line)]
    if not _is_square_gpu_matrix(rows):
        return text.strip()
    count = len(rows)
    links = [rows[i][1 + j] for i in range(count) for j in range(i + 1, count)]
    nvlinks = sorted({link for link in links if link.startswith("NV")})
    others = sorted({link for link in links if not link.startswith("NV")})
    if not nvlinks:
        return f"PCIe only ({', '.join(others)})"
    if not others:
        return f"NVLink ({', '.join(nvlinks)}) between all pairs"
    nvlink_pairs = sum(link.startswith("NV") for link in links)
    return (
        f"NVLink ({', '.join(nvlinks)}) between {nvlink_pairs} of {len(links)} pairs, "
        f"PCIe ({', '.join(others)}) otherwise"
    )


def network_interfaces() -> tuple[str, ...]:
    """The network interfaces that have an address, e.g. ("eth0", "lo"): those NCCL and gloo
    can bind to."""
    import psutil  # imported here: the doctor must still run when psutil is missing

    return tuple(sorted(psutil.net_if_addrs()))


def infiniband_devices(root: Path = INFINIBAND_ROOT) -> tuple[str, ...]:
    """The InfiniBand (and RoCE) adapters the kernel lists, e.g. ("mlx5_0", "mlx5_1")."""
    return tuple(sorted(path.name for path in root.iterdir())) if root.is_dir() else ()


def nvlink_active_links(nvml: ModuleType | None = None) -> int | None:
    """Active NVLink links summed over this machine's GPUs, read through NVML (nvidia-ml-py);
    0 where the GPUs talk over PCIe only, None where NVML cannot say (no driver, no nvidia-ml-py).
    `nvml` stands in for the pynvml module (tests pass a fake)."""
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            return None
    try:
        nvml.nvmlInit()
    except nvml.NVMLError:
        return None
    try:
        return sum(
            _active_links(nvml, nvml.nvmlDeviceGetHandleByIndex(index))
            for index in range(nvml.nvmlDeviceGetCount())
        )
    except nvml.NVMLError:
        return None
    finally:
        nvml.nvmlShutdown()


def _active_links(nvml: ModuleType, handle: object) -> int:
    active = 0
    for link in range(nvml.NVML_NVLINK_MAX_LINKS):
        try:
            state = nvml.nvmlDeviceGetNvLinkState(handle, link)
        except nvml.NVMLError:  # a link this GPU does not have; on a PCIe card, every link
            continue
        active += state == nvml.NVML_FEATURE_ENABLED
    return active
