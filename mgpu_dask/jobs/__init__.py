"""The end-to-end jobs behind the CLI: load, start, transfer, fit, predict, cold and
warm, every phase timed, and a plain dictionary back (what ``--json`` writes).

:func:`knn_job`, :func:`logreg_job` and :func:`compare_job` (every backend side
by side) share :mod:`.session`; :mod:`.bench` sweeps them over worker counts
and sizes, :mod:`.workflow` runs YAML sweep files.  The names load on first
use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .compare import compare_job
    from .knn import knn_job
    from .logreg import logreg_job

_WHERE = {"knn_job": "knn", "logreg_job": "logreg", "compare_job": "compare"}
__all__ = ["compare_job", "knn_job", "logreg_job"]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
