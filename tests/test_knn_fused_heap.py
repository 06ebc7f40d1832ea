"""The fused search's per-row lists (``kernels/knn/fused.cu``): heaps in shared memory,
rows side by side, sorted as they go out -- the device functions themselves, built for
the host with g++ (the rest of the kernel needs tensor-core instructions: GPU tests), and
the merges of the splits' lists."""

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


def _host_library(tmp_path_factory, name: str, text: str) -> ctypes.CDLL:
    """``text`` (C++ with fused.cu's functions) built by g++ into a shared library."""
    compiler = shutil.which("g++")
    if compiler is None:
        pytest.skip("g++ not found (apt-get install g++): the host build of fused.cu's functions")
    src = tmp_path_factory.mktemp(name) / f"{name}.cpp"
    src.write_text(text)
    out = src.with_suffix(".so")
    subprocess.run([compiler, "-std=c++17", "-O1", "-shared", "-fPIC", "-o", str(out), str(src)],
                   check=True, capture_output=True, text=True)
    return ctypes.CDLL(str(out))


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    text = resources.files("mgpu_dask.kernels.knn").joinpath("fused.cu").read_text()
    start = text.index("#define AT(list, j)")
    end = text.index("// Row r's queue")
    assert re.search(r"#define BM (\d+)", text).group(1) == str(fused.ROWS)
    return _host_library(tmp_path_factory, "heap", (
        "#define __device__\n#define __forceinline__ inline\n"
        f"#define BM {fused.ROWS}\n" + text[start:end] +
        'extern "C" void push_all(long long* lists, int row, int K, const long long* v, int n)'
        " {\n    for (int i = 0; i < n; ++i) heap_replace(lists + row, K, v[i]);\n"
        "    heap_sort(lists + row, K);\n}\n"))


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


@pytest.fixture(scope="module")
def merges(tmp_path_factory):
    """``fused_merge`` and ``fused_merge_ranked`` built for the host: each launch a loop
    over the grid's threads (the int8 build's keys)."""
    text = resources.files("mgpu_dask.kernels.knn").joinpath("fused.cu").read_text()
    insert = text[text.index("// Insert p into the ascending list"):text.index("// A row's list in")]
    kernels = text[text.index("// Entry j of a row's merged list"):]
    return _host_library(tmp_path_factory, "merge", (
        "#include <cstring>\n#define __device__\n#define __forceinline__ inline\n"
        "#define __global__\n#define __restrict__\n"
        f"#define LK {fused.MAX_K}\n#define EMPTY 0x7fffffffffffffffLL\n"
        "struct Dim { int x; } blockIdx, threadIdx, blockDim;\n"
        "static double __longlong_as_double(long long v) { double d; std::memcpy(&d, &v, 8); return d; }\n"
        "static int key_of(long long p) { return (int)(p >> 32); }\n" + insert + kernels +
        'extern "C" void launch(int ranked, int blocks, int threads, const long long* parts,'
        " int splits, int m, int K, double* keys, int* cols) {\n"
        "    blockDim.x = threads;\n"
        "    for (blockIdx.x = 0; blockIdx.x < blocks; ++blockIdx.x)\n"
        "        for (threadIdx.x = 0; threadIdx.x < threads; ++threadIdx.x)\n"
        "            if (ranked) fused_merge_ranked(parts, splits, m, K, keys, cols);\n"
        "            else fused_merge(parts, splits, m, K, keys, cols);\n}\n"))


def _merged(lib, ranked, parts, threads):
    splits, m, K = parts.shape
    keys = np.zeros((m, K)); cols = np.zeros((m, K), dtype=np.int32)
    work = splits * m * K if ranked else m
    p = ctypes.c_void_p
    lib.launch(ctypes.c_int(int(ranked)), ctypes.c_int(-(-work // threads)), ctypes.c_int(threads),
               parts.ctypes.data_as(p), ctypes.c_int(splits), ctypes.c_int(m), ctypes.c_int(K),
               keys.ctypes.data_as(p), cols.ctypes.data_as(p))
    return keys, cols


@pytest.mark.parametrize("splits, m, K", [(1, 3, 1), (2, 5, 3), (3, 40, 18), (7, 9, 10),
                                          (16, 4, 64)])
def test_both_merges_keep_each_rows_k_best_over_the_splits(merges, splits, m, K):
    """Each split's ascending lists (columns of their own, "none" where a split had fewer
    than K, equal keys across splits): the ranked merge, a thread an entry, writes what
    the merge a thread a row writes, and both the K smallest of all the row's entries."""
    rng = np.random.default_rng(splits * 100 + K)
    keys = rng.integers(-20, 20, (splits, m, K)).astype(np.int64)  # few values: many ties
    cols = (np.arange(splits * K).reshape(splits, 1, K) + np.zeros((1, m, 1), np.int64))
    parts = np.sort(keys * (1 << 32) + cols, axis=2)
    short = rng.random((splits, m)) < 0.3  # some splits had fewer than K rows
    for s, r in zip(*np.nonzero(short)):
        parts[s, r, rng.integers(0, K):] = EMPTY
    want = np.sort(parts.transpose(1, 0, 2).reshape(m, splits * K), axis=1)[:, :K]
    ranked = _merged(merges, True, parts, 256)
    plain = _merged(merges, False, parts, 32)
    np.testing.assert_array_equal(ranked[0], plain[0])
    np.testing.assert_array_equal(ranked[1], plain[1])
    real = want != EMPTY
    np.testing.assert_array_equal(ranked[1], np.where(real, want & 0xffffffff, 2**31 - 1))
    np.testing.assert_array_equal(ranked[0], np.where(real, (want >> 32).astype(float), np.inf))


@pytest.fixture(scope="module")
def scans(tmp_path_factory):
    """The splits' scans of one query row, built for the host around fused.cu's own
    ``merge_queue`` and ``lower``: each split tests a tile's keys against its threshold,
    queues those that pass, merges its queue once half full and, with shared thresholds,
    reads the row's shared one every ``look`` tiles; the splits take their tiles in turn,
    as blocks running side by side would (int8 keys)."""
    text = resources.files("mgpu_dask.kernels.knn").joinpath("fused.cu").read_text()
    functions = text[text.index("#define AT(list, j)"):text.index("#ifdef WGMMA\n// A warpgroup")]
    qcap = int(re.search(r"#define QCAP (\d+)", text).group(1))
    assert int(re.search(r"#define OPEN_KEY (0x[0-9a-f]+)", text).group(1), 16) == fused.OPEN_KEY
    return _host_library(tmp_path_factory, "scan", (
        "#include <vector>\n#include <algorithm>\n"
        "#define __device__\n#define __forceinline__ inline\n"
        f"#define BM {fused.ROWS}\n#define QCAP {qcap}\n#define EMPTY 0x7fffffffffffffffLL\n"
        f"#define OPEN_KEY {fused.OPEN_KEY}\nusing std::min;\n"
        "static int key_of(long long p) { return (int)(p >> 32); }\n"
        "static int atomicMin(int* p, int v) {\n"
        "    const int old = *p;\n    if (v < old) *p = v;\n    return old;\n}\n"
        + functions +
        'extern "C" long long scan(const int* keys, int splits, int n, int K, int tile, int share,'
        " int look, long long* out) {\n"
        "    struct Split { std::vector<long long> lists, queue; std::vector<int> count, thr;"
        " std::vector<float> thrf; };\n"
        "    std::vector<Split> at(splits);\n"
        "    for (auto& s : at) { s.lists.assign(BM * K, EMPTY); s.queue.assign(BM * QCAP, 0);"
        " s.count.assign(BM, 0); s.thr.assign(BM, OPEN_KEY); s.thrf.assign(BM, 0.f); }\n"
        "    int bound = OPEN_KEY;\n    long long queued = 0;\n"
        "    for (int t = 0; t * tile < n; ++t)\n"
        "        for (int p = 0; p < splits; ++p) {\n"
        "            Split& s = at[p];\n"
        "            if (share && t % look == 0) lower(s.thr.data(), s.thrf.data(), 0, bound);\n"
        "            for (int c = t * tile; c < min(n, (t + 1) * tile); ++c) {\n"
        "                const int v = keys[p * n + c];\n"
        "                if (v <= s.thr[0]) {\n"
        "                    s.queue[s.count[0]++ * BM] =\n"
        "                        (long long)v * 4294967296LL + (p * n + c);\n"
        "                    ++queued;\n                }\n            }\n"
        "            if (s.count[0] >= QCAP / 2) merge_queue(s.lists.data(), s.queue.data(),"
        " s.count.data(), s.thr.data(), s.thrf.data(), 0, K, share ? &bound : nullptr);\n"
        "        }\n"
        "    for (int p = 0; p < splits; ++p) {\n"
        "        Split& s = at[p];\n"
        "        merge_queue(s.lists.data(), s.queue.data(), s.count.data(), s.thr.data(),"
        " s.thrf.data(), 0, K, nullptr);\n"
        "        heap_sort(s.lists.data(), K);\n"
        "        for (int j = 0; j < K; ++j) out[p * K + j] = s.lists[j * BM];\n    }\n"
        "    return queued;\n}\n"))


def _scan(lib, keys, K, share, tile=16, look=8):
    splits, n = keys.shape
    out = np.zeros((splits, K), dtype=np.int64)
    queued = lib.scan(keys.ctypes.data_as(ctypes.c_void_p), ctypes.c_int(splits), ctypes.c_int(n),
                      ctypes.c_int(K), ctypes.c_int(tile), ctypes.c_int(int(share)),
                      ctypes.c_int(look), out.ctypes.data_as(ctypes.c_void_p))
    return out, queued


@pytest.mark.parametrize("splits, n, K, spread", [(2, 300, 10, 1 << 20), (5, 2000, 64, 1 << 20),
                                                  (5, 2000, 18, 50), (8, 64, 64, 1 << 20)])
def test_shared_thresholds_queue_fewer_keys_and_merge_to_the_same_k_best(scans, splits, n, K,
                                                                         spread):
    """A row's keys over several splits (ties among them where the spread is small, a split
    shorter than K too): with the thresholds shared, each split's list, merged with the
    others', still gives the K smallest of all the row's keys (packed with their columns,
    ties to the smaller), as without sharing; and the splits queue fewer keys."""
    rng = np.random.default_rng(splits * n + K)
    keys = np.ascontiguousarray(rng.integers(-spread, spread, (splits, n)).astype(np.int32))
    packed = keys.astype(np.int64) * (1 << 32) + np.arange(splits * n).reshape(splits, n)
    want = np.sort(np.concatenate([packed.ravel(), np.full(K, EMPTY, np.int64)]))[:K]
    alone, queued_alone = _scan(scans, keys, K, share=False)
    shared, queued_shared = _scan(scans, keys, K, share=True)
    for lists in (alone, shared):
        np.testing.assert_array_equal(np.sort(lists.ravel())[:K], want)
    assert (np.diff(shared, axis=1) >= 0).all()  # each split's list still ascends
    if n > K:  # every split fills its list: the others' thresholds cut what it queues
        assert queued_shared < queued_alone
