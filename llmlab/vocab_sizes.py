"""The vocabulary size of the tokenizer each profile trains (Lab 01): the data pipeline trains
its tokenizer to it and the small model presets are built for it, so it sits below both."""

VOCAB_SIZES = {
    # A small vocabulary at smoke: the embedding and the output layer stay a small share of a
    # tiny model's parameters and FLOPs, so its training time goes into the blocks, where
    # what the later labs prune and quantize learns the language.
    "smoke": 2048,
    "full": 32768,
}
VOCAB_SIZES["consumer"] = VOCAB_SIZES["full"]  # consumer trains the full profile's model and data
