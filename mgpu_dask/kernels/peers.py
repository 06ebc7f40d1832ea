"""Peer access between the GPUs one process uses (CUDA runtime, through CuPy)."""

from __future__ import annotations

from typing import Iterable

ALREADY_ENABLED = 704  # cudaErrorPeerAccessAlreadyEnabled


def enable(leader: int, devices: Iterable[int]) -> set[int]:
    """Peer access between GPU ``leader`` and each of ``devices``, both ways, where the
    machine allows it (NVLink, or PCIe peer to peer); the GPUs whose kernels can then read
    and write ``leader``'s memory (``leader`` itself included).  Copies with
    ``memcpyDefault`` work between any two GPUs; kernels need this.  A GPU whose access
    to ``leader`` could not be enabled (too many peers, say) is left out."""
    import cupy
    from cupy.cuda import runtime

    near = {leader}
    for peer in set(devices) - {leader}:
        for a, b in ((leader, peer), (peer, leader)):
            if not runtime.deviceCanAccessPeer(a, b):
                continue
            with cupy.cuda.Device(a):
                try:
                    runtime.deviceEnablePeerAccess(b)
                except runtime.CUDARuntimeError as exc:
                    if exc.status != ALREADY_ENABLED:
                        continue
            if b == leader:
                near.add(a)
    return near
