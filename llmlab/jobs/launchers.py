"""Every way this course starts N training processes, side by side: what each launcher starts,
where each process learns its rank and the world size, and the llmlab helpers that build it.

The behaviour described was measured on CPUs (gloo) with torch 2.13, accelerate 1.15 and
deepspeed 0.19.8, except Horovod's, which is from its documentation (it is not installed here).
`launcher_table()` renders it for the lab; a test checks that every helper named exists.
"""

from dataclasses import dataclass

from llmlab.tables import markdown_table

TORCHRUN_ENV = "RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/PORT in the environment"


@dataclass(frozen=True)
class Launcher:
    name: str
    command: str  # how it is typed
    starts: str  # which processes it starts, and where
    rank_from: str  # where each process reads its rank and the world size
    helpers: tuple[str, ...]  # llmlab names, relative to llmlab.distributed or llmlab.jobs


LAUNCHERS = (
    Launcher("torchrun, one node", "torchrun --standalone --nproc_per_node N train.py",
             "an agent that starts N processes here (and restarts them: --max-restarts)",
             f"{TORCHRUN_ENV}, set by the agent",
             ("commands.torchrun_command", "processes.run_script")),
    Launcher("torchrun, several nodes",
             "torchrun --nnodes M --nproc_per_node N --rdzv_backend c10d "
             "--rdzv_endpoint HOST:PORT train.py",
             "run on each node: one agent per node, N processes each; the agents meet at the "
             "rendezvous",
             f"{TORCHRUN_ENV}; the rendezvous numbers the nodes (GROUP_RANK)", ()),
    Launcher("srun + torchrun", "sbatch job.sbatch",
             "the script's `srun --ntasks-per-node=1 torchrun ...` starts one torchrun per "
             "node, which starts that node's N processes",
             f"torchrun's: {TORCHRUN_ENV} (SLURM_PROCID numbers the torchruns, not the ranks)",
             ("slurm.sbatch_script", "slurm.write_sbatch")),
    Launcher("srun alone", "srun --ntasks-per-node=N python train.py",
             "one process per task, no agent",
             "SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS; rank 0's host: the first of "
             "SLURM_JOB_NODELIST", ("launcher_env.launcher_env", "groups.process_group")),
    Launcher("accelerate launch", "accelerate launch --config_file accelerate.json train.py",
             "with distributed_type MULTI_GPU, torchrun: N processes, on a CPU too (--cpu "
             "--num_processes N starts one: several CPU processes need mpirun)",
             f"torchrun's {TORCHRUN_ENV}, read by Accelerator(); without a GPU only "
             "Accelerator(cpu=True) joins them into one group",
             ("accelerate_config.write_accelerate_config",)),
    Launcher("notebook_launcher", "notebook_launcher(fn, args, num_processes=N)",
             "N processes forked from the notebook by torch's elastic agent (fn may be defined "
             "in a cell)", f"{TORCHRUN_ENV}, read by Accelerator(cpu=True) inside fn",
             ("accelerate_notebook.notebook_launch",)),
    Launcher("llmlab's launch", "launch(fn, nprocs=N)",
             "N processes forked from the notebook or test, the group already joined",
             f"{TORCHRUN_ENV}, set by launch; dist.get_rank() works when fn starts",
             ("launch.launch",)),
    Launcher("deepspeed", "deepspeed --num_gpus N train.py",
             "a launcher per node that starts N processes; with --hostfile FILE it reaches the "
             "other nodes over ssh (pdsh), or each node runs its own (--no_ssh --node_rank I)",
             f"{TORCHRUN_ENV}, the node as CROSS_RANK, and --local_rank=L in the arguments",
             ("commands.deepspeed_command", "commands.write_hostfile",
              "processes.run_script")),
    Launcher("horovodrun", "horovodrun -np N -H host1:4,host2:4 python train.py",
             "N processes, met through Horovod's own Gloo rendezvous (or mpirun, with MPI)",
             "hvd.rank(), hvd.size(), hvd.local_rank() after hvd.init(), from HOROVOD_RANK, "
             "HOROVOD_SIZE... (Gloo) or OMPI_COMM_WORLD_RANK, ... (Open MPI)", ()),
)


def launcher_table() -> str:
    """The launchers as a Markdown table."""
    return markdown_table([
        {"launcher": row.name, "command": f"`{row.command}`", "starts": row.starts,
         "rank and world size from": row.rank_from,
         "llmlab": ", ".join(f"`{name}`" for name in row.helpers) or "none"}
        for row in LAUNCHERS
    ])
