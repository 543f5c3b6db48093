"""Choosing a layout: what fits by the memory planner, ranked by the stated rule."""

import pytest

from llmlab.distributed.layout import choose_layouts, gpu_memory_gb, layout_table
from llmlab.memory import TrainingSetup

GPT2_STEP = TrainingSetup(batch=8, seq=1024)
LLAMA_STEP = TrainingSetup(batch=1, seq=4096, checkpointing=True)


def test_a_124m_model_picks_plain_data_parallel():
    best = choose_layouts("gpt2-124m", "H100 SXM", gpus_per_node=8, setup=GPT2_STEP)[0]
    assert (best.dp, best.tp, best.pp, best.zero) == (8, 1, 1, 0)
    assert "all-reduce" in best.reason


def test_a_70b_model_on_8x80gb_needs_sharding():
    # Full training: 16 bytes per parameter is 1.1 TB of model states, more than 8 x 80 GB.
    assert choose_layouts("llama-70b", "H100 SXM", setup=LLAMA_STEP) == []
    # LoRA fine-tuning: the frozen 140 GB of bf16 weights must be split over the GPUs.
    layouts = choose_layouts("llama-70b", 80, setup=LLAMA_STEP.replace(lora_rank=16))
    assert layouts and all(layout.zero == 3 or layout.tp > 1 for layout in layouts)
    assert (layouts[0].dp, layouts[0].zero) == (8, 3)  # ZeRO-3 ranks before tensor parallel


def test_every_kept_layout_fits_and_uses_every_gpu():
    layouts = choose_layouts("llama-7b", "A100 40GB", gpus_per_node=8, nodes=2, setup=LLAMA_STEP)
    assert layouts
    for layout in layouts:
        assert layout.dp * layout.tp * layout.pp == 16
        assert layout.estimate.total <= 40e9
    fit = [layout.fit for layout in layouts]
    assert fit == sorted(fit, key=lambda f: f != "yes")  # the last 10% of memory ranks last


@pytest.mark.parametrize("inside, between", [("pcie", "infiniband"), ("pcie", "ethernet")])
def test_tensor_parallel_only_inside_an_nvlink_node(inside, between):
    layouts = choose_layouts("llama-70b", "H100 SXM", nodes=8, inside_node=inside,
                             between_nodes=between, setup=LLAMA_STEP)  # fmt: skip
    assert layouts and all(layout.tp == 1 for layout in layouts)


def test_tensor_parallel_stays_inside_a_node():
    layouts = choose_layouts("llama-70b", "H100 SXM", gpus_per_node=4, nodes=8, setup=LLAMA_STEP)
    assert layouts and max(layout.tp for layout in layouts) <= 4


def test_over_ethernet_pipeline_ranks_before_zero3_across_nodes():
    setup = LLAMA_STEP
    infiniband = choose_layouts("llama-70b", "H100 SXM", nodes=8, setup=setup)
    ethernet = choose_layouts("llama-70b", "H100 SXM", nodes=8, between_nodes="ethernet",
                              setup=setup)  # fmt: skip
    assert (infiniband[0].pp, infiniband[0].zero) == (1, 3)
    assert ethernet[0].pp > 1 and ethernet[0].tp == 1
    assert "Ethernet" in ethernet[0].reason


def test_the_table_names_the_layouts_and_says_when_nothing_fits():
    table = layout_table(choose_layouts("gpt2-124m", "H100 SXM", setup=GPT2_STEP))
    assert table.splitlines()[1].split()[:3] == ["1", "DP", "8"]
    assert "nothing fits" in layout_table([])


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"gpu": "H900"}, "unknown GPU"),
        ({"gpu": 0}, "positive number of GB"),
        ({"gpus_per_node": 0}, "positive integer"),
        ({"nodes": 1.5}, "positive integer"),
        ({"inside_node": "ethernet"}, "inside_node"),
        ({"between_nodes": "nvlink"}, "between_nodes"),
    ],
)
def test_bad_input_says_what_is_allowed(kwargs, message):
    with pytest.raises(ValueError, match=message):
        choose_layouts("gpt2-124m", **{"gpu": "H100 SXM", **kwargs})


def test_gpu_memory_by_name_or_number():
    assert gpu_memory_gb("H200") == 141 and gpu_memory_gb("a100 40gb") == 40
    assert gpu_memory_gb("NVIDIA H100 80GB HBM3") == 80  # a device name, as torch reports it
    assert gpu_memory_gb(24) == 24.0
