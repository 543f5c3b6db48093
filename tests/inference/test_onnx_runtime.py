"""A tiny GPT-2 exported to ONNX and run by ONNX Runtime gives PyTorch's logits, for batch sizes
and lengths other than the example's; ONNX Runtime's int8 model is smaller and still close;
bad input is refused with what to do."""

import pytest
import torch
from helpers.train_fakes import tiny_gpt2, token_ids

from llmlab.inference.engines import engine_rows, engine_table
from llmlab.inference.onnx_runtime import (
    export_onnx,
    folder_bytes,
    ort_logits,
    ort_session,
    quantize_onnx_int8,
)

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")


@pytest.fixture(scope="module")
def model():
    return tiny_gpt2(width=64, context=32).eval()


@pytest.fixture(scope="module")
def exported(model, tmp_path_factory):
    model.train()  # exported in training mode: the export must neither mind nor change it
    try:
        path = export_onnx(model, tmp_path_factory.mktemp("onnx") / "fp32", torch.ones(2, 8).long())
        assert model.training
    finally:
        model.eval()
    return path



@pytest.mark.parametrize(("batch", "length"), [(2, 8), (1, 3), (3, 32)])
def test_onnx_runtime_gives_pytorchs_logits(model, exported, batch, length):
    tokens = token_ids(batch, length)
    with torch.no_grad():
        expected = model(tokens).logits
    got = ort_logits(ort_session(exported, threads=1), tokens)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


def test_the_export_is_a_complete_folder(exported):
    assert {path.name for path in exported.parent.iterdir()} >= {"model.onnx"}
    assert not list(exported.parent.parent.glob(".*"))  # no temporary left beside it


def test_int8_is_smaller_and_close(exported, tmp_path, caplog):
    int8 = quantize_onnx_int8(exported, tmp_path / "int8")
    # Its advice, logged at every call whatever the model, is silenced (llmlab._quiet).
    assert not [r for r in caplog.records if "pre-processing" in r.getMessage()]
    assert folder_bytes(int8) < 0.6 * folder_bytes(exported)  # tiny: the graph's bytes count
    tokens = token_ids(4, 16)
    rows = engine_rows({
        "fp32": (lambda x: ort_logits(ort_session(exported), x), folder_bytes(exported)),
        "int8": (lambda x: ort_logits(ort_session(int8), x), folder_bytes(int8)),
    }, tokens, repeats=1)
    assert rows[0].max_abs_diff == 0 and rows[0].same_argmax == 1
    assert 0 < rows[1].max_abs_diff < 1 and rows[1].same_argmax > 0.8
    assert "engine | size_mb | latency_ms" in engine_table(rows)


def test_bad_input_is_refused_with_what_to_do(model, exported, tmp_path):
    with pytest.raises(ValueError, match=r"batch of at least 2 and a length from 2 to 32"):
        export_onnx(model, tmp_path / "m", torch.ones(1, 8).long())
    with pytest.raises(ValueError, match=r"int64 token ids.*torch.float32"):
        export_onnx(model, tmp_path / "m", torch.ones(2, 8))
    with pytest.raises(FileNotFoundError, match="no ONNX model at .*nothing.onnx: make one"):
        ort_session(tmp_path / "nothing.onnx")
    with pytest.raises(FileNotFoundError, match="make one with export_onnx"):
        quantize_onnx_int8(tmp_path / "nothing.onnx", tmp_path / "int8")
    with pytest.raises(ValueError, match=r"length\), got torch.int64 of shape \(8,\)"):
        ort_logits(ort_session(exported), torch.ones(8).long())
