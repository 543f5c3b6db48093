"""One table of the profiles' vocabulary sizes: the tokenizer the data pipeline trains and the small
model presets read the same number."""

from llmlab.data.pipeline import PROFILE_SPECS
from llmlab.models import SMOKE_VOCAB, preset
from llmlab.vocab_sizes import VOCAB_SIZES


def test_the_pipeline_and_the_small_presets_read_one_table():
    assert {name: spec.vocab_size for name, spec in PROFILE_SPECS.items()} == VOCAB_SIZES
    assert preset("tiny").vocab_size == preset("small").vocab_size == SMOKE_VOCAB == 2048
