"""A fine-tuning task that is on every machine: from a function's code, write its summary line.

Each example is one function of the standard library (the built-in corpus, `llmlab.data.corpus`):
the input is the function's source with its docstring removed, the target is the first line of
that docstring ("Return the number of items in the queue."). This is code summarization, the
task CodeXGLUE's code-to-text scores with smoothed BLEU-4, built here without a download.

Two things make the scores honest:
- The split is by module, not by function: all functions of `json/decoder.py` land in the same
  split. Functions of one module share helpers, names and phrasing; a random split by function
  would let the model see near-copies of its test examples while training.
- `leaked` finds test examples whose code shares many n-grams with training code, so a learner
  can see (and measure) what leakage between splits does to a score.

Online (LLMLAB_ONLINE=1), `hub_docstring_pairs` gives the same task on CodeXGLUE's Python
code-to-text data (functions from GitHub, split by repository), cut by the same rules.
"""

import ast
import hashlib
import re
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from llmlab.data.corpus import builtin_corpus
from llmlab.data.errors import DataError, require_online

SPLITS = ("train", "validation", "test")
HUB_TASK = ("google/code_x_glue_ct_code_to_text", "python")  # (repository, configuration)
TOKEN = re.compile(r"\w+|[^\w\s]")  # words and single punctuation marks: code-friendly tokens
# A language model learns the task as text: the code, this marker, then the summary and a newline
# (the newline tells generation where to stop).
PROMPT_END = "\n# Summary:"


@dataclass(frozen=True)
class DocstringPair:
    module: str  # the source file, relative to the standard library: "json/decoder.py"
    name: str  # "JSONDecoder.decode" for a method, "loads" for a function
    code: str  # the function's source, dedented, without its docstring
    summary: str  # the first line of its docstring


def task_prompt(code: str) -> str:
    """What the model is given: the code, then the marker after which the summary comes."""
    return f"{code}{PROMPT_END}"


def task_target(summary: str) -> str:
    """What the model learns to write after the prompt: the summary, then a newline."""
    return f" {summary}\n"


def function_pairs(
    source: str,
    module: str,
    *,
    min_summary_words: int = 3,
    min_code_lines: int = 3,
    max_code_lines: int = 40,
) -> list[DocstringPair]:
    """The (code, summary) pairs of one module's functions and methods (nested functions stay
    inside their parent), in source order. Kept: a summary line (PEP 257's: one line, then a
    blank line or nothing) of at least `min_summary_words` words, and code of `min_code_lines`
    to `max_code_lines` lines once the docstring is gone."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):  # a file of another Python version, or stray NUL bytes
        return []
    lines = source.splitlines()
    pairs = []
    for name, node in _functions(tree.body, prefix=""):
        docstring = ast.get_docstring(node)
        if not docstring or not docstring.strip():
            continue
        summary, _, rest = docstring.strip().partition("\n")
        summary = summary.strip()
        # PEP 257: a one-line summary, then a blank line; otherwise line 1 is half a sentence.
        one_line = not rest or not rest.splitlines()[0].strip()
        code = _without_docstring(node, lines)
        if code is None or not one_line or len(summary.split()) < min_summary_words:
            continue
        if min_code_lines <= len(code.splitlines()) <= max_code_lines:
            pairs.append(DocstringPair(module, name, code, summary))
    return pairs


def _functions(body: list[ast.stmt], prefix: str) -> Iterable[tuple[str, ast.AST]]:
    """Functions and methods (through classes, at any depth), with their qualified names."""
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield prefix + node.name, node
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node.body, prefix + node.name + ".")


def _without_docstring(node: ast.FunctionDef, lines: list[str]) -> str | None:
    """The function's lines (from `def`, decorators left out) minus the docstring's lines; None
    when the docstring shares a line with other code (`def f(): "doc"`), which cannot be cut."""
    doc = node.body[0]
    after = node.body[1] if len(node.body) > 1 else None
    if doc.lineno == node.lineno or (after is not None and after.lineno == doc.end_lineno):
        return None
    kept = lines[node.lineno - 1 : doc.lineno - 1] + lines[doc.end_lineno : node.end_lineno]
    return textwrap.dedent("\n".join(kept)).strip("\n")


def split_of(module: str, fractions: tuple[float, float, float] = (0.8, 0.1, 0.1)) -> str:
    """The split a module belongs to, from a hash of its name: the same on every machine, and a
    module keeps its split when other modules come or go (a shuffled list would move them)."""
    if len(fractions) != 3 or any(f < 0 for f in fractions) or abs(sum(fractions) - 1) > 1e-9:
        raise ValueError(f"fractions must be three numbers >= 0 that sum to 1, got {fractions}")
    position = int(hashlib.sha256(module.encode()).hexdigest()[:8], 16) / 16**8  # in [0, 1)
    if position < fractions[0]:
        return "train"
    return "validation" if position < fractions[0] + fractions[1] else "test"


def docstring_splits(
    subset: str = "all",
    fractions: tuple[float, float, float] = (0.8, 0.1, 0.1),
    drop_leaked: bool = True,
    **filters,
) -> dict[str, list[DocstringPair]]:
    """{"train": [...], "validation": [...], "test": [...]} from the standard library's code
    (`subset="smoke"`: every 8th file); `filters` go to `function_pairs`. With `drop_leaked`,
    validation and test pairs that `leaked` finds in the training code are left out: the
    library copies some functions between modules (tokenize and lib2to3, ...)."""
    splits: dict[str, list[DocstringPair]] = {name: [] for name in SPLITS}
    for document in builtin_corpus(subset):
        if document.source == "stdlib":  # the help topics are prose, not code
            pairs = function_pairs(document.text, document.name, **filters)
            splits[split_of(document.name, fractions)] += pairs
    if drop_leaked:
        train = [pair.code for pair in splits["train"]]
        for name in ("validation", "test"):
            copies = set(leaked(train, [pair.code for pair in splits[name]]))
            splits[name] = [pair for i, pair in enumerate(splits[name]) if i not in copies]
    return splits


def hub_docstring_pairs(
    split: str = "test", max_examples: int | None = None, **filters
) -> list[DocstringPair]:
    """CodeXGLUE's Python functions (only with LLMLAB_ONLINE=1), streamed, each cut into (code,
    summary) by `function_pairs` like the standard library's; its splits are by repository."""
    repository, config = HUB_TASK
    require_online(repository, instead="docstring_splits()")
    import datasets  # (here: it takes a while to import, and only online users need it)

    pairs = []
    try:
        for row in datasets.load_dataset(repository, config, split=split, streaming=True):
            # Methods come indented; Python 2 functions do not parse and are skipped.
            code = textwrap.dedent(row["code"])
            pairs += function_pairs(code, f"{row['repo']}/{row['path']}", **filters)
            if max_examples is not None and len(pairs) >= max_examples:
                break
    except Exception as error:  # streaming: network errors surface while reading
        raise DataError(f"could not read {repository} ({config}, {split}): {error}") from error
    return pairs[:max_examples]


def ngrams(text: str, n: int) -> set[tuple[str, ...]]:
    """The distinct token n-grams of a text (tokens: words and punctuation marks)."""
    tokens = TOKEN.findall(text)
    return {tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)}


def leaked(
    train_texts: Sequence[str], test_texts: Sequence[str], n: int = 8, threshold: float = 0.5
) -> list[int]:
    """Indices of the test texts of which at least `threshold` of their n-grams occur somewhere
    in the training texts: copies and near-copies (8-grams rarely repeat by chance in code)."""
    if n < 1 or not 0 < threshold <= 1:
        raise ValueError(f"need n >= 1 and 0 < threshold <= 1, got n={n}, threshold={threshold}")
    seen = set().union(*(ngrams(text, n) for text in train_texts))
    found = []
    for index, text in enumerate(test_texts):
        grams = ngrams(text, n)
        if grams and len(grams & seen) / len(grams) >= threshold:
            found.append(index)
    return found
