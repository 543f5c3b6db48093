"""The lab capability table: which scale each lab runs at on a given machine, and why."""

import dataclasses

from fake_machines import GIB, cuda_box, fake_gpu, h100_box, make_report

from llmlab.course.labs import LABS, capability_table


def scales(report) -> dict[str, str]:
    return {lab.slug: scale for lab, scale, _ in capability_table(report)}


def test_a_cpu_laptop_runs_everything_at_smoke_scale_and_multi_gpu_simulated():
    result = scales(make_report())
    assert result.pop("multi_gpu") == "simulated"
    assert set(result.values()) == {"smoke"}


def test_an_8_gpu_node_runs_everything_at_full_scale():
    assert set(scales(h100_box()).values()) == {"full"}


def test_a_small_single_gpu_trains_at_smoke_scale_and_simulates_multi_gpu():
    t4 = fake_gpu(name="Tesla T4", capability=(7, 5))
    t4 = dataclasses.replace(t4, total_memory_bytes=8 * GIB)
    result = scales(cuda_box(gpus=[t4]))
    assert result["environment"] == "full"
    assert result["training"] == "smoke"
    assert result["multi_gpu"] == "simulated"


def test_every_lab_gives_a_reason_and_notebook_names_follow_the_numbering():
    for lab, scale, why in capability_table(make_report()):
        assert scale in {"full", "smoke", "simulated"} and why
        assert lab.notebook.startswith(f"{lab.number:02d}_")
    assert [lab.number for lab in LABS] == list(range(len(LABS)))
