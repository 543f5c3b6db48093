"""Where the recipes build what they need and leave what they make (tokenizers, token shards,
trained models): what `llmlab train` and later labs reuse.

LLMLAB_ARTIFACTS wins; inside a checkout of the course it is `<repository>/artifacts/` (ignored by
git); on Colab with Google Drive mounted, a folder on Drive (a runtime's own disk is lost when it
ends); elsewhere `~/.cache/llmlab/artifacts`. Each lab also runs on its own: it rebuilds what it
needs when the artifact is missing.
"""

import os
from pathlib import Path

ARTIFACTS_VARIABLE = "LLMLAB_ARTIFACTS"
DRIVE = Path("/content/drive/MyDrive")  # where Colab mounts Google Drive
HOSTED_HOMES = (Path("/content"), Path("/kaggle"))  # Colab's and Kaggle's working folders


def _course_root(start: Path) -> Path | None:
    """The nearest folder at or above `start` that holds the course (llmlab/ and solutions/)."""
    for folder in (start, *start.parents):
        if (folder / "llmlab").is_dir() and (folder / "solutions").is_dir():
            return folder
    return None


def _home_cache() -> Path:
    return Path.home() / ".cache" / "llmlab" / "artifacts"


def artifacts_dir(create: bool = True, drive: Path = DRIVE) -> Path:
    if os.environ.get(ARTIFACTS_VARIABLE):
        path = Path(os.environ[ARTIFACTS_VARIABLE])
    elif root := _course_root(Path.cwd().resolve()):
        path = root / "artifacts"
    elif drive.is_dir():
        path = drive / "llmlab-artifacts"
    else:
        path = _home_cache()
    if create:
        path.mkdir(parents=True, exist_ok=True)
    return path


def where_artifacts_live(drive: Path = DRIVE, hosted_homes: tuple[Path, ...] = HOSTED_HOMES) -> str:
    """Where the labs keep what they build for each other, and how to keep it, in a sentence."""
    path = artifacts_dir(create=False, drive=drive)
    where = f"What the labs build for each other (Lab 03's model, token shards) is kept in {path}"
    if path.is_relative_to(drive):
        return f"{where}, on Google Drive: it outlives this runtime."
    if path == _home_cache() and any(home.is_dir() for home in hosted_homes):  # goes with it
        return (f"{where}, which is lost when this runtime ends (Labs 06-10 would then train Lab "
                "03's model again). To keep it, mount Google Drive (Colab: the folder icon, then "
                f"the Drive icon), or set {ARTIFACTS_VARIABLE} to a folder that lasts.")
    return f"{where} ({ARTIFACTS_VARIABLE} chooses another folder)."
