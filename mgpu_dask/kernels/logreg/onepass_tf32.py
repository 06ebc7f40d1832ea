"""The float32 evaluation in one pass over the rows on the tensor cores (``onepass_tf32.cu``).

The evaluation by products (:mod:`.cuda`) reads the rows twice, through two cuBLAS
products whose few columns leave the library far from the GPU's peak, and writes and
reads the logits and residuals (``n x k`` each) in between; :mod:`.cuda_float` reads
them once but multiplies on the float32 cores, one instruction a multiply-add.
``onepass_tf32.cu`` keeps a tile of whole rows in shared memory (the next one arriving
meanwhile) and takes the forward product, the softmax and the gradient's product from
it on the tensor cores, in float32 accuracy: each operand is split into two tf32 parts
and a product is three of theirs ("3xTF32", as CUTLASS's fast float32 products); the
tensor cores round their float32 sums toward zero, so each k-step's sums start from zero
and go into the running sums by float32 adds, which round to nearest.  The softmax's arithmetic is
:func:`.cuda.softmax_xent_rows`'s: float32 logits, float32 exponentials of differences
rounded once to float32, float64 exp-sums, log-sum-exp, cross-entropies and intercept
sums.  A block keeps its gradient sums in registers for every tile it walks and writes
its parts once; :func:`.cuda_float.sum_block_parts` adds the blocks' parts in block
order, so repeated evaluations give the same bits.  No ``n x k`` buffer is made.

A kernel is built per feature and class count (NVRTC through CuPy, cached by CuPy) with
the tile and block that :func:`layout` picks from :data:`CANDIDATES` (the first whose
block leaves room for two an SM), the gradient's sums split over its warps (at most
:data:`MAX_SUMS` a thread); rows of more features or classes than fit keep the products.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import numpy as np

from ..cuda_source import module
from .onepass import multiprocessors, shared_optin as optin_of

MAX_SUMS = 96
"""Gradient sums a thread at most (registers)."""
MAX_CLASSES = 128
MAX_SOFTMAX = 16
"""Classes a softmax thread holds at most (its logits and float64 intercept sums)."""
NEEDS = (8, 0)
"""mma.sync with tf32 operands and cp.async: compute capability 8.0 or newer."""
ONE_PASS_FROM = 1 << 14
"""Rows of a shard from which its float32 evaluation runs in one pass here."""
ENABLED = True
"""Whether float32 evaluations may run here (tests turn it off to compare)."""


class Layout(NamedTuple):
    """How a kernel for rows of some features and classes is built and launched."""

    tile: int
    """Rows a tile."""
    warps: int
    """Warps a block."""
    gm: int
    """Warps along the features in the gradient's product (warps / gm along the rows)."""
    stages: int
    """Tile buffers: the one taken and the ones arriving."""
    wsplit: bool
    """Whether the coefficients' tf32 parts are made once (else at every use)."""
    shared: int
    """Dynamic shared memory a block, bytes."""
    min_blocks: int
    """Blocks an SM the registers must allow."""


def _up(x: int, m: int) -> int:
    return -(-x // m) * m


def sums_a_thread(d: int, k: int, gm: int) -> int:
    """Gradient sums a thread holds for ``d`` features, ``k`` classes, ``gm`` warps along
    the features."""
    return -(-(_up(d, 16) // 16) // gm) * (_up(k, 8) // 8) * 4


def shared_bytes(d: int, k: int, tile: int, warps: int, gm: int, stages: int,
                 wsplit: bool) -> int:
    """A block's dynamic shared memory (onepass_tf32.cu's layout): the tile buffers, the
    coefficients, intercepts, forward sums and residuals; the end's reductions reuse it."""
    dp, kp = _up(d, 16), _up(k, 8)
    px, pw, pr = dp + 4, (kp if kp % 16 == 8 else kp + 8), kp + 4
    fk = warps // (tile // 16)
    pipeline = 4 * (stages * tile * px + (2 if wsplit else 1) * dp * pw + kp
                    + fk * tile * kp + tile * pr)
    scratch = max(4 * sums_a_thread(d, k, gm) * gm * 32, 8 * tile * kp, 8 * 32 * warps)
    return max(pipeline, scratch)


CANDIDATES = ((64, 8), (32, 4), (32, 8), (16, 8))
"""(rows a tile, warps a block) in order of preference (the probes behind the order:
docs/performance-history.md)."""


def layout(d: int, k: int, shared_optin: int) -> Layout | None:
    """The build for rows of ``d`` features and ``k`` classes on a GPU that lets a block
    have ``shared_optin`` bytes of shared memory, or None where none fits: the first of
    :data:`CANDIDATES` whose block leaves room for two an SM, else the first that fits."""
    if not (1 <= d and 2 <= k <= MAX_CLASSES):
        return None
    fitting = []
    for tile, warps in CANDIDATES:
        if -(-_up(k, 8) // (32 * warps // tile)) > MAX_SOFTMAX:
            continue  # too many classes a softmax thread
        # registers: a block of 8 warps keeps two an SM up to 48 sums a thread (one up to
        # 96); a block of 4 keeps two up to 96
        fits = [g for g in (1, 2, 4, 8) if g <= warps and warps // g <= tile // 8
                and sums_a_thread(d, k, g) <= MAX_SUMS]
        gm = next((g for g in fits if warps < 8 or sums_a_thread(d, k, g) <= MAX_SUMS // 2),
                  fits[0] if fits else None)
        if gm is None:
            continue
        for wsplit in (True, False):
            shared = shared_bytes(d, k, tile, warps, gm, 2, wsplit)
            if shared <= shared_optin:
                # more than 32 classes: the forward's sums take the registers of a second block
                two = _up(k, 8) <= 32 and (warps < 8 or sums_a_thread(d, k, gm) <= MAX_SUMS // 2)
                lay = Layout(tile, warps, gm, 2, wsplit, shared, 2 if two else 1)
                if 2 * (shared + 1024) <= shared_optin + 1024:
                    return lay
                fitting.append(lay)
                break
    return fitting[0] if fitting else None


def usable(n: int, d: int, k: int, capability: tuple[int, int], shared_optin: int) -> bool:
    """Whether a shard of ``n`` rows of ``d`` features and ``k`` classes evaluates in one
    pass here on a GPU of ``capability``."""
    return (ENABLED and n >= ONE_PASS_FROM and tuple(capability) >= NEEDS
            and layout(d, k, shared_optin) is not None)


def options(d: int, k: int, lay: Layout, vec: int) -> tuple[str, ...]:
    """NVRTC's options: a kernel per feature and class count (every loop unrolled)."""
    return ("--std=c++17", f"-DD={d}", f"-DK={k}", f"-DTM={lay.tile}", f"-DWARPS={lay.warps}",
            f"-DGM={lay.gm}", f"-DSTAGES={lay.stages}", f"-DWSPLIT={int(lay.wsplit)}",
            f"-DVEC={vec}", f"-DMINB={lay.min_blocks}")


class Built(NamedTuple):
    """A kernel built for a shard's rows, and its launch."""

    kernel: Any
    layout: Layout
    grid: int
    """Blocks: as many as the GPU's SMs hold at once, at most one a tile."""


def build(X: Any, k: int) -> Built:
    """The kernel for the CuPy float32 rows ``X`` (C-contiguous) and ``k`` classes on their
    GPU (which must be current), compiled where CuPy's cache lacks it."""
    import cupy

    n, d = X.shape
    device_id = X.device.id
    lay = layout(d, k, optin_of(device_id))
    if lay is None:
        raise ValueError(f"no one-pass tensor-core build for {d} features and {k} classes")
    vec = 4 if d % 4 == 0 and X.data.ptr % 16 == 0 else 1
    kernel = module(__package__, "onepass_tf32.cu",
                    options(d, k, lay, vec)).get_function("evaluate_tf32")
    kernel.max_dynamic_shared_size_bytes = max(lay.shared, kernel.max_dynamic_shared_size_bytes)
    per_sm = cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(
        kernel.kernel.ptr, 32 * lay.warps, lay.shared)  # the RawKernel's CUfunction
    sms = multiprocessors(device_id)
    return Built(kernel, lay, max(1, min(-(-n // lay.tile), max(1, per_sm) * sms)))


def bound(built: Built, X: Any, labels: Any, params: Any, weights: Any, weighted: bool,
          grad_parts: Any, sum_parts: Any, stream: Any) -> Callable[[], None]:
    """A no-argument callable: on ``stream``, block ``b`` of ``built.grid`` writes its part
    of the gradient (``grad_parts[b]``, float32 ``d x k`` row-major) and of the intercept
    sums and cross-entropy (``sum_parts[b]``, float64 ``k + 1``) over its tiles of the rows
    ``X`` (those ``built`` was made for) at ``params`` (float32 ``[coef (d x k),
    intercept]``); with ``weighted`` each row's residual and cross-entropy are times
    ``weights[row]``.  Call it with the arrays' device current; they must stay allocated
    and in place."""
    args = (X, labels, params, weights, np.int32(bool(weighted)), np.int32(X.shape[0]),
            grad_parts, sum_parts)
    kernel, shared, grid = built.kernel, built.layout.shared, built.grid
    threads = 32 * built.layout.warps

    def launch() -> None:
        with stream:
            kernel((grid,), (threads,), args, shared_mem=shared)
    return launch
