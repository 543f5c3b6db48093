"""GSM8K (Cobbe et al. 2021): grade-school maths word problems whose answers a program checks.

A record is a `question` and an `answer`: the worked solution, with calculator notes such as
`<<48/2=24>>`, whose last line is `#### 72`. The number after "####" is the answer, so a model's
completion can be scored by a checker instead of a judge: it is right when the number it gives
equals the reference. That is the verifiable reward of Lab 10's RL, at full scale online.

Everything here but `hub_gsm8k` works offline: the format, the checker and the prompts.
`hub_gsm8k` streams the problems from the Hub, only with LLMLAB_ONLINE=1.
"""

import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from llmlab.data.errors import DataError, require_online

HUB_DATASET = ("openai/gsm8k", "main")  # (repository, configuration): "socratic" adds sub-questions
ANSWER_MARK = "####"
# A number as written: a minus, digits (in thousands "1,000" or not), decimals. "1,2" is read as
# two numbers, as in a list.
NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
SYSTEM_PROMPT = ("Solve the maths problem. Reason step by step, then write the final answer, a "
                 f"number alone, on the last line after '{ANSWER_MARK} '.")


@dataclass(frozen=True)
class Problem:
    question: str
    solution: str  # the worked solution as GSM8K writes it, ending with the "#### 72" line
    answer: str  # the number after "####", commas removed: "72", "1000", "-3", "0.5"


def final_number(text: str) -> float | None:
    """The answer a text gives: the first number after its last "####" when it has one (the
    format GSM8K's solutions and SYSTEM_PROMPT use), else the last number in it; commas removed.
    None when there is none, or when nothing but words follows the "####"."""
    _, mark, tail = text.rpartition(ANSWER_MARK)  # without the mark, tail is the whole text
    numbers = NUMBER.findall(tail)
    if not numbers:
        return None
    return float((numbers[0] if mark else numbers[-1]).replace(",", ""))


def gsm8k_reward(completion: str, reference_answer: str) -> float:
    """1.0 when the completion's final number equals the reference's (an answer "72" or a whole
    GSM8K solution), else 0.0: a wrong number, no number, or a right one that is not the last."""
    got = final_number(completion)
    return float(got is not None and got == final_number(reference_answer))


def parse_record(record: Mapping[str, str]) -> Problem:
    """A GSM8K record ({"question", "answer"}) as a Problem; a DataError when the answer does
    not end with a line "#### <number>"."""
    solution = record["answer"].strip()
    last = solution.splitlines()[-1] if solution else ""
    number = NUMBER.fullmatch(last.removeprefix(ANSWER_MARK).strip())
    if not last.startswith(ANSWER_MARK) or number is None:
        raise DataError(f"a GSM8K answer ends with a line '{ANSWER_MARK} <number>', this one "
                        f"with {last!r}")
    return Problem(record["question"].strip(), solution, number.group().replace(",", ""))


def problem_messages(question: str) -> list[dict]:
    """The conversation that asks a problem: SYSTEM_PROMPT, then the question as the user's."""
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": question}]


def grpo_prompts(problems: Sequence[Problem]):
    """A datasets.Dataset in TRL's conversational form: a "prompt" column (the messages that
    ask each problem) and an "answer" column, which TRL hands each reward function by name."""
    import datasets  # (here: it takes a while to import, and only the TRL path needs it)

    return datasets.Dataset.from_list(
        [{"prompt": problem_messages(p.question), "answer": p.answer} for p in problems])


def hub_gsm8k(split: str = "train", limit: int | None = None) -> list[Problem]:
    """The first `limit` problems of GSM8K's `split` ("train": 7473, "test": 1319), streamed
    from the Hub, only with LLMLAB_ONLINE=1 (else a DataError that names the switch)."""
    repository, config = HUB_DATASET
    require_online(repository, instead="Lab 10's dates (task_splits('dates', ...))")
    import datasets  # (after the refusal: offline, the slow import is not needed)

    try:
        rows = datasets.load_dataset(repository, config, split=split, streaming=True)
        return [parse_record(row) for row in itertools.islice(rows, limit)]
    except Exception as error:  # streaming: network errors surface while reading
        raise DataError(f"could not read {repository} ({config}, {split}): {error}") from error
