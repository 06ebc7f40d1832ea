"""The optimisation problem of a logistic-regression fit, as every fit route shares it.

The problem's description (:class:`Problem`, sent to the workers), the
labels a holder keeps, and how the shards' parts add up.  The client and the
workers both import this module, so it imports neither kernels nor the
L-BFGS (:mod:`.solvers` does, on the workers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from ..kernels.precision import Precision

if TYPE_CHECKING:
    from ..kernels.logreg import ShardObjective

NOT_FINITE = "Input X contains NaN or infinity; clean or impute it first"


class Problem(NamedTuple):
    """A fit as the workers see it: sizes, penalty and options (all picklable)."""

    n: int
    d: int
    n_classes: int | None   # None: the leader finds the classes of the labels it maps
    penalty: float          # the L2 strength: (1 - l1_ratio) / (C S), S = n or the weights' sum
    max_iter: int
    gtol: float
    optimizer: str          # "auto", "device" or "host"
    precision: Precision    # asked for (AUTO: int8 products where they apply)
    scale: float | None     # the objective's rows are X * scale
    classes: Any = None     # the declared classes, where the leader finds them
    l1: float = 0.0         # the L1 strength, l1_ratio / (C S): OWL-QN where above 0
    fit_intercept: bool = True
    weight_sum: float | None = None  # S where rows are weighted (None: n)


class HeldLabels(NamedTuple):
    """A holder's label blocks, named by their keys on that worker: labels that live
    beside their rows and never travel with the fit."""

    keys: list[Any]


def sum_parts(parts: list[tuple]) -> tuple:
    """Add the shards' (loss, grad_coef, grad_intercept) triples."""
    return (sum(p[0] for p in parts), sum(p[1] for p in parts), sum(p[2] for p in parts))


def products(objectives: list[ShardObjective]) -> dict[str, Any]:
    """What the shards' evaluations ran: ``{"precision": ..., "precision_note": ...}``
    (several precisions joined by commas, where shards differ)."""
    ran = sorted({str(o.precision) for o in objectives})
    notes = sorted({o.fallback for o in objectives if o.fallback})
    launch = next((o.launch_note for o in objectives if o.launch_note), None)
    return {"precision": ",".join(ran), "precision_note": "; ".join(notes) or None,
            "launch_note": launch}
