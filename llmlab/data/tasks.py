"""Tasks a model of a few million parameters learns in minutes, generated here (no download).

Each task turns a *key* (a date, a number, two numbers) into a prompt and the one
right answer by a fixed rule, so a model can only score by learning the rule:
- "dates": an ISO date written out ("2021-03-04" -> "March 4, 2021"): a translation, scored with
  BLEU and chrF as well as exact match; "dates-back" is the reverse direction, for
  back-translation;
- "number-words": a number written in words ("4071" -> "four thousand seventy-one"): a longer
  translation;
- "addition": the sum of two two-digit numbers: an answer a program can verify (the reward of
  reinforcement learning with verifiable rewards);
- "facts-qa": where an invented person lives, asked closed-book. The model learns the facts by
  reading them (`fact_statements`, for every person) and the question form on the training
  people only; the test asks the others. A wrong answer that names one of the task's cities is
  fluent and wrong: a hallucination, told apart from other errors by `qa_outcome`.

The splits are drawn from disjoint sets of keys, so no test example's answer was ever trained
on (a test date never appears among the training dates).
"""

import calendar
import random
import zlib
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass

SPLITS = ("train", "validation", "test")
# Written out, not calendar.month_name: that follows the locale, and the task is in English.
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December")
ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
        "fifteen sixteen seventeen eighteen nineteen").split()
TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
# Invented names, so the model knows nothing of them before it reads their facts.
SYLLABLES = "ka lo mi ra te su no vi da re po zu fe ga".split()
CITIES = "Oslo Lima Rome Kyiv Cairo Quito Paris Delhi Seoul Tokyo Dakar Perth Riga Sofia".split()
# The ways a fact is stated for the model to read; more of them is the augmentation that lets it
# answer a question about a fact it only ever read.
STATEMENTS = ("{name} lives in", "{name} has a home in", "The city where {name} lives is",
              "{name} is a resident of")


@dataclass(frozen=True)
class TaskItem:
    key: Hashable  # what the example was made from: no two splits share one
    prompt: str  # what the model is given; it ends where the answer starts
    answer: str  # the one right answer, without the leading space and the newline

    @property
    def target(self) -> str:
        """What the model learns to write after the prompt: the answer, then a newline (the
        newline tells generation where to stop)."""
        return f" {self.answer}\n"


@dataclass(frozen=True)
class Task:
    name: str
    draw_key: Callable[[random.Random], Hashable]
    render: Callable[[Hashable], tuple[str, str]]  # key -> (prompt, answer)

    def item(self, key: Hashable) -> TaskItem:
        return TaskItem(key, *self.render(key))


def number_words(n: int) -> str:
    """An integer from 0 to 999,999 in English words: 4071 -> "four thousand seventy-one"."""
    if not 0 <= n < 1_000_000:
        raise ValueError(f"number_words covers 0 to 999,999, got {n}")
    if n < 20:
        return ONES[n]
    if n < 100:
        return TENS[n // 10] + (f"-{ONES[n % 10]}" if n % 10 else "")
    if n < 1000:
        return f"{ONES[n // 100]} hundred" + (f" {number_words(n % 100)}" if n % 100 else "")
    rest = f" {number_words(n % 1000)}" if n % 1000 else ""
    return f"{number_words(n // 1000)} thousand{rest}"


def _date(rng: random.Random) -> tuple[int, int, int]:
    year, month = rng.randrange(1900, 2100), rng.randrange(1, 13)
    return year, month, rng.randrange(1, calendar.monthrange(year, month)[1] + 1)


def _written(key: tuple[int, int, int]) -> str:
    year, month, day = key
    return f"{MONTHS[month - 1]} {day}, {year}"


def _iso(key: tuple[int, int, int]) -> str:
    year, month, day = key
    return f"{year:04d}-{month:02d}-{day:02d}"


def _person(rng: random.Random) -> str:
    return "".join(rng.choice(SYLLABLES) for _ in range(rng.choice((2, 3)))).capitalize()


def city_of(name: str) -> str:
    """Where an invented person lives: fixed by the name (crc32 is the same on every machine)."""
    return CITIES[zlib.crc32(name.encode()) % len(CITIES)]


TASKS = {task.name: task for task in (
    # " =" ends a prompt in one token: short prompts make a fine-tuning step cheaper.
    Task("dates", _date, lambda key: (f"Date: {_iso(key)} =", _written(key))),
    Task("dates-back", _date, lambda key: (f"Written: {_written(key)} =", _iso(key))),
    Task("number-words", lambda rng: rng.randrange(1, 10_000),
         lambda n: (f"Number: {n}\nIn words:", number_words(n))),
    Task("addition", lambda rng: (rng.randrange(10, 100), rng.randrange(10, 100)),
         lambda ab: (f"{ab[0]} + {ab[1]} =", str(ab[0] + ab[1]))),
    Task("facts-qa", _person, lambda name: (f"Q: Where does {name} live?\nA:", city_of(name))),
)}


def task_splits(
    name: str, sizes: Mapping[str, int], seed: int = 0
) -> dict[str, list[TaskItem]]:
    """{split: items} for the task `name`, `sizes[split]` items each, from distinct keys: the
    keys are drawn once, without repeats, and dealt to the splits in the order of `sizes`."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}: choose one of {sorted(TASKS)}")
    if any(size < 0 for size in sizes.values()):
        raise ValueError(f"split sizes must be >= 0, got {dict(sizes)}")
    task, rng = TASKS[name], random.Random(seed)
    keys: dict[Hashable, None] = {}  # a dict keeps the order keys were drawn in
    total, attempts = sum(sizes.values()), 0
    while len(keys) < total:
        attempts += 1
        if attempts > 20 * total + 1000:  # the task has fewer distinct keys than asked for
            raise ValueError(f"task {name!r} ran out of distinct examples at {len(keys)} of "
                             f"{total}: ask for fewer")
        keys.setdefault(task.draw_key(rng))
    ordered, splits, start = list(keys), {}, 0
    for split, size in sizes.items():
        splits[split] = [task.item(key) for key in ordered[start : start + size]]
        start += size
    return splits


def exact_match(output: str, item: TaskItem) -> bool:
    """Whether a completion is the answer, spaces around it ignored."""
    return output.strip() == item.answer



def fact_statements(items: Sequence[TaskItem], paraphrases: int = 1) -> list[TaskItem]:
    """The facts behind "facts-qa" items written as statements, in the first `paraphrases` of
    STATEMENTS each: "Kalo lives in" -> " Oslo.". What the model reads about a person whether or
    not it is ever asked about them."""
    if not 1 <= paraphrases <= len(STATEMENTS):
        raise ValueError(f"paraphrases must be 1 to {len(STATEMENTS)}, got {paraphrases}")
    return [TaskItem(item.key, template.format(name=item.key), f"{item.answer}.")
            for item in items for template in STATEMENTS[:paraphrases]]


def qa_outcome(output: str, item: TaskItem) -> str:
    """"correct", "hallucination" (another of the task's cities: a fluent answer, and wrong) or
    "other" (not a city at all)."""
    answer = output.strip()
    if answer == item.answer:
        return "correct"
    return "hallucination" if answer in CITIES else "other"
