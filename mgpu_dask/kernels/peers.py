"""Peer access between the GPUs one process uses (CUDA runtime, through CuPy)."""

from __future__ import annotations

from typing import Iterable


def enable(leader: int, devices: Iterable[int]) -> set[int]:
    """Peer access between GPU ``leader`` and each of ``devices``, both ways, where the
    machine allows it (NVLink, or PCIe peer to peer); the GPUs whose kernels can then read
    and write ``leader``'s memory (``leader`` itself included).  Copies with
    ``memcpyDefault`` work between any two GPUs; kernels need this."""
    import cupy
    from cupy.cuda import runtime

    near = {leader}
    for peer in set(devices) - {leader}:
        for a, b in ((leader, peer), (peer, leader)):
            if runtime.deviceCanAccessPeer(a, b):
                with cupy.cuda.Device(a):
                    try:
                        runtime.deviceEnablePeerAccess(b)
                    except runtime.CUDARuntimeError:  # already enabled
                        pass
                if b == leader:
                    near.add(a)
    return near
