"""Every parallel group from one rank grid: data (dp), tensor (tp) and pipeline (pp) parallel.

With dp * tp * pp processes, lay the ranks out in a 3-D grid of shape (pp, dp, tp), tensor
parallel fastest: ranks 0..tp-1 form the first tensor-parallel group. Each kind of group is then a
line through the grid along one axis. Tensor parallelism talks after every layer, so its ranks are
neighbours (the GPUs of one machine, joined by NVLink); pipeline stages talk least, so they are
farthest apart. Megatron-LM and torchtitan order their groups the same way, and so does the
planner, which prices each group's link by it: the order is llmlab.scale.layout's RANK_ORDER.

Both are built from a layout, llmlab.scale's `Parallel` (only its degrees matter here):
`RankGrid(Parallel(dp=2, tp=2))` is plain arithmetic (no processes needed); `device_mesh` turns
the same grid into a `torch.distributed.device_mesh.DeviceMesh` with named dimensions, which the
DTensor-based strategies (`parallelize_module`, `fully_shard`) take.
"""

from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from llmlab.memory import check_tensor_parallel
from llmlab.models import ModelShape, as_shape
from llmlab.scale.layout import RANK_ORDER, Parallel
from llmlab.tables import markdown_table

DIMS = RANK_ORDER  # the grid's axes, slowest to fastest


@dataclass(frozen=True)
class RankGrid:
    """The ranks of a layout (llmlab.scale's `Parallel`, its degrees) laid out as a (pp, dp, tp)
    grid in RANK_ORDER: rank = (pp_i * dp + dp_i) * tp + tp_i."""

    parallel: Parallel

    @classmethod
    def for_world(cls, world_size: int, tp: int = 1, pp: int = 1) -> "RankGrid":
        """The grid for `world_size` processes: data parallel takes what tp and pp leave."""
        if world_size % (tp * pp):
            raise ValueError(
                f"world size {world_size} is not a multiple of tp * pp = {tp} * {pp}: "
                "choose degrees whose product divides the number of processes"
            )
        return cls(Parallel(dp=world_size // (tp * pp), tp=tp, pp=pp))

    @property
    def world_size(self) -> int:
        return self.parallel.gpus

    @property
    def shape(self) -> tuple[int, int, int]:
        return tuple(getattr(self.parallel, dim) for dim in DIMS)

    def grid(self) -> torch.Tensor:
        """The ranks as a (pp, dp, tp) tensor: entry [i, j, k] is the rank at pp=i, dp=j, tp=k."""
        return torch.arange(self.world_size).view(self.shape)

    def coords(self, rank: int) -> dict[str, int]:
        """Where `rank` sits: {"pp": ..., "dp": ..., "tp": ...}."""
        self._check_rank(rank)
        strides = self.parallel.strides()
        return {dim: rank // strides[dim] % getattr(self.parallel, dim) for dim in DIMS}

    def rank(self, pp: int = 0, dp: int = 0, tp: int = 0) -> int:
        """The rank at these coordinates."""
        for name, value in (("pp", pp), ("dp", dp), ("tp", tp)):
            size = getattr(self.parallel, name)
            if not 0 <= value < size:
                raise ValueError(f"{name}={value} is outside 0..{size - 1}")
        strides = self.parallel.strides()
        return pp * strides["pp"] + dp * strides["dp"] + tp * strides["tp"]

    def groups(self, dim: str) -> list[list[int]]:
        """Every group along `dim`: the ranks that differ only in that coordinate."""
        axis = self._axis(dim)
        lines = self.grid().movedim(axis, -1).reshape(-1, self.shape[axis])
        return lines.tolist()

    def group_of(self, rank: int, dim: str) -> list[int]:
        """The ranks in `rank`'s group along `dim` (itself included)."""
        self._check_rank(rank)
        return next(group for group in self.groups(dim) if rank in group)

    def table(self) -> str:
        """One line per rank with its coordinates and groups, for printing."""
        rows = []
        for rank in range(self.world_size):
            at = self.coords(rank)
            groups = {f"{d} group": self.group_of(rank, d) for d in ("tp", "dp", "pp")}
            rows.append({"rank": rank, "pp": at["pp"], "dp": at["dp"], "tp": at["tp"], **groups})
        return markdown_table(rows, aligned=True)

    def check_model(self, model: str | ModelShape) -> None:
        """Raise a clear error if this model cannot be split this way."""
        check_tensor_parallel(model, self.parallel.tp)
        shape = as_shape(model)
        if self.parallel.pp > shape.n_layer:
            raise ValueError(
                f"pipeline parallel degree {self.parallel.pp} is more than the model's "
                f"{shape.n_layer} layers: every stage needs at least one block"
            )

    def _axis(self, dim: str) -> int:
        if dim not in DIMS:
            raise ValueError(f"unknown grid dimension {dim!r}: use one of {DIMS}")
        return DIMS.index(dim)

    def _check_rank(self, rank: int) -> None:
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} is outside this grid's 0..{self.world_size - 1}")


def device_mesh(parallel: Parallel, device_type: str = "") -> DeviceMesh:
    """`parallel`'s rank grid as a DeviceMesh with dimensions named "pp", "dp", "tp" (take one
    with `mesh["tp"]`). Call it on every rank after the process group is up; device_type
    defaults to "cuda" when the group's backend is NCCL, else "cpu"."""
    grid, p = RankGrid(parallel), parallel
    if not dist.is_initialized():
        raise RuntimeError("no process group: start the ranks first (launch(...) or torchrun)")
    world = dist.get_world_size()
    if world != grid.world_size:
        raise ValueError(
            f"the grid dp * tp * pp = {p.dp} * {p.tp} * {p.pp} = {grid.world_size} ranks, but "
            f"{world} processes are running: make the product equal the world size"
        )
    device_type = device_type or ("cuda" if dist.get_backend() == "nccl" else "cpu")
    # init_device_mesh lays ranks out row-major over this shape: the same grid as RankGrid.
    return init_device_mesh(device_type, grid.shape, mesh_dim_names=DIMS)
