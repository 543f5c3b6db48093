"""The notebooks' markdown and the README render the same in JupyterLab, Colab and on GitHub:
there, any two dollar signs on a line are read as inline math, so a price written "$0.50 at $3
per hour" turns into italic math that eats its spaces. Escaping them as `\\$` helps on GitHub
but not in JupyterLab 4.6, so prices are written in USD, and a pair of signs is allowed only
around what reads as math (no space just inside either sign, as in `$2mnk$`)."""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "solutions").glob("*.ipynb")) + sorted((ROOT / "labs").glob("*.ipynb"))
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)  # code is shown as typed: its dollars are literal
DOLLAR = re.compile(r"\\?\$\$?")  # `$$` opens display math and is one delimiter; `\$` counts too


def bare_dollars(markdown: str) -> list[str]:
    """The lines whose dollar signs do not pair up into math, each with why."""
    problems = []
    for line in CODE.sub("", markdown).splitlines():
        signs = list(DOLLAR.finditer(line))
        if len(signs) % 2:
            problems.append(f"an odd number of $ (write prices in USD): {line.strip()}")
            continue
        for opening, closing in zip(signs[::2], signs[1::2], strict=True):
            inner = line[opening.end() : closing.start()]
            after = line[closing.end() : closing.end() + 1]
            if not inner or inner[0].isspace() or inner[-1].isspace() or after.isdigit():
                problems.append(f"$...$ around prose, rendered as math: {line.strip()}")
    return problems


def markdown_cells(path: Path) -> list[str]:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return ["".join(cell["source"]) for cell in cells if cell["cell_type"] == "markdown"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_notebook_markdown_has_a_bare_dollar(path):
    problems = [problem for cell in markdown_cells(path) for problem in bare_dollars(cell)]
    assert not problems, "\n".join(problems)


def test_the_readme_has_no_bare_dollar():
    problems = bare_dollars((ROOT / "README.md").read_text(encoding="utf-8"))
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("text", [
    "about $0.50 at $3 per hour",  # the pair JupyterLab renders as math
    "under $2",  # one sign: any later pair on the line would shift
    "costs $3/h; a matmul does $2mnk$ FLOPs",  # the price's sign pairs with the math's
    "from $5 $to",  # a space just inside the opening sign
    r"about \$0.50 at \$3 per hour",  # JupyterLab 4.6 pairs escaped signs all the same
])
def test_prices_are_refused(text):
    assert bare_dollars(text)


@pytest.mark.parametrize("text", [
    "about USD 0.50 at USD 3 per hour",
    "it does $2mnk$ FLOPs, $10^{12}$ per second",
    "`echo $HOME` and ```\n$ make lab\n```",
    "$$T + L - 1$$",
])
def test_prices_in_usd_math_and_code_pass(text):
    assert bare_dollars(text) == []
