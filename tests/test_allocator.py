"""Our GPU work takes CuPy's pool where RAPIDS left CuPy on RMM over plain cudaMalloc
(``kernels.allocator``), and leaves any other allocator alone.

CuPy and RMM are stood in for by small fakes: what is tested is the decision and that
the block's allocator is the pool's only inside it."""

from __future__ import annotations

import contextlib
import sys
import types

import pytest

from mgpu_dask.kernels import allocator


def _resource(name, upstream=None):
    return type(name, (), {"upstream_mr": upstream})()


@pytest.fixture
def fakes(monkeypatch):
    used = []

    def rmm_cupy_allocator(nbytes):  # RMM's, as cudf's import sets it
        raise AssertionError("not called")

    rmm_cupy_allocator.__module__ = "rmm.allocators.cupy"
    state = {"allocator": rmm_cupy_allocator, "resource": _resource("CudaMemoryResource")}

    @contextlib.contextmanager
    def using_allocator(malloc):
        used.append(malloc)
        yield
        used.append(None)

    pool = types.SimpleNamespace(malloc=object())
    cupy = types.SimpleNamespace(
        cuda=types.SimpleNamespace(get_allocator=lambda: state["allocator"],
                                   using_allocator=using_allocator),
        get_default_memory_pool=lambda: pool)
    rmm = types.SimpleNamespace(mr=types.SimpleNamespace(
        get_current_device_resource=lambda: state["resource"]))
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setitem(sys.modules, "rmm", rmm)
    return state, used, pool


def test_rmm_over_cudamalloc_gets_cupys_pool(fakes):
    state, used, pool = fakes
    assert allocator.unpooled_rmm()
    with allocator.pooled():
        assert used == [pool.malloc]  # the pool, inside the block only
    assert used == [pool.malloc, None]
    state["resource"] = _resource("StatisticsResourceAdaptor", _resource("CudaMemoryResource"))
    assert allocator.unpooled_rmm()  # counting adaptors are looked through


@pytest.mark.parametrize("pooling", allocator.POOLING)
def test_an_rmm_pool_is_left_as_it_is(fakes, pooling):
    state, used, _ = fakes
    state["resource"] = _resource("StatisticsResourceAdaptor", _resource(pooling))
    assert not allocator.unpooled_rmm()

    @allocator.pooled()
    def work():
        return 7

    assert work() == 7 and used == []


class _BoundMalloc:  # CuPy's pool's malloc, a Cython method: its __module__ is None
    __module__ = None


@pytest.mark.parametrize("own", [lambda nbytes: None, _BoundMalloc()])
def test_cupys_own_allocator_is_left_as_it_is(fakes, own):
    state, used, _ = fakes
    state["allocator"] = own  # CuPy's pool, or a user's own
    assert not allocator.unpooled_rmm()
    with allocator.pooled():
        pass
    assert used == []


def test_without_rmm_nothing_is_asked(monkeypatch):
    monkeypatch.delitem(sys.modules, "rmm", raising=False)
    assert not allocator.unpooled_rmm()
    with allocator.pooled():
        pass
