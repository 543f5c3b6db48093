"""Two ways to feed a model from token shards.

`RandomWindows`: random (input, target) windows from memory-mapped shards, the nanoGPT way; for
training on a budget of steps. `TokenStream`: a streaming `IterableDataset` that reads each
(rank, data-loader worker) pair's own shards lazily, in order, and can resume where it stopped
(through `ResumableLoader`).
"""

import itertools
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from llmlab.data.errors import DataError
from llmlab.data.shards import memmap_ids, open_shard, read_header


def shards_for_reader(
    num_shards: int, rank: int, world_size: int, worker: int = 0, num_workers: int = 1
) -> list[int]:
    """The shard indices one reader (a rank's data-loader worker) owns.

    Split by rank first, then among that rank's workers: every rank gets the same number of
    shards (a flat split over rank * workers + worker readers does not: 8 shards on 2 ranks with
    3 workers each would give 5 and 3), and readers never share a shard.
    """
    if not 0 <= rank < world_size or not 0 <= worker < num_workers:
        raise ValueError(
            f"rank {rank} of {world_size} or worker {worker} of {num_workers} does not exist"
        )
    return list(range(num_shards))[rank::world_size][worker::num_workers]


def _check_batch_shape(seq_len: int, batch_size: int) -> None:
    """Zero would give empty batches that train nothing without a word: refuse it."""
    for name, value in (("seq_len", seq_len), ("batch_size", batch_size)):
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")


def _as_tensors(windows: np.ndarray, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets): each window's first T tokens, and the same shifted left by one."""
    batch = torch.from_numpy(windows.astype(np.int64))  # embeddings want int64 indices
    x, y = batch[:, :-1], batch[:, 1:]
    if device.type != "cuda":
        return x.contiguous(), y.contiguous()
    # From pinned (page-locked) memory the copy is asynchronous: the CPU goes on to prepare the
    # next step instead of waiting for the transfer.
    return tuple(t.pin_memory().to(device, non_blocking=True) for t in (x, y))


class RandomWindows:
    """Random windows of seq_len + 1 tokens from the shards; `next_batch()` -> (x, y) of (B, T)."""

    def __init__(
        self,
        paths: Sequence[str | Path],
        seq_len: int,
        batch_size: int,
        *,
        tokenizer: str | None = None,
        seed: int = 0,
        device: torch.device | str = "cpu",
    ):
        _check_batch_shape(seq_len, batch_size)
        self.paths = [Path(p) for p in paths]
        self.seq_len, self.batch_size = seq_len, batch_size
        self.device = torch.device(device)
        # Verify every shard once up front; batches then only re-open the memory maps.
        self.headers = [open_shard(p, tokenizer=tokenizer)[0] for p in self.paths]
        starts = np.array([max(0, h.tokens - seq_len) for h in self.headers])  # window starts
        if starts.sum() == 0:
            raise DataError(f"no shard in {self.paths[:3]}... holds {seq_len + 1} tokens")
        self.weights = starts / starts.sum()  # pick shards in proportion to their windows
        self.rng = np.random.default_rng(seed)

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        shards = self.rng.choice(len(self.paths), size=self.batch_size, p=self.weights)
        maps = {}
        windows = np.empty((self.batch_size, self.seq_len + 1), dtype=np.int64)
        for row, shard in enumerate(shards):
            if shard not in maps:
                # A fresh memmap per batch (as nanoGPT does): a long-lived one keeps every page
                # it ever touched mapped, so the process's resident memory creeps up.
                maps[shard] = memmap_ids(self.paths[shard], self.headers[shard])
            start = self.rng.integers(0, self.headers[shard].tokens - self.seq_len)
            windows[row] = maps[shard][start : start + self.seq_len + 1]
        return _as_tensors(windows, self.device)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        while True:
            yield self.next_batch()

    def state_dict(self) -> dict:
        return {"rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]


class TokenStream(IterableDataset):
    """Batches of consecutive windows from the shards of this rank, split among its workers.

    Each batch is a dict: input_ids and labels (B, T), plus the reader it came from and its index
    in that reader's sequence, which `ResumableLoader` records to resume exactly.
    """

    def __init__(
        self,
        paths: Sequence[str | Path],
        seq_len: int,
        batch_size: int,
        *,
        rank: int = 0,
        world_size: int = 1,
        tokenizer: str | None = None,
        verify: bool = True,
    ):
        _check_batch_shape(seq_len, batch_size)
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is outside 0 .. {world_size - 1}")
        if len(paths) % world_size:
            raise DataError(
                f"{len(paths)} shards cannot be shared equally by {world_size} ranks: a rank "
                "with more batches would wait forever for the others at its extra steps. "
                "Rebuild with a shard count that is a multiple of the world size (shard_count)."
            )
        self.paths = [Path(p) for p in paths]
        self.seq_len, self.batch_size = seq_len, batch_size
        self.rank, self.world_size = rank, world_size
        self.tokenizer, self.verify = tokenizer, verify
        # Headers only (1 KB each): checks sizes and fingerprints now, data later, lazily.
        self.headers = [read_header(p) for p in self.paths]
        windows = sum(self._window_count(index) for index in range(len(self.paths)))
        if windows < batch_size:
            longest = max((h.tokens for h in self.headers), default=0)
            raise DataError(
                f"the {len(self.paths)} shard(s) hold {windows} window(s) of seq_len + 1 = "
                f"{seq_len + 1} tokens (the longest shard has {longest:,} tokens), fewer than one "
                f"batch of {batch_size}: use a shorter seq_len, a smaller batch or more data."
            )
        self.resume_from: dict[int, int] = {}  # reader -> batches it has already delivered

    def _window_count(self, index: int) -> int:
        """Windows of seq_len + 1 tokens in shard `index`, with stride seq_len."""
        return max(0, (self.headers[index].tokens - 1) // self.seq_len)

    def reader(self) -> tuple[int, int]:
        """(this reader's number, number of readers) in the process that iterates."""
        info = get_worker_info()  # None in the main process (num_workers=0)
        workers, worker = (info.num_workers, info.id) if info else (1, 0)
        return self.rank * workers + worker, self.world_size * workers

    def _windows(self, shards: list[int], skip: int) -> Iterator[np.ndarray]:
        """Windows of seq_len + 1 tokens with stride seq_len, so every token is a target once."""
        for index in shards:
            count = self._window_count(index)
            if skip >= count:  # the whole shard was consumed before: do not even open it
                skip -= count
                continue
            _, ids = open_shard(self.paths[index], tokenizer=self.tokenizer, verify=self.verify)
            for w in range(skip, count):
                yield ids[w * self.seq_len : (w + 1) * self.seq_len + 1]
            skip = 0

    def __iter__(self) -> Iterator[dict]:
        reader, readers = self.reader()
        start = self.resume_from.get(reader, 0)
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        shards = shards_for_reader(len(self.paths), self.rank, self.world_size, worker, workers)
        windows = self._windows(shards, start * self.batch_size)
        index = start
        while True:
            rows = list(itertools.islice(windows, self.batch_size))
            if len(rows) < self.batch_size:  # drop the last partial batch: shapes stay fixed
                return
            x, y = _as_tensors(np.stack(rows), torch.device("cpu"))
            yield {"input_ids": x, "labels": y, "reader": reader, "batch": index}
            index += 1


class ResumableLoader:
    """A DataLoader over a TokenStream that remembers how far each reader got.

    `state_dict()` goes into a checkpoint; `load_state_dict()` on a fresh loader (same shards,
    rank, world size and num_workers) makes every reader continue where it stopped. After a full
    pass the position resets, so the next pass starts from the beginning.
    """

    def __init__(self, stream: TokenStream, num_workers: int = 0, **dataloader_options):
        self.stream, self.num_workers = stream, num_workers
        # batch_size=None: the stream already yields whole batches.
        self.loader = DataLoader(stream, batch_size=None, num_workers=num_workers,
                                 **dataloader_options)
        self.position: dict[int, int] = {}

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        # Workers take their copy of the stream when iteration starts: set the position first.
        self.stream.resume_from = dict(self.position)
        for item in self.loader:
            self.position[item["reader"]] = item["batch"] + 1
            yield item["input_ids"], item["labels"]
        self.position = {}

    def state_dict(self) -> dict:
        return {
            "rank": self.stream.rank, "world_size": self.stream.world_size,
            "num_workers": self.num_workers, "shards": len(self.stream.paths),
            "position": {str(reader): n for reader, n in self.position.items()},  # JSON-safe
        }

    def load_state_dict(self, state: dict) -> None:
        here = self.state_dict()
        for key in ("rank", "world_size", "num_workers", "shards"):
            if state[key] != here[key]:
                raise DataError(
                    f"cannot resume: the saved loader had {key}={state[key]}, this one has "
                    f"{here[key]}. The split of shards among readers depends on it; resume with "
                    "the same setting."
                )
        self.position = {int(reader): n for reader, n in state["position"].items()}
