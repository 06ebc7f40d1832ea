"""The block reductions our kernels share (``kernels.blocks``), run where the kernels run:
under Numba's CUDA simulator in CI, on the GPU where there is one."""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda, float64

from mgpu_dask.kernels.blocks import LANES, last_block, row_maxes, row_sums

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


@cuda.jit
def _last(count, counted, step, parts, totals, lasts):
    """Blocks below ``counted`` write a part and count themselves in ``count[1]``; the last
    of them adds every part (the others write nothing and do not count)."""
    b = cuda.blockIdx.x
    if b >= counted:
        return
    if cuda.threadIdx.x == 0:
        parts[b] = (b + 1) * step
    if last_block(count, 1, counted):
        if cuda.threadIdx.x == 0:
            total = 0.0
            for i in range(counted):
                total += parts[i]
            totals[0] = total
            lasts[b] += 1


@pytest.mark.parametrize("threads", [1, 8])
def test_the_last_block_sees_every_part_and_resets_its_count_for_the_next_launch(threads):
    """One block finds itself last, after every counted block's part was written, and the
    count is back at zero: a second launch (a graph's replay) finds its last block too."""
    count = np.zeros(3, np.int32)
    parts, totals = np.zeros(5), np.zeros(1)
    lasts = np.zeros(7, np.int64)
    for step in (1.0, 2.0):
        _last[7, threads](count, 5, step, parts, totals, lasts)
        assert totals[0] == 15 * step  # (1 + 2 + 3 + 4 + 5) * step: every part, this launch's
        assert count.tolist() == [0, 0, 0]
    assert lasts.sum() == 2 and not lasts[5:].any()  # one last block per launch, a counted one



@pytest.mark.parametrize("knows_bounds", [True, False])
def test_a_bounded_kernel_asks_for_its_launch_bounds_where_numba_knows_them(monkeypatch,
                                                                            knows_bounds):
    """``bounded_kernel`` passes ``launch_bounds=(threads, blocks)`` to ``cuda.jit`` where it
    takes them, and compiles the kernel without them where they are unknown (Numba's CUDA
    simulator, an older numba-cuda) instead of failing."""
    from mgpu_dask.kernels import jitable

    asked = []

    def fake_jit(**options):
        asked.append(options)
        if "launch_bounds" in options and not knows_bounds:
            raise TypeError("jit() got an unexpected keyword argument 'launch_bounds'")
        return lambda fn: ("compiled", fn, options)

    monkeypatch.setattr(cuda, "jit", fake_jit)

    def kernel(a):
        pass

    compiled = jitable.bounded_kernel(256, 4)(kernel)
    assert compiled[:2] == ("compiled", kernel)
    assert asked[0] == {"cache": True, "launch_bounds": (256, 4)}
    assert compiled[2] == (asked[0] if knows_bounds else {"cache": True})
