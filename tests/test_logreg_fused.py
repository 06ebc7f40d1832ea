"""The int8 evaluation's forward product and softmax in one kernel (``kernels/logreg/fused``):
when it runs, that NVRTC builds it, and -- on a GPU -- that it leaves the unfused kernels'
bits."""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import cu_defines

from mgpu_dask.kernels.cuda_source import source
from mgpu_dask.kernels.logreg import cuda_int8 as C
from mgpu_dask.kernels.logreg import fused
from mgpu_dask.kernels.logreg.int8 import term_columns


def test_source_agrees_with_the_python_side_and_the_numba_kernels():
    d = cu_defines("fused.cu")
    assert (d["BM"], d["BK"], d["THREADS"], d["STAGES"], d["MIN_BLOCKS"]) == (
        C.THREADS, fused.STAGE_BYTES, fused.THREADS, fused.STAGES,
        fused.MIN_BLOCKS)  # Python's are the defaults
    assert fused.ROWS == C.THREADS  # a block's sums are one row of bpart, as unfused
    assert (d["TERMS"], d["TOP"], d["BASE"], d["LOCAL_K"]) == (
        C.I8_TERMS, C.I8_TOP, C.I8_BASE, C.I8_LOCAL_K)


@pytest.mark.parametrize("k, capability, runs", [
    (10, (9, 0), True), (10, (8, 0), True), (2, (8, 6), True), (14, (9, 0), True),
    (10, (7, 5), False),              # no cp.async: cuBLAS and the softmax kernel
    (15, (9, 0), True), (C.I8_LOCAL_K + 1, (9, 0), False)])  # more than a row's logits hold
def test_which_evaluations_run_fused(k, capability, runs):
    assert fused.usable(k, term_columns(k), capability) is runs


def test_shared_memory_fits_every_gpu_it_runs_on():
    """Every class count it takes fits 99 KiB a block (consumer Ampere and Ada; data-centre
    GPUs allow more), and three blocks fit the 227 KiB of an SM of compute capability 9.0."""
    for k in range(2, C.I8_LOCAL_K + 1):
        assert fused.shared_bytes(k, term_columns(k)) <= fused.SHARED_OPTIN
    assert 3 * fused.shared_bytes(10, term_columns(10)) <= 227 << 10


@pytest.mark.parametrize("arch", ["compute_80", "compute_90"])
@pytest.mark.parametrize("k", [2, 10, C.I8_LOCAL_K])
def test_source_compiles_with_nvrtc_without_warnings_or_spills(arch, k):
    """NVRTC needs no GPU: CI compiles the kernel with the options CuPy is given; at
    MIN_BLOCKS blocks of 256 threads per SM (what the shared memory allows) it has 85
    registers a thread and must not spill."""
    import nvrtc_compile

    if nvrtc_compile.library_path() is None:
        pytest.skip("NVRTC not installed (pip install nvidia-cuda-nvrtc; the test extra has it)")
    code = source("mgpu_dask.kernels.logreg", "fused.cu")
    ok, log, ptx = nvrtc_compile.compile_source(code, "fused.cu",
                                                [f"--gpu-architecture={arch}",
                                                 *fused.options(k, term_columns(k))])
    assert ok and not log.strip(), log
    assert set(re.findall(rb"\.entry (\w+)", ptx)) == {b"forward_softmax_i8"}
    ok, log, _ = nvrtc_compile.compile_source(
        code, "fused.cu", ["--gpu-architecture=sm_90", *fused.options(k, term_columns(k)), "-Xptxas", "-v"])
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    registers = re.search(r"Used (\d+) registers", log)
    assert ok and spills and spills.groups() == ("0", "0"), log
    assert registers and int(registers.group(1)) <= 65536 // (fused.MIN_BLOCKS * fused.THREADS)


@pytest.mark.gpu
@pytest.mark.parametrize("n, d, k", [(3 * 16384 + 7, 300, 10), (52500, 784, 10), (5, 1000, 3),
                                     (40000, 31, 7), (3001, 150, 13), (130, 64, 2)])
def test_on_a_gpu_the_fused_kernel_leaves_the_unfused_bits(monkeypatch, n, d, k):
    """Loss, coefficient and intercept gradients of the int8 evaluation, fused and unfused,
    are the same bits, at several points: every residual term and block sum is."""
    pytest.importorskip("cupy")
    from conftest import int8_objectives_agree

    from mgpu_dask.config.environment import has_gpu

    if not has_gpu():
        pytest.skip("no GPU")
    fast, slow = int8_objectives_agree(  # test_logreg_onepass.py has the one pass
        monkeypatch, n, d, k, {"ONE_PASS": False, "FUSED": True}, {"FUSED": False})
    assert fast.fused and not slow.fused
    np.testing.assert_array_equal(fast.resid.get(), slow.resid.get())
