"""Multinomial logistic regression on dask arrays: the estimator (:mod:`.estimator`), its
fit routes (:mod:`.routes`: :mod:`.single_host` with its worker side :mod:`.leader`,
:mod:`.actors`, :mod:`.local`), the problem they share (:mod:`.problem`), our
L-BFGS (:mod:`.lbfgs`), and the predict blocks (:mod:`.blocks`).

``LogisticRegression`` loads on first use: the workers import the fit's modules,
which need no scikit-learn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .estimator import LogisticRegression

__all__ = ["LogisticRegression"]


def __getattr__(name: str) -> Any:
    if name == "LogisticRegression":
        from .estimator import LogisticRegression

        return LogisticRegression
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
