"""Copies of the device L-BFGS's state, one per GPU of a fit (:class:`.device.DeviceBackend`).

A fit whose shards sit on several GPUs keeps the optimiser's whole state --
point, gradient, direction, curvature pairs, scalars -- on each of those GPUs,
and every copy runs the same kernels on the same numbers: each GPU proposes
its own trial parameters, evaluates its own shards at them, and takes the
other GPUs' partial sums by peer copies; then each ends the iteration itself.
The copies stay equal bit for bit because the L-BFGS's kernels take no
atomics and every copy adds the shards' sums in the same order, so every
decision they take on the device (a step kept, a stopping rule) is the same.

What this buys: an iteration hands data between the GPUs once (the partial
sums, each GPU's to every other), where a single copy on the leader hands
over twice (the trial parameters out, then the sums back), each hand-over a
wait on another GPU.

:class:`Replica` holds one copy with the launches bound to it and the stream
it runs on; :func:`homes` says which copy each shard reads its parameters
from and sends its sums to; :func:`pull` queues a copy's peer copies of the
other copies' sums; :func:`fork` and :func:`join` order the copies' streams
after the leader's and the leader's after theirs.  The device backend puts
whatever it queues between the two, so that a graph launched on the leader's
stream comes after it on every GPU, and no copy's next evaluation overwrites
sums that another copy is still reading.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np

from ...kernels.lbfgs import cuda as K
from ...kernels.lbfgs import finish as Fin
from .launches import launches

#: One copy per GPU of the shards (the default), one on the leader's GPU only (every
#: shard reads the leader's parameters and sends its sums there), or one per shard
#: (several on one GPU: the copies checked where a machine has one GPU).
LAYOUTS = ("device", "leader", "shard")


def homes(devices: list[Any], leader: Any, layout: str) -> tuple[list[Any], list[int]]:
    """``(where, home)``: the device of each copy (the leader's first) and, for each shard
    on ``devices[i]``, the index of the copy it works with (``layout``: :data:`LAYOUTS`;
    devices are named by anything comparable, such as their ids)."""
    if layout not in LAYOUTS:
        raise ValueError(f"replicas={layout!r}: expected one of {', '.join(LAYOUTS)}")
    if layout == "leader":
        return [leader], [0] * len(devices)
    if layout == "shard":
        order = sorted(range(len(devices)), key=lambda i: devices[i] != leader)
        if devices and devices[order[0]] != leader:  # the leader holds no shard: a copy too
            return [leader] + [devices[i] for i in order], [order.index(i) + 1
                                                             for i in range(len(devices))]
        return [devices[i] for i in order], [order.index(i) for i in range(len(devices))]
    where = [leader] + [d for i, d in enumerate(devices) if d != leader and d not in devices[:i]]
    return where, [where.index(d) for d in devices]


class Replica:
    """One copy of the L-BFGS state on one GPU (or NumPy, under the CUDA simulator).

    Parameters
    ----------
    device : cupy.cuda.Device or None
        Its GPU; None: NumPy arrays (the simulator).
    shards : int
        Shards of the fit: a slot of partial sums for each (``parts``, ``psums``).
    d, k, memory : int
        Features, classes, curvature pairs kept.
    sweep, threads : int
        Threads per block of the sweeps and of ``finish``.
    inv_n, penalty : float
        ``1 / rows`` and the L2 weight, bound into the launches.
    """

    def __init__(self, device: Any, shards: int, d: int, k: int, memory: int, sweep: int,
                 threads: int, inv_n: float, penalty: float) -> None:
        self.device = device
        gpu = device is not None
        if gpu:
            import cupy

            xp = cupy
            with device:
                self.stream: Any = cupy.cuda.Stream(non_blocking=True)
                self.ready = cupy.cuda.Event(disable_timing=True)  # its parameters written
                self.end = cupy.cuda.Event(disable_timing=True)  # its last queued work
        else:
            xp, self.stream = np, None
        m, dk = d * k + k, d * k
        with self.on():
            z = lambda *shape, dtype=np.float64: xp.zeros(shape, dtype=dtype)  # noqa: E731
            self.x, self.g, self.gt, self.p = z(m), z(m), z(m), z(m)
            self.S, self.Y, self.rho = z(memory, m), z(memory, m), z(memory)
            self.scal = z(K.N_SCALARS)
            self.params = z(m, dtype=np.float32)
            self.parts = z(shards, dk, dtype=np.float32)
            self.psums = z(shards, k + 1)
            # One entry per thread: the sweeps wait on memory side by side, not in a chain
            chunks = max(1, min(K.MAX_CHUNKS, -(-m // sweep)))
            self.SY, self.YY = z(memory, memory), z(memory, memory)
            self.dparts, self.pparts = z(2 * memory + 1, chunks), z(1, chunks)
            self.gparts = z(3 * memory, chunks)
            self.fparts = z(Fin.N_PARTS, chunks)
            self.state = (self.x, self.g, self.gt, self.p, self.S, self.Y, self.rho, self.scal,
                          self.params, self.parts, self.psums, self.SY, self.YY, self.dparts,
                          self.pparts, self.gparts, self.fparts)
            (self.propose, self.finish, self.gram, self.trial, self.forget,
             self.arm) = launches(self, memory, chunks, sweep, threads, inv_n, penalty)
            if gpu:
                # The zeros above were queued on the legacy default stream, which a
                # non-blocking stream is not ordered with: done before any kernel reads them.
                cupy.cuda.Stream.null.synchronize()

    def on(self) -> Any:
        """This copy's GPU as the current device (nothing under the simulator)."""
        return self.device if self.device is not None else contextlib.nullcontext()

    def queue_proposal(self) -> None:
        """The proposal's launches (on this copy's GPU): trial parameters in ``params``."""
        for launcher, grid in self.propose:
            launcher(grid)

    def queue_finish(self, mode: int) -> None:
        """The end of an iteration's launches in ``mode`` (on this copy's GPU)."""
        (assemble, _), (end, _), _ = self.finish
        assemble.set(10, mode)
        end.set(6, mode)
        for launcher, grid in self.finish:
            launcher(grid)
        if mode in (K.AUTO, K.COMMIT):  # a pair may have been stored
            for launcher, grid in self.gram:
                launcher(grid)

    def zero(self) -> None:
        """Every buffer zeroed, on this copy's stream (in order with its kernels)."""
        with self.on(), self.stream or contextlib.nullcontext():
            for array in self.state:
                array.fill(0)


def enable_peers(devices: list[int]) -> None:
    """Peer access between every two of these GPUs, both ways (NVLink copies)."""
    import cupy
    from cupy.cuda import runtime

    for a in devices:
        for b in devices:
            if a != b and runtime.deviceCanAccessPeer(a, b):
                with cupy.cuda.Device(a):
                    try:
                        runtime.deviceEnablePeerAccess(b)
                    except runtime.CUDARuntimeError:  # already enabled
                        pass


def fork(replicas: list[Replica], forked: Any) -> None:
    """Every copy's stream after the first's (the leader's) work queued so far: event
    ``forked`` recorded on the first, waited for by the others (GPU)."""
    lead = replicas[0]
    with lead.device:
        forked.record(lead.stream)
    for r in replicas[1:]:
        with r.device:
            r.stream.wait_event(forked)


def join(replicas: list[Replica]) -> None:
    """The first copy's stream (the leader's) after every other copy's work queued so far."""
    for r in replicas[1:]:
        with r.device:
            r.end.record(r.stream)
    lead = replicas[0]
    with lead.device:
        for r in replicas[1:]:
            lead.stream.wait_event(r.end)


def pull(replica: Replica, home: list[int], replicas: list[Replica], done: list[Any]) -> None:
    """Queue on ``replica``'s stream: wait for every shard's evaluation (events ``done``)
    and copy the partial sums of the shards that other copies hold into its own slots
    (peer copies where those copies are on other GPUs)."""
    from cupy.cuda import runtime

    mine = replicas.index(replica)
    default = runtime.memcpyDefault
    with replica.device:
        for i, event in enumerate(done):
            replica.stream.wait_event(event)
            if home[i] == mine:
                continue
            source = replicas[home[i]]
            for dst, src in ((replica.parts[i], source.parts[i]),
                             (replica.psums[i], source.psums[i])):
                runtime.memcpyAsync(dst.data.ptr, src.data.ptr, dst.nbytes, default,
                                    replica.stream.ptr)
