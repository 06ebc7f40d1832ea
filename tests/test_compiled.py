"""Counting the kernels a process compiles: ours (Numba) and CuPy's (kernels.compiled)."""

from __future__ import annotations

import sys
import types
import uuid

import pytest

from mgpu_dask.kernels import compiled as C


@pytest.fixture
def fresh_log(monkeypatch):
    """An empty record of CuPy's compiles for the test (the process's own is kept)."""
    monkeypatch.setattr(C._CupyLog, "tracked", False)
    monkeypatch.setattr(C._CupyLog, "compiled", [])
    monkeypatch.setattr(C._CupyLog, "seconds", dict.fromkeys(C._CupyLog.seconds, 0.0))
    monkeypatch.setattr(C._CupyLog, "calls", dict.fromkeys(C._CupyLog.calls, 0))


def _fake_cupy(monkeypatch, **functions):
    """A ``cupy.cuda.compiler`` module holding ``functions`` (CuPy's internals' names)."""
    compiler = types.ModuleType("cupy.cuda.compiler")
    for name, function in functions.items():
        setattr(compiler, name, function)
    cuda = types.ModuleType("cupy.cuda")
    cuda.compiler = compiler
    cupy = types.ModuleType("cupy")
    cupy.cuda = cuda
    for name, module in (("cupy", cupy), ("cupy.cuda", cuda), ("cupy.cuda.compiler", compiler)):
        monkeypatch.setitem(sys.modules, name, module)
    return compiler


def test_cupy_compiles_are_counted_named_and_told_from_cache_loads(monkeypatch, fresh_log):
    on_disk: set[str] = set()

    def _compile_using_nvrtc_no_warning(source, options=(), arch=None, *rest, **kw):
        return b"cubin"

    def _preprocess(source, options, arch, backend):
        return ""

    def _compile_with_cache_cuda(source, options, arch, *rest, **kw):
        # as CuPy does: NVRTC's version check, then the cache folder, else NVRTC
        compiler._preprocess("", options, arch, "nvrtc")
        if source in on_disk:
            return "loaded"
        on_disk.add(source)
        return compiler._compile_using_nvrtc_no_warning(source, options, arch)

    compiler = _fake_cupy(monkeypatch,
                          _compile_using_nvrtc_no_warning=_compile_using_nvrtc_no_warning,
                          _preprocess=_preprocess,
                          _compile_with_cache_cuda=_compile_with_cache_cuda)
    before = C.compilations()
    assert C.track_cupy() and C.track_cupy()  # the second call wraps nothing twice
    assert compiler._compile_with_cache_cuda.__wrapped__ is _compile_with_cache_cuda
    source = ('extern "C" __global__ void __launch_bounds__(128) cupy_bitwise_xor__uint32(int n)'
              ' {}')
    assert compiler._compile_with_cache_cuda(source, (), 90) == b"cubin"
    assert compiler._compile_with_cache_cuda(source, (), 90) == "loaded"  # another process's
    assert C.compilations() == before + 1
    assert "cupy:cupy_bitwise_xor__uint32" in C.compiled()
    got = C.cupy_kernels()
    assert (got["requests"], got["compiled"], got["version checks"]) == (2, 1, 2)
    assert got["tracked"] is True
    assert got["seconds"] >= got["compile seconds"] >= 0


def test_without_cupys_internals_nothing_is_wrapped_or_counted(monkeypatch, fresh_log):
    compiler = _fake_cupy(monkeypatch, _compile_with_cache_cuda=lambda *a, **k: None)
    before = C.compilations()
    assert C.track_cupy() is False
    assert not hasattr(compiler._compile_with_cache_cuda, "__wrapped__")
    assert C.compilations() == before and C.cupy_kernels()["requests"] == 0
    assert C.cupy_kernels()["tracked"] is False


@pytest.mark.gpu
def test_a_real_cupy_compile_is_named_once(fresh_log):
    cupy = pytest.importorskip("cupy")
    from mgpu_dask.config.environment import has_gpu

    if not has_gpu():
        pytest.skip("needs a CUDA GPU")
    assert C.track_cupy()
    name = f"mgpu_test_{uuid.uuid4().hex[:12]}"  # never in any cache folder
    kernel = cupy.ElementwiseKernel("float32 x", "float32 y", "y = x + 1", name)
    before = C.compilations()
    for _ in range(2):  # the second time from CuPy's memory: no request
        assert float(kernel(cupy.zeros(4, dtype=cupy.float32))[0]) == 1.0
    assert C.compilations() == before + 1
    assert any(entry.startswith("cupy:") and name in entry for entry in C.compiled())
    assert C.cupy_kernels()["requests"] == 1
