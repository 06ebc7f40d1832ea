"""KNN kernels: operands per precision, the tiled search with its running top-k (or, for
int8 operands on a GPU, one fused product and top-k kernel), the exact re-rank, the
merge of candidate lists and the vote.

Arrays in, arrays out: CuPy arrays run the CUDA kernels (:mod:`.cuda`), NumPy
arrays their CPU twins (:mod:`.cpu`); ``target="cuda"`` runs the CUDA kernels
on NumPy arrays under Numba's CUDA simulator.
"""

from __future__ import annotations

from .distances import INT_MAX, MAX_K, refine, sqdist
from .operands import Queries, TrainBlock, prepare_queries, prepare_train
from .search import local_candidates, smallest
from .vote import merge, vote

__all__ = ["INT_MAX", "MAX_K", "Queries", "TrainBlock", "local_candidates", "merge",
           "prepare_queries", "prepare_train", "refine", "smallest", "sqdist", "vote"]
