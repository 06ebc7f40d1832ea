"""The single-host fit, from the client: the worker with the most rows, asked straight
(:mod:`mgpu_dask.parallel.direct`), maps every shard of its host and runs the whole
L-BFGS (:mod:`.leader`).

Also the labels that live beside their rows (``shard(y, client, like=X)``):
the leader reads them where they are, finds their classes and encodes them on
the GPUs, so nothing label-sized goes through the client.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, NamedTuple

import dask.array as da
import numpy as np

from ..exceptions import DataError
from ..parallel import labels as labels_mod
from ..parallel import direct, kept_with_blocks, peer_views, placement, results, spread
from ..parallel.by_name import WorkerFunction
from ..parallel.workers import alive_workers
from .problem import NOT_FINITE, HeldLabels, Problem

FIT_ON_LEADER = WorkerFunction("mgpu_dask.logreg.leader.fit_on_leader")
"""The leader's task, named: the client never imports the leader's kernels and L-BFGS."""
FIT_HERE = WorkerFunction("mgpu_dask.logreg.leader.fit_here")
"""The leader's fit asked of it straight (:func:`~mgpu_dask.parallel.direct.from_client`)."""

LOSS_SECONDS = 10.0
"""How long a broken connection to the leader may take to show as a lost worker on the
scheduler before it is raised as it is."""

Holders = tuple[list[Any], list[str]]
"""The futures of an array's row blocks and the worker that holds each."""


class Outcome(NamedTuple):
    """What a single-host attempt gave: the fit's result, or None with the reason."""

    result: dict[str, Any] | None
    note: str | None = None       # why it did not run single-host, or how a loss was handled
    recoveries: int = 0           # workers lost on the way


def label_codes(codes: np.ndarray, n_classes: int) -> np.ndarray:
    """Class indices in the smallest unsigned type that holds them: what travels with the
    export tasks (8.1 million MNIST labels: 8 MB as uint8 instead of 32 as int32)."""
    for dtype in (np.uint8, np.uint16):
        if n_classes <= np.iinfo(dtype).max + 1:
            return codes.astype(dtype)
    return codes.astype(np.int32)


def labels_beside(X: Any, y: Any, rows: Holders | None, client: Any) -> Holders | None:
    """The futures and holders of y's row blocks where y is a persisted dask array of
    integer labels chunked as X's rows (``rows`` being X's futures and holders): labels
    the fit reads where they are, so they never travel to the client and back.

    Blocks that Dask placed on another worker than their rows (two arrays persisted
    apart, or rechunked apart) are copied to their rows' holders, worker to worker, by
    one task each, and kept for the next fits of the same arrays, which then find them
    in place (:func:`..parallel.spread.copied_to`).
    """
    if (rows is None or not isinstance(y, da.Array) or y.ndim != 1 or y.dtype.kind not in "iu"
            or X.numblocks[1] != 1 or y.chunks[0] != X.chunks[0]):
        return None
    found = placement.locate(client, y, remembered=True)
    if found is None:
        return None
    if list(found[1]) == list(rows[1]):
        return found
    return spread.copied_to(client, found, list(rows[1])), list(rows[1])


def held_classes(client: Any, held: Holders, declared: Any) -> np.ndarray:
    """The classes of label blocks that live on the workers (one round trip: each holder
    names the values its block holds)."""
    parts = client.gather([placement.submit_pinned(client, labels_mod.present, f, worker=w)
                           for f, w in zip(*held)])
    return labels_mod.classes_from(parts, declared)


def keeping_levels(client: Any) -> bool:
    """Whether the holders may keep their rows' int8 levels for the next fit: once
    :class:`~.kept_with_blocks.ReleaseKept` is on every worker (asked once per client),
    which drops them with the rows; else they are converted again each fit."""
    return kept_with_blocks.ensure_release(client)


def _as_task_inputs(shard: dict[str, Any], futures: list[Any], labels: Any,
                    idx: list[int]) -> dict[str, Any]:
    """The leader's shard as a task's inputs (its blocks' futures, which Dask resolves
    where the task runs) instead of by key; other shards as they are."""
    if "own block keys" not in shard:
        return shard
    shard = {k: v for k, v in shard.items() if k != "own block keys"}
    shard["own rows"] = [futures[i] for i in idx]
    if isinstance(shard["labels"], HeldLabels):
        shard["labels"] = [labels[i] for i in idx]
    return shard


def fit_single_host(X: da.Array, rows: Holders, labels: Any, client: Any, timeout: float,
                    problem: Problem, strict: bool, weights: np.ndarray | None = None) -> Outcome:
    """The whole L-BFGS in one worker that maps every shard of its host.

    ``rows`` are X's row futures and holders; ``labels`` the class indices of
    every row (NumPy, sent with the task) or the futures of label blocks
    beside the rows (read there).  The client asks the leader straight (no
    task, no scheduler in between; a task where the leader's blocks moved
    on or the client cannot reach it).  The leader asks each other holder to
    export its rows and labels by CUDA IPC / shared memory, exports its own in
    place, evaluates every shard on its own GPU with no Dask message per step,
    and has the holders release their exports before it returns, or keeps
    them mapped for the next fit of the same rows (:mod:`.kept_peers`, the
    holders releasing them when the leader's rows go): one round trip per fit.  Where that cannot be done here (shards on several
    hosts, GPUs the leader does not see) or a worker was lost, the outcome
    has no result and says why, unless ``strict``: then it raises.  ``weights``: each
    row's weight (NumPy), sent with each shard's labels; such a fit keeps nothing for
    the next one.
    """
    token = uuid.uuid4().hex
    futures, where = rows
    keep = weights is None and keeping_levels(client)
    starts = np.concatenate([[0], np.cumsum(X.chunks[0])])
    by_worker: dict[str, list[int]] = {}
    for i, worker in enumerate(where):
        by_worker.setdefault(worker, []).append(i)
    sizes = {w: sum(X.chunks[0][i] for i in idx) for w, idx in by_worker.items()}
    held = isinstance(labels, list)
    if not held:
        labels = label_codes(labels, problem.n_classes)
    leader = max(sizes, key=sizes.get)
    # The leader reads its own blocks where they are; the others are named by
    # their keys and exported by their holders when the leader asks: nothing but
    # the exports' small descriptions travels.
    shards: list[Any] = []
    for worker, idx in by_worker.items():
        keys = [futures[i].key for i in idx]
        if held:
            codes = HeldLabels([labels[i].key for i in idx])
        else:
            codes = np.concatenate([labels[starts[i]:starts[i + 1]] for i in idx])
        if worker == leader:
            shards.append({"own block keys": keys, "labels": codes, "token": token,
                           "own keys": keys if keep else None})
        else:
            shards.append({"address": worker, "keys": keys, "labels": codes, "token": token,
                           "keep": keep})
        if weights is not None:
            shards[-1]["weights"] = np.concatenate(
                [weights[starts[i]:starts[i + 1]] for i in idx]).astype(np.float32)
    started, submitted = time.perf_counter(), time.time()
    exporters: set[str] | None = None
    try:
        # Asked of the leader straight (no scheduler in between: one message each
        # way, where a task costs four and a fetch).  A leader whose blocks moved on
        # refuses, and one this client cannot reach (lost, or across a network only
        # the scheduler crosses) is not asked: the fit goes as a task, its own
        # blocks its inputs, which Dask runs where they are.
        try:
            result = direct.from_client(client, leader, FIT_HERE, shards, problem,
                                        timeout=timeout, in_thread=True)
        except direct.WorkerUnreachable:
            result = {"refused": "moved"}
        if result.get("refused") == "moved":
            as_task = [_as_task_inputs(s, futures, labels, by_worker[leader]) for s in shards]
            fit = client.submit(FIT_ON_LEADER, as_task, problem, workers=[leader],
                                allow_other_workers=True, pure=False,
                                key=f"logreg-fit-{token[:12]}")
            submitted = time.time()
            result = results.gather(client, [fit], timeout, where=[leader])[0]
        arrived = time.time()
        exporters = set(result.pop("exporters")) - set(result.pop("released"))
        if "refused" in result:
            if result["refused"] == "not finite":
                raise DataError(NOT_FINITE)
            if result["refused"] == "labels":
                raise DataError(result["message"])
            raise peer_views.PeerUnavailable(result["refused"])
        profile = result["profile"]
        result["profile"] = {
            "export and fit": time.perf_counter() - started,
            "submission to leader": profile.pop("leader began at") - submitted,
            "leader to client": arrived - profile.pop("leader ended at"), **profile}
        return Outcome({**result, "round_trips": 1, "comm": "single-host"})
    except (DataError, TimeoutError):
        raise
    except Exception as exc:
        # A leader that died mid-call breaks the connection at once; the scheduler
        # may take a moment longer to count it gone.
        deadline = time.monotonic() + (LOSS_SECONDS if isinstance(exc, OSError) else 0.0)
        while True:
            lost = not set(by_worker) <= set(client.run_on_scheduler(alive_workers))
            if lost or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        if not lost and (strict or not isinstance(exc, peer_views.PeerUnavailable)):
            raise
        # Shards that cannot be mapped from one worker, or a worker lost
        # on the way: the caller fits by messages (which rebuilds lost shards).
        note = (f"single-host fit lost a worker ({type(exc).__name__}: {exc}); refitted by "
                "actors" if lost else f"single-host fit not possible here ({exc}); fitted by "
                "actors")
        return Outcome(None, note, int(lost))
    finally:
        # The leader had the exporters free their copies; after a failure, every
        # live worker looks for the token.
        if exporters is None:
            exporters = set(client.run_on_scheduler(alive_workers))
        if exporters:  # none when every shard was the leader's own
            client.run(peer_views.release, token, workers=sorted(exporters), on_error="ignore")
