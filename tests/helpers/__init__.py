"""What the tests share, imported as `helpers.<module>` (pytest puts tests/ on the path): fake
machines, clocks, tiny models and data, and the launch helpers; and the worker scripts that tests
start in processes of their own (`*_worker.py`, run by path from WORKERS; run as scripts, they
import their sibling helpers by name)."""

from pathlib import Path

WORKERS = Path(__file__).resolve().parent
