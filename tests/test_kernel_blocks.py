"""The block reductions our kernels share (``kernels.blocks``), run where the kernels run:
under Numba's CUDA simulator in CI, on the GPU where there is one."""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda, float64

from mgpu_dask.kernels.blocks import LANES, row_maxes, row_sums

ROWS = 7


@cuda.jit
def _rows(parts, rows, sums, maxes):
    scratch = cuda.shared.array(56, float64)  # ROWS * LANES
    out = cuda.shared.array(ROWS, float64)
    row_sums(parts, rows, scratch, out)
    for r in range(cuda.threadIdx.x, rows, cuda.blockDim.x):
        sums[r] = out[r]
    cuda.syncthreads()
    row_maxes(parts, rows, scratch, out)
    for r in range(cuda.threadIdx.x, rows, cuda.blockDim.x):
        maxes[r] = out[r]


@pytest.mark.parametrize("chunks", [1, 3, LANES, 2 * LANES + 5])
@pytest.mark.parametrize("threads", [4, 16])
def test_row_sums_and_maxes_cover_every_chunk_in_a_fixed_order(chunks, threads):
    assert 56 == ROWS * LANES
    rng = np.random.default_rng(chunks)
    parts = rng.standard_normal((ROWS, chunks))
    for rows in (1, ROWS):
        sums, maxes = np.full(ROWS, np.nan), np.full(ROWS, np.nan)
        _rows[1, threads](parts, rows, sums, maxes)
        np.testing.assert_allclose(sums[:rows], parts[:rows].sum(1), rtol=1e-13, atol=1e-14)
        np.testing.assert_array_equal(maxes[:rows], parts[:rows].max(1))
        assert np.isnan(sums[rows:]).all()  # rows past ``rows`` untouched
        # the same bits from another thread count: the order is the lanes', not the threads'
        again = np.full(ROWS, np.nan)
        _rows[1, 2 * threads](parts, rows, again, np.full(ROWS, np.nan))
        np.testing.assert_array_equal(again[:rows], sums[:rows])
