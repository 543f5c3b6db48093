"""The NCCL/gloo variables explained, and the doctor's checks of them against a machine: each
wrong setting warns with what to do, and the right one beside it stays quiet."""

import os
import socket
import subprocess
import sys
from types import SimpleNamespace

import pytest
from helpers.fake_machines import h100_box, make_report

from llmlab import env
from llmlab.distributed.launch import is_gloo_notice
from llmlab.jobs.nccl_env import (
    BY_NAME,
    DEPRECATED,
    VARIABLES,
    comm_problems,
    explain,
    format_explanation,
    select_interfaces,
)

NODE = make_report(network_interfaces=("docker0", "eth0", "eth1", "ib0", "lo"))
NVLINK_NODE = make_report(network_interfaces=("eth0", "lo"), nvlink_links=144)
PCIE_NODE = make_report(network_interfaces=("eth0", "lo"), nvlink_links=0)
IB_NODE = make_report(network_interfaces=("eth0", "lo"), infiniband_devices=("mlx5_0", "mlx5_1"))


def problems(environ, report=NODE):
    return [(problem.severity, problem.message) for problem in comm_problems(environ, report)]


def only_warning(environ, report=NODE) -> str:
    found = comm_problems(environ, report)
    assert [problem.severity for problem in found] == ["warning"], found
    assert found[0].fix  # every warning says what to do
    return found[0].message


def test_every_variable_is_explained_once():
    assert len(BY_NAME) == len(VARIABLES)
    for variable in VARIABLES:
        assert variable.backend in ("nccl", "gloo", "torch")
        assert all((variable.what, variable.when, variable.typical, variable.counterpart))
    assert set(DEPRECATED.values()) <= set(BY_NAME)
    # A counterpart that names a variable names one of the table.
    named = {v.counterpart for v in VARIABLES if v.counterpart.isupper()}
    assert named <= set(BY_NAME)


def test_explain_lists_the_set_variables_in_table_order_with_their_meaning():
    environ = {"GLOO_SOCKET_IFNAME": "eth0", "NCCL_DEBUG": "WARN", "HOME": "/root",
               "NCCL_ASYNC_ERROR_HANDLING": "1"}
    found = explain(environ)
    assert [setting for _, setting in found] == [
        "NCCL_DEBUG=WARN", "NCCL_ASYNC_ERROR_HANDLING=1", "GLOO_SOCKET_IFNAME=eth0",
    ]
    assert found[1][0].name == "TORCH_NCCL_ASYNC_ERROR_HANDLING"  # the old name, explained
    assert "GLOO_SOCKET_IFNAME=eth0: which interfaces gloo uses" in format_explanation(environ)
    assert format_explanation({"HOME": "/root"}).startswith("none set")


@pytest.mark.parametrize(
    "spec, selected",
    [
        ("eth", ["eth0", "eth1"]),  # a prefix
        ("=eth", []),  # an exact name
        ("=eth0,ib0", ["eth0", "ib0"]),  # '=' applies to the whole list
        ("eth0,ib", ["eth0", "ib0"]),
        ("^docker,lo", ["eth0", "eth1", "ib0"]),  # excluded prefixes
        ("^=eth0", ["docker0", "eth1", "ib0", "lo"]),  # an excluded exact name
        ("=mlx5_0:1", []),  # a port after ':' is not part of the name
        ("ib0:1", ["ib0"]),
    ],
)
def test_select_interfaces_follows_nccls_syntax(spec, selected):
    assert select_interfaces(spec, NODE.network_interfaces) == selected


@pytest.mark.parametrize("spec", ["eth", "=eth0", "^docker,lo", "ib0,eth9"])
def test_an_nccl_interface_list_that_selects_something_is_fine(spec):
    assert problems({"NCCL_SOCKET_IFNAME": spec}) == []


@pytest.mark.parametrize("spec", ["enp", "=eth", "^e,d,i,l", "=eth9,eth8"])
def test_an_nccl_interface_list_that_selects_nothing_warns_and_lists_the_interfaces(spec):
    message = only_warning({"NCCL_SOCKET_IFNAME": spec})
    assert f"NCCL_SOCKET_IFNAME={spec} selects none" in message
    assert "docker0, eth0, eth1, ib0, lo" in message


def test_gloo_takes_exact_interface_names():
    assert problems({"GLOO_SOCKET_IFNAME": "eth0,eth1"}) == []
    message = only_warning({"GLOO_SOCKET_IFNAME": "eth"})
    assert "names eth, which this machine does not have" in message
    assert "exact names, not NCCL's prefixes" in message
    message = only_warning({"GLOO_SOCKET_IFNAME": "eth0,bond0"})
    assert "names bond0" in message and "prefixes" not in message


def test_interfaces_are_not_checked_where_the_machine_could_not_list_them():
    unknown = make_report(network_interfaces=None)
    assert problems({"NCCL_SOCKET_IFNAME": "x", "GLOO_SOCKET_IFNAME": "x"}, unknown) == []


@pytest.mark.parametrize(
    "environ", [{"NCCL_P2P_DISABLE": "1"}, {"NCCL_P2P_LEVEL": "LOC"}, {"NCCL_P2P_LEVEL": "0"}]
)
def test_p2p_switched_off_on_nvlink_gpus_warns(environ):
    message = only_warning(environ, NVLINK_NODE)
    assert "NVLink (144 active links)" in message


@pytest.mark.parametrize(
    "environ, report",
    [
        ({"NCCL_P2P_DISABLE": "1"}, PCIE_NODE),  # the workaround it exists for
        ({"NCCL_P2P_DISABLE": "1"}, make_report()),  # NVLink unknown: say nothing
        ({"NCCL_P2P_DISABLE": "0"}, NVLINK_NODE),
        ({"NCCL_P2P_LEVEL": "NVL"}, NVLINK_NODE),
    ],
)
def test_p2p_settings_that_keep_nvlink_are_fine(environ, report):
    assert problems(environ, report) == []


def test_a_typical_h100_node_job_environment_is_fine_and_its_debug_switches_are_not():
    job = {"NCCL_DEBUG": "WARN", "NCCL_SOCKET_IFNAME": "=eth0", "GLOO_SOCKET_IFNAME": "eth0",
           "NCCL_IB_HCA": "mlx5", "MASTER_ADDR": "node-1", "MASTER_PORT": "29500"}
    assert problems(job, h100_box()) == []
    debugging = {**job, "NCCL_P2P_DISABLE": "1", "NCCL_IB_DISABLE": "1"}
    messages = [message for _, message in problems(debugging, h100_box())]
    assert len(messages) == 2
    assert "NVLink (144 active links)" in messages[0] and "mlx5_0" in messages[1]


def test_infiniband_switched_off_where_it_exists_warns():
    message = only_warning({"NCCL_IB_DISABLE": "1"}, IB_NODE)
    assert "mlx5_0, mlx5_1" in message and "TCP sockets" in message
    assert problems({"NCCL_IB_DISABLE": "1"}, NODE) == []  # no adapters: nothing lost
    assert problems({"NCCL_IB_DISABLE": "0"}, IB_NODE) == []


def test_ib_hca_must_name_an_adapter_of_this_machine():
    assert problems({"NCCL_IB_HCA": "mlx5"}, IB_NODE) == []
    assert problems({"NCCL_IB_HCA": "=mlx5_1:1"}, IB_NODE) == []
    assert "selects none of this machine's InfiniBand" in only_warning(
        {"NCCL_IB_HCA": "=mlx5_2"}, IB_NODE
    )
    assert "(none)" in only_warning({"NCCL_IB_HCA": "mlx5"}, NODE)


def test_log_levels():
    assert problems({"NCCL_DEBUG": "WARN", "GLOO_LOG_LEVEL": "INFO",
                     "TORCH_DISTRIBUTED_DEBUG": "detail"}) == []
    (note,) = comm_problems({"NCCL_DEBUG": "info"}, NODE)
    assert note.severity == "info" and "NCCL_DEBUG=INFO" in note.message
    assert "is not a level NCCL knows" in only_warning({"NCCL_DEBUG": "VERBOSE"})
    # gloo compares exactly: a lower-case level silences it instead.
    assert "reads it as ERROR" in only_warning({"GLOO_LOG_LEVEL": "info"})
    assert "ValueError" in only_warning({"TORCH_DISTRIBUTED_DEBUG": "ALL"})


def test_deprecated_async_error_handling_and_a_bad_master_port():
    (note,) = comm_problems({"NCCL_ASYNC_ERROR_HANDLING": "1"}, NODE)
    assert note.severity == "info" and "TORCH_NCCL_ASYNC_ERROR_HANDLING" in note.fix
    assert "not a TCP port" in only_warning({"MASTER_PORT": "eth0"})
    assert "not a TCP port" in only_warning({"MASTER_PORT": "70000"})
    assert problems({"MASTER_PORT": "29500", "MASTER_ADDR": "node-1"}) == []


# ---------------------------------------------------------------- gathering the facts


class FakeNvml(SimpleNamespace):
    """pynvml's calls on a machine whose GPUs have `links[i]` active NVLink links each."""

    class NVMLError(Exception):
        pass

    NVML_NVLINK_MAX_LINKS = 18
    NVML_FEATURE_ENABLED = 1

    def __init__(self, links, has_nvlink=True, init_fails=False):
        super().__init__(links=links, has_nvlink=has_nvlink, init_fails=init_fails, shut=False)

    def nvmlInit(self):
        if self.init_fails:
            raise self.NVMLError("NVML Shared Library Not Found")

    def nvmlShutdown(self):
        self.shut = True

    def nvmlDeviceGetCount(self):
        return len(self.links)

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetNvLinkState(self, gpu, link):
        if not self.has_nvlink or link >= 12:  # a PCIe card; links past the 12 of this GPU
            raise self.NVMLError("Not Supported")
        return int(link < self.links[gpu])


def test_nvlink_links_are_counted_over_gpus_through_nvml():
    nvml = FakeNvml([12, 12, 10])
    assert env.nvlink_active_links(nvml) == 34
    assert nvml.shut  # NVML is released again
    assert env.nvlink_active_links(FakeNvml([0, 0], has_nvlink=False)) == 0  # PCIe only
    assert env.nvlink_active_links(FakeNvml([12], init_fails=True)) is None  # no driver


def test_infiniband_adapters_are_read_from_sysfs(tmp_path):
    for name in ("mlx5_1", "mlx5_0"):
        (tmp_path / name).mkdir()
    assert env.infiniband_devices(tmp_path) == ("mlx5_0", "mlx5_1")
    assert env.infiniband_devices(tmp_path / "missing") == ()


def test_the_report_shows_the_network_facts():
    text = env.format_report(make_report(network_interfaces=("eth0", "lo"), nvlink_links=0))
    assert "== Network ==" in text and "eth0, lo" in text
    assert "NVLink links:" in text


GLOO_INIT = """
import os, sys
import torch.distributed as dist
os.environ["GLOO_SOCKET_IFNAME"] = sys.argv[1]
try:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{sys.argv[2]}", rank=0,
                            world_size=1)
except RuntimeError as error:
    print("failed:", error)
else:
    dist.destroy_process_group()
    print("started")
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("good", [True, False], ids=["accepted", "flagged"])
def test_gloo_fails_exactly_where_the_check_warns(good):
    """The check's verdict on GLOO_SOCKET_IFNAME agrees with a real gloo start-up here."""
    report = make_report(network_interfaces=env.network_interfaces())  # as the doctor sees it
    name = "lo" if good else "llmlab_no_such_if"
    warned = bool(comm_problems({"GLOO_SOCKET_IFNAME": name}, report))
    result = subprocess.run(
        [sys.executable, "-c", GLOO_INIT, name, str(_free_port())], capture_output=True,
        text=True, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stderr
    assert warned == (not good)
    # Torch 2.10's gloo prints a notice of its own first ("[Gloo] Rank 0 is connected to ...").
    said = "".join(line for line in result.stdout.splitlines(keepends=True)
                   if not is_gloo_notice(line))
    assert said.startswith("started" if good else "failed:"), result.stdout
    if not good:
        assert f"Unable to find address for: {name}" in result.stdout
