"""A shard objective's float32 evaluation in one pass over its rows (GPU shards): the
kernels that take it and the launches a :class:`.objective.ShardObjective` queues.

Two kernels read each row once, where the products (:mod:`.cuda`) read it twice:
:mod:`.onepass_tf32` on the tensor cores in float32 accuracy (up to 128 classes, shards
of ``onepass_tf32.ONE_PASS_FROM`` rows or more), else, for rows of few features and
classes, :mod:`.cuda_float` on the float32 cores.  Each writes a part of the gradient,
intercept sums and cross-entropy per block, and :func:`.cuda_float.sum_block_parts`
adds the parts in block order into the objective's ``grad`` and ``sums`` (every entry:
``sums_written``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..launch import bound_launch


def on_tensor_cores(obj: Any, n: int, d: int, k: int) -> bool:
    """Whether ``obj``'s float32 rows (``obj.X``, n x d, on ``obj.device``) evaluate in
    one pass on that GPU's tensor cores (:mod:`.onepass_tf32`)."""
    from . import onepass_tf32
    from .onepass import capability, shared_optin

    dev = obj.device.id
    return (obj.X.dtype == np.float32 and obj.X.flags.c_contiguous
            and onepass_tf32.usable(n, d, k, capability(dev), shared_optin(dev)))


def tensor_ops(obj: Any, n: int, d: int, k: int) -> list[Any]:
    """The launches of :mod:`.onepass_tf32`'s evaluation for ``obj`` (its device and stream
    current): the blocks' parts, then their sums."""
    from . import onepass_tf32

    built = onepass_tf32.build(obj.X, k)
    weighted = _parts(obj, built.grid, d, k)
    obj.tensor_cores = True
    return [onepass_tf32.bound(built, obj.X, obj.labels, obj.params, obj.weights, weighted,
                               *obj._parts, obj.stream),
            _sums(obj, built.grid, d, k)]


def float_core_ops(obj: Any, n: int, d: int, k: int) -> list[Any]:
    """The launches of :mod:`.cuda_float`'s evaluation for ``obj``: the blocks' parts, then
    their sums."""
    from . import cuda_float

    blocks = cuda_float.layout(n, obj.device.attributes["MultiProcessorCount"])
    weighted = _parts(obj, blocks, d, k)
    return [bound_launch(cuda_float.xent_grad_tiles,
                         [obj.X.ravel(), d, obj.labels, obj.params, k, obj.weights,
                          int(weighted), *obj._parts], (blocks,), cuda_float.THREADS,
                         obj.stream),
            _sums(obj, blocks, d, k)]


def _parts(obj: Any, blocks: int, d: int, k: int) -> bool:
    """``obj``'s buffers of ``blocks`` blocks' parts, its weights on the GPU; whether the
    rows are weighted.  The evaluation writes every entry of ``sums``."""
    import cupy

    weighted = obj._weights_here()
    obj._parts = (cupy.empty(blocks * d * k, dtype=np.float32),
                  cupy.empty(blocks * (k + 1), dtype=np.float64))
    obj.sums_written = obj.one_pass = True
    return weighted


def _sums(obj: Any, blocks: int, d: int, k: int) -> Any:
    from . import cuda_float

    outputs = d * k + k + 1
    return bound_launch(cuda_float.sum_block_parts,
                        [*obj._parts, blocks, d * k, k, obj.grad.ravel(), obj.sums],
                        (-(-outputs // 128),), 128, obj.stream)
