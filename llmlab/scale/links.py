"""Interconnects as an alpha-beta pair: a start-up latency alpha (seconds per message) and a
bandwidth beta (bytes per second, per GPU, in one direction).

Vendors quote NVLink in GB/s summed over both directions, and network cards in Gb/s (bits) per
direction. Both are converted here, once, to bytes per second in one direction, so nothing
downstream has to remember which was which. Latencies are typical figures for a small NCCL
message, not datasheet numbers: they only matter for small messages and many hops.
"""

from collections.abc import Sequence
from dataclasses import dataclass

BITS_PER_BYTE = 8


def gbit_to_bytes(gbit_per_s: float) -> float:
    """Network speeds are bits: 400 Gb/s is 50 GB/s."""
    return gbit_per_s * 1e9 / BITS_PER_BYTE


def bidirectional_gbs_to_bytes(gb_per_s_both_ways: float) -> float:
    """NVLink's quoted figure counts both directions: 900 GB/s is 450 GB/s each way."""
    return gb_per_s_both_ways * 1e9 / 2


@dataclass(frozen=True)
class Link:
    name: str
    bandwidth: float  # bytes per second, per GPU, one direction (beta)
    latency: float  # seconds per message (alpha)
    source: str = ""

    def __post_init__(self) -> None:
        if not self.bandwidth > 0 or not self.latency >= 0:
            raise ValueError(f"link {self.name!r} needs a positive bandwidth and a latency >= 0, "
                             f"got {self.bandwidth} B/s and {self.latency} s")

    def seconds(self, nbytes: float, messages: int = 1) -> float:
        """alpha-beta time of `messages` sends that carry `nbytes` in all."""
        return messages * self.latency + nbytes / self.bandwidth


LINKS: dict[str, Link] = {
    "nvlink4": Link("NVLink 4 (H100 SXM)", bidirectional_gbs_to_bytes(900), 3e-6,
                    "NVIDIA H100 datasheet: 900 GB/s NVLink per GPU, both directions"),
    "nvlink3": Link("NVLink 3 (A100 SXM)", bidirectional_gbs_to_bytes(600), 3e-6,
                    "NVIDIA A100 datasheet: 600 GB/s NVLink per GPU, both directions"),
    # PCIe x16: 16 GT/s (gen 4) or 32 GT/s (gen 5) per lane, 128b/130b encoding.
    "pcie4": Link("PCIe 4.0 x16", 16e9 * 16 * 128 / 130 / BITS_PER_BYTE, 5e-6,
                  "PCI-SIG: 16 GT/s per lane, 128b/130b encoding"),
    "pcie5": Link("PCIe 5.0 x16", 32e9 * 16 * 128 / 130 / BITS_PER_BYTE, 5e-6,
                  "PCI-SIG: 32 GT/s per lane, 128b/130b encoding"),
    "ib-hdr": Link("InfiniBand HDR, 200 Gb/s per GPU", gbit_to_bytes(200), 5e-6,
                   "DGX A100: eight 200 Gb/s HDR adapters, one per GPU (Selene, Narayanan 2021)"),
    "ib-ndr": Link("InfiniBand NDR, 400 Gb/s per GPU", gbit_to_bytes(400), 5e-6,
                   "DGX H100: eight 400 Gb/s NDR adapters, one per GPU"),
    "roce-400": Link("RoCE, 400 Gb/s per GPU", gbit_to_bytes(400), 10e-6,
                     "Llama 3 (Meta 2024), section 3.3.1: 400 Gbps RoCE between GPUs"),
}


def fit_link(name: str, sizes: Sequence[float], seconds: Sequence[float]) -> Link:
    """The Link whose alpha-beta line best fits measured one-message times (least squares of
    t = alpha + S / beta): alpha is the intercept (0 if the fit goes below), beta one over the
    slope."""
    if len(sizes) != len(seconds) or len(set(sizes)) < 2:
        raise ValueError(f"need one time per size and two sizes or more, got {len(sizes)} sizes "
                         f"({len(set(sizes))} different) and {len(seconds)} times")
    n = len(sizes)
    mean_s, mean_t = sum(sizes) / n, sum(seconds) / n
    slope = (sum((s - mean_s) * (t - mean_t) for s, t in zip(sizes, seconds, strict=True))
             / sum((s - mean_s) ** 2 for s in sizes))
    if not slope > 0:
        raise ValueError("the times do not grow with the message size: measure larger messages "
                         "(the bandwidth term must outgrow the noise)")
    return Link(name, 1 / slope, max(0.0, mean_t - slope * mean_s), "fitted to measured times")


def link(name: str | Link) -> Link:
    """A preset by name, or a Link as it is."""
    if isinstance(name, Link):
        return name
    if name not in LINKS:
        raise ValueError(f"unknown link {name!r}: use one of {', '.join(LINKS)}, or a Link(...)")
    return LINKS[name]
