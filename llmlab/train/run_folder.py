"""One live run per run folder (a trainer's out_dir).

Two runs in one folder would resume from each other's checkpoints, write into one metrics file,
prune each other's checkpoints and sweep away each other's half-written ones. So a run holds an
exclusive lock on the folder's `run.lock` from its start to its end, and a second run is refused
with the holder's pid and host, which the holder writes into the file.

The lock is `fcntl.flock`'s: it belongs to the open file, and the kernel drops it when the last
process holding that file ends, however it ends. A run killed with SIGKILL leaves no stale lock
(once any child it forked and that still holds the file, such as a data-loader worker, is gone
too). The file itself stays: whether it is locked, not whether it exists, says a run is live.
"""

import errno
import fcntl
import json
import os
import socket
from datetime import UTC, datetime
from pathlib import Path

LOCK_FILE = "run.lock"


class RunFolderBusy(RuntimeError):
    """Another live run holds the run folder's lock."""


class RunLock:
    """The exclusive lock on a run folder: `acquire()` before anything is written there,
    `release()` when the run ends."""

    def __init__(self, folder: Path):
        self.path = Path(folder) / LOCK_FILE
        self._file = None

    def acquire(self) -> None:
        """Take the lock, or raise RunFolderBusy naming the process that holds it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # "a+": opening must not erase what the holder wrote, should there be one.
        file = open(self.path, "a+", encoding="utf-8")  # noqa: SIM115 (held for the whole run)
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)  # never waits: a run is refused
        except OSError as error:
            file.seek(0)
            holder = file.read()
            file.close()
            if error.errno == errno.EWOULDBLOCK:
                raise RunFolderBusy(self._busy_message(holder)) from None
            raise OSError(
                f"cannot lock {self.path} ({error.strerror}): this file system does not support "
                "file locks; put the run's folder on a local or NFS disk"
            ) from error
        file.truncate(0)
        holder = {"pid": os.getpid(), "host": socket.gethostname(),
                  "since": datetime.now(UTC).isoformat(timespec="seconds")}
        file.write(json.dumps(holder) + "\n")
        file.flush()
        self._file = file

    def release(self) -> None:
        """Drop the lock (closing the file does); nothing when it is not held."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def _busy_message(self, holder_text: str) -> str:
        try:
            holder = json.loads(holder_text)
            who = f"pid {holder['pid']} on host {holder['host']}, running since {holder['since']}"
        except (ValueError, TypeError, KeyError):  # it has only just taken the lock
            who = "its pid and host not written yet"
        return (
            f"{self.path.parent} is in use by another run ({who}): two runs in one folder "
            "would write over each other's checkpoints and metrics. Wait for that run to end "
            "or stop it, or use another folder"
        )
