"""The float32 evaluation in one pass on the tensor cores (``kernels/logreg/onepass_tf32``):
which rows it takes and how it is built (CPU), that NVRTC builds every layout without
spilling (CPU, no GPU needed), and -- on a GPU -- its loss and gradients against float64
NumPy in every layout, and a fit through it reaching the products' solution."""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import softmax_reference

from mgpu_dask.kernels.cuda_source import source
from mgpu_dask.kernels.logreg import onepass_tf32 as T

H100_OPTIN = 227 << 10
A100_OPTIN = 163 << 10
ADA_OPTIN = 99 << 10

SHAPES = [(1, 2), (5, 3), (32, 10), (37, 4), (96, 10), (128, 20), (128, 32), (300, 7),
          (768, 20), (784, 10), (1000, 3), (1024, 8), (37, 33), (64, 50), (128, 100),
          (128, 128), (784, 100)]


@pytest.mark.parametrize("d, k", SHAPES)
@pytest.mark.parametrize("optin", [H100_OPTIN, A100_OPTIN, ADA_OPTIN])
def test_a_layout_fits_its_block_and_its_registers(d, k, optin):
    """Whatever the shape, the layout chosen fits the block's shared memory, splits the
    warps so that every row k-step of a tile has a warp and every thread holds at most
    the sums its registers allow; None only where no candidate fits at all."""
    lay = T.layout(d, k, optin)
    if lay is None:
        assert not [(tm, w, g) for tm, w in T.CANDIDATES for g in (1, 2, 4, 8)
                    if g <= w and w // g <= tm // 8 and T.sums_a_thread(d, k, g) <= T.MAX_SUMS
                    and T.shared_bytes(d, k, tm, w, g, 2, False) <= optin]
        return
    assert lay.shared == T.shared_bytes(d, k, lay.tile, lay.warps, lay.gm, lay.stages,
                                        lay.wsplit) <= optin
    assert (lay.tile, lay.warps) in T.CANDIDATES and lay.warps % lay.gm == 0
    assert lay.warps // lay.gm <= lay.tile // 8  # no warp without a row k-step
    sums = T.sums_a_thread(d, k, lay.gm)
    assert sums <= T.MAX_SUMS
    two = lay.warps < 8 or sums <= T.MAX_SUMS // 2
    assert lay.min_blocks == (2 if two and k <= 32 else 1)
    assert -(-(-(-k // 8) * 8) // (32 * lay.warps // lay.tile)) <= T.MAX_SOFTMAX
    if not lay.wsplit:  # the split coefficients did not fit
        assert T.shared_bytes(d, k, lay.tile, lay.warps, lay.gm, 2, True) > optin or (
            2 * (T.shared_bytes(d, k, lay.tile, lay.warps, lay.gm, 2, True) + 1024) > optin + 1024)


def test_the_layouts_of_the_measured_shapes():
    """The layouts the H200 probes chose among (docs/performance-history.md)."""
    assert T.layout(96, 10, H100_OPTIN)[:5] == (64, 8, 1, 2, True)
    assert T.layout(768, 20, H100_OPTIN)[:5] == (16, 8, 8, 2, False)
    assert T.layout(128, 32, H100_OPTIN)[:5] == (32, 4, 2, 2, True)
    assert T.layout(128, 20, H100_OPTIN)[:5] == (64, 8, 2, 2, True)
    assert T.layout(128, 100, H100_OPTIN)[:5] == (32, 8, 8, 2, True)
    assert T.layout(32, 129, H100_OPTIN) is None


@pytest.mark.parametrize("n, d, k, capability, runs", [
    (100_000, 32, 10, (9, 0), True),
    (T.ONE_PASS_FROM - 1, 32, 10, (9, 0), False),   # a small shard keeps the products
    (200_000, 768, 20, (8, 0), True),
    (200_000, 768, 20, (7, 5), False),              # no tf32 mma.sync
    (1_000_000, 128, 100, (9, 0), True),
    (1_000_000, 128, 129, (9, 0), False),           # more classes than the softmax takes
    (100_000, 4096, 2, (9, 0), False),              # rows too long for a block
])
def test_which_shards_evaluate_on_the_tensor_cores(n, d, k, capability, runs):
    assert T.usable(n, d, k, capability, H100_OPTIN) is runs


def test_it_can_be_switched_off(monkeypatch):
    monkeypatch.setattr(T, "ENABLED", False)
    assert not T.usable(100_000, 32, 10, (9, 0), H100_OPTIN)


def test_source_agrees_with_the_python_side():
    """The layout's defines reach the source by name, and the kernel's shared-memory
    layout is the one shared_bytes counts (its arrays, in order)."""
    text = source("mgpu_dask.kernels.logreg", "onepass_tf32.cu")
    lay = T.layout(96, 10, H100_OPTIN)
    for opt in T.options(96, 10, lay, 4)[1:]:
        name = re.match(r"-D(\w+)=", opt).group(1)
        assert f"#ifndef {name}\n" in text, name
    for part in ("STAGES * TM * PX", "DP * PW", "KP", "FK * TM * KP", "TM * PR"):
        assert part in text
    assert "#define THREADS (32 * WARPS)" in text


@pytest.mark.parametrize("d, k", [(32, 10), (37, 4), (96, 10), (128, 32), (768, 20), (5, 3),
                                  (1024, 8), (37, 33), (64, 50), (128, 100), (128, 128)])
def test_source_compiles_with_nvrtc_without_spills(d, k):
    """NVRTC needs no GPU: CI compiles each layout with the options CuPy is given, for
    compute capability 8.0 and 9.0; the gradient's sums stay in registers (no spills)."""
    import nvrtc_compile

    if nvrtc_compile.library_path() is None:
        pytest.skip("NVRTC not installed (pip install nvidia-cuda-nvrtc; the test extra has it)")
    code = source("mgpu_dask.kernels.logreg", "onepass_tf32.cu")
    lay = T.layout(d, k, H100_OPTIN)
    for vec in ((4, 1) if d % 4 == 0 else (1,)):
        opts = T.options(d, k, lay, vec)
        for arch in ("sm_80", "sm_90"):
            ok, log, ptx = nvrtc_compile.compile_source(
                code, "onepass_tf32.cu", [f"--gpu-architecture={arch}", *opts, "-Xptxas", "-v"])
            assert ok, log
            assert set(re.findall(rb"\.entry (\w+)", ptx)) == {b"evaluate_tf32"}
            spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
            assert spills and spills.groups() == ("0", "0"), log


gpu = pytest.mark.gpu


def _reference(X, y, W, b, w):
    resid, loss = softmax_reference(X.astype(np.float64) @ W + b, y)
    if w is not None:
        resid, loss = resid * w[:, None], loss * w
    return loss.sum(), X.T.astype(np.float64) @ resid, resid.sum(axis=0)


@gpu
@pytest.mark.parametrize("n, d, k, weighted, offset", [
    (T.ONE_PASS_FROM + 77, 37, 4, True, 0),   # rows of odd length, copied 4 bytes at a time
    (100_003, 32, 10, False, 0),               # a short last tile
    (70_000, 96, 10, True, 1),                 # rows not 16-byte aligned (a view)
    (40_000, 768, 20, False, 0),               # 16-row tiles, coefficients split at each use
    (50_000, 128, 32, True, 0),                # the most classes
    (30_000, 1, 2, False, 0),
    (50_000, 37, 33, True, 0),                 # more than 32 classes: one set of forward sums
    (40_000, 128, 100, False, 0),
])
def test_on_a_gpu_the_evaluation_is_float64s_to_float32s_error(n, d, k, weighted, offset):
    import cupy

    from mgpu_dask.kernels.logreg.objective import ShardObjective

    rng = np.random.default_rng(n + d + k)
    X = (rng.standard_normal((n, d)) * 2).astype(np.float32)
    y = rng.integers(0, k, n).astype(np.int32)
    w = rng.uniform(0.2, 3.0, n).astype(np.float32) if weighted else None
    W, b = rng.standard_normal((d, k)) / np.sqrt(d), rng.standard_normal(k) * 0.2
    X = X[:n]
    if offset:  # the rows one float past a 16-byte boundary
        flat = cupy.empty(n * d + 1, dtype=cupy.float32)
        flat[1:] = cupy.asarray(X.ravel())
        Xd = flat[1:].reshape(n, d)
        assert Xd.data.ptr % 16 and Xd.flags.c_contiguous
    else:
        Xd = cupy.asarray(X)
    o = ShardObjective(Xd, cupy.asarray(y), k, precision="fp32",
                       weights=None if w is None else cupy.asarray(w))
    assert o.one_pass and o.tensor_cores
    want = _reference(X, y, W, b, w)
    got = o(W, b)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    for g, r in zip(got[1:], want[1:]):
        np.testing.assert_allclose(g, r, atol=2e-6 * np.abs(r).max() + 1e-5)
    again = o(W, b)  # the same bits every evaluation
    assert again[0] == got[0]
    for g, r in zip(again[1:], got[1:]):
        np.testing.assert_array_equal(g, r)


@gpu
@pytest.mark.parametrize("weighted", [False, True])
def test_on_a_gpu_a_fit_through_it_reaches_the_products_solution(monkeypatch, weighted):
    """The same fit with the tensor cores' pass and with the cuBLAS products: the same
    objective, coefficients to 1e-4; the profile says which ran."""
    import cupy

    from mgpu_dask import LogisticRegression

    rng = np.random.default_rng(9)
    n, d, k = 60_000, 48, 6
    X = rng.standard_normal((n, d)).astype(np.float32)
    y = np.argmax(X @ rng.standard_normal((d, k)) + rng.gumbel(size=(n, k)), 1)
    w = rng.uniform(0.2, 3.0, n).astype(np.float32) if weighted else None

    def fitted() -> LogisticRegression:
        return LogisticRegression(max_iter=300, tol=1e-8).fit(cupy.asarray(X), y, sample_weight=w)

    tensor = fitted()
    assert tensor.fit_profile_["evaluation"] == "fp32 in one pass, 3xTF32 tensor cores"
    monkeypatch.setattr(T, "ENABLED", False)
    products = fitted()
    assert products.fit_profile_["evaluation"] == "fp32"
    np.testing.assert_allclose(tensor.loss_, products.loss_, rtol=1e-7)
    np.testing.assert_allclose(tensor.coef_, products.coef_, rtol=1e-4,
                               atol=1e-4 * np.abs(products.coef_).max())
