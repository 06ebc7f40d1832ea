"""Which GPUs may read and write the leader's memory (``kernels.peers.enable``), with the
CUDA runtime stood in for: no GPU needed."""

from __future__ import annotations

import contextlib
import sys
import types

import pytest

from mgpu_dask.kernels import peers


class _RuntimeError(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


@pytest.fixture
def runtime(monkeypatch):
    """A CUDA runtime whose peer links and enable failures the test sets."""
    state = types.SimpleNamespace(links=set(), fails={}, enabled=[])

    def can_access(a, b):
        return (a, b) in state.links

    def enable(b):
        a = state.current
        if (a, b) in state.fails:
            raise _RuntimeError(state.fails[(a, b)])
        state.enabled.append((a, b))

    @contextlib.contextmanager
    def device(a):
        state.current = a
        yield

    rt = types.SimpleNamespace(deviceCanAccessPeer=can_access, deviceEnablePeerAccess=enable,
                               CUDARuntimeError=_RuntimeError)
    cuda = types.SimpleNamespace(runtime=rt, Device=device)
    cupy = types.ModuleType("cupy")
    cupy.cuda = cuda
    cuda_module = types.ModuleType("cupy.cuda")
    cuda_module.runtime = rt
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setitem(sys.modules, "cupy.cuda", cuda_module)
    return state


def test_linked_gpus_are_near_and_already_enabled_links_count(runtime):
    runtime.links = {(0, 1), (1, 0), (0, 2), (2, 0)}
    runtime.fails = {(2, 0): peers.ALREADY_ENABLED}  # enabled by an earlier fit
    assert peers.enable(0, [0, 1, 2, 3]) == {0, 1, 2}  # 3: no link to the leader
    assert (0, 1) in runtime.enabled and (1, 0) in runtime.enabled


def test_a_link_that_cannot_be_enabled_leaves_its_gpu_out(runtime):
    runtime.links = {(0, 1), (1, 0)}
    runtime.fails = {(1, 0): 711}  # cudaErrorTooManyPeers: kernels there must copy instead
    assert peers.enable(0, [1]) == {0}
