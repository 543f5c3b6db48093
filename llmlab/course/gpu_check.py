"""The GPU check (issue 23): the course's GPU figures, measured in one command on one GPU.

    llmlab gpu-check [--out FILE] [--budget-s N] [--dry-run]      (or: make gpu-check)

Each section measures one lab's GPU claims with the package's own functions (the doctor, the
matmul timer and peak table, the memory planner against the CUDA allocator, the trainer, the 2:4
kernel, the quantization wrappers, one NCCL rank) and returns rows of figures, or a skip with
its reason (no CUDA GPU, a capability too low, a package missing, two GPUs needed). A section
that fails is recorded with its error and the next one runs. The runner gives each section its
own budget and stops starting sections when the overall budget (8 minutes by default) is spent;
a section checks its budget between measurements (a CUDA kernel cannot be interrupted).

Without a CUDA GPU (or with --dry-run) nothing is measured: each section prints what it would
measure, the JSON marks every section skipped with the reason, and the command exits 0.

On a GPU machine: `bash tools/gpu_check.sh` (141 s of measuring on one H200, 8 minutes at most:
the budget; it needs only the machine's own Python and PyTorch and the repository, no .venv. It
ran on an H200 with PyTorch 2.11 and transformers 5.17; benchmarks/measured/gpu_check_h200.json
holds that run. Missing optional packages, bitsandbytes and torchao, are skipped by name).
The JSON it writes (build/gpu_check.json by default) holds:
  {"torch": ..., "cuda": ..., "device": ..., "model": ..., "budget_s": ..., "dry_run": ...,
   "sections": [{"section", "lab", "measures", "status" ("ok", "skipped", "error"), "reason",
                 "seconds", "rows": [{"what", "value", "unit", "note"}, ...]}, ...]}
"""

import functools
import importlib
import importlib.util
import json
import math
import os
import statistics
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from llmlab.files import write_atomically
from llmlab.gpu_specs import DTYPES, peak_tflops
from llmlab.matmul import dtype_supported, matmul_flops, measure_matmul
from llmlab.tables import markdown_table
from llmlab.timing import time_fn
from llmlab.units import MB

DEFAULT_BUDGET_S = 480.0  # the "about 8 minutes on one H100"
MODEL = "gpt2-124m"  # GPT-2 small: the course's GPU reference model
SEQ = 1024  # its context
LARGE_MODEL = "llama-7b"  # the 2:4 kernel's shapes at a size where sparsity is used
TRAIN_BATCH = 16  # sequences per training step: enough work per step to keep an H100 busy
MEMORY_BATCH = 8  # the memory plan's batch (and the checkpoint-stall run's)
TRAIN_STEPS = 60  # bf16 run: compilation and warm-up take the first half, the median the rest
FP16_STEPS = 10  # the fp16 path only has to work and save a checkpoint


class Skip(Exception):
    """A section (or one of its measurements) cannot run here; the message says why."""


def require_cuda(capability: tuple[int, int] = (0, 0), feature: str = "") -> torch.device:
    """The current CUDA device, or Skip when there is none or it is older than `capability`."""
    if not torch.cuda.is_available():
        raise Skip("no CUDA GPU")
    have = torch.cuda.get_device_capability()
    if have < capability:
        raise Skip(f"{feature} needs compute capability {capability[0]}.{capability[1]}, this "
                   f"GPU has {have[0]}.{have[1]}")
    return torch.device("cuda", torch.cuda.current_device())


def require_package(name: str):
    """Import `name`, or Skip saying it is missing (on the GPU machines a missing package
    has to travel as a wheel)."""
    try:
        return importlib.import_module(name)
    except ImportError as error:
        raise Skip(f"{name} is not installed ({error}): bring its wheel to measure this") from None


def row(what: str, value: float | str | None, unit: str = "", note: str = "") -> dict:
    """One figure: every section's rows have these keys, so one table layout shows them all."""
    return {"what": what, "value": value, "unit": unit, "note": note}


@dataclass
class Budget:
    """Seconds left to a section; `clock` is injectable so tests never depend on real time."""

    deadline: float
    clock: Callable[[], float] = time.monotonic

    def left(self) -> float:
        return self.deadline - self.clock()


@dataclass(frozen=True)
class Section:
    name: str
    lab: str
    measures: str  # what it would measure: printed in dry mode
    run: Callable[[Budget], list[dict]]
    budget_s: float
    packages: tuple[str, ...] = ()  # optional packages some of its measurements need


# -- the sections ------------------------------------------------------------------------------


def check_doctor(budget: Budget) -> list[dict]:
    from llmlab import env

    device = require_cuda()
    report = env.collect(include_frameworks=False)  # the framework probes take minutes
    gpu = report.gpus[device.index or 0]
    rows = [row("GPU", gpu.name), row("compute capability", f"{gpu.capability[0]}."
                                      f"{gpu.capability[1]}", note=gpu.tensor_cores),
            row("driver", report.driver_version), row("CUDA runtime", report.cuda_runtime),
            row("NCCL", report.nccl_version)]
    rows += [row(f"NVML {name}", value, unit) for name, value, unit in _nvml_readings(device)]
    return rows


def _nvml_readings(device: torch.device) -> list[tuple[str, float, str]]:
    """Utilisation, memory in use, power and temperature as NVML reads them (torch.cuda's
    wrappers around pynvml); none when NVML is missing."""
    readings = (("utilisation", torch.cuda.utilization, "%"),
                ("memory in use", lambda d: torch.cuda.device_memory_used(d) / 1e9, "GB"),
                ("power", lambda d: torch.cuda.power_draw(d) / 1000, "W"),
                ("temperature", torch.cuda.temperature, "C"))
    found = []
    for name, read, unit in readings:
        try:
            found.append((name, round(float(read(device)), 1), unit))
        except (ModuleNotFoundError, RuntimeError, AttributeError):  # no pynvml, or no such call
            continue
    return found


def check_matmul(budget: Budget, size: int = 8192) -> list[dict]:
    device = require_cuda()
    name = torch.cuda.get_device_name(device)
    rows = []
    for dtype in DTYPES:
        if budget.left() <= 0:
            rows.append(row(f"{dtype} {size}^3", None, note="section budget spent"))
            continue
        if not dtype_supported(dtype, device):
            rows.append(row(f"{dtype} {size}^3", None, note="not supported by this GPU"))
            continue
        result = measure_matmul(size, dtype, device, warmup=3, repeats=10)
        peak = peak_tflops(name, dtype)
        share = f"{result.tflops / peak:.0%} of the {peak:g} peak" if peak else "no peak known"
        rows.append(row(f"{dtype} {size}^3", round(result.tflops, 1), "TFLOP/s", share))
    rows.append(_fp8_matmul_row(device, size))
    return rows


def _fp8_matmul_row(device: torch.device, size: int) -> dict:
    """An e4m3 matmul with per-tensor scales (torch._scaled_mm, the kernel fp8 training uses)."""
    what = f"fp8 e4m3 {size}^3"
    if torch.cuda.get_device_capability(device) < (8, 9):
        return row(what, None, note="fp8 needs compute capability 8.9 (Ada, Hopper) or newer")
    a = torch.randn(size, size, device=device).to(torch.float8_e4m3fn)
    b = torch.randn(size, size, device=device).to(torch.float8_e4m3fn).t()  # column-major
    one = torch.ones((), device=device)
    timing = time_fn(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one,
                                                    out_dtype=torch.bfloat16),
                           warmup=3, repeats=10, device=device)
    return row(what, round(matmul_flops(size, size, size) / timing.median_s / 1e12, 1),
               "TFLOP/s", "dense, bf16 output")


MEMORY_SETUPS = {  # the three ways Lab 02 trains GPT-2 small, each as a TrainingSetup's changes
    "fp32": {"dtype": "fp32"},
    "bf16 autocast": {"dtype": "bf16", "fp32_grads": True},
    "pure bf16": {"dtype": "bf16", "master_weights": False},
}


def check_memory(budget: Budget) -> list[dict]:
    from llmlab.memory import TrainingSetup, estimate_memory, measure

    device = require_cuda()
    rows = []
    for label, changes in MEMORY_SETUPS.items():
        for checkpointing in (False, True):
            what = f"{label}{', checkpointing' if checkpointing else ''}, {MEMORY_BATCH}x{SEQ}"
            if budget.left() <= 0:
                rows.append(row(what, None, note="section budget spent"))
                continue
            setup = TrainingSetup(batch=MEMORY_BATCH, seq=SEQ, checkpointing=checkpointing,
                                  **changes)
            plan = estimate_memory(MODEL, setup).peak
            step = measure(MODEL, setup, device)
            torch.cuda.empty_cache()
            # The CUDA allocator's peak is the figure; off a GPU only the tracker's sum exists.
            measured = step.cuda_max_allocated or step.peak_bytes
            by = "CUDA allocator" if step.cuda_max_allocated else "tracked tensors"
            parts = ", ".join(f"{k} {v / 1e9:.2f}" for k, v in step.peak.items())
            rows.append(row(what, round(measured / 1e9, 3), f"GB peak ({by})",
                            f"plan {plan / 1e9:.3f} GB, off by {measured / plan - 1:+.1%} "
                            f"(goal: within 5%); tensors tracked {step.peak_bytes / 1e9:.3f} GB "
                            f"at the {step.peak_phase}: {parts}"))
    return rows


class RandomTokens:
    """A batch source of random token ids on the GPU: speed does not depend on the text."""

    def __init__(self, vocab: int, batch: int, seq: int, device: torch.device, seed: int = 0):
        self.vocab, self.shape, self.device = vocab, (batch, seq + 1), device
        self.rng = np.random.default_rng(seed)

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        window = torch.from_numpy(self.rng.integers(0, self.vocab, self.shape)).to(self.device)
        return window[:, :-1], window[:, 1:]

    def state_dict(self) -> dict:
        return {"rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]


def _train(device, dtype: str, compile: bool, steps: int, out_dir: Path | None = None):
    """A short run of GPT-2 small on random tokens with the course's trainer."""
    from llmlab.models import build_model, preset, training_flops_per_token
    from llmlab.train import TrainConfig, Trainer

    shape = preset(MODEL)
    config = TrainConfig(max_steps=steps, micro_batch_size=TRAIN_BATCH, seq_len=SEQ, dtype=dtype,
                         compile=compile, warmup_steps=1, log_interval=1, eval_interval=steps,
                         eval_batches=1, out_dir=out_dir, device=str(device),
                         progress=False)
    data = RandomTokens(shape.vocab_size, TRAIN_BATCH, SEQ, device)
    flops = training_flops_per_token(shape, SEQ).total
    trainer = Trainer(build_model(shape), config, data, flops_per_token=flops)
    return trainer.fit()


def _steady(history, reading: str) -> float | None:
    """The median of a reading over the second half of the steps (compilation and warm-up
    are in the first)."""
    values = [getattr(m, reading) for m in history[len(history) // 2 :]]
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def check_training(budget: Budget, compile: bool = True) -> list[dict]:
    from llmlab.models import build_model, preset
    from llmlab.train import load_checkpoint

    device = require_cuda((8, 0), "bf16 training")
    result = _train(device, "bf16", compile, TRAIN_STEPS)
    tokens_per_s, mfu = _steady(result.history, "tokens_per_s"), _steady(result.history, "mfu")
    rows = [row(f"bf16{' + compile' if compile else ''} + SDPA", round(tokens_per_s), "tokens/s",
                f"MFU {mfu:.1%} (aim: 45%)" if mfu is not None else "no peak known")]
    if budget.left() <= 0:
        return rows + [row("fp16 + scaler, checkpoint GPU -> CPU", None,
                           note="section budget spent")]
    with tempfile.TemporaryDirectory() as folder:
        result = _train(device, "fp16", False, FP16_STEPS, Path(folder))
        loss = result.history[-1].loss
        rows.append(row("fp16 + GradScaler, final loss", round(loss, 3), "",
                        f"{_steady(result.history, 'tokens_per_s'):.0f} tokens/s"))
        state = load_checkpoint(result.checkpoint, build_model(preset(MODEL)))  # on the CPU
        rows.append(row("checkpoint written on the GPU, loaded on the CPU", state.get("step"),
                        "step", result.checkpoint.name))
    return rows


def check_sparse(budget: Budget) -> list[dict]:
    from torch.sparse import to_sparse_semi_structured

    from llmlab.memory.estimate import block_linear_shapes
    from llmlab.models import preset
    from llmlab.prune.masks import nm_mask

    device = require_cuda((8, 0), "2:4 sparse tensor cores")
    rows, tokens = [], TRAIN_BATCH * SEQ
    # GPT-2 small's shapes, then Llama-7B's (where a kernel's fixed cost weighs less)
    shapes = dict.fromkeys([*block_linear_shapes(preset(MODEL)),
                            *block_linear_shapes(preset(LARGE_MODEL))])
    for fan_in, fan_out in shapes:
        what = f"{tokens} tokens x ({fan_in} -> {fan_out}), fp16"
        if budget.left() <= 0:
            rows.append(row(what, None, note="section budget spent"))
            continue
        weight = torch.randn(fan_out, fan_in, device=device, dtype=torch.float16)
        weight = weight * nm_mask(weight)
        x = torch.randn(tokens, fan_in, device=device, dtype=torch.float16)
        sparse = to_sparse_semi_structured(weight)
        dense_s, sparse_s = _linear_seconds(x, weight), _linear_seconds(x, sparse)
        rows.append(row(what, round(dense_s / sparse_s, 2), "x dense speed",
                        f"dense {dense_s * 1e3:.3f} ms, 2:4 {sparse_s * 1e3:.3f} ms "
                        f"({type(sparse).__name__.removeprefix('SparseSemiStructuredTensor')})"))
    return rows


def _linear_seconds(x: torch.Tensor, weight: torch.Tensor) -> float:
    """Median seconds of x @ weight.T (a dense or a 2:4 sparse weight) on x's GPU."""
    return time_fn(lambda: torch.nn.functional.linear(x, weight), repeats=20,
                         device=x.device).median_s


def check_quant(budget: Budget) -> list[dict]:
    device = require_cuda()
    rows = []
    for what, measure in ((f"bitsandbytes NF4 {MODEL}", _nf4_row),
                          (f"torchao int8 weight-only {MODEL}", _torchao_row)):
        if budget.left() <= 0:
            rows.append(row(what, None, note="section budget spent"))
            continue
        try:
            rows.append(measure(what, device))
        except Skip as skip:
            rows.append(row(what, None, note=f"skipped: {skip}"))
    rows += [row(what, None, note="not automated in this check yet: run Lab 07 on the GPU")
             for what in ("LLM.int8 layer on CUDA", "GPTQModel kernel latency against fp16",
                          "QLoRA measured peak against qlora_memory")]
    return rows


def _model_latency(model, device) -> float:
    ids = torch.randint(0, model.config.vocab_size, (MEMORY_BATCH, SEQ), device=device)
    with torch.no_grad():
        return time_fn(lambda: model(ids), repeats=10, device=device).median_s


def _nf4_row(what: str, device: torch.device) -> dict:
    require_package("bitsandbytes")
    from llmlab.models import build_model, preset
    from llmlab.quant.bnb import nf4_bits_per_weight, nf4_model

    model = build_model(preset(MODEL), device, torch.float16)
    quantized = nf4_model(model, compute_dtype=torch.float16, device=device)
    ratio = _model_latency(quantized, device) / _model_latency(model.eval(), device)
    return row(what, round(nf4_bits_per_weight(quantized), 2), "bits/weight",
               f"forward {ratio:.2f}x fp16's time")


def _torchao_row(what: str, device: torch.device) -> dict:
    require_package("torchao")
    from llmlab.models import build_model, preset
    from llmlab.quant.torchao_int8 import int8_bits_per_weight, int8_model

    model = build_model(preset(MODEL), device, torch.bfloat16)
    quantized = int8_model(model, "weight-only", device)
    ratio = _model_latency(quantized, device) / _model_latency(model.eval(), device)
    return row(what, round(int8_bits_per_weight(quantized), 2), "bits/weight",
               f"forward {ratio:.2f}x bf16's time")


def check_nccl(budget: Budget) -> list[dict]:
    import torch.distributed as dist

    device = require_cuda()
    if not dist.is_nccl_available():
        raise Skip("this PyTorch was built without NCCL")
    from llmlab.jobs.hangs import FLIGHT_RECORDER_ENTRIES

    # The flight recorder is sized when the group is created: set it before.
    os.environ.setdefault("TORCH_FR_BUFFER_SIZE", FLIGHT_RECORDER_ENTRIES)
    dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1,
                            device_id=device)
    try:
        rows = _one_rank_rows(device)
    finally:
        dist.destroy_process_group()
    if budget.left() > 0:
        rows += _stall_rows(device)
    rows.append(row("all-reduce bandwidth, DDP/FSDP equivalence, tensor and pipeline parallel",
                    None, note="need two GPUs or more: unmeasured"))
    return rows


def _one_rank_rows(device: torch.device) -> list[dict]:
    import torch.distributed as dist

    from llmlab.jobs.hangs import dump_flight_record, load_flight_records

    tensor = torch.ones(64 * 2**20, device=device)  # 256 MB of fp32
    timing = time_fn(lambda: dist.all_reduce(tensor), device=device)
    rows = [row("NCCL process group, one rank: all-reduce of 256 MB",
                round(timing.median_s * 1e3, 3), "ms", "a copy at most: no link is crossed")]
    try:
        with tempfile.TemporaryDirectory() as folder:
            dump_flight_record(Path(folder) / "rank_")
            calls = load_flight_records(Path(folder) / "rank_")[0]
    except ImportError as error:  # a private torch name: another PyTorch may lack it
        return rows + [row("flight recorder dump", None, note=f"skipped: {error}")]
    return rows + [row("flight recorder dump", len(calls), "collectives recorded")]


def _stall_rows(device: torch.device) -> list[dict]:
    """dcp.save against async_save. A first sync run measures one write and one step; both
    modes then save at an interval longer than a write, as a real job does (saved every few
    steps, async_save would stall on the previous write, not on staging)."""
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        probe = _stall_run("sync", device, Path(folder) / "probe", steps=6, every=3)
        step_s = statistics.median(probe.step_seconds)
        every = min(100, math.ceil(1.5 * probe.median_stall / step_s))
        for mode in ("sync", "async"):
            run = _stall_run(mode, device, Path(folder) / mode, steps=3 * every, every=every)
            rows.append(row(f"checkpoint stall, {mode}, a save every {every} steps",
                            round(run.median_stall, 3), "s median",
                            f"of it waiting for the previous save {run.median_wait:.3f} s; step "
                            f"{statistics.median(run.step_seconds) * 1e3:.0f} ms; exact: "
                            f"{run.exact}, {run.checkpoint_bytes / MB:.0f} MB"))
    return rows


def _stall_run(mode: str, device: torch.device, folder: Path, steps: int, every: int):
    """Train GPT-2 small in pure bf16 for `steps` steps, saving in `mode` every `every`."""
    from llmlab.memory import TrainingSetup, prepare, training_step
    from llmlab.train.stall import measure_stall

    setup = TrainingSetup(batch=MEMORY_BATCH, seq=SEQ, dtype="bf16", master_weights=False)
    model, optimizer, ids, autocast_dtype = prepare(MODEL, setup, device)
    step = functools.partial(training_step, model, optimizer, ids, autocast_dtype)
    return measure_stall(mode, model, optimizer, step, folder, steps=steps, every=every)


def check_kernels(budget: Budget) -> list[dict]:
    """Lab 09 on a GPU: its Triton kernels compiled (agreement, then bandwidth against eager,
    torch.softmax and torch.compile), a bf16 step of GPT-2 small profiled with its kernels and
    the GPU's idle gaps, and torch.compile's modes timed on its forward."""
    device = require_cuda((8, 0), "bf16 kernels")
    require_package("triton")
    from llmlab.kernels.attention import attention_forward
    from llmlab.kernels.softmax import softmax

    rows = []
    x = torch.randn(512, 1000, device=device) * 10  # an odd width: masked lanes in the tile
    error = (softmax(x) - x.softmax(-1)).abs().max().item()
    rows.append(row("Triton softmax vs torch.softmax, fp32", f"{error:.1e}", "max abs error"))
    q, k, v = (torch.randn(2, 4, 300, 64, device=device) for _ in range(3))
    reference = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    error = (attention_forward(q, k, v, causal=True) - reference).abs().max().item()
    rows.append(row("Triton attention forward vs SDPA, causal, fp32", f"{error:.1e}",
                    "max abs error", "tl.dot rounds fp32 to tf32: about 1e-3 expected"))
    measurements = (("softmax bandwidth", _softmax_bandwidth_rows),
                    (f"profiled bf16 step of {MODEL}", _profiled_step_rows),
                    (f"torch.compile modes, {MODEL} forward", _compile_mode_rows))
    for what, measure in measurements:
        if budget.left() <= 0:
            rows.append(row(what, None, note="section budget spent"))
            continue
        rows += measure(device)
    return rows


def _softmax_bandwidth_rows(device: torch.device) -> list[dict]:
    from llmlab.kernels.bandwidth import softmax_bandwidth

    return [row(f"softmax 8192 x 4096 bf16: {r['softmax']}", r["GB/s"], "GB/s",
                f"{r['time (us)']} us, {r['of datasheet']}")
            for r in softmax_bandwidth(device=device)]


def _profiled_step_rows(device: torch.device) -> list[dict]:
    from llmlab import profiler
    from llmlab.models import build_model, preset

    model = build_model(preset(MODEL), device, torch.float32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    ids = torch.randint(0, model.config.vocab_size, (MEMORY_BATCH, SEQ), device=device)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            model(ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    profiled = profiler.profile_step(step, cuda=True)
    idle = profiler.gpu_gaps(profiled.kernels)
    top = profiler.top_operators(profiled.kernels, k=3)
    return [row("kernels in one step", len(profiled.kernels), "kernels",
                f"GPU busy {idle.busy_us / 1e3:.1f} ms, idle {idle.idle_fraction:.1%} between "
                "them"),
            *(row(f"top kernel {i + 1}: {r['operator'][:60]}", r["share"], "of GPU time")
              for i, r in enumerate(top))]


def _compile_mode_rows(device: torch.device) -> list[dict]:
    from llmlab.kernels.compiled import time_modes
    from llmlab.models import build_model, preset

    model = build_model(preset(MODEL), device, torch.bfloat16).eval()
    ids = torch.randint(0, model.config.vocab_size, (1, 128), device=device)  # small: launch-bound
    # max-autotune benchmarks kernel variants for minutes: out of this check's budget.
    timings = time_modes(model, [ids], modes=("default", "reduce-overhead"))
    return [row(f"torch.compile mode={mode}, batch 1 x 128", round(t.speedup, 2), "x eager",
                f"compile {t.compile_s:.0f} s, {t.compiled_s * 1e3:.2f} ms against "
                f"{t.eager_s * 1e3:.2f} ms eager; {t.speedup_line()}")
            for mode, t in timings.items()]


SECTIONS = (
    Section("doctor", "Lab 00", "driver, CUDA runtime, capability, NCCL version, NVML readings",
            check_doctor, 30),
    Section("matmul", "Lab 00", "8192^3 matmul TFLOP/s in fp32, tf32, bf16, fp16 and fp8 "
            "against the peak table", check_matmul, 60),
    Section("memory", "Lab 02", "GPT-2 small's training-step peak (CUDA allocator) against "
            "estimate_memory in fp32, bf16 autocast, pure bf16, with and without activation "
            "checkpointing", check_memory, 90),
    Section("training", "Lab 03", "GPT-2 small bf16 + torch.compile + SDPA tokens/s and MFU; "
            "fp16 + GradScaler; a GPU checkpoint loaded on the CPU", check_training, 150),
    Section("sparse 2:4", "Lab 06", "2:4 semi-structured matmul against dense at GPT-2 small's "
            "and Llama-7B's shapes", check_sparse, 40),
    Section("quant", "Lab 07", "bitsandbytes NF4 and torchao int8 GPT-2 small on CUDA (bits "
            "per weight, latency against 16-bit)", check_quant, 60,
            ("bitsandbytes", "torchao")),
    Section("nccl, one rank", "Labs 04-05", "NCCL process group with one rank, the flight "
            "recorder, sync/async checkpoint stall; what needs two GPUs stays unmeasured",
            check_nccl, 60),
    Section("kernels", "Lab 09", "Triton softmax and attention compiled (agreement; bandwidth "
            "against eager, torch.softmax, torch.compile), a bf16 step profiled (kernels, idle "
            "gaps), torch.compile modes on GPT-2 small's forward", check_kernels, 120,
            ("triton",)),
)


# -- the runner --------------------------------------------------------------------------------


def missing_packages(section: Section) -> list[str]:
    return [name for name in section.packages if importlib.util.find_spec(name) is None]


def _result(section: Section, status: str, reason: str = "", seconds: float = 0.0, rows=()):
    return {"section": section.name, "lab": section.lab, "measures": section.measures,
            "status": status, "reason": reason, "seconds": round(seconds, 1),
            "rows": list(rows)}


def run_sections(
    sections: Sequence[Section] = SECTIONS,
    budget_s: float = DEFAULT_BUDGET_S,
    skip_all: str | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> list[dict]:
    """Run every section in turn (or mark each skipped with `skip_all`'s reason); a failure is
    recorded, never raised, so one broken section costs only its own figures."""
    end = clock() + budget_s
    results = []
    for section in sections:
        start = clock()
        if skip_all:
            missing = missing_packages(section)
            also = f" (missing here too: {', '.join(missing)})" if missing else ""
            results.append(_result(section, "skipped", skip_all + also))
            continue
        if start >= end:
            results.append(_result(section, "skipped", f"overall budget of {budget_s:g} s spent"))
            continue
        budget = Budget(min(start + section.budget_s, end), clock)
        try:
            rows = section.run(budget)
        except Skip as skip:
            results.append(_result(section, "skipped", str(skip), clock() - start))
            continue
        except Exception as error:  # any failure: record it and go on with the next section
            last = traceback.format_exception_only(error)[-1].strip()
            results.append(_result(section, "error", last, clock() - start))
            continue
        seconds = clock() - start
        late = seconds > section.budget_s
        reason = f"over its {section.budget_s:g} s budget" if late else ""
        results.append(_result(section, "ok", reason, seconds, rows))
    return results


def summary_table(results: list[dict]) -> str:
    summary = [{"section": r["section"], "lab": r["lab"], "status": r["status"],
                "seconds": r["seconds"], "reason": r["reason"]} for r in results]
    parts = [markdown_table(summary, aligned=True)]
    for result in results:
        if result["rows"]:
            parts.append(f"\n{result['section']} ({result['lab']})\n"
                         + markdown_table(result["rows"], aligned=True))
    return "\n".join(parts)


def write_report(results: list[dict], path: str | Path, budget_s: float, dry_run: bool) -> None:
    report = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "model": MODEL,
        "budget_s": budget_s,
        "dry_run": dry_run,
        "sections": results,
    }
    write_atomically(path, json.dumps(report, indent=2).encode())  # never half a report


def gpu_check(out: Path, budget_s: float = DEFAULT_BUDGET_S, dry_run: bool = False,
              sections: Sequence[Section] = SECTIONS) -> int:
    """Print what is measured (or would be), the table and where the JSON went; exit status."""
    skip_all = None
    if not torch.cuda.is_available():
        skip_all = "no CUDA GPU: nothing measured"
    elif dry_run:
        skip_all = "dry run: nothing measured"
    for section in sections:
        print(f"{section.name} ({section.lab}): {section.measures}")
    if skip_all:
        print(skip_all)
    results = run_sections(sections, budget_s, skip_all)
    print()
    print(summary_table(results))
    write_report(results, out, budget_s, skip_all is not None)
    print(f"\nwrote {out}")
    return 0 if all(r["status"] != "error" for r in results) else 1
