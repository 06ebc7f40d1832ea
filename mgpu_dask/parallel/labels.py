"""Class labels as the fits use them: which classes occur, and each label's index among them.

The same steps run on the client (NumPy labels, :func:`.inputs.encode_labels`)
and on the workers (labels that live beside their rows: the logistic-regression
leader finds the classes of every shard it maps and encodes each on its own GPU), so
this module imports no scikit-learn and works on NumPy and CuPy arrays alike.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..exceptions import DataError
from ..kernels.launch import array_module, as_numpy

SMALL = 1 << 16
"""Non-negative integer labels below this are counted and looked up in a table instead
of sorted and searched."""
_FEW = 16
"""Up to this many candidate values, NumPy counts each with a comparison pass: no
int64 copy of the labels, which ``bincount`` makes, and faster for a few classes
(by how much: docs/performance-history.md)."""


def _small_range(labels: Any) -> int | None:
    """The largest label where every label is an integer in [0, SMALL); else None."""
    if labels.dtype.kind not in "iu" or labels.size == 0:
        return None
    top = int(labels.max())
    if top >= SMALL or (labels.dtype.kind == "i" and int(labels.min()) < 0):
        return None
    return top


def present(labels: Any) -> np.ndarray:
    """The distinct values of the 1-D ``labels`` (NumPy or CuPy), sorted, as a NumPy array
    of the labels' dtype."""
    xp = array_module(labels)
    top = _small_range(labels)
    if top is None:
        return as_numpy(xp.unique(labels))
    if xp is not np:  # one scatter of flags: no bincount, whose check for negative
        # labels is an ``any`` that CuPy builds from CUB's headers (slow to compile)
        seen = xp.zeros(top + 1, dtype=np.bool_)
        seen[labels] = True
        found = np.flatnonzero(as_numpy(seen))
    elif top < _FEW:
        found = [v for v in range(top + 1) if np.count_nonzero(labels == v)]
    else:
        found = np.flatnonzero(np.bincount(labels, minlength=top + 1))
    return np.asarray(found, dtype=labels.dtype)


def classes_from(found: list[np.ndarray], declared: Any = None) -> np.ndarray:
    """The classes of labels whose shards hold ``found`` values: those values, or the
    ``declared`` classes, which must include every one of them (else DataError)."""
    seen = np.unique(np.concatenate(found)) if found else np.empty(0)
    if declared is None:
        return seen
    classes = np.unique(np.asarray(declared))
    outside = np.setdiff1d(seen, classes)
    if outside.size:
        raise DataError(f"label(s) {outside[:5].tolist()} are not among the declared classes "
                        f"{classes.tolist()}; fix the labels or the classes parameter")
    return classes


def at_least_two(classes: np.ndarray) -> np.ndarray:
    """``classes``, if there are two or more (a classifier needs them); else DataError."""
    if len(classes) < 2:
        raise DataError(f"y holds {len(classes)} class ({classes.tolist()}); a classifier "
                        "needs at least two")
    return classes


def own_codes(classes: np.ndarray, dtype: Any) -> bool:
    """Whether integer labels of ``dtype`` are their own indices among ``classes`` (0..m-1)."""
    return (np.dtype(dtype).kind in "iu" and classes.dtype.kind in "iu" and len(classes) > 0
            and classes[0] == 0 and classes[-1] == len(classes) - 1)


def codes(labels: Any, classes: np.ndarray | None) -> Any:
    """Each label's index among the sorted ``classes`` (int32, where the labels live;
    ``classes`` None: the labels are indices already).

    Integer labels 0..m-1 are their own indices; other small non-negative
    integers go through a table, the rest through a binary search.
    """
    xp = array_module(labels)
    if classes is None or own_codes(classes, labels.dtype):
        return labels.astype(np.int32)
    if (_small_range(labels) is not None and classes.dtype.kind in "iu" and classes[0] >= 0
            and classes[-1] < SMALL):  # every label is among the classes (classes_from)
        table = np.zeros(int(classes[-1]) + 1, dtype=np.int32)
        table[classes] = np.arange(len(classes), dtype=np.int32)
        return xp.asarray(table)[labels]
    return xp.searchsorted(xp.asarray(classes), labels).astype(np.int32)


def decoded(codes: Any, classes: np.ndarray) -> np.ndarray:
    """The labels of class indices ``codes`` (a NumPy or CuPy block): ``classes[codes]``,
    NumPy (labels GPU arrays cannot hold, such as strings, are decoded on the host)."""
    return classes[as_numpy(codes)]
