"""Data augmentation for a translation task: more training pairs from the pairs you have.

Two families, for a task of (source -> target) pairs such as "dates" (ISO date -> written out):
- **rule-based noise** (the EDA family: drop a token, swap two): cheap, needs no model. It makes
  copies of the real pairs with a perturbed *source* and the target unchanged, so the model
  learns to be robust to small changes of its input. Where every source token carries meaning
  (a digit of a date) a perturbed source no longer fits its target: the copy is label noise.
- **back-translation**: a model trained in the reverse direction (target -> source, here
  "dates-back") writes a source for each *extra target-side text* (written-out dates the small
  training share does not hold). The loop is generate -> filter -> mix: generate the synthetic
  sources, keep the pairs whose source is well formed, and add them to the real pairs in a set
  ratio. The targets are real text, so the model learns to write real targets; the sources may
  be wrong, which is the price of pairs nobody labelled.

The extra targets must never include a test example's target: back-translating it would train
the model on the test answer (leakage). `extra_targets` leaves out every target of the splits
it is given to avoid.
"""

import datetime
import random
import re
from collections.abc import Callable, Iterable, Sequence

from llmlab.data.tasks import TaskItem

# Words, numbers and single punctuation marks: "2021-03-04" -> ["2021", "-", "03", "-", "04"].
TOKEN = re.compile(r"\w+|[^\w\s]")


def split_tokens(text: str) -> list[str]:
    """The tokens EDA works on: words, numbers and punctuation marks (spaces dropped)."""
    return TOKEN.findall(text)


def drop_tokens(tokens: Sequence[str], p: float, rng: random.Random) -> list[str]:
    """Each token dropped with probability `p` (EDA's random deletion); one token is always
    kept, so the result is never empty."""
    if not 0 <= p <= 1:
        raise ValueError(f"p must be between 0 and 1, got {p}")
    if not tokens:
        return []
    kept = [t for t in tokens if rng.random() >= p]
    return kept or [tokens[rng.randrange(len(tokens))]]


def swap_tokens(tokens: Sequence[str], swaps: int, rng: random.Random) -> list[str]:
    """`swaps` times, two positions drawn at random exchange their tokens (EDA's random swap)."""
    if swaps < 0:
        raise ValueError(f"swaps must be >= 0, got {swaps}")
    out = list(tokens)
    if len(out) < 2:
        return out
    for _ in range(swaps):
        i, j = rng.sample(range(len(out)), 2)
        out[i], out[j] = out[j], out[i]
    return out


def noisy_text(text: str, rng: random.Random, drop: float = 0.1, swaps: int = 1,
               join: str = "") -> str:
    """`text` with EDA's deletion then swaps applied to its tokens, joined by `join` ("" keeps
    "2021-03-04" one piece; " " suits words)."""
    return join.join(swap_tokens(drop_tokens(split_tokens(text), drop, rng), swaps, rng))


def eda_pairs(
    sources: Sequence[str],
    targets: Sequence[str],
    copies: int,
    rng: random.Random,
    *,
    drop: float = 0.1,
    swaps: int = 1,
    join: str = "",
) -> list[tuple[str, str]]:
    """`copies` noisy copies of each (source, target): the source perturbed by `noisy_text`, the
    target unchanged. The real pairs are not included: mix them in with `mix`."""
    if len(sources) != len(targets):
        raise ValueError(f"{len(sources)} sources but {len(targets)} targets")
    return [(noisy_text(s, rng, drop, swaps, join), t)
            for _ in range(copies) for s, t in zip(sources, targets, strict=True)]


def extra_targets(pool: Iterable[TaskItem], avoid: Iterable[Iterable[TaskItem]]) -> list[str]:
    """The answers of `pool` that no item of `avoid` (the training share, the validation and
    test splits) has as its answer, each once, in pool order: target-side text for
    back-translation that cannot leak a test answer or repeat a real pair."""
    taken = {item.answer for split in avoid for item in split}
    seen: set[str] = set()
    out = []
    for item in pool:
        if item.answer not in taken and item.answer not in seen:
            seen.add(item.answer)
            out.append(item.answer)
    return out


def back_translate(
    targets: Sequence[str],
    translate_back: Callable[[list[str]], list[str]],
    keep: Callable[[str, str], bool],
) -> tuple[list[tuple[str, str]], int]:
    """Generate, then filter: a synthetic source for every target from `translate_back` (a
    target -> source model, called once on all targets), then the (source, target) pairs that
    `keep(source, target)` accepts. Returns (pairs, how many were dropped)."""
    sources = translate_back(list(targets))
    if len(sources) != len(targets):
        raise ValueError(f"translate_back gave {len(sources)} sources for {len(targets)} targets")
    pairs = [(s.strip(), t) for s, t in zip(sources, targets, strict=True)]
    kept = [pair for pair in pairs if keep(*pair)]
    return kept, len(pairs) - len(kept)


def mix(real: Sequence, synthetic: Sequence, ratio: float, rng: random.Random) -> list:
    """The real examples, each once, and round(ratio * len(real)) synthetic ones drawn without
    repeats (all of them if there are fewer), shuffled together. ratio = synthetic per real."""
    if ratio < 0:
        raise ValueError(f"ratio must be >= 0, got {ratio}")
    wanted = min(len(synthetic), round(ratio * len(real)))
    mixed = list(real) + rng.sample(list(synthetic), wanted)
    rng.shuffle(mixed)
    return mixed


ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def is_iso_date(text: str) -> bool:
    """Whether `text` is a real calendar date written YYYY-MM-DD: the filter of back-translated
    dates (a source the forward task could have drawn)."""
    if not ISO_DATE.fullmatch(text.strip()):
        return False
    try:
        datetime.date.fromisoformat(text.strip())
    except ValueError:
        return False
    return True


NUMBER = re.compile(r"\d+")


def numbers_agree(source: str, target: str) -> bool:
    """Whether every number in `target` is also in `source`, by value and as often ("March 4,
    2021" needs a 4 and a 2021 in "2021-03-04"): the number-agreement check that parallel-corpus
    cleaning uses, here dropping back-translated dates with a wrong day or year. It cannot see a
    wrong month: that is the part of the task only a model knows."""
    have = [int(n) for n in NUMBER.findall(source)]
    for number in (int(n) for n in NUMBER.findall(target)):
        if number not in have:
            return False
        have.remove(number)
    return True


def augment_by_back_translation(
    real: Sequence[tuple[str, str]],
    pool: Iterable[TaskItem],
    avoid: Iterable[Iterable[TaskItem]],
    translate_back: Callable[[list[str]], list[str]],
    keep: Callable[[str, str], bool],
    ratio: float,
    rng: random.Random,
) -> list[tuple[str, str]]:
    """Back-translation's whole loop, on (source, target) pairs: the extra targets of `pool`
    (none of `avoid`'s answers), a synthetic source for each (generate), the pairs `keep`
    accepts (filter), and the real pairs with `ratio` synthetic ones per real pair (mix)."""
    targets = extra_targets(pool, avoid)
    synthetic, _ = back_translate(targets, translate_back, keep)
    return mix(real, synthetic, ratio, rng)
