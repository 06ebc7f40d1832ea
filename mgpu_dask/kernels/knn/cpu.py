"""Numba CPU kernels for k-nearest neighbours: the same contracts as ``knn_cuda``.

Used on CPU workers (NumPy chunks).  Rows run in parallel (``prange``); ties
are broken by the smaller training index, exactly as on the GPU.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .lists import keep_sorted


@njit(parallel=True, cache=True, nogil=True)
def sqdist_direct(Q, T, out):
    """out[i, j] = sum_f (Q[i, f] - T[j, f])^2, accumulated in the input precision."""
    for i in prange(Q.shape[0]):
        for j in range(T.shape[0]):
            acc = Q.dtype.type(0)
            for f in range(Q.shape[1]):
                t = Q[i, f] - T[j, f]
                acc += t * t
            out[i, j] = acc


@njit(parallel=True, cache=True, nogil=True)
def scan_tile(G, ld, nrows, ncols, alpha, norms, use_norms, col0, n_valid, row0, keys, cols, K):
    """Fold one product tile into every row's running top-K (``knn_cuda.scan_tile``'s twin)."""
    limit = min(ncols, n_valid - col0)
    for r in prange(nrows):
        row = row0 + r
        worst = keys[row, K - 1]
        base = r * ld
        for c in range(limit):
            v = alpha * np.float64(G[base + c])
            if use_norms != 0:
                v += np.float64(norms[col0 + c])
            if v < worst:
                j = K - 1
                while j > 0 and keys[row, j - 1] > v:
                    keys[row, j] = keys[row, j - 1]
                    cols[row, j] = cols[row, j - 1]
                    j -= 1
                keys[row, j] = v
                cols[row, j] = col0 + c
                worst = keys[row, K - 1]


@njit(parallel=True, cache=True, nogil=True)
def refine_rows(Q, T, cand, k, inner, out_sq, out_idx):
    """Exact float64 squared distances of each row's candidates (``inner``: ``-2 q.t``);
    keep the k best."""
    for r in prange(Q.shape[0]):
        best = np.full(k, np.inf)
        best_i = np.full(k, 2**31 - 1, dtype=np.int32)
        for j in range(cand.shape[1]):
            t = cand[r, j]
            if t < 0 or t >= T.shape[0]:
                continue
            acc = 0.0
            if inner != 0:
                for f in range(Q.shape[1]):
                    acc -= 2.0 * np.float64(Q[r, f]) * np.float64(T[t, f])
            else:
                for f in range(Q.shape[1]):
                    diff = np.float64(Q[r, f]) - np.float64(T[t, f])
                    acc += diff * diff
            keep_sorted(best, best_i, k, acc, t)
        out_sq[r, :] = best
        out_idx[r, :] = best_i


@njit(parallel=True, cache=True, nogil=True)
def merge_pairs(a, b, out):
    """Merge two sorted packed candidate lists per row into the k best."""
    k = out.shape[1]
    for row in prange(a.shape[0]):
        i = 0
        j = 0
        for r in range(k):
            take_a = j >= b.shape[1] or (i < a.shape[1] and (
                a[row, i, 0] < b[row, j, 0]
                or (a[row, i, 0] == b[row, j, 0] and a[row, i, 1] <= b[row, j, 1])))
            if take_a:
                out[row, r, :] = a[row, i, :]
                i += 1
            else:
                out[row, r, :] = b[row, j, :]
                j += 1


@njit(parallel=True, cache=True, nogil=True)
def vote_rows(cand, n_classes, uniform, out_proba, out_pred):
    """Class probabilities and prediction per row (ties: the smaller class)."""
    k = cand.shape[1]
    for row in prange(cand.shape[0]):
        score = np.zeros(n_classes)
        exact = False
        if not uniform:
            for j in range(k):
                if cand[row, j, 0] == 0.0:
                    exact = True
        total = 0.0
        for j in range(k):
            if cand[row, j, 1] < 0 or cand[row, j, 0] == np.inf:
                continue
            if uniform:
                w = 1.0
            elif exact:
                w = 1.0 if cand[row, j, 0] == 0.0 else 0.0
            else:
                w = 1.0 / cand[row, j, 0]
            score[int(cand[row, j, 2])] += w
            total += w
        best = 0
        for c in range(n_classes):
            out_proba[row, c] = score[c] / total if total > 0 else 0.0
            if score[c] > score[best]:
                best = c
        out_pred[row] = best
