"""Numba CUDA kernels of the device-resident L-BFGS (float64 vectors).

The point ``x``, the gradient ``g``, the direction ``p``, the gradient at the
trial point ``gt`` and the curvature pairs (rows of ``S`` and ``Y``, a ring
of ``memory`` rows; ``rho[i] = 1 / s_i.y_i``) live on the GPU.  So do the
scalars the host decides on, in ``scal`` (indices below): one small copy to
the host per iteration is all the loop reads.

* A proposal is three launches over many blocks: :func:`products` (``g``
  against every stored ``s`` and ``y`` and itself, and after a pair was
  stored, that pair's products with the others, which its last block adds to
  the pairs' Gram matrices ``SY``/``YY``), :func:`direction` (the two-loop
  recursion from those products, then ``p = -H g``) and :func:`trial` (the
  slope along ``p``, the first trial step, and the trial point written as the
  float32 parameters the evaluation reads).
* :func:`set_trial`: the trial point at a step the host chose (line search).
* :mod:`.finish`: the objective at the trial point from the shards' sums and,
  by ``mode``, whether to keep it (two launches: ``assemble``, whose last
  block decides, and ``apply``).  Keeping a point stores the new curvature
  pair; the next :func:`products` adds its products with the other pairs to
  ``SY`` and ``YY``.
* :func:`forget`: drops the curvature pairs.
* :func:`arm`: lets the next proposals run (see "Running ahead").

Running ahead: the host may queue several iterations (``arm``, then
a proposal, the evaluation and the end in mode AUTO n times) and read the
scalars once.  The end in mode AUTO clears ``scal[ACTIVE]`` when its step is
not kept (the host's line search takes over from there) or when a stopping
rule holds (largest gradient entry at most ``scal[GTOL]``, relative decrease
at most ``scal[FTOL]``); while it is clear, the proposal's kernels and the
ends in mode AUTO return at once, so the iterations queued behind change
nothing.  ``scal[DONE]`` counts the steps kept since ``arm``.

With an L1 weight (``l1 > 0``) the same kernels run OWL-QN
(``mgpu_dask.logreg.lbfgs.owlqn``): the recursion reads the pseudo-gradient
``pg`` (which ``finish.apply`` keeps beside ``g``; without L1 a copy of it), the
direction keeps only entries that point against it, and every trial point is
projected on the current point's orthant (``rules.moved_entry``).

The recursion's products are independent, so they are taken over many
blocks at once and the recursion itself is scalar work (in one block it
would be a chain of dependent sweeps, each waiting on memory in one SM).  No
warp shuffles: the kernels also run in the CUDA simulator.
"""

from __future__ import annotations

from numba import cuda, float32, float64, int32

from ..blocks import LANES, block_sum, last_block, row_sums
from ..jitable import inlined_device
from .rules import first_owlqn_step, first_step, moved_entry

SWEEP = 256        # threads per block of the many-block kernels (a power of 2)
MAX_CHUNKS = 64    # blocks along a vector in those kernels
MAX_MEMORY = 32    # curvature pairs at most
HELD_PAIRS = 16    # direction: the pairs whose entries a thread loads together (registers)
VECS = 65          # 2 * MAX_MEMORY + 1 (literal: Numba needs constant shared shapes)
GRAM = 1024        # MAX_MEMORY ** 2
PAIR_ROWS = 96     # 3 * MAX_MEMORY: the rows of a stored pair's products
VECS_LANES = 520   # VECS * blocks.LANES: scratch of the row sums
PAIR_LANES = 768   # PAIR_ROWS * blocks.LANES
assert VECS_LANES == VECS * LANES and PAIR_LANES == PAIR_ROWS * LANES

# Indices into ``scal``.
(F, F_PREV, SLOPE0, STEP, VALUE, SLOPE, STATUS, GMAX, DECREASE, PAIRS, HEAD,
 ACTIVE, DONE, GTOL, FTOL, STORED, APPLY, SLOT, DECREASE_1, DECREASE_2, ROUNDING) = range(21)
N_SCALARS = 21  # the host copies all of them once per look
# DECREASE_1, DECREASE_2: OWL-QN's two steps before the last one (rules.STALLED = 3)
# Slots of ``count`` (blocks.last_block): products' and the end's (finish.assemble).
COUNT_PRODUCTS, COUNT_END = 0, 1
N_COUNTS = 2
# Modes of the end of an iteration (``finish.assemble``).
INIT, AUTO, PROBE, COMMIT = 0, 1, 2, 3
# Values of ``scal[STATUS]`` (the host loop's ACCEPTED, SEARCH, NOT_DESCENT).
ACCEPTED, SEARCH, NOT_DESCENT = 0, 1, 2


@inlined_device
def _slot(head, age, memory):
    """Ring slot of the pair ``age`` steps old (0: the newest; ``age < memory``).  No
    modulo: a 64-bit integer one is a long software routine on the GPU."""
    slot = head - 1 - age
    if slot < 0:
        slot += memory
    return slot


@inlined_device
def _dot_part(S, Y, g, scal, parts, b, sh):
    """``g``'s products, block ``b``: vector ``v = b // chunks`` (``s`` of age v for v < pairs,
    then ``y`` of age v - pairs, then ``g``) against ``g`` over chunk ``c = b % chunks``,
    into ``parts[v, c]`` (nothing for v past ``2 * pairs``)."""
    chunks = parts.shape[1]
    v = b // chunks
    c = b % chunks
    pairs = int32(scal[PAIRS])
    head = int32(scal[HEAD])
    if v > 2 * pairs:
        return
    memory = S.shape[0]
    tid = cuda.threadIdx.x
    nt = cuda.blockDim.x
    part = float64(0.0)
    if v == 2 * pairs:
        for j in range(c * nt + tid, g.shape[0], chunks * nt):
            part += g[j] * g[j]
    elif v < pairs:
        idx = _slot(head, v, memory)
        for j in range(c * nt + tid, g.shape[0], chunks * nt):
            part += S[idx, j] * g[j]
    else:
        idx = _slot(head, v - pairs, memory)
        for j in range(c * nt + tid, g.shape[0], chunks * nt):
            part += Y[idx, j] * g[j]
    total = block_sum(part, sh)
    if tid == 0:
        parts[v, c] = total


@inlined_device
def _pair_part(S, Y, scal, parts, b, sh):
    """A stored pair's products, block ``b``: kind ``v // memory`` (0:
    s_new . y_o, 1: s_o . y_new, 2: y_new . y_o), ``v = b // chunks``, for slot
    ``o = v % memory`` over chunk ``c = b % chunks``, into ``parts[v, c]``."""
    memory = S.shape[0]
    chunks = parts.shape[1]
    v = b // chunks
    c = b % chunks
    new = _slot(int32(scal[HEAD]), 0, memory)
    kind = v // memory
    o = v % memory
    tid = cuda.threadIdx.x
    nt = cuda.blockDim.x
    part = float64(0.0)
    for j in range(c * nt + tid, S.shape[1], chunks * nt):
        if kind == 0:
            part += S[new, j] * Y[o, j]
        elif kind == 1:
            part += S[o, j] * Y[new, j]
        else:
            part += Y[new, j] * Y[o, j]
    total = block_sum(part, sh)
    if tid == 0:
        parts[v, c] = total


@inlined_device
def _pair_sums(scal, parts, SY, YY):
    """The new pair's row and column of ``SY`` and ``YY`` from the pair's parts (one
    block, the whole of it), and ``scal[STORED]`` cleared."""
    memory = SY.shape[0]
    new = _slot(int32(scal[HEAD]), 0, memory)
    scratch = cuda.shared.array(PAIR_LANES, float64)
    totals = cuda.shared.array(PAIR_ROWS, float64)
    row_sums(parts, 3 * memory, scratch, totals)
    for v in range(cuda.threadIdx.x, 3 * memory, cuda.blockDim.x):
        total = totals[v]
        o = v % memory
        if v < memory:
            SY[new, o] = total
        elif v < 2 * memory:
            SY[o, new] = total
        else:
            YY[new, o] = total
            YY[o, new] = total
    # Cleared last: every pair block read scal[STORED] before it counted itself
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        scal[STORED] = 0.0


@cuda.jit(cache=True)
def products(S, Y, g, scal, dparts, gparts, SY, YY, count):
    """The products a proposal needs, in one launch.  After a pair was stored
    (``scal[STORED]``), the first ``gparts.size`` blocks take the new pair's ``s`` and
    ``y`` against every slot's, and the last of them to finish adds them into ``SY``
    and ``YY``; the next ``dparts.size`` blocks take ``g`` against every stored ``s``
    and ``y`` and itself (``dparts[v, c]``, as ``direction`` reads them).

    Every block writes its chunk's sum alone, so the sums are the same bits as in
    launches of their own; one launch waits on memory for both at once.
    """
    sh = cuda.shared.array(SWEEP, float64)
    pair_blocks = gparts.shape[0] * gparts.shape[1]
    b = cuda.blockIdx.x
    if b < pair_blocks:
        if scal[STORED] == 0.0:  # every pair block alike: none counts itself
            return
        _pair_part(S, Y, scal, gparts, b, sh)
        if last_block(count, COUNT_PRODUCTS, pair_blocks):
            _pair_sums(scal, gparts, SY, YY)
    elif scal[ACTIVE] != 0.0:
        _dot_part(S, Y, g, scal, dparts, b - pair_blocks, sh)


@cuda.jit(cache=True)
def direction(S, Y, g, rho, SY, YY, scal, parts, p, pparts, l1, dk):
    """``p = -H g`` over chunk ``c`` (block ``c``), and its chunk of ``g . p`` in ``pparts[c]``.
    With an L1 part (``l1 > 0``, OWL-QN), ``g`` is the pseudo-gradient and an entry of the
    first ``dk`` (the coefficients) that does not point against it is zero.

    The two-loop recursion needs, besides ``g``, only products of vectors:
    ``s_i . g``, ``y_i . g`` and the pairs' ``s_i . y_j`` and ``y_i . y_j``
    (``SY``, ``YY``), all from :func:`products`, so its
    scalars (alpha_i, beta_i) come from a few hundred flops: the alphas and the
    betas' chain on one thread, each beta's products with the alphas on a thread
    of its own (the same operations in the same order as on one thread); every
    block does them (reading the same sums in the same order) and then writes
    ``p = -gamma g + sum gamma alpha_i y_i - sum (alpha_i - beta_i) s_i`` over its
    chunk, each thread's entries of the first HELD_PAIRS pairs loaded together.
    The same direction as the usual recursion on vectors, summed in another order.
    """
    active = scal[ACTIVE]  # the scalars loaded together, before the test
    pairs = int32(scal[PAIRS])
    head = int32(scal[HEAD])
    if active == 0.0:
        return
    tid = cuda.threadIdx.x
    nt = cuda.blockDim.x
    c = cuda.blockIdx.x
    chunks = pparts.shape[1]
    memory = S.shape[0]
    d = cuda.shared.array(VECS, float64)
    coef = cuda.shared.array(VECS, float64)
    sy = cuda.shared.array(GRAM, float64)
    yy = cuda.shared.array(GRAM, float64)
    sh = cuda.shared.array(SWEEP, float64)
    slots = cuda.shared.array(MAX_MEMORY, int32)  # each age's ring slot, found once
    rh = cuda.shared.array(MAX_MEMORY, float64)
    alpha = cuda.shared.array(MAX_MEMORY, float64)
    beta = cuda.shared.array(MAX_MEMORY, float64)
    for i in range(tid, pairs, nt):
        slot = _slot(head, i, memory)
        slots[i] = slot
        rh[i] = rho[slot]
    scratch = cuda.shared.array(VECS_LANES, float64)
    row_sums(parts, 2 * pairs + 1, scratch, d)  # g's products, over the chunks
    for e in range(tid, pairs * pairs, nt):
        a = slots[e // pairs]
        b = slots[e % pairs]
        sy[e] = SY[a, b]
        yy[e] = YY[a, b]
    cuda.syncthreads()
    if tid == 0:
        for i in range(pairs):  # newest first: q_i = g - sum_{j newer} alpha_j y_j
            t = d[i]
            for j in range(i):
                t -= alpha[j] * sy[i * pairs + j]
            alpha[i] = rh[i] * t
    cuda.syncthreads()
    gamma = float64(1.0)
    if pairs > 0:  # initial Hessian: (s.y / y.y) I of the newest pair
        gamma = sy[0] / yy[0]
    for i in range(tid, pairs, nt):  # the part of each beta that needs no other, side by side
        t = d[pairs + i]
        for j in range(pairs):
            t -= alpha[j] * yy[i * pairs + j]
        beta[i] = t * gamma
    cuda.syncthreads()
    if tid == 0:
        for i in range(pairs - 1, -1, -1):  # oldest first
            t = beta[i]
            for j in range(i + 1, pairs):
                t += (alpha[j] - beta[j]) * sy[j * pairs + i]
            beta[i] = rh[i] * t
        for i in range(pairs):
            coef[i] = beta[i] - alpha[i]
            coef[pairs + i] = gamma * alpha[i]
        coef[2 * pairs] = -gamma
    cuda.syncthreads()
    held = min(pairs, HELD_PAIRS)
    sv = cuda.local.array(HELD_PAIRS, float64)
    yv = cuda.local.array(HELD_PAIRS, float64)
    part = float64(0.0)
    for j in range(c * nt + tid, g.shape[0], chunks * nt):
        for i in range(HELD_PAIRS):  # a constant count: unrolled, the loads issued together
            if i < held:
                idx = slots[i]
                sv[i] = S[idx, j]
                yv[i] = Y[idx, j]
        pj = coef[2 * pairs] * g[j]
        for i in range(HELD_PAIRS):
            if i < held:
                pj += coef[i] * sv[i] + coef[pairs + i] * yv[i]
        for i in range(held, pairs):
            idx = slots[i]
            pj += coef[i] * S[idx, j] + coef[pairs + i] * Y[idx, j]
        if l1 > 0.0 and j < dk and pj * g[j] >= 0.0:
            pj = 0.0
        p[j] = pj
        part += g[j] * pj
    total = block_sum(part, sh)
    if tid == 0:
        pparts[0, c] = total


@cuda.jit(cache=True)
def trial(x, p, scal, pparts, params, pg, l1, dk):
    """The slope along ``p``, the first step and the float32 trial parameters (any block
    count); with an L1 part (``l1 > 0``) the trial point is projected on the orthant of
    ``x`` (``rules.moved_entry``; ``pg``: the pseudo-gradient) and the first step is
    OWL-QN's."""
    active = scal[ACTIVE]  # the scalars loaded together, before the test
    f = scal[F]
    f_prev = scal[F_PREV]
    pairs = scal[PAIRS]
    if active == 0.0:
        return
    scratch = cuda.shared.array(LANES, float64)
    total = cuda.shared.array(1, float64)
    row_sums(pparts, 1, scratch, total)  # direction's chunks of g . p
    slope0 = total[0]
    if l1 > 0.0:
        step = first_owlqn_step(f, f_prev, slope0, pairs)
    else:
        step = first_step(f, f_prev, slope0)
    nt = cuda.blockDim.x
    for j in range(cuda.blockIdx.x * nt + cuda.threadIdx.x, x.shape[0], cuda.gridDim.x * nt):
        params[j] = float32(moved_entry(x[j], p[j], pg[j], step, l1 if j < dk else 0.0))
    if cuda.blockIdx.x == 0 and cuda.threadIdx.x == 0:
        scal[SLOPE0] = slope0
        scal[STEP] = step
        scal[STATUS] = SEARCH if slope0 < 0 else NOT_DESCENT


@cuda.jit(cache=True)
def set_trial(x, p, scal, params, step, pg, l1, dk):
    """Trial parameters ``x + step p`` (float32) at a step the host chose, projected as
    :func:`trial` projects them; any grid."""
    j = cuda.grid(1)
    if j == 0:
        scal[STEP] = step
    if j < x.shape[0]:
        params[j] = float32(moved_entry(x[j], p[j], pg[j], step, l1 if j < dk else 0.0))


@cuda.jit(cache=True)
def forget(scal):
    """Drop the curvature pairs (the next direction is steepest descent), and the products
    of a stored one not yet taken."""
    if cuda.grid(1) == 0:
        scal[PAIRS] = 0
        scal[HEAD] = 0
        scal[STORED] = 0


@cuda.jit(cache=True)
def arm(scal, gtol, ftol, rounding):
    """Let the proposals queued next run, with the loop's stopping rules and the
    evaluations' relative rounding (:func:`.rules.acceptable`)."""
    if cuda.grid(1) == 0:
        scal[ACTIVE] = 1.0
        scal[DONE] = 0.0
        scal[GTOL] = gtol
        scal[FTOL] = ftol
        scal[ROUNDING] = rounding
