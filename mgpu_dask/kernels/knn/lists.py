"""The sorted candidate list the exact re-ranks keep, one rule for the CPU and CUDA kernels."""

from __future__ import annotations

from ..jitable import both_targets


@both_targets
def keep_sorted(best, best_i, k, acc, t):
    """Put value ``acc`` of column ``t`` into the ascending list ``best`` / ``best_i`` of
    ``k`` entries where it belongs (ties to the smaller column); the last one drops out."""
    if acc < best[k - 1] or (acc == best[k - 1] and t < best_i[k - 1]):
        p = k - 1
        while p > 0 and (best[p - 1] > acc or (best[p - 1] == acc and best_i[p - 1] > t)):
            best[p] = best[p - 1]
            best_i[p] = best_i[p - 1]
            p -= 1
        best[p] = acc
        best_i[p] = t
