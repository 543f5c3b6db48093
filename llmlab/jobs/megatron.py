"""The course's names for a parallel layout, in Megatron-LM's words, and a command line for it.

Megatron-LM (NVIDIA) is where tensor and pipeline parallelism for transformers come from, and
its `pretrain_gpt.py` is how many large runs are launched. Data parallelism has no flag: it is
whatever the world size leaves, world / (tp * pp); the layout, llmlab.scale's `Parallel`, names
dp, and the command starts its dp * tp * pp processes.
Flag names checked against Megatron-LM's `megatron/training/arguments.py`.
"""

import shlex

from llmlab.device import TORCH_DTYPES
from llmlab.distributed.mesh import RankGrid
from llmlab.models import ModelShape, as_shape
from llmlab.scale.layout import Parallel
from llmlab.tables import markdown_table

# (what the course calls it, Megatron-LM's argument, what it means)
MEGATRON_NAMES = (
    ("tensor parallel degree tp", "--tensor-model-parallel-size", "ranks splitting each layer"),
    ("pipeline stages pp", "--pipeline-model-parallel-size", "ranks splitting the layers"),
    ("sequence parallel", "--sequence-parallel", "norms/dropout split by position (needs tp>1)"),
    ("data parallel degree dp", "(none)", "implied: world size / (tp * pp)"),
    ("ZeRO-1 (optimizer sharding)", "--use-distributed-optimizer",
     "optimizer states and fp32 master weights sharded over dp"),
    ("micro-batch (per replica)", "--micro-batch-size", "sequences per forward pass"),
    ("global batch", "--global-batch-size", "micro-batch * accumulation (micro-batches) * dp"),
    ("sequence length", "--seq-length", "tokens per sequence"),
    ("context", "--max-position-embeddings", "the longest sequence the model takes"),
    ("n_layer", "--num-layers", ""),
    ("d_model", "--hidden-size", ""),
    ("d_ff", "--ffn-hidden-size", "MLP width"),
    ("n_head", "--num-attention-heads", ""),
    ("n_kv_head", "--group-query-attention --num-query-groups", "key/value heads"),
    ("untied LM head", "--untie-embeddings-and-output-weights", ""),
    ("bf16 / fp16 mixed precision", "--bf16 / --fp16", "fp32 master weights kept"),
)


def megatron_table() -> str:
    """MEGATRON_NAMES as a text table."""
    return markdown_table([{"course": course, "Megatron-LM": flag, "meaning": meaning}
                           for course, flag, meaning in MEGATRON_NAMES], aligned=True)


def megatron_args(
    model: str | ModelShape,
    parallel: Parallel,
    dtype: str = "bf16",
    sequence_parallel: bool = False,
) -> list[str]:
    """`pretrain_gpt.py`'s arguments for this model and layout: tp, pp and the ZeRO stage are
    `parallel`'s, the micro-batch `parallel.micro_batch`, the global batch micro-batch *
    accumulation * dp; `dtype` is the compute precision (fp32 adds no flag)."""
    shape = as_shape(model)
    tp, pp = parallel.tp, parallel.pp
    RankGrid(parallel).check_model(shape)
    if shape.n_layer % pp:
        raise ValueError(f"Megatron-LM gives every stage the same number of layers: "
                         f"{pp} stages do not divide {shape.n_layer} layers")
    if sequence_parallel and tp == 1:
        raise ValueError("sequence parallel splits what tensor parallel replicates: needs tp > 1")
    if parallel.zero > 1:
        raise ValueError(f"ZeRO-{parallel.zero} has no Megatron-LM flag here: its distributed "
                         "optimizer is ZeRO-1 (zero=1); use FSDP or DeepSpeed for stages 2-3")
    if dtype not in TORCH_DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}: use one of {tuple(TORCH_DTYPES)}")
    args = {
        "--tensor-model-parallel-size": tp,
        "--pipeline-model-parallel-size": pp,
        "--num-layers": shape.n_layer,
        "--hidden-size": shape.d_model,
        "--ffn-hidden-size": shape.ff,
        "--num-attention-heads": shape.n_head,
        "--seq-length": parallel.seq or shape.context,
        "--max-position-embeddings": shape.context,
        "--micro-batch-size": parallel.micro_batch,
        "--global-batch-size": parallel.micro_batch * parallel.accumulation * parallel.dp,
    }
    flags = [f"{name}={value}" for name, value in args.items()]
    if shape.family == "llama":
        flags += ["--normalization=RMSNorm", "--swiglu", "--position-embedding-type=rope",
                  "--disable-bias-linear"]
        if shape.kv_heads != shape.n_head:
            flags += ["--group-query-attention", f"--num-query-groups={shape.kv_heads}"]
    if not shape.tied_embeddings:
        flags.append("--untie-embeddings-and-output-weights")
    if sequence_parallel:
        flags.append("--sequence-parallel")
    if parallel.zero == 1:
        flags.append("--use-distributed-optimizer")
    if dtype != "fp32":
        flags.append(f"--{dtype}")
    return flags


def megatron_command(
    model: str | ModelShape,
    parallel: Parallel,
    dtype: str = "bf16",
    sequence_parallel: bool = False,
    gpus_per_node: int = 8,
    train_iters: int = 100,
    lr: float = 3e-4,
) -> str:
    """A `torchrun ... pretrain_gpt.py ...` command line for this layout on its `parallel.gpus`
    GPUs, on synthetic data (`--mock-data`, a null tokenizer of the model's vocabulary) so it
    runs as it stands from a Megatron-LM checkout. On several nodes, add torchrun's rendezvous
    flags."""
    gpus = parallel.gpus
    per_node = min(gpus_per_node, gpus)
    if gpus % per_node:
        raise ValueError(f"{gpus} GPUs do not fill nodes of {per_node}")
    shape = as_shape(model)
    launcher = ["torchrun", f"--nproc_per_node={per_node}", f"--nnodes={gpus // per_node}"]
    data = ["--mock-data", "--tokenizer-type=NullTokenizer", f"--vocab-size={shape.vocab_size}",
            f"--train-iters={train_iters}", f"--lr={lr}"]
    words = launcher + ["pretrain_gpt.py"] + megatron_args(
        shape, parallel, dtype, sequence_parallel) + data
    return " \\\n    ".join(shlex.quote(word) for word in words)
