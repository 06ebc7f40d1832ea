"""k-nearest neighbours on dask arrays: the estimator (:mod:`.estimator`), what a fit
chooses (:mod:`.choices`), the placed training rows (:mod:`.layout`) and the search
graphs (:mod:`.plans`).

``KNeighborsClassifier`` loads on first use: the workers import :mod:`.layout` and
:mod:`.plans`, which need no scikit-learn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .estimator import KNeighborsClassifier

__all__ = ["KNeighborsClassifier"]


def __getattr__(name: str) -> Any:
    if name == "KNeighborsClassifier":
        from .estimator import KNeighborsClassifier

        return KNeighborsClassifier
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
