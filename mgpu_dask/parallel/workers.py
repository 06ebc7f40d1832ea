"""The workers of a cluster as our code sees them: who they are, in a stable order, and
what they have (a GPU, free memory), each asked for when needed."""

from __future__ import annotations

import contextlib
import socket
import threading
import weakref
from typing import Any, Iterator, NamedTuple, Sequence

from .. import config
from ..config.environment import has_gpu
from ..exceptions import ClusterError


_views = threading.local()


@contextlib.contextmanager
def one_view(client: Any) -> Iterator[None]:
    """Within: :func:`scheduler_workers` asks the scheduler once, and every later call in
    this thread (and :func:`fixed_facts`' check of the set) gets that answer.

    A fit's decisions (device, compute capability, memory, the order of the
    workers) then see the same workers and cost one round trip, not one each.
    Nested views share the outermost.
    """
    held = getattr(_views, "held", None)
    if held is None:
        held = _views.held = {}
    if client is None or id(client) in held:
        yield
        return
    held[id(client)] = None  # asked at the first need
    try:
        yield
    finally:
        held.pop(id(client), None)


def scheduler_workers(client: Any) -> dict[str, dict]:
    """The scheduler's entry for every worker, asked for now (address -> info), or
    the answer of this thread's :func:`one_view`.

    Not ``client.scheduler_info()["workers"]``: distributed (2025.x and later)
    caches that answer, and the client's periodic refresh (cluster totals, no
    workers) can replace the cache between the fetch and the return, so the
    worker list comes back empty at random (it failed a CI run).
    """
    held = getattr(_views, "held", None)
    viewed = held is not None and id(client) in held
    if viewed and held[id(client)]:
        return dict(held[id(client)])
    try:
        info = client.sync(client.scheduler.identity, n_workers=-1)
    except TypeError:  # distributed before n_workers: every worker, always
        info = client.sync(client.scheduler.identity)
    workers = dict(info["workers"])
    if viewed and workers:  # none yet: asked again (worker_addresses waits for one)
        held[id(client)] = workers
    return dict(workers)


def worker_addresses(client: Any) -> list[str]:
    """Worker addresses in a stable order (by worker name, then address).

    A cluster with no worker at this moment (still starting, or between its
    last worker leaving and a replacement joining) is waited for, up to
    ``mgpu-dask.cluster.start-timeout``; then ClusterError.
    """
    workers = scheduler_workers(client)
    if not workers:
        wait_s = config.seconds("cluster.start-timeout")
        try:
            client.wait_for_workers(1, timeout=wait_s)
        except TimeoutError:
            raise ClusterError(f"the cluster has no workers (waited {wait_s:g} s); start some "
                               "or check --scheduler-address") from None
        workers = scheduler_workers(client)
    return sorted(workers, key=lambda a: (str(workers[a].get("name")), a))


def detect_device(client: Any) -> str:
    """``"gpu"`` when every worker sees a GPU and has CuPy, else ``"cpu"``."""
    answers = fixed_facts(client)
    return "gpu" if answers and all(f.gpu for f in answers.values()) else "cpu"


def gpu_capability() -> tuple[int, int]:
    """This process's GPU's compute capability as (major, minor)."""
    import cupy

    cc = str(cupy.cuda.Device().compute_capability)
    return int(cc[:-1]), int(cc[-1])


class Facts(NamedTuple):
    """What does not change while a worker process lives."""

    gpu: bool                                # it sees a GPU and has CuPy
    capability: tuple[int, int] | None       # the GPU's compute capability
    gpu_bytes: int | None                    # the GPU's memory, in all


def _fixed_facts() -> Facts:
    if not has_gpu():
        return Facts(False, None, None)
    import cupy

    return Facts(True, gpu_capability(), int(cupy.cuda.runtime.memGetInfo()[1]))


def _gpu_id() -> str | None:
    if not has_gpu():
        return None
    import cupy

    return f"{socket.gethostname()}/{cupy.cuda.Device().pci_bus_id}"


_GPU_IDS: "weakref.WeakKeyDictionary[Any, dict[str, str | None]]" = weakref.WeakKeyDictionary()


def gpu_ids(client: Any, addresses: Sequence[str]) -> dict[str, str | None]:
    """The GPU of each worker at ``addresses``, as ``"host/PCI bus id"`` (None: no GPU, or
    the worker did not answer): workers with the same id share one GPU (several workers
    started on one device).  Each worker is asked once per client, the first time it is
    named (every predict needs them: no round trip after)."""
    known = _GPU_IDS.setdefault(client, {})
    missing = sorted(set(addresses) - set(known))
    if missing:
        try:
            # only workers the scheduler has now: ``run`` on a lost one's address waits on
            # it without end (a lost worker shares no GPU with anyone: None, not kept)
            alive = set(scheduler_workers(client))
            asked = [a for a in missing if a in alive]
            if asked:
                known.update(client.run(_gpu_id, workers=asked))
        except Exception:  # a worker gone meanwhile: none of these is known to share a GPU
            pass
    return {a: known.get(a) for a in addresses}


_FIXED: "weakref.WeakKeyDictionary[Any, dict[str, Facts]]" = weakref.WeakKeyDictionary()


def pushed_workers(client: Any) -> set[str]:
    """The workers of the client's own cluster object (``LocalCluster``,
    ``LocalCUDACluster``, a dask-jobqueue cluster): its ``scheduler_info`` is a copy of
    the scheduler's that the scheduler keeps current by messages, so reading it costs no
    round trip.  Empty for a client given an address, or while the copy has none."""
    info = getattr(getattr(client, "cluster", None), "scheduler_info", None)
    try:
        return set(info["workers"]) if info else set()
    except (KeyError, TypeError, RuntimeError):  # not a cluster's, or changing as read
        return set()


def fixed_facts(client: Any) -> dict[str, Facts]:
    """Each worker's :class:`Facts` (address -> facts), asked of the workers once per
    client and set of workers (every fit needs them), again when the set the client
    last heard of differs: the set of the client's cluster object where it has one
    (:func:`pushed_workers`, no round trip: a warm fit asks the scheduler nothing), else
    the scheduler's."""
    known = _FIXED.get(client)
    held = getattr(_views, "held", None)
    try:
        current = pushed_workers(client) or set(
            scheduler_workers(client) if held is not None and id(client) in held
            else client.scheduler_info()["workers"])
    except Exception:  # no answer cached yet: ask
        current = set()
    if known is None or not current or set(known) != current:
        known = {w: Facts(*f) for w, f in client.run(_fixed_facts).items()}
        _FIXED[client] = known
    return known


def _free_gpu_bytes() -> int:
    import cupy

    return int(cupy.cuda.runtime.memGetInfo()[0])


def free_gpu_memory(client: Any) -> list[int]:
    """Free bytes on each worker's GPU (one call to every worker)."""
    return list(client.run(_free_gpu_bytes).values())


def alive_workers(dask_scheduler: Any) -> list[str]:
    """Run on the scheduler: the addresses of the workers it has now."""
    return list(dask_scheduler.workers)
