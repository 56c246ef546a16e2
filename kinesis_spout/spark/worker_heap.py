"""A Python worker's imports kept out of the cyclic garbage collector's scans.

PySpark's worker daemon runs a full ``gc.collect()`` after each task of a reused worker,
and it scans every object of every module the worker imported (PySpark, pyarrow, boto3):
the cost is in docs/figures.md. A read task starts with :func:`freeze_imports`, which
moves what is alive to ``gc.freeze()``'s permanent generation when modules were imported
since the last freeze, so later collections scan only what tasks make. Reference counting
still frees frozen objects; only a cycle among them would stay.
"""

from __future__ import annotations

import gc
import sys

_modules_at_freeze = 0


def freeze_imports() -> bool:
    """Freeze what is alive if modules were imported since the last freeze; whether it did."""
    global _modules_at_freeze
    modules = len(sys.modules)
    if modules == _modules_at_freeze:
        return False
    gc.freeze()
    _modules_at_freeze = modules
    return True
