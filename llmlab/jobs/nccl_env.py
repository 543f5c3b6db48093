"""The environment variables that steer NCCL, gloo and torch.distributed, and the common mistakes.

`VARIABLES` says, for each variable, what it does, when to set it, a typical value and its
counterpart on the other backend; `explain(environ)` lists the ones set, with that meaning.
`comm_problems(environ, report)` finds settings that contradict the machine (an interface that
does not exist, P2P switched off between NVLink-connected GPUs, InfiniBand switched off where it
exists): a pure function of the variables and the facts `llmlab.env.collect` gathered, so it is
tested on CPU with fake machines. `llmlab doctor` prints both.

Names and meanings as documented by NVIDIA (NCCL User Guide, "Environment Variables" and
"Logging"), by PyTorch (torch.distributed "Common environment variables", "PYTORCH
ProcessGroupNCCL Environment Variables") and read in gloo's source (GLOO_LOG_LEVEL,
GLOO_DEVICE_TRANSPORT).
"""

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from llmlab.env import EnvReport, Problem


@dataclass(frozen=True)
class CommVariable:
    name: str
    backend: str  # who reads it: "nccl", "gloo" or "torch" (torch.distributed itself)
    what: str
    when: str
    typical: str
    counterpart: str  # the variable doing the same job on the other backend, or "none"


VARIABLES: tuple[CommVariable, ...] = (
    CommVariable(
        "NCCL_DEBUG", "nccl",
        "how much NCCL logs: VERSION, WARN, INFO (the interfaces, transports and rings it "
        "chose), TRACE (every call; needs a NCCL built with tracing)",
        "INFO while a job hangs at start-up or runs slower than expected; WARN otherwise",
        "WARN", "GLOO_LOG_LEVEL",
    ),
    CommVariable(
        "NCCL_DEBUG_SUBSYS", "nccl",
        "which parts of NCCL log at INFO: a comma list of INIT, COLL, P2P, SHM, NET, GRAPH, "
        "TUNING, ENV, ALL ...",
        "with NCCL_DEBUG=INFO, to keep only what matters: COLL for a hang in a collective, "
        "GRAPH when topology detection goes wrong",
        "INIT,NET", "none",
    ),
    CommVariable(
        "NCCL_SOCKET_IFNAME", "nccl",
        "which IP interfaces NCCL uses to bootstrap and for socket traffic: comma-separated "
        "name prefixes ('eth' takes eth0, eth1), '=' before the list for exact names, '^' "
        "before it to exclude",
        "when nodes cannot reach each other on the interface NCCL picked (a docker bridge, a "
        "management network): name the one that connects them",
        "=eth0", "GLOO_SOCKET_IFNAME",
    ),
    CommVariable(
        "NCCL_IB_DISABLE", "nccl",
        "1 stops NCCL from using InfiniBand/RoCE verbs: traffic between nodes goes over TCP "
        "sockets instead",
        "only to test whether a failure comes from the InfiniBand set-up; it costs most of the "
        "inter-node bandwidth",
        "0 (unset)", "none (gloo always uses TCP)",
    ),
    CommVariable(
        "NCCL_IB_HCA", "nccl",
        "which InfiniBand adapters (HCAs) NCCL uses, in NCCL_SOCKET_IFNAME's syntax, a port "
        "after ':' (mlx5_0:1)",
        "on nodes with adapters NCCL should not use (a storage network) or to pin GPUs to "
        "their nearest adapters",
        "=mlx5_0,mlx5_1", "none",
    ),
    CommVariable(
        "NCCL_NET_GDR_LEVEL", "nccl",
        "how close a GPU and an adapter must be (LOC, PIX, PXB, PHB, SYS) for NCCL to use "
        "GPUDirect RDMA, the adapter reading GPU memory directly",
        "rarely: NCCL picks it from the topology; lower it if GPUDirect RDMA misbehaves",
        "PXB", "none",
    ),
    CommVariable(
        "NCCL_P2P_DISABLE", "nccl",
        "1 stops direct GPU-to-GPU copies (over NVLink or PCIe) inside a node: data goes "
        "through host memory instead",
        "only on machines whose PCIe peer-to-peer is broken (some consumer boards and VMs hang "
        "without it); never on NVLink machines",
        "0 (unset)", "none (gloo moves CPU tensors)",
    ),
    CommVariable(
        "NCCL_P2P_LEVEL", "nccl",
        "the farthest GPU pair that still uses direct copies: LOC (never), NVL, PIX, PXB, PHB, "
        "SYS; the finer tool than NCCL_P2P_DISABLE",
        "to keep P2P over NVLink but not across a PCIe path that misbehaves (NVL)",
        "NVL", "none",
    ),
    CommVariable(
        "TORCH_NCCL_ASYNC_ERROR_HANDLING", "torch",
        "what torch's NCCL watchdog does when a collective fails or times out: 0 nothing, "
        "1 abort the communicator and end the process, 2 abort only, 3 end the process "
        "(the default); NCCL_ASYNC_ERROR_HANDLING is its deprecated name",
        "leave the default so that a hung rank ends the job (and an elastic agent can restart "
        "it) instead of waiting forever",
        "3 (default)", "none (gloo raises in the calling thread after the group's timeout)",
    ),
    CommVariable(
        "TORCH_DISTRIBUTED_DEBUG", "torch",
        "OFF, INFO or DETAIL: extra checks and logs in torch.distributed; DETAIL checks that "
        "every rank calls the same collective with the same shapes",
        "DETAIL to find a rank that calls a different collective (a hang); INFO for DDP's "
        "unused-parameter reports; OFF in production (DETAIL costs speed)",
        "OFF", "the same variable (it covers both backends)",
    ),
    CommVariable(
        "GLOO_SOCKET_IFNAME", "gloo",
        "which interfaces gloo uses: exact names, comma-separated (gloo spreads operations "
        "over them in turn; every process must list as many)",
        "when gloo binds to the wrong address (often the loopback on multi-node jobs)",
        "eth0", "NCCL_SOCKET_IFNAME",
    ),
    CommVariable(
        "GLOO_DEVICE_TRANSPORT", "gloo",
        "gloo's transport: TCP (Linux default), UV (libuv, macOS and Windows), TCP_TLS",
        "rarely: the default suits the platform",
        "TCP", "none",
    ),
    CommVariable(
        "GLOO_LOG_LEVEL", "gloo",
        "how much gloo logs: DEBUG, INFO, WARN (default); any other text, lower case included, "
        "means ERROR",
        "INFO to see gloo's connections while debugging a CPU run",
        "WARN", "NCCL_DEBUG",
    ),
    CommVariable(
        "MASTER_ADDR", "torch",
        "the address of rank 0's store, where every process meets at start-up "
        "(init_method='env://'; torchrun sets it)",
        "when launching by hand (srun alone, a notebook): an address every node can reach",
        "the first node's hostname", "the same variable (it serves both backends)",
    ),
    CommVariable(
        "MASTER_PORT", "torch",
        "the port of that store on MASTER_ADDR",
        "with MASTER_ADDR; any free port, the same on every node",
        "29500", "the same variable (it serves both backends)",
    ),
)
BY_NAME = {variable.name: variable for variable in VARIABLES}
DEPRECATED = {"NCCL_ASYNC_ERROR_HANDLING": "TORCH_NCCL_ASYNC_ERROR_HANDLING"}

NCCL_DEBUG_LEVELS = ("VERSION", "WARN", "INFO", "TRACE")  # NCCL reads them in any case
GLOO_LOG_LEVELS = ("DEBUG", "INFO", "WARN")  # gloo compares them exactly: "info" means ERROR
TORCH_DEBUG_LEVELS = ("OFF", "INFO", "DETAIL")  # torch reads them in any case


def explain(environ: Mapping[str, str] | None = None) -> list[tuple[CommVariable, str]]:
    """The variables of `VARIABLES` set in `environ` (default: this process's), with their
    values, in the table's order; a deprecated name counts as the variable it stands for."""
    environ = os.environ if environ is None else environ
    found = []
    for variable in VARIABLES:
        names = [variable.name, *(old for old, new in DEPRECATED.items() if new == variable.name)]
        found += [(variable, f"{name}={environ[name]}") for name in names if name in environ]
    return found


def format_explanation(environ: Mapping[str, str] | None = None) -> str:
    """One line per set variable with what it does, or a line saying that none is set."""
    found = explain(environ)
    if not found:
        return "none set: NCCL and gloo choose interfaces, transports and log levels themselves"
    return "\n".join(f"{setting}: {variable.what}" for variable, setting in found)


# ---------------------------------------------------------------- checks against the machine


def select_interfaces(spec: str, names: Sequence[str]) -> list[str]:
    """The names of `names` that an NCCL list (NCCL_SOCKET_IFNAME, NCCL_IB_HCA) selects.

    NCCL's syntax: comma-separated prefixes ("eth" matches eth0); "=" before the list makes them
    exact names; "^" before that excludes them instead; ":<port>" after a name picks a port of
    an adapter and plays no part in matching."""
    exclude = spec.startswith("^")
    body = spec.removeprefix("^")
    exact = body.startswith("=")
    items = [item.split(":")[0].strip() for item in body.removeprefix("=").split(",")]
    items = [item for item in items if item]

    def listed(name: str) -> bool:
        return any(name == item if exact else name.startswith(item) for item in items)

    return [name for name in names if listed(name) != exclude]


def _listing(names: Sequence[str]) -> str:
    return ", ".join(names) if names else "none"


def _nccl_interface_problem(spec: str, interfaces: Sequence[str]) -> list[Problem]:
    if select_interfaces(spec, interfaces):
        return []
    usable = [name for name in interfaces if name != "lo"] or list(interfaces)
    example = f"={usable[0]}" if usable else "=<interface>"
    return [Problem(
        "warning",
        f"NCCL_SOCKET_IFNAME={spec} selects none of this machine's network interfaces "
        f"({_listing(interfaces)}): NCCL stops at start-up with 'Bootstrap : no socket "
        "interface found'",
        f"name the interface that connects the nodes (`ip addr` lists them; e.g. "
        f"NCCL_SOCKET_IFNAME={example}), or unset it and let NCCL choose",
    )]


def _gloo_interface_problem(value: str, interfaces: Sequence[str]) -> list[Problem]:
    missing = [name.strip() for name in value.split(",") if name.strip() not in interfaces]
    if not missing:
        return []
    prefix_note = ""
    if any(name.startswith(item) for item in missing for name in interfaces):
        prefix_note = " (gloo takes exact names, not NCCL's prefixes)"
    return [Problem(
        "warning",
        f"GLOO_SOCKET_IFNAME={value} names {_listing(missing)}, which this machine does not "
        f"have{prefix_note}; its interfaces: {_listing(interfaces)}. gloo stops at start-up "
        f"with 'Unable to find address for: {missing[0]}'",
        "set it to exact interface names from `ip addr` (the same count on every node), or "
        "unset it",
    )]


def _p2p_disabled(environ: Mapping[str, str]) -> str | None:
    """The setting that switches NCCL's GPU-to-GPU copies off, if one does."""
    if environ.get("NCCL_P2P_DISABLE", "").strip() == "1":
        return "NCCL_P2P_DISABLE=1"
    level = environ.get("NCCL_P2P_LEVEL", "").strip().upper()
    return f"NCCL_P2P_LEVEL={level}" if level in ("LOC", "0") else None


def _p2p_problem(environ: Mapping[str, str], nvlink_links: int | None) -> list[Problem]:
    setting = _p2p_disabled(environ)
    if setting is None or not nvlink_links:
        return []
    return [Problem(
        "warning",
        f"{setting} on GPUs connected by NVLink ({nvlink_links} active links): NCCL copies "
        "between them through host memory instead, at a fraction of NVLink's bandwidth",
        "unset it; it is a workaround for broken PCIe peer-to-peer, and NVLink does not need "
        "it (to avoid only a PCIe path, use NCCL_P2P_LEVEL=NVL)",
    )]


def _infiniband_problems(environ: Mapping[str, str], devices: Sequence[str]) -> list[Problem]:
    problems = []
    if environ.get("NCCL_IB_DISABLE", "").strip() == "1" and devices:
        problems.append(Problem(
            "warning",
            f"NCCL_IB_DISABLE=1 on a machine with InfiniBand/RoCE adapters ({_listing(devices)}):"
            " NCCL sends traffic between nodes over TCP sockets instead of RDMA, many times "
            "slower",
            "unset it (keep it only while testing whether the InfiniBand set-up is at fault); "
            "to choose adapters, use NCCL_IB_HCA",
        ))
    spec = environ.get("NCCL_IB_HCA", "").strip()
    if spec and not select_interfaces(spec, devices):
        problems.append(Problem(
            "warning",
            f"NCCL_IB_HCA={spec} selects none of this machine's InfiniBand adapters "
            f"({_listing(devices)}): NCCL falls back to TCP sockets, or fails",
            "name adapters listed in /sys/class/infiniband (`ibv_devices`), or unset it",
        ))
    return problems


def _level_problems(environ: Mapping[str, str]) -> list[Problem]:
    problems = []
    nccl_debug = environ.get("NCCL_DEBUG", "").strip().upper()
    if nccl_debug in ("INFO", "TRACE"):
        problems.append(Problem(
            "info",
            f"NCCL_DEBUG={nccl_debug}: every rank logs its topology, rings and transports, "
            "thousands of lines on a large job",
            "fine while debugging; use NCCL_DEBUG=WARN for production runs",
        ))
    elif nccl_debug and nccl_debug not in NCCL_DEBUG_LEVELS:
        problems.append(Problem(
            "warning",
            f"NCCL_DEBUG={environ['NCCL_DEBUG']} is not a level NCCL knows",
            f"use one of {', '.join(NCCL_DEBUG_LEVELS)}",
        ))
    gloo_level = environ.get("GLOO_LOG_LEVEL")
    if gloo_level is not None and gloo_level not in GLOO_LOG_LEVELS:
        problems.append(Problem(
            "warning",
            f"GLOO_LOG_LEVEL={gloo_level} is not one of {', '.join(GLOO_LOG_LEVELS)} (upper "
            "case): gloo reads it as ERROR and logs less, not more",
            "write DEBUG, INFO or WARN exactly",
        ))
    torch_debug = environ.get("TORCH_DISTRIBUTED_DEBUG")
    if torch_debug is not None and torch_debug.strip().upper() not in TORCH_DEBUG_LEVELS:
        problems.append(Problem(
            "warning",
            f"TORCH_DISTRIBUTED_DEBUG={torch_debug}: init_process_group will refuse it "
            "(ValueError)",
            f"use one of {', '.join(TORCH_DEBUG_LEVELS)}",
        ))
    return problems


def _rendezvous_problems(environ: Mapping[str, str]) -> list[Problem]:
    problems = [
        Problem(
            "info",
            f"{old} is the deprecated name of {new}",
            f"set {new} instead (torch still reads the old name, with a warning)",
        )
        for old, new in DEPRECATED.items()
        if old in environ
    ]
    port = environ.get("MASTER_PORT", "").strip()
    if port and not (port.isdigit() and 0 < int(port) < 65536):
        problems.append(Problem(
            "warning",
            f"MASTER_PORT={port} is not a TCP port",
            "set a free port number between 1024 and 65535, the same on every node "
            "(torchrun uses 29500)",
        ))
    return problems


def comm_problems(environ: Mapping[str, str], report: EnvReport) -> list[Problem]:
    """What is wrong with the NCCL/gloo variables in `environ` on the machine `report`
    describes, each with what to do (a pure function: the doctor gathers both)."""
    problems = []
    interfaces = report.network_interfaces
    nccl_ifname = environ.get("NCCL_SOCKET_IFNAME", "").strip()
    if nccl_ifname and interfaces is not None:
        problems += _nccl_interface_problem(nccl_ifname, interfaces)
    gloo_ifname = environ.get("GLOO_SOCKET_IFNAME", "").strip()
    if gloo_ifname and interfaces is not None:
        problems += _gloo_interface_problem(gloo_ifname, interfaces)
    problems += _p2p_problem(environ, report.nvlink_links)
    problems += _infiniband_problems(environ, report.infiniband_devices)
    return problems + _level_problems(environ) + _rendezvous_problems(environ)
