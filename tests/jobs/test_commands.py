"""The command lines llmlab builds for torchrun, and the port a job's ranks meet at. (DeepSpeed's
launcher and its hostfile: test_commands_deepspeed.py.)"""

import socket
import sys

from llmlab.jobs.commands import free_port, torchrun_command


def test_free_port_is_outside_the_range_the_kernel_hands_out():
    port = free_port()
    assert 1024 < port < 32768  # below Linux's default ephemeral range (32768-60999)
    with socket.create_server(("127.0.0.1", port)):
        pass


def test_torchrun_command_uses_this_python():
    command = torchrun_command("train.py", 4, ["--steps", 5])
    assert command[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert "--nproc_per_node=4" in command and command[-3:] == ["train.py", "--steps", "5"]
    assert torchrun_command("llmlab", 2, module=True)[-2:] == ["-m", "llmlab"]


def test_torchruns_own_options_come_before_the_script():
    command = torchrun_command("train.py", 2, ["out"], torchrun_args=["--max-restarts", 1])
    assert command[-4:] == ["--max-restarts", "1", "train.py", "out"]
