"""The one error type of `llmlab.data`, and the one refusal of the Hub while the course is
offline."""

from llmlab.network import ONLINE_VARIABLE, online


class DataError(ValueError):
    """Bad input data or a damaged artifact; the message names the file and says what to do."""


def require_online(name: str, instead: str) -> None:
    """Raise a DataError naming the switch unless LLMLAB_ONLINE=1: `name` (a Hub dataset or
    model) is not on this machine, and `instead` is what the course has on every machine."""
    if not online():
        raise DataError(
            f"{name} comes from the Hugging Face Hub and the course is offline: set "
            f"{ONLINE_VARIABLE}=1 before starting Python (or Jupyter) to download it, or use "
            f"{instead}."
        )
