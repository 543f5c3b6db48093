"""Where the recipes build what they need and leave what they make (tokenizers, token shards,
trained models): what `llmlab train` and later labs reuse.

LLMLAB_ARTIFACTS wins; inside a checkout of the course it is `<repository>/artifacts/` (ignored by
git), elsewhere `~/.cache/llmlab/artifacts`. Each lab also runs on its own: it rebuilds what it
needs when the artifact is missing.
"""

import os
from pathlib import Path

ARTIFACTS_VARIABLE = "LLMLAB_ARTIFACTS"


def _course_root(start: Path) -> Path | None:
    """The nearest folder at or above `start` that holds the course (llmlab/ and solutions/)."""
    for folder in (start, *start.parents):
        if (folder / "llmlab").is_dir() and (folder / "solutions").is_dir():
            return folder
    return None


def artifacts_dir(create: bool = True) -> Path:
    if os.environ.get(ARTIFACTS_VARIABLE):
        path = Path(os.environ[ARTIFACTS_VARIABLE])
    elif root := _course_root(Path.cwd().resolve()):
        path = root / "artifacts"
    else:
        path = Path.home() / ".cache" / "llmlab" / "artifacts"
    if create:
        path.mkdir(parents=True, exist_ok=True)
    return path
