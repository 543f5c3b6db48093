"""The one error type of `llmlab.data`."""


class DataError(ValueError):
    """Bad input data or a damaged artifact; the message names the file and says what to do."""
