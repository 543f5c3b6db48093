import json

from helpers.fake_machines import h100_box, make_report

from llmlab.env.report import format_report, report_to_dict


def test_memory_figures_are_in_the_courses_gb_and_say_so():
    text = format_report(h100_box())
    assert "GiB" not in text
    assert "85.0 GB" in text  # the H100's 85.0e9 bytes (79.2 GiB)
    assert "RAM total:            16.0 GB (host)" in text


def test_format_report_lists_each_gpu_with_capability_and_memory():
    text = format_report(h100_box())
    for index in range(8):
        assert f"GPU {index}:" in text
    assert text.count("NVIDIA H100 80GB HBM3") == 8
    assert "9.0" in text and "85.0 GB" in text and "NVLink" in text


def test_format_report_says_when_there_is_no_cuda_gpu():
    assert "no CUDA GPU" in format_report(make_report())


def test_report_to_dict_survives_json_with_computed_properties():
    data = json.loads(json.dumps(report_to_dict(h100_box())))
    assert data["gpus"][0]["tensor_cores"].endswith("fp8")
    assert data["gpus"][0]["bf16"] is True
    assert data["cpu"]["fast_bf16"] is False
