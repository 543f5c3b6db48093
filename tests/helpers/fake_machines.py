"""Fake machine reports for tests: a healthy CPU laptop, CUDA boxes, an 8 x H100 node, and the
GPUs learners rent (their memory as torch reports it, a little below the marketed size)."""

import dataclasses

from llmlab import env
from llmlab.env import CpuInfo, EnvReport, FrameworkInfo, GpuInfo
from llmlab.units import GB

ALL_PACKAGES = {name: "1.0" for name in env.COURSE_PACKAGES}

T4 = GpuInfo(0, "Tesla T4", (7, 5), int(15.8 * GB), 40)
RTX_4060 = GpuInfo(0, "NVIDIA GeForce RTX 4060", (8, 9), int(8.6 * GB), 24)
RTX_3060 = GpuInfo(0, "NVIDIA GeForce RTX 3060", (8, 6), int(12.6 * GB), 28)
RTX_4080 = GpuInfo(0, "NVIDIA GeForce RTX 4080", (8, 9), int(17.2 * GB), 76)
L4 = GpuInfo(0, "NVIDIA L4", (8, 9), int(24.1 * GB), 58)
A100_40GB = GpuInfo(0, "NVIDIA A100-SXM4-40GB", (8, 0), int(42.3 * GB), 108)
A100_80GB = GpuInfo(0, "NVIDIA A100-SXM4-80GB", (8, 0), int(85.1 * GB), 108)
H100 = GpuInfo(0, "NVIDIA H100 80GB HBM3", (9, 0), int(85.0 * GB), 132)


def make_report(**overrides) -> EnvReport:
    """A healthy CPU laptop with the whole course stack; tests override what they break."""
    report = EnvReport(
        python="3.11.9",
        platform="Linux-6.8-x86_64",
        cpu=CpuInfo("Fake CPU", 8, 4, ("sse4_2", "avx", "avx2", "fma"), "AVX2"),
        ram_total_bytes=16 * GB,
        ram_available_bytes=12 * GB,
        ram_limit_file=None,
        disk_free_bytes=100 * GB,
        torch_version="2.13.0+cpu",
        torch_build="cpu",
        cuda_runtime=None,
        hip_runtime=None,
        cudnn_version=None,
        nccl_available=False,
        nccl_version=None,
        nvidia_device_present=False,
        driver_version=None,
        driver_cuda_version=None,
        gpus=[],
        interconnect=None,
        packages=dict(ALL_PACKAGES),
        frameworks=[FrameworkInfo("tensorflow", None, None, "not installed")],
    )
    return dataclasses.replace(report, **overrides)


def fake_gpu(index: int = 0, name: str = H100.name, capability=H100.capability) -> GpuInfo:
    return dataclasses.replace(H100, index=index, name=name, capability=capability)


def gpus(model: GpuInfo, count: int = 1) -> list[GpuInfo]:
    """`count` GPUs of one model, numbered from 0."""
    return [dataclasses.replace(model, index=index) for index in range(count)]


def cuda_box(**overrides) -> EnvReport:
    """A CUDA 12.8 build of torch on a machine with a driver; the GPUs are up to each test."""
    defaults = dict(
        torch_version="2.13.0+cu128",
        torch_build="cuda",
        cuda_runtime="12.8",
        nccl_available=True,
        nvidia_device_present=True,
        driver_version="570.86.15",
        driver_cuda_version="12.8",
    )
    return make_report(**{**defaults, **overrides})


def h100_box() -> EnvReport:
    return cuda_box(
        gpus=gpus(H100, 8),
        cudnn_version="9.10.2",
        nccl_version="2.27.3",
        interconnect="NVLink (NV18) between all pairs",
        network_interfaces=("eth0", "ib0", "lo"),
        infiniband_devices=tuple(f"mlx5_{index}" for index in range(8)),
        nvlink_links=8 * 18,  # 18 NVLink 4 links per H100 SXM, each to the node's NVSwitches
    )
