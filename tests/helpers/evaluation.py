"""The tiny GPT-2 the evaluation tests score."""

from llmlab.models import preset

TINY = preset("tiny", vocab_size=320, context=64, n_layer=2, d_model=64, n_head=2)
