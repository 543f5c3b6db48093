"""Load the functions a notebook defines, without running the rest of it.

Tests use this to call the solution (and the generated stub) of an exercise directly: only the
imports and the top-level `def`/`class` statements of the notebook's code cells are executed.
"""

import ast
import linecache
from pathlib import Path

import nbformat


def _is_code_line(line: str) -> bool:
    # IPython magics and shell escapes are not Python.
    return not line.lstrip().startswith(("%", "!"))


def load_definitions(path: str | Path, names: list[str] | None = None) -> dict:
    """Namespace with the notebook's imports, functions and classes (only `names`, if given)."""
    notebook = nbformat.read(str(path), as_version=4)
    kept: list[ast.stmt] = []
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        source = "\n".join(line for line in cell.source.splitlines() if _is_code_line(line))
        for node in ast.parse(source).body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                kept.append(node)
            elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                if names is None or node.name in names:
                    kept.append(node)
    # Code that reads its own source (inspect.getsource; triton.jit does, to compile a kernel)
    # finds it in linecache under this name, as it finds a Jupyter cell's.
    source = ast.unparse(ast.Module(body=kept, type_ignores=[]))
    filename = f"<definitions of {path}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    namespace: dict = {}
    exec(compile(source, filename, "exec"), namespace)
    missing = [name for name in names or [] if name not in namespace]
    if missing:
        raise LookupError(f"{path} defines no {', '.join(missing)}")
    return namespace
