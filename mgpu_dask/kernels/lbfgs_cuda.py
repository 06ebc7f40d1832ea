"""Numba CUDA kernels of the device-resident L-BFGS (float64 vectors, one block).

The point ``x``, the gradient ``g``, the direction ``p``, the gradient at the
trial point ``gt`` and the curvature pairs (rows of ``S`` and ``Y``, a ring
of ``memory`` rows; ``rho[i] = 1 / s_i.y_i``) live on the GPU.  So do the
scalars the host decides on, in ``scal`` (indices below): one small copy to
the host per iteration is all the loop reads.

* :func:`propose`: the two-loop recursion, the slope along the direction, the
  first trial step, and the trial point written as the float32 parameters
  the evaluation reads.
* :func:`set_trial`: the trial point at a step the host chose (line search).
* :func:`finish`: sums the shards' partial gradients and losses into the
  objective (mean cross-entropy plus the L2 penalty on the coefficients,
  the intercept unpenalised) at the trial point, and, by ``mode``: keeps it
  as the start point (INIT), keeps it when both strong-Wolfe conditions hold
  (AUTO), only reports value and slope (PROBE), or keeps the last probed
  point (COMMIT).  Keeping a point stores the new curvature pair.
* :func:`forget`: drops the curvature pairs.
* :func:`arm`: lets the next proposals run (see "Running ahead").

Running ahead: the host may queue several iterations (``arm``, then
``propose``/evaluation/``finish(AUTO)`` n times) and read the scalars once.
``finish(AUTO)`` clears ``scal[ACTIVE]`` when its step is not kept (the host's
line search takes over from there) or when a stopping rule holds (largest
gradient entry at most ``scal[GTOL]``, relative decrease at most
``scal[FTOL]``); while it is clear, ``propose`` and ``finish(AUTO)`` return at
once, so the iterations queued behind change nothing.  ``scal[DONE]`` counts
the steps kept since ``arm``.

The vectors are short (7,850 entries for MNIST), so one block of threads
does the recursion: each thread owns the entries ``j = tid (mod threads)``
and needs no barrier but the block reductions.  No warp shuffles: the
kernels also run in the CUDA simulator.
"""

from __future__ import annotations

import math

from numba import cuda, float32, float64, int32

from .cuda_blocks import block_max, block_sum
from .lbfgs_math import acceptable, first_step

THREADS = 512      # threads of the one block (a power of 2; fewer in the simulator)
MAX_MEMORY = 32    # curvature pairs at most

# Indices into ``scal``.
(F, F_PREV, SLOPE0, STEP, VALUE, SLOPE, STATUS, GMAX, DECREASE, PAIRS, HEAD,
 ACTIVE, DONE, GTOL, FTOL) = range(15)
N_SCALARS = 16
# Modes of ``finish``.
INIT, AUTO, PROBE, COMMIT = 0, 1, 2, 3
# Values of ``scal[STATUS]`` (the host loop's ACCEPTED, SEARCH, NOT_DESCENT).
ACCEPTED, SEARCH, NOT_DESCENT = 0, 1, 2


@cuda.jit(cache=True)
def propose(x, g, S, Y, rho, scal, p, params):
    """``p = -H g`` (two-loop recursion), its slope, the first step and the trial parameters."""
    if scal[ACTIVE] == 0.0:  # an earlier step of this run-ahead was not kept
        return
    tid = cuda.threadIdx.x
    nt = cuda.blockDim.x
    m = x.shape[0]
    memory = S.shape[0]
    sh = cuda.shared.array(THREADS, float64)
    alphas = cuda.local.array(MAX_MEMORY, float64)
    pairs = int32(scal[PAIRS])
    head = int32(scal[HEAD])
    f = scal[F]
    f_prev = scal[F_PREV]
    for j in range(tid, m, nt):
        p[j] = g[j]
    for i in range(pairs):  # newest pair first
        idx = (head - 1 - i + memory) % memory
        part = float64(0.0)
        for j in range(tid, m, nt):
            part += S[idx, j] * p[j]
        a = rho[idx] * block_sum(part, sh)
        alphas[i] = a
        for j in range(tid, m, nt):
            p[j] -= a * Y[idx, j]
    if pairs > 0:  # initial Hessian: (s.y / y.y) I of the newest pair
        idx = (head - 1 + memory) % memory
        part = float64(0.0)
        for j in range(tid, m, nt):
            part += Y[idx, j] * Y[idx, j]
        gamma = 1.0 / (rho[idx] * block_sum(part, sh))
        for j in range(tid, m, nt):
            p[j] *= gamma
    for i in range(pairs - 1, -1, -1):  # oldest pair first
        idx = (head - 1 - i + memory) % memory
        part = float64(0.0)
        for j in range(tid, m, nt):
            part += Y[idx, j] * p[j]
        b = rho[idx] * block_sum(part, sh)
        for j in range(tid, m, nt):
            p[j] += (alphas[i] - b) * S[idx, j]
    part = float64(0.0)
    for j in range(tid, m, nt):
        p[j] = -p[j]
        part += g[j] * p[j]
    slope0 = block_sum(part, sh)
    step = first_step(f, f_prev, slope0)
    for j in range(tid, m, nt):
        params[j] = float32(x[j] + step * p[j])
    if tid == 0:
        scal[SLOPE0] = slope0
        scal[STEP] = step
        scal[STATUS] = SEARCH if slope0 < 0 else NOT_DESCENT


@cuda.jit(cache=True)
def set_trial(x, p, scal, params, step):
    """Trial parameters ``x + step p`` (float32) at a step the host chose; any grid."""
    j = cuda.grid(1)
    if j == 0:
        scal[STEP] = step
    if j < x.shape[0]:
        params[j] = float32(x[j] + step * p[j])


@cuda.jit(cache=True)
def forget(scal):
    """Drop the curvature pairs (the next direction is steepest descent)."""
    if cuda.grid(1) == 0:
        scal[PAIRS] = 0
        scal[HEAD] = 0


@cuda.jit(cache=True)
def arm(scal, gtol, ftol):
    """Let the proposals queued next run, with the loop's stopping rules."""
    if cuda.grid(1) == 0:
        scal[ACTIVE] = 1.0
        scal[DONE] = 0.0
        scal[GTOL] = gtol
        scal[FTOL] = ftol


@cuda.jit(cache=True)
def finish(parts, psums, x, p, g, gt, S, Y, rho, scal, inv_n, penalty, mode):
    """Objective and gradient at the trial point from the shards' sums, then as ``mode`` says.

    ``parts[s]``: shard ``s``'s coefficient gradient (rows x classes, flat,
    float32, unscaled); ``psums[s]``: its intercept gradient and, last, its
    summed cross-entropy.
    """
    tid = cuda.threadIdx.x
    nt = cuda.blockDim.x
    m = x.shape[0]
    dk = parts.shape[1]
    n_parts = parts.shape[0]
    k = psums.shape[1] - 1
    memory = S.shape[0]
    sh = cuda.shared.array(THREADS, float64)
    f = scal[F]
    step = scal[STEP]
    slope0 = scal[SLOPE0]
    pairs = int32(scal[PAIRS])
    head = int32(scal[HEAD])
    value = scal[VALUE]
    slope = scal[SLOPE]
    if mode == AUTO and scal[ACTIVE] == 0.0:  # queued behind a step not kept, or a stop
        return
    gtol = scal[GTOL]
    ftol = scal[FTOL]
    cuda.syncthreads()  # every thread has read scal before thread 0 writes it
    if mode != COMMIT:
        w2 = float64(0.0)
        gtp = float64(0.0)
        for j in range(tid, m, nt):
            xt = x[j] + step * p[j]
            total = float64(0.0)
            if j < dk:
                for s in range(n_parts):
                    total += float64(parts[s, j])
                v = total * inv_n + penalty * xt
                w2 += xt * xt
            else:
                for s in range(n_parts):
                    total += psums[s, j - dk]
                v = total * inv_n
            gt[j] = v
            gtp += v * p[j]
        loss = float64(0.0)
        for s in range(n_parts):
            loss += psums[s, k]
        value = loss * inv_n + 0.5 * penalty * block_sum(w2, sh)
        slope = block_sum(gtp, sh)
    descent = slope0 < 0
    keep = mode == INIT or mode == COMMIT or (
        mode == AUTO and descent and acceptable(value, slope, step, f, slope0))
    status = ACCEPTED if keep else (NOT_DESCENT if mode == AUTO and not descent else SEARCH)
    if keep and mode == INIT:
        part = float64(0.0)
        top = float64(0.0)
        for j in range(tid, m, nt):
            g[j] = gt[j]
            part += gt[j] * gt[j]
            top = max(top, abs(gt[j]))
        norm = math.sqrt(block_sum(part, sh))
        top = block_max(top, sh)
        if tid == 0:
            scal[F] = value
            scal[F_PREV] = value + norm / 2  # first trial step of about unit length
            scal[GMAX] = top
            scal[DECREASE] = math.inf
    elif keep:
        sy = float64(0.0)
        yy = float64(0.0)
        for j in range(tid, m, nt):
            s_j = step * p[j]
            y_j = gt[j] - g[j]
            sy += s_j * y_j
            yy += y_j * y_j
        sy = block_sum(sy, sh)
        yy = block_sum(yy, sh)
        store = sy > 1e-10 * yy
        top = float64(0.0)
        for j in range(tid, m, nt):
            s_j = step * p[j]
            if store:
                S[head, j] = s_j
                Y[head, j] = gt[j] - g[j]
            x[j] += s_j
            g[j] = gt[j]
            top = max(top, abs(gt[j]))
        top = block_max(top, sh)
        if tid == 0:
            if store:
                rho[head] = 1.0 / sy
                scal[HEAD] = (head + 1) % memory
                scal[PAIRS] = min(pairs + 1, memory)
            decrease = (f - value) / max(abs(f), abs(value), 1.0)
            scal[F_PREV] = f
            scal[F] = value
            scal[GMAX] = top
            scal[DECREASE] = decrease
            if mode == AUTO:
                scal[DONE] += 1.0
                scal[ACTIVE] = 1.0 if top > gtol and decrease > ftol else 0.0
    if tid == 0:
        if mode == AUTO and not keep:
            scal[ACTIVE] = 0.0
        scal[VALUE] = value
        scal[SLOPE] = slope
        scal[STATUS] = status
