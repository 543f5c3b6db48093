"""The `llmlab` command: doctor, estimate-memory, plan, train, course, make-labs, gpu-check."""

import argparse
import json
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path

from llmlab import env
from llmlab.course.labs import capability_table
from llmlab.course.profiles import ENV_VARIABLE, explicit_profile
from llmlab.tables import markdown_table

SEVERITY_MARK = {"error": "ERROR", "warning": "WARNING", "info": "note"}


def _labs_section(report: env.EnvReport) -> str:
    rows = [
        {"lab": f"{lab.number:02d} {lab.title}{'' if lab.ready else ' (planned)'}",
         "profile": name, "why": why, "smoke run, 2 cores": f"{lab.smoke_seconds} s"}
        for lab, name, why in capability_table(report)
    ]
    return "Labs on this machine\n" + markdown_table(rows, aligned=True)


def _profile_note() -> str:
    """Whether the notebooks follow the table (PROFILE = "auto"), or LLMLAB_PROFILE overrides it."""
    try:
        named = explicit_profile()
    except ValueError as error:  # a bad LLMLAB_PROFILE: every notebook would stop with this
        return f"{ENV_VARIABLE} is wrong: {error}"
    if named is None:
        return f'A notebook\'s profile("auto", lab=N) picks the same; {ENV_VARIABLE} overrides it.'
    return f"{ENV_VARIABLE}={named.name} is set: every lab runs at the {named.name} profile."


def _problems_section(problems: list[env.Problem]) -> str:
    if not problems:
        return "Problems: none found"
    lines = ["Problems"]
    for problem in problems:
        lines.append(f"  {SEVERITY_MARK[problem.severity]}: {problem.message}")
        lines.append(f"    what to do: {problem.fix}")
    return "\n".join(lines)


def _communication_section(explanation: str) -> str:
    lines = ["NCCL / gloo environment", *(f"  {line}" for line in explanation.splitlines())]
    return "\n".join(lines)


def doctor(as_json: bool) -> int:
    """Print the machine report and each lab's profile here; exit 1 when the stack is broken."""
    from llmlab.jobs import nccl_env  # here: only the doctor needs it

    report = env.collect()
    problems = env.diagnose(report) + nccl_env.comm_problems(os.environ, report)
    if as_json:
        payload = env.report_to_dict(report)
        payload["problems"] = [vars(problem) for problem in problems]
        payload["communication"] = [
            {"setting": setting, "what": variable.what}
            for variable, setting in nccl_env.explain(os.environ)
        ]
        payload["labs"] = [
            {"lab": lab.notebook, "ready": lab.ready, "profile": name, "why": why,
             "smoke_seconds": lab.smoke_seconds}
            for lab, name, why in capability_table(report)
        ]
        print(json.dumps(payload, indent=2))
    else:
        print(env.format_report(report))
        print()
        print(_labs_section(report))
        print(_profile_note())
        print()
        print(_communication_section(nccl_env.format_explanation(os.environ)))
        print()
        print(_problems_section(problems))
    return 1 if any(problem.severity == "error" for problem in problems) else 0


def course(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Execute the solution notebooks headless and print lab, status, wall time, headline."""
    from llmlab.course.runner import find_notebooks, format_table, run_course  # notebook stack

    try:  # check the arguments before any kernel starts
        explicit_profile(args.profile)
        find_notebooks(args.solutions, args.only)
    except ValueError as error:
        parser.error(str(error))  # exits with status 2
    _check_out_dir(args.out, parser, holds="the executed notebooks")
    if args.threads is not None and args.threads < 1:
        parser.error(f"--threads {args.threads}: give 1 or more math threads per kernel")
    runs = run_course(args.solutions, args.out, args.profile, args.only, args.threads)
    print()
    print(format_table(runs))
    return 0 if all(run.ok for run in runs) else 1


def make_labs(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from llmlab.course.generate import generate_labs

    try:
        written = generate_labs(args.solutions, args.labs)
    except ValueError as error:  # no solutions folder, or no lab notebooks in it
        parser.error(str(error))
    for path in written:
        print(f"wrote {path}")
    return 0


def estimate_memory(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Print the itemised memory of a training step and which common GPUs it fits."""
    from llmlab.memory import TrainingSetup, estimate_memory, fit_table
    from llmlab.models import count_active_parameters, count_parameters

    try:
        setup = TrainingSetup(
            batch=args.batch, seq=args.seq, dtype=args.dtype, optimizer=args.optimizer,
            fused_optimizer=args.fused,
            master_weights=not args.pure, fp32_grads=args.fp32_grads,
            checkpointing=args.checkpointing, attention=args.attention,
            grad_accumulation=args.accumulation, zero=args.zero, gpus=args.gpus,
            tensor_parallel=args.tp, context_parallel=args.cp, expert_parallel=args.ep,
            lora_rank=args.lora_rank, weights_4bit=args.weights_4bit,
        )
        estimate = estimate_memory(args.model, setup)
    except ValueError as error:  # an unknown name, or numbers that do not go together
        parser.error(str(error))  # exits with status 2
    counts, active = count_parameters(args.model), count_active_parameters(args.model)
    each_token = f", {active.total / 1e9:.3f}B active" if active != counts else ""
    print(f"{args.model}: {counts.total / 1e9:.3f}B parameters "
          f"({counts.non_embedding / 1e9:.3f}B non-embedding{each_token})")
    print(f"set-up: {setup.describe()}\n")
    print(estimate.table())
    print()
    print(fit_table({args.model: estimate}))
    advice = _what_would_fit(args.model, setup, estimate)
    if advice:
        print(f"\n{advice}")
    return 0


def _what_would_fit(model: str, setup, estimate) -> str:
    """The changes that would fit the largest GPU size of the fit table that the set-up does not
    fit comfortably (the advice an out-of-memory error gets); "" when it fits them all."""
    from llmlab.memory import GB, GPU_SIZES_GB, fits, gpus_with, memory_options
    from llmlab.memory.oom import format_options

    too_small = [size for size in GPU_SIZES_GB if fits(estimate, size) != "yes"]
    if not too_small:
        return ""
    size = max(too_small)
    options = format_options(memory_options(model, setup, size * GB), size * GB)
    return f"Too big for the {size} GB GPUs ({', '.join(gpus_with(size))}).\n{options}"


def plan(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Print the cheapest layouts of a training run on a cluster, simulated."""
    from llmlab.scale.search import plan_table, search_layouts
    from llmlab.scale.simulate import Cluster

    if args.gpus % args.gpus_per_node:
        parser.error(f"--gpus {args.gpus} is not whole nodes of --gpus-per-node "
                     f"{args.gpus_per_node}: give a multiple of it")
    try:
        cluster = Cluster(args.gpu, args.gpus_per_node, args.gpus // args.gpus_per_node,
                          args.inside_node, args.between_nodes, args.price)
        found = search_layouts(args.model, cluster, args.tokens, args.batch_tokens, args.seq,
                               args.efficiency)
    except ValueError as error:  # an unknown model, GPU or link, or numbers that do not fit
        parser.error(str(error))
    print(f"{args.model} on {args.gpus} x {args.gpu} ({args.gpus_per_node} per node, "
          f"{args.inside_node} inside, {args.between_nodes} between), {args.tokens:g} tokens, "
          f"${args.price}/GPU-hour")
    print(plan_table(found, args.limit))
    return 0 if found else 1


def train(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Train Lab 03's model with its recipe; under torchrun every process takes part (DDP)."""
    from llmlab.course import profile
    from llmlab.distributed import process_group
    from llmlab.distributed.data_parallel import STRATEGIES
    from llmlab.train import CheckpointError, EarlierRun, RunFolderBusy, TrainingDiverged
    from llmlab.train.metrics import format_perplexity

    if args.parallel not in STRATEGIES:  # checked here: importing torch for choices= is slow
        parser.error(f"--parallel {args.parallel}: use one of {', '.join(STRATEGIES)}")
    if args.checkpoint_every and args.out is None:
        # An error, not a note: a long run believed to be checkpointed would be lost to a kill.
        parser.error(f"--checkpoint-every {args.checkpoint_every} saves checkpoints into --out, "
                     "and there is none: give --out DIR (or drop --checkpoint-every)")
    try:
        # Lab 03's rule, as `llmlab doctor` prints it: full on a GPU with room for its recipe,
        # consumer (the same recipe in smaller micro-batches) on a 12-20 GB one.
        name = profile(args.profile, lab=3).name
    except ValueError as error:  # an unknown profile
        parser.error(str(error))
    if args.out is not None:
        _check_out_dir(args.out, parser)
    with process_group() as info:
        problem = None
        try:
            result = _train_lab03(name, args, info)
        except (RunFolderBusy, TrainingDiverged) as error:  # one line, naming the checkpoint
            problem = str(error)
        except (CheckpointError, EarlierRun) as error:
            problem = f"{_one_line(error)}. Use another --out, or --fresh to start again in it"
        if problem:  # raised here, once the trainer (and its DDP wrapper) is gone
            parser.error(problem)
        if info.is_main:
            print(
                f"{result.final_step} steps on {info.world_size} process(es), profile {name}: "
                f"validation loss {result.val_loss:.3f}, "
                f"perplexity {format_perplexity(result.perplexity)}"
            )
    return 0


def _train_lab03(name: str, args: argparse.Namespace, info):
    """Build and run the trainer; it is freed on return, before the process group is left."""
    from llmlab.data.pipeline import full_corpus_line
    from llmlab.models import build_model, training_flops_per_token
    from llmlab.recipes import lab03_config, lab03_data, lab03_shape
    from llmlab.train import Trainer

    changes = {"max_steps": args.steps} if args.steps else {}
    if args.checkpoint_every:
        changes["checkpoint_interval"] = args.checkpoint_every
    changes["parallel"] = args.parallel
    if name in ("full", "consumer") and info.is_main:  # both train on the full profile's data
        print(full_corpus_line())
    config = lab03_config(name, out_dir=args.out, progress=info.is_main, **changes)
    data = lab03_data(name, config, seed=info.rank)  # each rank draws its own windows
    shape = lab03_shape(name, data.dataset)
    flops = training_flops_per_token(shape, config.seq_len).total
    trainer = Trainer(build_model(shape), config, data.train, data.val,
                      tokenizer=data.dataset.load_tokenizer(), flops_per_token=flops,
                      measure_peak=True)
    return trainer.fit(resume=args.out is not None, fresh=args.fresh)


def gpu_check(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Measure the course's GPU figures (or, without a GPU, say what would be measured)."""
    from llmlab.course.gpu_check import DEFAULT_BUDGET_S
    from llmlab.course.gpu_check import gpu_check as run_check  # torch: only this command

    if args.out.is_dir():
        parser.error(f"--out {args.out} is a folder: give a file name for the JSON report")
    return run_check(args.out, args.budget_s or DEFAULT_BUDGET_S, args.dry_run)


def _check_out_dir(
    out: Path, parser: argparse.ArgumentParser, holds: str = "the metrics and checkpoints"
) -> None:
    if out.exists() and not out.is_dir():
        parser.error(f"--out {out} is a file: give a folder for {holds}")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        parser.error(f"--out {out} cannot be created ({error.strerror}): choose a folder you "
                     "can write to")
    if not os.access(out, os.W_OK):
        parser.error(f"--out {out} is not writable: choose a folder you can write to")


def _one_line(error: Exception) -> str:
    """A library's multi-line message as one line: its first line and first detail."""
    return " ".join(line.strip() for line in str(error).splitlines()[:2])


def _number(kind: type, allowed: Callable[[float], bool], says: str) -> Callable[[str], float]:
    """An argparse type: kind(text) if `allowed`, else argparse's one-line error naming the
    flag and the value ("argument --gpus: must be ..., got 'x'") and exit status 2."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:  # "two", or "1e9" for an integer
            value = None
        if value is None or not allowed(value):  # NaN fails every comparison
            raise argparse.ArgumentTypeError(f"must be {says}, got {text!r}")
        return value

    return parse


def _path(text: str) -> Path:
    """An argparse type: Path(text), but not of an empty text (Path("") is the current folder,
    which a run would then fill by accident)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty: give a path (. for the current folder)")
    return Path(text)


MAX_GPUS = 2**20  # more than any cluster: a larger count is a typo (and takes long to search)
_positive = _number(int, lambda n: n >= 1, "a positive integer")
_count_or_zero = _number(int, lambda n: n >= 0, "0 or a positive integer")
_gpu_count = _number(int, lambda n: 1 <= n <= MAX_GPUS, f"a number of GPUs from 1 to {MAX_GPUS}")
_positive_real = _number(float, lambda x: 0 < x < math.inf, "a positive finite number")
_share = _number(float, lambda x: 0 < x <= 1, "a share of the peak, above 0 and at most 1")
_price = _number(float, lambda x: 0 <= x < math.inf, "a finite number >= 0")


def _add_memory_parser(commands) -> argparse.ArgumentParser:
    # Names are checked by llmlab.memory (its errors list the valid ones), not by `choices`:
    # importing it here would add seconds to every other command.
    p = commands.add_parser(
        "estimate-memory", help="estimate the GPU memory of a training step, per GPU",
        description="Itemised memory per GPU of one training step, and the GPUs it fits on.",
    )
    p.add_argument("--model", required=True, help="a preset: tiny, gpt2-124m, llama-7b, ...")
    p.add_argument("--dtype", default="bf16", help="fp32, bf16 (default) or fp16")
    p.add_argument("--optimizer", default="adamw",
                   help="sgd, sgd-momentum, adam, adamw (default), adam-8bit or muon (the "
                   "blocks' matrices; AdamW for the rest)")
    p.add_argument("--fused", action="store_true", help="a fused optimizer (no scratch buffer)")
    p.add_argument("--batch", type=_positive, default=1, help="micro-batch, sequences per GPU")
    # 0 means "the model's context" and "no LoRA"; llmlab.memory checks them against the model.
    p.add_argument("--seq", type=_count_or_zero, default=0,
                   help="tokens per sequence (0, the default: the model's context)")
    p.add_argument("--accumulation", type=_positive, default=1, help="gradient accumulation")
    p.add_argument("--checkpointing", action="store_true", help="activation checkpointing")
    p.add_argument("--attention", default="sdpa", help="sdpa (fused, default) or eager")
    p.add_argument("--pure", action="store_true", help="16-bit everything, no fp32 master")
    p.add_argument("--fp32-grads", action="store_true",
                   help="torch.autocast's fp32 weights and gradients (18 bytes/param with Adam)")
    p.add_argument("--gpus", type=_gpu_count, default=1, help="all GPUs")
    p.add_argument("--zero", type=int, default=0, choices=[0, 1, 2, 3], help="ZeRO stage")
    p.add_argument("--cp", type=_positive, default=1,
                   help="context parallel: GPUs that split each sequence (of --gpus)")
    p.add_argument("--ep", type=_positive, default=1,
                   help="expert parallel: GPUs that share out a mixture of experts' experts")
    p.add_argument("--tp", type=_positive, default=1,
                   help="tensor-parallel degree (it divides the attention heads)")
    p.add_argument("--lora-rank", type=_count_or_zero, default=0,
                   help="train LoRA adapters of this rank only (0, the default: no LoRA)")
    p.add_argument("--weights-4bit", default="",
                   help="nf4 or gptq: frozen base weights in 4 bits (with --lora-rank: QLoRA)")
    return p


def _add_plan_parser(commands) -> argparse.ArgumentParser:
    p = commands.add_parser(
        "plan", help="predict time and cost of a run on many GPUs, best layouts first",
        description="Search DP x TP x PP x ZeRO layouts that fit, simulate each (memory, "
        "alpha-beta communication, pipeline bubble) and print the cheapest.",
    )
    p.add_argument("--model", required=True, help="a preset: llama-7b, llama-70b, ...")
    p.add_argument("--gpu", default="h100", help="h100 (default), h200, a100, a100-40gb, ...")
    p.add_argument("--gpus", type=_gpu_count, required=True, help="all GPUs")
    p.add_argument("--gpus-per-node", type=_positive, default=8)
    p.add_argument("--tokens", type=_positive_real, required=True,
                   help="tokens to train, e.g. 2e12")
    p.add_argument("--batch-tokens", type=_positive_real, default=4e6,
                   help="global batch in tokens")
    p.add_argument("--seq", type=_count_or_zero, default=0,
                   help="tokens per sequence (0: the context)")
    p.add_argument("--efficiency", type=_share, default=None,
                   help="share of the bf16 peak compute reaches (default 0.6)")
    p.add_argument("--price", type=_price, default=3.0,
                   help="$ per GPU-hour (default 3.0, an on-demand H100; prices vary)")
    p.add_argument("--inside-node", default="nvlink4", help="nvlink4, nvlink3, pcie4, pcie5")
    p.add_argument("--between-nodes", default="ib-ndr", help="ib-ndr, ib-hdr, roce-400")
    p.add_argument("--limit", type=_positive, default=5, help="layouts to show")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="llmlab", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    p_doctor = commands.add_parser("doctor", help="check this machine and the course stack")
    p_doctor.add_argument("--json", action="store_true", help="print JSON (for issue reports)")

    p_course = commands.add_parser("course", help="run the solution notebooks headless")
    p_course.add_argument("--profile", default="auto",
                          help="smoke, consumer, full or auto (default)")
    p_course.add_argument("--only", nargs="+", default=None, help="lab prefixes, e.g. 00 03")
    p_course.add_argument("--solutions", type=_path, default=Path("solutions"))
    p_course.add_argument("--out", type=_path, default=Path("build"))
    p_course.add_argument("--threads", type=int, default=None,
                          help="math threads per notebook kernel (default: PyTorch's own choice); "
                               "make solutions pins 2, so stored timings share one setting")

    p_memory = _add_memory_parser(commands)
    p_plan = _add_plan_parser(commands)

    p_train = commands.add_parser(
        "train", help="train Lab 03's model (run it under torchrun for DDP, ZeRO-1 or FSDP)",
        description="Train Lab 03's model with its recipe. Under `torchrun --nproc_per_node N -m "
        "llmlab train` the N processes train together with DDP, or with --parallel zero1/fsdp "
        "(gloo on CPUs, NCCL on GPUs).",
    )
    p_train.add_argument("--profile", default="auto",
                         help="smoke, consumer, full or auto (default: Lab 03's choice, as llmlab "
                         "doctor prints it)")
    p_train.add_argument("--steps", type=_positive, default=None,
                         help="train this many steps (the recipe's warm-up scales with them)")
    p_train.add_argument("--out", type=_path, default=None,
                         help="metrics and checkpoints go here; a run there is resumed (one run "
                         "at a time: a second one is refused)")
    p_train.add_argument("--checkpoint-every", type=_positive, default=None, metavar="N",
                         help="save a checkpoint into --out every N steps (default: the "
                         "recipe's, 100), so a killed run resumes from the last one")
    p_train.add_argument("--parallel", default="ddp",
                         help="how the processes share the model under torchrun: ddp "
                         "(replicated), zero1 (optimizer states sharded), fsdp (all sharded, "
                         "checkpoints in shards); ignored in one process")
    p_train.add_argument("--fresh", action="store_true",
                         help="start again at step 1 in an --out that holds an earlier run's "
                         "checkpoints (they are set aside, the metrics appended to)")

    p_labs = commands.add_parser("make-labs", help="regenerate labs/ from solutions/")
    p_labs.add_argument("--solutions", type=_path, default=Path("solutions"))
    p_labs.add_argument("--labs", type=_path, default=Path("labs"))

    p_gpu = commands.add_parser(
        "gpu-check", help="measure the course's GPU figures on this GPU (a table and a JSON)",
        description="Doctor, matmul TFLOP/s, memory against the plan, training MFU, 2:4, "
        "quantization and one NCCL rank on this machine's GPU; without one, a dry run.",
    )
    p_gpu.add_argument("--out", type=_path, default=Path("build/gpu_check.json"),
                       help="the JSON report (default build/gpu_check.json)")
    p_gpu.add_argument("--budget-s", type=_positive_real, default=None,
                       help="seconds for all sections together (default 480: 8 minutes)")
    p_gpu.add_argument("--dry-run", action="store_true",
                       help="measure nothing: print what each section would measure")

    args = parser.parse_args(argv)
    if args.command == "doctor":
        return doctor(args.json)
    if args.command == "course":
        return course(args, p_course)
    if args.command == "train":
        return train(args, p_train)
    if args.command == "estimate-memory":
        return estimate_memory(args, p_memory)
    if args.command == "plan":
        return plan(args, p_plan)
    if args.command == "gpu-check":
        return gpu_check(args, p_gpu)
    return make_labs(args, p_labs)


if __name__ == "__main__":
    sys.exit(main())
