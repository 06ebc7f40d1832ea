"""Logistic-regression kernels: the loss and gradient of one shard, in float32 or on
tensor cores for rows of 8-bit levels, and the logits of a block.

:class:`ShardObjective` is what the fits evaluate; :mod:`.cuda`, :mod:`.cuda_float`,
:mod:`.cuda_int8` and :mod:`.cuda_bf16` hold the Numba CUDA kernels, :mod:`.cpu` their
CPU twin; ``fused.cu``, ``onepass.cu`` (int8) and ``onepass_tf32.cu`` (float32 on the
tensor cores, :mod:`.onepass_tf32`) the CUDA C ones.
"""

from __future__ import annotations

from .levels import Levels, rows_on_gpu, scaled_rows
from .objective import PRECISIONS, ShardObjective, decision, loss_grad

__all__ = ["Levels", "PRECISIONS", "ShardObjective", "decision", "loss_grad", "rows_on_gpu",
           "scaled_rows"]
