"""Choosing a layout: what fits by the memory planner, ranked by the stated rule."""

import pytest

from llmlab.memory import TrainingSetup, estimate_memory
from llmlab.models import ModelShape
from llmlab.scale.layout import (
    Layout,
    Parallel,
    choose_layouts,
    gpu_memory_gb,
    layout_table,
    stage_estimate,
    stage_setup,
)

GPT2_STEP = TrainingSetup(batch=8, seq=1024)
LLAMA_STEP = TrainingSetup(batch=1, seq=4096, checkpointing=True)


def test_a_124m_model_picks_plain_data_parallel():
    best = choose_layouts("gpt2-124m", "H100 SXM", gpus_per_node=8, setup=GPT2_STEP)[0]
    assert best.parallel == Parallel.for_setup(GPT2_STEP, dp=8, tp=1, pp=1, zero=0)
    assert "all-reduce" in best.reason


def test_a_70b_model_on_8x80gb_needs_sharding():
    # Full training: 16 bytes per parameter is 1.1 TB of model states, more than 8 x 80 GB.
    assert choose_layouts("llama-70b", "H100 SXM", setup=LLAMA_STEP) == []
    # LoRA fine-tuning: the frozen 140 GB of bf16 weights must be split over the GPUs.
    layouts = choose_layouts("llama-70b", 80, setup=LLAMA_STEP.replace(lora_rank=16))
    parallels = [layout.parallel for layout in layouts]
    assert parallels and all(p.zero == 3 or p.tp > 1 for p in parallels)
    assert (parallels[0].dp, parallels[0].zero) == (8, 3)  # ZeRO-3 ranks before tensor parallel


def test_every_kept_layout_fits_and_uses_every_gpu():
    layouts = choose_layouts("llama-7b", "A100 40GB", gpus_per_node=8, nodes=2, setup=LLAMA_STEP)
    assert layouts
    for layout in layouts:
        assert layout.parallel.gpus == 16
        assert layout.estimate.total <= 40e9
    fit = [layout.fit for layout in layouts]
    assert fit == sorted(fit, key=lambda f: f != "yes")  # the last 10% of memory ranks last


@pytest.mark.parametrize("inside, between", [("pcie", "infiniband"), ("pcie", "ethernet")])
def test_tensor_parallel_only_inside_an_nvlink_node(inside, between):
    layouts = choose_layouts("llama-70b", "H100 SXM", nodes=8, inside_node=inside,
                             between_nodes=between, setup=LLAMA_STEP)
    assert layouts and all(layout.parallel.tp == 1 for layout in layouts)


def test_tensor_parallel_stays_inside_a_node():
    layouts = choose_layouts("llama-70b", "H100 SXM", gpus_per_node=4, nodes=8, setup=LLAMA_STEP)
    assert layouts and max(layout.parallel.tp for layout in layouts) <= 4


def test_over_ethernet_pipeline_ranks_before_zero3_across_nodes():
    setup = LLAMA_STEP
    infiniband = choose_layouts("llama-70b", "H100 SXM", nodes=8, setup=setup)
    ethernet = choose_layouts("llama-70b", "H100 SXM", nodes=8, between_nodes="ethernet",
                              setup=setup)
    assert (infiniband[0].parallel.pp, infiniband[0].parallel.zero) == (1, 3)
    assert ethernet[0].parallel.pp > 1 and ethernet[0].parallel.tp == 1
    assert "Ethernet" in ethernet[0].reason


def test_the_table_names_the_layouts_and_says_when_nothing_fits():
    table = layout_table(choose_layouts("gpt2-124m", "H100 SXM", setup=GPT2_STEP))
    first = table.splitlines()[2]  # after the header and its | --- | rule
    assert [cell.strip() for cell in first.split("|")][:2] == ["1", "DP 8"]
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


def test_the_planners_take_the_same_gpu_names():
    # One resolver (llmlab.gpu_specs.resolve_gpu_spec): the alias `llmlab plan --gpu` and
    # Cluster(gpu=...) take works for choose_layouts too.
    assert gpu_memory_gb("h100") == 80 and gpu_memory_gb("a100-40gb") == 40
    by_alias = choose_layouts("gpt2-124m", "h100", setup=GPT2_STEP)
    assert by_alias == choose_layouts("gpt2-124m", "H100 SXM", setup=GPT2_STEP) != []


def test_a_pipeline_is_planned_by_its_most_loaded_stage_each_with_its_own_items():
    # 4 GPT-2 blocks of width 64 on 2 stages; the last holds the head of a 1000-token vocabulary.
    shape = ModelShape("gpt2", n_layer=4, d_model=64, n_head=4, vocab_size=1000, context=128)
    setup = TrainingSetup(batch=1, seq=128, checkpointing=True, grad_accumulation=8)
    plan = stage_estimate(shape, setup, Parallel.for_setup(setup, dp=1, tp=1, pp=2, zero=0))
    # By hand (tests/memory/test_estimate.py): the last stage's items, each for one micro-batch,
    # not the whole pipe's 2, and its head charged to it, not to the first stage.
    assert plan.items["head activations"] == 128 * (64 * 2 + 64 * 2 + 1000 * 4)
    assert plan.items["loss buffers"] == 2 * 128 * 1000 * 4
    assert plan.items["block in backward"] == 128 * 2304
    assert plan.items["block activations"] == 128 * 2 * 64 * 2
    stages = [estimate_memory(shape, setup, pipeline_stage=i, pipeline_stages=2) for i in (0, 1)]
    assert plan == max(stages, key=lambda stage: stage.total) == stages[1]


@pytest.mark.parametrize("parallel, degrees", [
    (Parallel(dp=8), "DP 8"),  # degrees of 1 left out: not "DP 8 x TP 1 x PP 1"
    (Parallel(dp=8, zero=1, tp=2), "DP 8 ZeRO-1 x TP 2"),
    (Parallel(dp=2, tp=8, pp=2, zero=1, micro_batch=4), "DP 2 ZeRO-1 x TP 8 x PP 2"),
    (Parallel(dp=1, pp=4), "DP 1 x PP 4"),
    (Parallel(dp=16, zero=1, ep=8), "DP 16 (EP 8) ZeRO-1"),
])
def test_the_short_form_names_the_degrees_above_one(parallel, degrees):
    assert parallel.degrees() == degrees
    layout = Layout(parallel, estimate_memory("tiny", TrainingSetup()), "yes", "")
    assert layout.describe() == degrees  # the planner's tables print the short form


def test_the_long_form_names_everything():
    assert Parallel(dp=8).describe() == "DP 8 x TP 1 x PP 1, micro-batch 1 x 1"
    assert (Parallel(dp=2, tp=8, pp=2, zero=1, accumulation=16, virtual_stages=2).describe()
            == "DP 2 ZeRO-1 x TP 8 x PP 2 (2 chunks), micro-batch 1 x 16")


@pytest.mark.parametrize("kwargs, message", [
    ({"dp": 0}, "dp must be a positive integer, got 0"),
    ({"tp": -2}, "tp must be a positive integer, got -2"),
    ({"pp": 0}, "pp must be a positive integer, got 0"),
    ({"pp": 1.5}, "pp must be a positive integer, got 1.5"),
    ({"micro_batch": 0}, "micro_batch must be a positive integer"),
    ({"accumulation": 0}, "accumulation must be a positive integer"),
    ({"virtual_stages": 0}, "virtual_stages must be a positive integer"),
    ({"seq": -1}, "seq must be 0 .* or a positive integer, got -1"),
    ({"zero": 4}, "zero must be a ZeRO stage 0-3, got 4"),
    ({"ep": 0}, "ep must be a positive integer, got 0"),
    ({"ep": 4}, "ep=4 does not divide dp=2"),
])
def test_a_layout_rejects_degrees_below_one(kwargs, message):
    # So a layout's GPUs, dp * tp * pp, are always a whole multiple of tp and of pp.
    with pytest.raises(ValueError, match=message):
        Parallel(**{"dp": 2, **kwargs})


@pytest.mark.parametrize("dp, tp, pp, gpus_per_node, crossing", [
    (2, 4, 2, 8, {"tp": False, "dp": False, "pp": True}),  # 2 nodes: a stage is a node
    (4, 4, 1, 8, {"tp": False, "dp": True, "pp": False}),
    (1, 8, 2, 8, {"tp": False, "dp": False, "pp": True}),
    (3, 4, 1, 6, {"tp": True, "dp": True, "pp": False}),  # ranks 4-7 straddle nodes 0 and 1
    (8, 1, 1, 8, {"tp": False, "dp": False, "pp": False}),  # one node
])
def test_which_groups_cross_nodes(dp, tp, pp, gpus_per_node, crossing):
    parallel = Parallel(dp, tp, pp)
    assert {dim: parallel.crosses_nodes(dim, gpus_per_node) for dim in crossing} == crossing


@pytest.mark.parametrize("dp, tp, ep, crosses", [
    (16, 1, 8, False),  # EP 8 over 8 neighbouring ranks: a node
    (16, 1, 16, True),  # EP 16: two nodes of 8
    (8, 2, 8, True),  # with TP 2, an EP group of 8 spans 16 ranks
    (8, 2, 4, False),
])
def test_an_expert_parallel_group_is_neighbouring_data_parallel_ranks(dp, tp, ep, crosses):
    assert Parallel(dp, tp, ep=ep).crosses_nodes("ep", 8) == crosses


def test_a_mixture_of_experts_gets_expert_parallel_layouts_a_dense_model_none():
    moe = choose_layouts("mixtral-8x7b", "h100", 8, 8, setup=LLAMA_STEP)
    assert moe and all(layout.parallel.ep in (1, 2, 4, 8) for layout in moe)
    with_ep = [layout for layout in moe if layout.parallel.ep > 1]
    assert with_ep and all("experts over" in layout.reason for layout in with_ep)
    # Without EP, ZeRO-3 or a model split, every GPU would hold all 46.7B weights (93 GB in
    # bf16): sharing out the experts over a node is the simplest layout that fits.
    assert moe[0].describe() == "DP 64 (EP 8) ZeRO-1"
    assert not [layout for layout in moe if layout.parallel.ep == 1 and layout.parallel.zero < 3
                and layout.parallel.tp == layout.parallel.pp == 1]
    assert all(layout.parallel.ep == 1 for layout in choose_layouts("llama-70b", "h100", 8, 8))
    ep_estimate = stage_estimate("mixtral-8x7b", LLAMA_STEP, Parallel(64, ep=8))
    assert ep_estimate.setup.expert_parallel == 8


def test_the_memory_models_view_of_a_layout_round_trips():
    # TrainingSetup keeps a stage's GPUs, ZeRO stage and TP degree; Parallel keeps the set-up's
    # micro-batching: one conversion each way, and nothing else in the set-up changes.
    setup = LLAMA_STEP.replace(batch=2, grad_accumulation=4, dtype="fp16", lora_rank=8)
    parallel = Parallel.for_setup(setup, dp=4, tp=2, pp=3, zero=1)
    assert (parallel.micro_batch, parallel.accumulation, parallel.seq) == (2, 4, 4096)
    assert stage_setup(setup, parallel) == setup.replace(zero=1, gpus=8, tensor_parallel=2)
    with pytest.raises(ValueError, match="unknown dimension 'zero'"):
        parallel.crosses_nodes("zero", 8)


@pytest.mark.parametrize("model, pp", [("llama-7b", 4), ("gpt2-350m", 8), ("llama-70b", 16)])
def test_no_middle_stage_is_more_loaded_than_the_first_or_the_last(model, pp):
    setup = LLAMA_STEP.replace(seq=1024, grad_accumulation=32)
    every = [estimate_memory(model, setup.replace(gpus=8, tensor_parallel=8), pipeline_stage=i,
                             pipeline_stages=pp).total for i in range(pp)]
    parallel = Parallel.for_setup(setup, dp=1, tp=8, pp=pp)
    assert stage_estimate(model, setup, parallel).total == max(every)
