"""The labs and the rule per lab that picks its profile on a given machine, and why."""

import json
import re
from pathlib import Path

import pytest
from helpers.fake_machines import (
    A100_40GB,
    A100_80GB,
    H100,
    L4,
    RTX_3060,
    RTX_4060,
    RTX_4080,
    T4,
    cuda_box,
    gpus,
    h100_box,
    make_report,
)

from llmlab.course.labs import (
    CONSUMER_GPU_GB,
    LABS,
    TRAINING_GPU_GB,
    capability_table,
    find_lab,
)
from llmlab.course.profiles import PROFILES
from llmlab.units import GB


def profiles(report) -> dict[str, str]:
    return {lab.slug: name for lab, name, _ in capability_table(report)}


def test_a_cpu_laptop_runs_everything_at_smoke_scale():
    assert set(profiles(make_report()).values()) == {"smoke"}


def test_an_8_gpu_node_runs_everything_at_full_scale():
    assert set(profiles(h100_box()).values()) == {"full"}


@pytest.mark.parametrize(
    ("gpu", "training"),
    [(RTX_4060, "smoke"), (RTX_3060, "consumer"), (T4, "consumer"), (RTX_4080, "consumer"),
     (L4, "full"), (A100_40GB, "full"), (A100_80GB, "full"), (H100, "full")],
    ids=["RTX-4060-8GB", "RTX-3060-12GB", "T4", "RTX-4080-16GB", "L4", "A100-40GB",
         "A100-80GB", "H100"],
)
def test_one_gpu_trains_gpt2_small_from_12_gb_and_at_full_scale_from_20(gpu, training):
    result = profiles(cuda_box(gpus=gpus(gpu)))
    assert result["environment"] == "full"
    # Labs 06-10 start from Lab 03's model of their profile, trained first when it is missing.
    training_labs = ("training", "pruning", "quantization", "finetuning", "post_training")
    assert {result[slug] for slug in training_labs} == {training}
    assert result["multi_gpu"] == result["at_scale"] == "smoke"  # 2 CPU processes stand in


def test_a_t4_is_told_its_memory_and_that_it_trains_in_fp16():
    _, name, why = capability_table(cuda_box(gpus=gpus(T4)))[3]
    assert name == "consumer"
    assert "Tesla T4 has 15.8 GB" in why and f"full needs {TRAINING_GPU_GB} GB" in why
    assert "no bf16 (compute capability 7.5): the trainer runs fp16 with a grad scaler" in why


def test_a_gpu_with_bf16_is_not_told_about_fp16():
    for gpu in (RTX_4080, H100):
        _, _, why = capability_table(cuda_box(gpus=gpus(gpu)))[3]
        assert "fp16" not in why and "bf16" not in why


def test_a_gpu_below_the_consumer_bound_is_told_what_each_profile_needs():
    _, name, why = capability_table(cuda_box(gpus=gpus(RTX_4060)))[3]
    assert name == "smoke"
    assert "RTX 4060 has 8.6 GB" in why
    assert f"consumer needs {CONSUMER_GPU_GB} GB, full needs {TRAINING_GPU_GB} GB" in why


def test_the_consumer_bound_leaves_lab_03_a_micro_batch_of_4():
    """At the bound the planner gives Lab 03 a micro-batch of 4 or more (its accumulation
    comparison quarters it); one sequence at a time would fit far below it."""
    from llmlab.recipes import micro_batch_for

    assert micro_batch_for(CONSUMER_GPU_GB * GB) >= 4
    assert micro_batch_for(CONSUMER_GPU_GB * GB, "fp32") >= 4  # a GPU before Volta: no fp16
    assert micro_batch_for(4 * GB) == 1  # Lab 03 alone would run from 4 GB


def test_two_small_gpus_run_the_multi_gpu_labs_at_full_scale():
    result = profiles(cuda_box(gpus=gpus(T4, 2)))
    assert result["multi_gpu"] == result["at_scale"] == "full"
    assert result["training"] == "consumer"


def test_lab_03s_full_recipe_fits_the_memory_its_rule_asks_for():
    """The rule's threshold leaves the planner's 10% margin over the full recipe's estimate."""
    from llmlab.data.pipeline import PROFILE_SPECS
    from llmlab.memory import TrainingSetup, estimate_memory
    from llmlab.models import preset
    from llmlab.recipes import MODEL_PRESET, lab03_config

    config = lab03_config("full")
    shape = preset(MODEL_PRESET["full"], vocab_size=PROFILE_SPECS["full"].vocab_size)
    setup = TrainingSetup(batch=config.micro_batch_size, seq=config.seq_len, dtype="bf16",
                          optimizer="adamw", fused_optimizer=True)
    needed = estimate_memory(shape, setup).total
    assert needed <= 0.9 * TRAINING_GPU_GB * GB
    assert needed > T4.total_memory_bytes * 0.8  # a T4 would run at its edge


def test_the_labs_follow_the_course_plan():
    planned = [(lab.number, lab.slug, lab.ready) for lab in LABS if lab.number >= 4]
    assert planned == [(4, "multi_gpu", True), (5, "at_scale", True), (6, "pruning", True),
                       (7, "quantization", True), (8, "finetuning", True),
                       (9, "kernels", True), (10, "post_training", True),
                       (11, "experts_and_context", True)]
    assert [lab.title for lab in LABS[4:]] == [
        "Multi-GPU training", "Training at scale", "Pruning", "4-bit quantization",
        "Fine-tuning and evaluation", "Kernels and profiling",
        "Post-training: SFT, DPO and RLVR", "Experts and long context",
    ]


def test_every_lab_gives_a_reason_and_notebook_names_follow_the_numbering():
    for lab, name, why in capability_table(make_report()):
        assert name in PROFILES and why
        assert lab.notebook.startswith(f"{lab.number:02d}_")
    assert [lab.number for lab in LABS] == list(range(len(LABS)))


def test_an_unknown_lab_number_is_an_error_naming_the_range():
    with pytest.raises(ValueError, match="no lab 99; the labs are numbered 0 to 11"):
        find_lab(99)


def test_a_ready_lab_has_its_solution_and_lab_notebooks_and_a_planned_one_has_none():
    # tests/course/checks/test_every_lab.py skips a lab whose notebook is missing: a ready lab
    # must never be skipped.
    root = Path(__file__).resolve().parents[2]
    for lab in LABS:
        present = [(root / folder / lab.notebook).is_file() for folder in ("solutions", "labs")]
        assert present == [lab.ready, lab.ready], lab.notebook


def test_each_labs_measured_smoke_time_is_the_one_the_readme_and_its_introduction_quote():
    # One number per lab (LABS), quoted in two places a learner reads: a re-stored lab whose
    # new time reaches only one of them fails here.
    root = Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text().splitlines()
    for lab in LABS:
        row = next(line for line in readme if line.startswith(f"| [{lab.number:02d}]("))
        assert row.split("|")[3].strip().removesuffix("\\*") == f"{lab.smoke_seconds} s", row
        cells = json.loads((root / "solutions" / lab.notebook).read_text())["cells"]
        introduction = "".join(cells[0]["source"])
        quoted = re.findall(r"(?:measured: |the stored run: )(\d+) s", introduction)
        assert quoted == [str(lab.smoke_seconds)], (lab.notebook, quoted)
