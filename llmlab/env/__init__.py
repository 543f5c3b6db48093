"""What this machine is, for `llmlab doctor` and the labs: `probe` gathers the facts into an
`EnvReport` (`interconnect` the links between GPUs and machines), `diagnose` finds what is wrong
with them and says what to do, `report` lays them out as text or JSON. The units every package
uses (GB, MB) are `llmlab.units`'.
"""

from llmlab.env.diagnose import Problem, diagnose
from llmlab.env.interconnect import (
    infiniband_devices,
    network_interfaces,
    nvlink_active_links,
    summarize_topology,
)
from llmlab.env.probe import (
    COURSE_PACKAGES,
    OPTIONAL_PACKAGES,
    REQUIRED_PACKAGES,
    CpuInfo,
    EnvReport,
    FrameworkInfo,
    GpuInfo,
    MemoryLimit,
    collect,
    container_memory_limit,
    cpu_info,
    nvidia_smi,
    usable_ram,
    visible_gpus,
)
from llmlab.env.report import format_report, report_to_dict

__all__ = [
    "COURSE_PACKAGES", "OPTIONAL_PACKAGES", "REQUIRED_PACKAGES", "CpuInfo", "EnvReport",
    "FrameworkInfo", "GpuInfo", "MemoryLimit", "Problem", "collect", "container_memory_limit",
    "cpu_info", "diagnose", "format_report", "infiniband_devices", "network_interfaces",
    "nvidia_smi", "nvlink_active_links", "report_to_dict", "summarize_topology", "usable_ram",
    "visible_gpus",
]
