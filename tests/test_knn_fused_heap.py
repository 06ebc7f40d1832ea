"""The fused search's per-row lists (``kernels/knn/fused.cu``): heaps in shared memory,
rows side by side, sorted as they go out -- the device functions themselves, built for
the host with g++ (the rest of the kernel needs tensor-core instructions: GPU tests)."""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from importlib import resources

import numpy as np
import pytest

from mgpu_dask.kernels.knn import fused

EMPTY = np.iinfo(np.int64).max


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    compiler = shutil.which("g++")
    if compiler is None:
        pytest.skip("g++ not found (apt-get install g++): the host build of the list functions")
    text = resources.files("mgpu_dask.kernels.knn").joinpath("fused.cu").read_text()
    start = text.index("#define AT(list, j)")
    end = text.index("// Row r's queue")
    assert re.search(r"#define BM (\d+)", text).group(1) == str(fused.ROWS)
    src = tmp_path_factory.mktemp("fused_heap") / "heap.cpp"
    src.write_text(
        "#define __device__\n#define __forceinline__ inline\n"
        f"#define BM {fused.ROWS}\n" + text[start:end] +
        'extern "C" void push_all(long long* lists, int row, int K, const long long* v, int n)'
        " {\n    for (int i = 0; i < n; ++i) heap_replace(lists + row, K, v[i]);\n"
        "    heap_sort(lists + row, K);\n}\n")
    out = src.with_suffix(".so")
    subprocess.run([compiler, "-std=c++17", "-O1", "-shared", "-fPIC", "-o", str(out), str(src)],
                   check=True, capture_output=True, text=True)
    return ctypes.CDLL(str(out))


@pytest.mark.parametrize("K", [1, 2, 3, 10, 18, 32, 63, 64])
@pytest.mark.parametrize("n, spread", [(0, 10), (5, 10), (200, 7), (5000, 1 << 40)])
def test_each_rows_heap_keeps_its_k_smallest_and_sorts_them(lib, K, n, spread):
    """Any stream of packed keys (ties included, fewer than K too): the row's list ends as
    the K smallest, ascending, "none" (the largest value) where fewer came; the other
    rows' entries, side by side with it, untouched."""
    rng = np.random.default_rng(K * 1000 + n)
    values = rng.integers(-spread, spread, n).astype(np.int64)
    lists = np.full((K, fused.ROWS), EMPTY, dtype=np.int64)
    lists[:, 6] = 123  # a neighbour row's entries
    row = 5
    lib.push_all(lists.ctypes.data_as(ctypes.c_void_p), ctypes.c_int(row), ctypes.c_int(K),
                 values.ctypes.data_as(ctypes.c_void_p), ctypes.c_int(n))
    want = np.sort(np.concatenate([values, np.full(K, EMPTY, np.int64)]))[:K]
    np.testing.assert_array_equal(lists[:, row], want)
    assert (lists[:, 6] == 123).all()
    assert (np.delete(lists, [row, 6], axis=1) == EMPTY).all()
