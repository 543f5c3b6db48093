"""Where this process stands, read from the variables its launcher set.

A launcher starts the copies of a training script and tells each one its place through
environment variables, under its own names:
- `torchrun` sets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT for every worker;
  DeepSpeed's launcher (`deepspeed`) sets the same names, and its node's number as CROSS_RANK
  where torchrun says GROUP_RANK;
- SLURM's `srun`, used alone (one task per GPU, no torchrun), sets SLURM_PROCID (the rank),
  SLURM_LOCALID (the rank on its node), SLURM_NTASKS (the world size), SLURM_NODEID and the job's
  hosts in SLURM_JOB_NODELIST, but no address to meet at: the first host is the usual choice.

`launcher_env(environ)` turns either set into one `LauncherEnv`, or None when no launcher started
this process. It is a pure function of the dict it is given, so it is tested without a cluster.
Start SLURM tasks with srun: a script run straight from a batch script of several tasks may see
the job's SLURM_NTASKS and then wait for partners that were never started.
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass

# torchrun's default rendezvous port; also used when SLURM gives no job id to derive one from.
DEFAULT_PORT = 29500
# Two jobs sharing a node must not meet at the same port: one per job id, in a range of
# unprivileged ports above the usual ephemeral ones' start (Linux hands those out from 32768).
JOB_PORT_BASE, JOB_PORT_SPAN = 12000, 20000


@dataclass(frozen=True)
class LauncherEnv:
    launcher: str  # "torchrun", "deepspeed" or "slurm"
    rank: int  # this process among all processes
    local_rank: int  # this process on its node: which GPU it drives
    world_size: int
    node_rank: int  # which node this process runs on (0 for the first)
    master_addr: str  # where rank 0 listens for the others to join
    master_port: int

    def torchrun_variables(self) -> dict[str, str]:
        """The same place under torchrun's names, which torch.distributed's env:// reads."""
        return {"RANK": str(self.rank), "LOCAL_RANK": str(self.local_rank),
                "WORLD_SIZE": str(self.world_size), "MASTER_ADDR": self.master_addr,
                "MASTER_PORT": str(self.master_port)}


def launcher_env(environ: Mapping[str, str]) -> LauncherEnv | None:
    """This process's place from torchrun's variables, else from srun's; None if neither is set.

    torchrun's come first: `srun torchrun ...` sets both, and there SLURM_PROCID numbers the
    torchrun agents (one per node), not the training processes torchrun starts.
    """
    if "RANK" in environ or "WORLD_SIZE" in environ:
        return _from_torchrun(environ)
    if "SLURM_PROCID" in environ and "SLURM_NTASKS" in environ:
        return _from_slurm(environ)
    return None


def _from_torchrun(environ: Mapping[str, str]) -> LauncherEnv:
    launcher = "torchrun (or another launcher using its names)"
    if "WORLD_SIZE" not in environ:  # RANK alone: a place in which world?
        _require(environ, ("RANK", "WORLD_SIZE"), launcher)
    world = _integer(environ, "WORLD_SIZE", least=1)
    if world > 1:  # a lone process meets nobody, so it needs no rank nor address
        _require(environ, ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"), launcher)
    rank = _integer(environ, "RANK") if "RANK" in environ else 0
    local = _integer(environ, "LOCAL_RANK") if "LOCAL_RANK" in environ else rank
    # The node's number: torchrun's name for it, else DeepSpeed's launcher's.
    node_name = next((n for n in ("GROUP_RANK", "CROSS_RANK") if n in environ), None)
    node = _integer(environ, node_name) if node_name else 0
    address = environ.get("MASTER_ADDR", "127.0.0.1")
    port = _integer(environ, "MASTER_PORT", least=1) if "MASTER_PORT" in environ else DEFAULT_PORT
    name = "deepspeed" if node_name == "CROSS_RANK" else "torchrun"
    return _checked(name, rank, local, world, node, address, port, "RANK", "LOCAL_RANK")


def _from_slurm(environ: Mapping[str, str]) -> LauncherEnv:
    need = ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NODEID")
    _require(environ, need, "srun")
    rank, world = _integer(environ, "SLURM_PROCID"), _integer(environ, "SLURM_NTASKS", least=1)
    local, node = _integer(environ, "SLURM_LOCALID"), _integer(environ, "SLURM_NODEID")
    if "SLURM_NNODES" in environ and node >= _integer(environ, "SLURM_NNODES", least=1):
        raise ValueError(
            f"SLURM_NODEID={node} is not below SLURM_NNODES={environ['SLURM_NNODES']}: the "
            "variables come from different jobs or steps; run the script through srun"
        )
    # Variables set by hand win, so a user can pick the address and port (or test locally).
    address = environ.get("MASTER_ADDR") or first_host(_nodelist(environ))
    if "MASTER_PORT" in environ:
        port = _integer(environ, "MASTER_PORT", least=1)
    elif "SLURM_JOB_ID" in environ:
        port = JOB_PORT_BASE + _integer(environ, "SLURM_JOB_ID") % JOB_PORT_SPAN
    else:
        port = DEFAULT_PORT
    return _checked("slurm", rank, local, world, node, address, port,
                    "SLURM_PROCID", "SLURM_LOCALID")


def _nodelist(environ: Mapping[str, str]) -> str:
    # A job step may run on fewer nodes than the job holds: its own list comes first.
    for name in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"):
        if environ.get(name):
            return environ[name]
    raise ValueError(
        "srun set SLURM_PROCID but no SLURM_JOB_NODELIST, so there is no host for rank 0 to "
        "listen on: set MASTER_ADDR to the first node's address"
    )


def _checked(launcher, rank, local, world, node, address, port, rank_name, local_name):
    if rank >= world:
        raise ValueError(f"{rank_name}={rank} is not below the world size {world}: the "
                         "launcher's variables disagree; start the script with the launcher")
    if local > rank:
        raise ValueError(f"{local_name}={local} is above {rank_name}={rank}: a process's place "
                         "on its node cannot exceed its place among all processes")
    if not 0 < port < 65536:
        raise ValueError(f"port {port} is not a TCP port (1-65535): set MASTER_PORT")
    return LauncherEnv(launcher, rank, local, world, node, address, port)


def _require(environ: Mapping[str, str], names: tuple[str, ...], launcher: str) -> None:
    missing = [name for name in names if name not in environ]
    if missing:
        given = [name for name in names if name in environ]
        raise ValueError(
            f"{', '.join(given)} set but {', '.join(missing)} missing: {launcher} sets all of "
            f"{', '.join(names)}. Start the script with the launcher, or set the missing ones"
        )


def _integer(environ: Mapping[str, str], name: str, least: int = 0) -> int:
    text = environ[name]
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not a whole number") from None
    if value < least:
        raise ValueError(f"{name}={value} must be at least {least}")
    return value


# One hostname of a SLURM host list: a prefix, then optional bracketed ranges ("node[01-04,07]"),
# repeated ("rack[1-2]-gpu[01-08]"). Commas between hosts sit outside brackets.
_BRACKET = re.compile(r"\[([^\]]*)\]")


def first_host(nodelist: str) -> str:
    """The first host of a SLURM host list ("gpu[03-05,9],cpu1" -> "gpu03"), as `scontrol show
    hostnames` would print it first; zero padding is kept."""
    text = nodelist.strip()
    depth, end = 0, len(text)
    for i, char in enumerate(text):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            end = i
            break
    host = text[:end]
    if not host or host.count("[") != host.count("]"):
        raise ValueError(f"cannot read a host from the SLURM node list {nodelist!r}")
    return _BRACKET.sub(lambda match: _first_of_range(match.group(1), nodelist), host)


def _first_of_range(ranges: str, nodelist: str) -> str:
    first = ranges.split(",")[0].split("-")[0].strip()
    if not first.isdigit():
        raise ValueError(f"cannot read a host from the SLURM node list {nodelist!r}: "
                         f"[{ranges}] is not a list of number ranges")
    return first
