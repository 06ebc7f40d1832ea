"""The int8 evaluation in one pass over the rows (``kernels/logreg/onepass``): when it
runs, that NVRTC builds it without spilling, and -- on a GPU -- that it leaves the
unfused kernels' bits."""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import cu_defines

from mgpu_dask.kernels import cuda_source
from mgpu_dask.kernels.cuda_source import source
from mgpu_dask.kernels.logreg import cuda_int8 as C
from mgpu_dask.kernels.logreg import onepass
from mgpu_dask.kernels.logreg.int8 import padded_shape, term_columns

H100_OPTIN = 227 << 10


def test_source_agrees_with_the_python_side_and_the_numba_kernels():
    d = cu_defines("onepass.cu")
    assert (d["TM"], d["UNIT"], d["THREADS"]) == (onepass.TILE, onepass.UNIT, onepass.THREADS)
    assert onepass.UNIT == C.THREADS  # a unit's sums are one row of bpart, as unfused
    assert (d["TERMS"], d["TOP"], d["BASE"]) == (C.I8_TERMS, C.I8_TOP, C.I8_BASE)
    assert onepass.TERMS == C.I8_TERMS and onepass.MAX_ROWS_PER_BLOCK == C.I8_MAX_K
    assert d["SOFT_WARPS"] * 32 + d["COMPUTE"] == onepass.SPECIALIZED_THREADS


@pytest.mark.parametrize("capability, specialized", [((9, 0), True), ((8, 0), False),
                                                      ((8, 9), False), ((10, 0), False)])
def test_only_a_hopper_builds_the_softmax_on_warps_of_its_own(monkeypatch, capability,
                                                               specialized):
    """setmaxnreg is sm_90a's: the build that needs it is asked for on a 9.0 GPU only, and
    SPECIALIZE off asks for the other build there too."""
    got = onepass.options(10, 48, 800, capability)
    assert onepass.specialized(capability) is specialized
    assert ("-arch=sm_90a" in got, "-DSPECIALIZED" in got) == (specialized, specialized)
    assert got[:4] == onepass.options(10, 48, 800)  # the class count and the row length
    monkeypatch.setattr(onepass, "SPECIALIZE", False)
    assert "-DSPECIALIZED" not in onepass.options(10, 48, 800, capability)


@pytest.mark.parametrize("k, d, capability, optin, runs", [
    (10, 784, (9, 0), H100_OPTIN, True),
    (10, 784, (8, 0), 163 << 10, False),     # an A100's 163 KiB: the tiles do not fit
    (2, 64, (8, 6), 99 << 10, True),
    (10, 800, (9, 0), H100_OPTIN, True),
    (10, 832, (9, 0), H100_OPTIN, False),    # three tiles of such rows do not fit
    (4, 992, (9, 0), H100_OPTIN, True),
    (4, 1040, (9, 0), H100_OPTIN, False),    # more features than the registers hold
    (11, 784, (9, 0), H100_OPTIN, False),    # more classes than the registers hold
    (10, 784, (7, 5), H100_OPTIN, False)])   # no cp.async
def test_which_evaluations_run_in_one_pass(k, d, capability, optin, runs):
    d_pad = padded_shape(1, d)[1]
    assert onepass.usable(k, term_columns(k), d_pad, capability, optin) is runs


@pytest.mark.parametrize("n, sms", [(1, 132), (52500, 132), (210000, 132), (8137500, 132),
                                    (40_000_000, 132), (300, 1)])
def test_blocks_cover_every_unit_within_exact_sums(n, sms):
    grid, per = onepass.blocks(n, sms)
    units = -(-n // onepass.UNIT)
    assert per * onepass.UNIT <= onepass.MAX_ROWS_PER_BLOCK
    assert (grid - 1) * per < units <= grid * per  # every unit, no block without one
    assert grid <= sms or per == onepass.MAX_ROWS_PER_BLOCK // onepass.UNIT


@pytest.mark.parametrize("k, d", [(2, 64), (10, 784), (10, 1024), (7, 300), (3, 16)])
def test_source_compiles_with_nvrtc_without_warnings_or_spills(k, d):
    """NVRTC needs no GPU: CI compiles the kernel with the options CuPy is given; one block
    of 256 threads per SM, 255 registers a thread at most, and it must not spill (its
    gradient sums live in registers for a block's whole run)."""
    import nvrtc_compile

    if nvrtc_compile.library_path() is None:
        pytest.skip("NVRTC not installed (pip install nvidia-cuda-nvrtc; the test extra has it)")
    code = source("mgpu_dask.kernels.logreg", "onepass.cu")
    d_pad = padded_shape(1, d)[1]
    opts = onepass.options(k, term_columns(k), d_pad)
    for arch in ("compute_80", "compute_90"):
        ok, log, ptx = nvrtc_compile.compile_source(code, "onepass.cu",
                                                    [f"--gpu-architecture={arch}", *opts])
        assert ok and not log.strip(), log
        assert set(re.findall(rb"\.entry (\w+)", ptx)) == {b"evaluate_i8"}
    ok, log, _ = nvrtc_compile.compile_source(
        code, "onepass.cu", ["--gpu-architecture=sm_90", *opts, "-Xptxas", "-v"])
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    assert ok and spills and spills.groups() == ("0", "0"), log
    # Hopper's build: the softmax warps and the others each within the registers that
    # setmaxnreg leaves them.  The gradient's sums would spill hundreds of bytes; NVRTC
    # 13.0 spills one word of the softmax warps' 56 registers a thread (13.5 none), which
    # costs nothing measurable, so a word or two is let through.
    hopper = onepass.options(k, term_columns(k), d_pad, (9, 0))
    assert "-DSPECIALIZED" in hopper
    ok, log, _ = nvrtc_compile.compile_source(code, "onepass.cu", [*hopper, "-Xptxas", "-v"])
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    assert ok and spills and max(map(int, spills.groups())) <= 8, log


def test_combine_once_gives_combine_i8s_bits_and_zeroes_its_sums():
    """In the CUDA simulator: the gradient from sums already added over the row blocks is
    combine_i8's from the blocks, bit for bit, and the sums are zero afterwards."""
    from mgpu_dask.kernels.launch import launch

    rng = np.random.default_rng(5)
    d, k, blocks = 37, 7, 5
    width = term_columns(k)
    g32 = rng.integers(-2**31, 2**31, (blocks, d, width)).astype(np.int32)
    step, sums = np.array([1 / 255]), rng.standard_normal(k + 1)
    want = np.empty(d * k, dtype=np.float32)
    launch(C.combine_i8, -(-d * k // 32), 32, g32, step, sums, want)
    g64 = g32.astype(np.int64).sum(axis=0, keepdims=True)
    got = np.empty(d * k, dtype=np.float32)
    launch(C.combine_i8_once, -(-d * k // 32), 32, g64, step, sums, got)
    np.testing.assert_array_equal(got, want)
    assert not g64[..., :C.I8_TERMS * k].any()


@pytest.mark.gpu
@pytest.mark.parametrize("specialize", [True, False], ids=["hopper-build", "plain-build"])
@pytest.mark.parametrize("n, d, k", [(3 * 16384 + 7, 300, 10), (52500, 784, 10), (5, 1000, 3),
                                     (40000, 31, 7), (3001, 150, 9), (130, 64, 2),
                                     (300_000, 784, 10)])
def test_on_a_gpu_one_pass_leaves_the_unfused_bits(monkeypatch, n, d, k, specialize):
    """Loss, coefficient and intercept gradients of the int8 evaluation in one pass and
    unfused (cuBLAS's products and the softmax kernel) are the same bits at several points;
    on a Hopper, from both builds of the kernel."""
    pytest.importorskip("cupy")
    from conftest import int8_objectives_agree

    from mgpu_dask.config.environment import has_gpu

    if not has_gpu():
        pytest.skip("no GPU")
    if specialize and not onepass.specialized(onepass.capability(0)):
        pytest.skip("the softmax on warps of its own is Hopper's build")
    monkeypatch.setattr(onepass, "SPECIALIZE", specialize)
    cuda_source.forget()
    fast, slow = int8_objectives_agree(
        monkeypatch, n, d, k, {"ONE_PASS_FROM": 0, "ONE_PASS": True, "FUSED": True},
        {"ONE_PASS": False, "FUSED": False})
    assert fast.one_pass and not slow.one_pass and not slow.fused


def test_the_threshold_comes_back_after_the_warm_ups_window():
    """The warm-up lowers the one pass's row threshold for one evaluation only, an
    exception included."""
    from mgpu_dask.kernels.logreg import int8

    before = int8.ONE_PASS_FROM
    with pytest.raises(RuntimeError), int8.one_pass_on_any_rows():
        assert int8.ONE_PASS_FROM == 0
        raise RuntimeError
    assert int8.ONE_PASS_FROM == before


@pytest.mark.gpu
def test_on_a_gpu_the_warm_up_compiles_the_one_pass_evaluation():
    """A first fit of a million rows or more compiles nothing: where the run's shards may
    be that large, the warm-up's few rows have taken one evaluation in one pass (NVRTC's
    kernel and Numba's combine_i8_once); elsewhere it compiles neither."""
    pytest.importorskip("cupy")
    from mgpu_dask.config.environment import has_gpu
    from mgpu_dask.kernels.logreg import int8
    from mgpu_dask.logreg import warmup

    if not has_gpu():
        pytest.skip("no GPU")
    fields = dict(dtype="uint8", n_features=784, precision="auto", n_classes=10,
                  optimizer="auto", scale=1 / 255, large_shards=True)
    assert not warmup._one_pass(warmup.Fit(gpu=True, **{**fields, "large_shards": False}))
    if not warmup._one_pass(warmup.Fit(gpu=True, **fields)):
        pytest.skip("this GPU does not take the evaluation in one pass")
    cuda_source.forget()
    got = warmup.warm_up(gpu=True, **fields)
    assert "the one-pass evaluation" in got["steps"]
    wanted = onepass.options(10, term_columns(10), padded_shape(1, 784)[1],
                             onepass.capability(0))
    assert any(key[:2] == (onepass.__package__, "onepass.cu") and key[3] == wanted
               for key in cuda_source._MODULES)
    assert C.combine_i8_once.overloads
    assert int8.ONE_PASS_FROM == 1 << 20
