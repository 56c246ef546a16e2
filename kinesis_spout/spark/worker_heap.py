"""A Python worker's long-lived objects kept out of the cyclic garbage collector's scans.

PySpark's worker daemon runs a full ``gc.collect()`` after each task of a reused worker.
With PySpark, pyarrow, pandas and boto3 loaded that collection scans over 100,000 objects
that live as long as the worker (modules, their classes and functions), on every task
(docs/figures.md, "Python workers"). A read task therefore starts with
:func:`freeze_imports`: if modules were imported since the last freeze, what is alive now
goes to ``gc.freeze()``'s permanent generation, so the next collections scan only what
tasks make. Reference counting still frees frozen objects; only a reference cycle among
them would stay, and what is frozen is what a worker had when a task started after an
import (its modules, a task's closure), a few times in a worker's life.
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
