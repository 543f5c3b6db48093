"""How the course prints a table: rows of the same keys as Markdown, the one table builder every
package and lab uses.
"""

import re
from collections.abc import Iterator

# A formatted number, maybe with a unit or suffix: "1,234", "-0.5", "12.0 s", "1.50x", "45%".
_NUMBER = re.compile(r"[-+]?\d[\d,]*(\.\d+)?(e[-+]?\d+)?( ?[a-zA-Z%]+)?")


def markdown_table(rows: list[dict], aligned: bool = False) -> str:
    """Rows of the same keys as a Markdown table: readable in a terminal, pastable into a note.

    The course's one table builder. `aligned=True` pads each column to its widest cell, numbers
    to the right (marked `---:`), for tables read at a terminal; it renders as the same Markdown.
    """
    columns = list(rows[0])
    cells = [[str(row[column]) for column in columns] for row in rows]
    if not aligned:
        lines = [" | ".join(columns), " | ".join("---" for _ in columns)]
        return "\n".join(lines + [" | ".join(line) for line in cells])
    widths = [max(3, len(column), *(len(line[i]) for line in cells))
              for i, column in enumerate(columns)]
    right = [_numbers(line[i] for line in cells) for i in range(len(columns))]
    sides = list(zip(widths, right, strict=True))

    def join(values) -> str:  # rstrip: no padding after the last column
        padded = [v.rjust(w) if r else v.ljust(w) for v, (w, r) in zip(values, sides, strict=True)]
        return " | ".join(padded).rstrip()

    rule = " | ".join("-" * (w - 1) + ":" if r else "-" * w for w, r in sides)
    return "\n".join([join(columns), rule] + [join(line) for line in cells])


def _numbers(cells: Iterator[str]) -> bool:
    """Whether a column holds numbers: some cell reads as one, the others as one or a blank."""
    cells = [cell for cell in cells if cell not in ("", "-")]  # "-": no value (a placeholder)
    return bool(cells) and all(_NUMBER.fullmatch(cell) for cell in cells)
