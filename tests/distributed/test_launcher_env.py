"""launcher_env(): torchrun's and srun's variables read into one place, and the mistakes caught."""

import pytest

from llmlab.distributed.launcher_env import DEFAULT_PORT, LauncherEnv, first_host, launcher_env

TORCHRUN = {"RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "GROUP_RANK": "2",
            "MASTER_ADDR": "gpu07", "MASTER_PORT": "29400"}
SRUN = {"SLURM_PROCID": "6", "SLURM_LOCALID": "2", "SLURM_NTASKS": "8", "SLURM_NODEID": "1",
        "SLURM_NNODES": "2", "SLURM_JOB_NODELIST": "gpu[07-08]",
        "SLURM_JOB_ID": "123456"}


def test_no_launcher_means_none():
    assert launcher_env({}) is None
    assert launcher_env({"PATH": "/usr/bin", "SLURM_JOB_ID": "7"}) is None  # a job, no task


def test_torchrun_variables():
    assert launcher_env(TORCHRUN) == LauncherEnv("torchrun", 5, 1, 8, 2, "gpu07", 29400)


def test_deepspeeds_launcher_uses_torchruns_names_and_its_own_for_the_node():
    deepspeed = {**TORCHRUN, "CROSS_RANK": "3", "CROSS_SIZE": "4", "LOCAL_SIZE": "2"}
    del deepspeed["GROUP_RANK"]
    assert launcher_env(deepspeed) == LauncherEnv("deepspeed", 5, 1, 8, 3, "gpu07", 29400)


def test_torchrun_wins_over_slurm_because_srun_torchrun_sets_both():
    # Under `srun torchrun`, SLURM_PROCID numbers the torchrun agents (one per node).
    place = launcher_env({**SRUN, **TORCHRUN})
    assert (place.launcher, place.rank, place.world_size) == ("torchrun", 5, 8)


def test_srun_alone():
    place = launcher_env(SRUN)
    assert place == LauncherEnv("slurm", 6, 2, 8, 1, "gpu07", 12000 + 123456 % 20000)
    assert place.torchrun_variables() == {"RANK": "6", "LOCAL_RANK": "2", "WORLD_SIZE": "8",
                                          "MASTER_ADDR": "gpu07", "MASTER_PORT": "15456"}


def test_srun_port_and_address_given_by_hand_win_and_a_job_without_id_gets_the_default():
    place = launcher_env({**SRUN, "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "4000"})
    assert (place.master_addr, place.master_port) == ("10.0.0.1", 4000)
    no_id = {k: v for k, v in SRUN.items() if k != "SLURM_JOB_ID"}
    assert launcher_env(no_id).master_port == DEFAULT_PORT


def test_the_steps_node_list_comes_before_the_jobs():
    assert launcher_env({**SRUN, "SLURM_STEP_NODELIST": "gpu08"}).master_addr == "gpu08"


def test_one_process_needs_no_address():
    assert launcher_env({"WORLD_SIZE": "1"}) == LauncherEnv("torchrun", 0, 0, 1, 0, "127.0.0.1",
                                                            DEFAULT_PORT)


@pytest.mark.parametrize(
    ("nodelist", "first"),
    [("localhost,127.0.0.1", "localhost"), ("gpu[03-05,9],cpu1", "gpu03"),
     ("node007", "node007"), ("rack[2-3]-gpu[08-16]", "rack2-gpu08"),
     ("a[10,2]", "a10"), (" n[1-4] ", "n1")],
)
def test_first_host_of_a_slurm_host_list(nodelist, first):
    assert first_host(nodelist) == first


@pytest.mark.parametrize("nodelist", ["", "gpu[01-04", "gpu[a-b]", ",n1"])
def test_an_unreadable_host_list_is_an_error(nodelist):
    with pytest.raises(ValueError, match="cannot read a host"):
        first_host(nodelist)


@pytest.mark.parametrize(
    ("change", "message"),
    [({"RANK": "8"}, r"RANK=8 is not below the world size 8"),
     ({"LOCAL_RANK": "6"}, r"LOCAL_RANK=6 is above RANK=5"),
     ({"WORLD_SIZE": "eight"}, r"WORLD_SIZE='eight' is not a whole number"),
     ({"WORLD_SIZE": "0"}, r"WORLD_SIZE=0 must be at least 1"),
     ({"RANK": "-1"}, r"RANK=-1 must be at least 0"),
     ({"MASTER_PORT": "70000"}, r"port 70000 is not a TCP port"),
     ({"MASTER_ADDR": None}, r"MASTER_ADDR missing"),
     ({"WORLD_SIZE": None}, r"RANK set but WORLD_SIZE missing")],
)
def test_inconsistent_torchrun_variables_are_errors(change, message):
    environ = {k: v for k, v in {**TORCHRUN, **change}.items() if v is not None}
    with pytest.raises(ValueError, match=message):
        launcher_env(environ)


@pytest.mark.parametrize(
    ("change", "message"),
    [({"SLURM_PROCID": "8"}, r"SLURM_PROCID=8 is not below the world size 8"),
     ({"SLURM_LOCALID": "7"}, r"SLURM_LOCALID=7 is above SLURM_PROCID=6"),
     ({"SLURM_NODEID": "2"}, r"SLURM_NODEID=2 is not below SLURM_NNODES=2"),
     ({"SLURM_LOCALID": None}, r"SLURM_LOCALID.* missing: srun sets all"),
     ({"SLURM_JOB_NODELIST": None}, r"no SLURM_JOB_NODELIST.*set MASTER_ADDR"),
     ({"SLURM_JOB_ID": "x1"}, r"SLURM_JOB_ID='x1' is not a whole number")],
)
def test_inconsistent_srun_variables_are_errors(change, message):
    environ = {k: v for k, v in {**SRUN, **change}.items() if v is not None}
    with pytest.raises(ValueError, match=message):
        launcher_env(environ)
