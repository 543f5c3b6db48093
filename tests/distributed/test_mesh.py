"""RankGrid: every group from one grid, by arithmetic; device_mesh: that grid as a DeviceMesh."""

import pytest
import torch.distributed as dist

from llmlab.distributed import launch
from llmlab.distributed.mesh import RankGrid, check_tensor_parallel, device_mesh
from llmlab.models import preset
from llmlab.scale import Parallel


def test_tensor_parallel_ranks_are_neighbours_and_pipeline_ranks_farthest_apart():
    grid = RankGrid(Parallel(dp=2, tp=2, pp=2))
    assert grid.world_size == 8
    assert grid.groups("tp") == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert grid.groups("dp") == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert grid.groups("pp") == [[0, 4], [1, 5], [2, 6], [3, 7]]


@pytest.mark.parametrize("dp,tp,pp", [(1, 1, 1), (4, 1, 1), (2, 2, 1), (1, 2, 3), (3, 2, 2)])
def test_coords_and_rank_are_inverse_and_groups_partition_the_world(dp, tp, pp):
    grid = RankGrid(Parallel(dp=dp, tp=tp, pp=pp))
    for rank in range(grid.world_size):
        assert grid.rank(**grid.coords(rank)) == rank
    for dim in ("dp", "tp", "pp"):
        groups = grid.groups(dim)
        assert sorted(r for g in groups for r in g) == list(range(grid.world_size))
        assert all(len(g) == getattr(grid.parallel, dim) for g in groups)
        for rank in range(grid.world_size):  # a group's ranks differ only along its own axis
            others = [d for d in ("dp", "tp", "pp") if d != dim]
            for member in grid.group_of(rank, dim):
                assert all(grid.coords(member)[d] == grid.coords(rank)[d] for d in others)


def test_for_world_gives_data_parallel_what_is_left_and_table_lists_every_rank():
    grid = RankGrid.for_world(4, tp=2)
    assert (grid.parallel.dp, grid.parallel.tp, grid.parallel.pp) == (2, 2, 1)
    assert len(grid.table().splitlines()) == 2 + 4  # a header, its rule, the ranks


def test_bad_layouts_say_what_is_wrong():
    with pytest.raises(ValueError, match="not a multiple of tp"):
        RankGrid.for_world(6, tp=4)
    with pytest.raises(ValueError, match="positive integer"):
        RankGrid(Parallel(dp=0))
    with pytest.raises(ValueError, match="outside"):
        RankGrid(Parallel(dp=2)).coords(2)
    with pytest.raises(ValueError, match="unknown grid dimension"):
        RankGrid(Parallel(dp=2)).groups("cp")


def test_tensor_parallel_degree_must_fit_the_heads_and_the_mlp():
    tiny = preset("tiny")  # 4 heads, d_ff 1024
    check_tensor_parallel(tiny, 4)
    with pytest.raises(ValueError, match="more than the model's 4 attention heads"):
        check_tensor_parallel(tiny, 8)
    with pytest.raises(ValueError, match="does not divide the model's 4 attention heads"):
        check_tensor_parallel(tiny, 3)
    with pytest.raises(ValueError, match="key/value heads"):
        check_tensor_parallel(preset("llama-70b"), 16)  # 64 heads, but only 8 key/value heads
    with pytest.raises(ValueError, match="d_ff"):
        check_tensor_parallel(preset("tiny", d_ff=1022), 4)
    with pytest.raises(ValueError, match="every stage needs at least one block"):
        RankGrid(Parallel(dp=1, pp=5)).check_model(tiny)


def _mesh_groups():
    mesh = device_mesh(Parallel(dp=2, tp=2))
    return {dim: mesh[dim].mesh.tolist() for dim in ("dp", "tp")}, dist.get_rank()


def test_device_mesh_has_the_grids_groups():
    grid = RankGrid(Parallel(dp=2, tp=2))
    for groups, rank in launch(_mesh_groups, nprocs=4, timeout_s=60):
        assert groups["tp"] == grid.group_of(rank, "tp")
        assert groups["dp"] == grid.group_of(rank, "dp")


def _wrong_world():
    device_mesh(Parallel(dp=2, tp=2))


def test_device_mesh_rejects_a_grid_that_is_not_the_world():
    with pytest.raises(Exception, match="2 processes are running"):
        launch(_wrong_world, nprocs=2, timeout_s=60)
    with pytest.raises(RuntimeError, match="no process group"):
        device_mesh(Parallel(dp=1, tp=2))
