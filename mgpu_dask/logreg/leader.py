"""The single-host fit on the workers: the leader maps every shard of its host and runs
the whole L-BFGS; the holders export their rows for it.

Every holder exports its rows and labels once (CUDA IPC / shared memory,
:mod:`mgpu_dask.parallel.peer_views`) and one worker, the leader, runs the
whole loop (:func:`fit_on_leader`), evaluating each shard on its own GPU, all
GPUs at once; with every shard on a GPU the loop's vectors stay on that
worker's GPU (:mod:`.lbfgs.device`).  One round trip per fit (the client asks
the leader straight, :func:`fit_here`), whatever the iteration count.  The
client's side is :mod:`.single_host`.  This module runs on the workers (and the
fork server imports it ahead): it imports no scikit-learn.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import time
from typing import Any, Callable

import numpy as np

from ..exceptions import DataError
from ..kernels.allocator import pooled
from ..kernels.launch import array_module, as_numpy, beside, on_gpu
from ..kernels.lbfgs.rules import rounding_of
from ..kernels.logreg import Levels, ShardObjective
from ..kernels.precision import Precision
from ..parallel import direct, kept_with_blocks, peer_views
from ..parallel import labels as labels_mod
from . import joined, kept_peers, own_copies
from .lbfgs.launches import compile_ahead
from .problem import HeldLabels, Problem, products, sum_parts
from .solvers import fit_on_device, lbfgs_on_host, on_device

PEER_SECONDS = 600.0  # the longest a leader waits for a peer's export (the fit's own timeout
                     # is the client's; this only keeps a leader from waiting forever)


def levels_wanted(problem: Problem) -> bool:
    """Whether the holders should export their rows as int8 levels (the device L-BFGS with
    the int8 products, if the rows are levels): never where X itself is needed."""
    return (problem.optimizer != "host"
            and problem.precision in (Precision.AUTO, Precision.INT8))


@pooled()
def fit_on_leader(shards: list[dict[str, Any]], problem: Problem,
                  worker: Any = None) -> dict[str, Any]:
    """Runs on one worker: map every shard of the host and run the whole L-BFGS here.

    The leader asks every other holder for its export straight away (one message each
    way, no scheduler in between, :func:`.direct.from_worker`; they convert and export
    at the same time as the leader prepares its own rows, which it exports in place),
    maps them all and, with every shard on a GPU, keeps the optimiser's vectors on this
    worker's GPU (:mod:`.lbfgs.device`); otherwise each evaluation queues every shard's work
    on its own GPU first and then waits for them all, so the GPUs compute at the same
    time.  Shards that share this worker's GPU are first copied into one (:mod:`.joined`)
    and fitted as one worker's rows.  Once it no longer maps their rows -- after that
    copy, else after the fit -- it closes its mappings and tells the holders to release
    their exports, and waits for their answers before returning, so the client has
    nothing left to do; on the device, with every shard's keys given, it
    keeps other processes' shards mapped instead, for the next fit of the same rows
    (:mod:`.kept_peers`), and lets them go with its own rows.  Shards come as ``{"own
    rows", "labels", "token"}`` (this worker's, the blocks themselves) or ``{"address",
    "keys", "labels", "token"}`` (another worker's: the keys of its blocks there).
    ``labels`` are the shard's class indices (NumPy, sent by the client), or its label
    blocks themselves (the leader's own, a list) or by their keys (a holder's,
    :class:`HeldLabels`); with ``problem.n_classes`` None the leader finds the classes
    from what every shard holds and returns them as ``"classes"``.  Shards this worker
    joined for an earlier fit on the same blocks are fitted from that join
    (:func:`.joined.kept`), no holder asked;
    shards of other GPUs it mapped for such a fit stay mapped, and are fitted
    again as they are (:mod:`.kept_peers`).
    ``worker``: this process's Dask worker (by default the one whose task
    runs this).
    """
    began = time.time()
    if problem.optimizer != "host":  # a first fit's loop kernels, side by side (GPU only)
        compile_ahead()
    weighted = any("weights" in s for s in shards)  # nothing kept from or for such a fit
    levels = levels_wanted(problem) and not weighted
    discover = problem.n_classes is None
    hit = None if weighted else joined.kept(shards, levels, problem.scale, discover,
                                            problem.classes)
    kept_under = None if weighted else joined.fit_key(shards, levels, problem.scale)
    result = (_fit_kept_join(*hit, problem, len(shards), kept_under) if hit is not None
              else None)
    if result is None and not weighted:
        mapped = kept_peers.taken(shards, levels, problem.scale, discover, problem.classes)
        if mapped is not None:
            result = _fit_kept_mapped(mapped, shards, problem, levels, kept_under, worker)
    if result is None:
        result = _export_and_fit(shards, problem, levels, discover, worker, kept_under)
    if "profile" in result:  # wall-clock ends, for the client's share of the time
        result["profile"]["leader began at"], result["profile"]["leader ended at"] = (
            began, time.time())
    return result


def _fit_kept_join(one: tuple[Any, Any], classes: np.ndarray | None, problem: Problem,
                   n_shards: int, kept_under: tuple[list[Any], tuple] | None,
                   ) -> dict[str, Any] | None:
    """Fit the shards' join kept from an earlier fit; None where this fit does not run on
    the device (the shards are then exported and mapped as they are)."""
    if classes is not None:
        problem = problem._replace(n_classes=len(classes))
    if not on_device([one], problem):
        return None
    result = fit_on_device([one], problem, kept_under)
    result["profile"] = {**result["profile"], "shards joined": n_shards if n_shards > 1 else 0,
                         "join kept": n_shards > 1, "rows kept": True}
    found = {"classes": classes} if classes is not None else {}
    return {**result, **found, "exporters": [], "released": []}


def _fit_kept_mapped(mapped: kept_peers.Mapped, shards: list[dict[str, Any]],
                     problem: Problem, levels: bool,
                     kept_under: tuple[list[Any], tuple] | None, worker: Any,
                     ) -> dict[str, Any] | None:
    """Fit the shards kept mapped from an earlier fit (:mod:`.kept_peers`), and keep them
    again; None where this fit does not run on the device (they are then exported and
    mapped as a new fit's are)."""
    classes, here = mapped.classes, kept_peers.this_worker(worker)
    if classes is not None:
        problem = problem._replace(n_classes=len(classes))
    try:
        if not on_device(mapped.arrays, problem):
            kept_peers.keep(shards, levels, problem.scale, mapped, here)
            return None
        result = fit_on_device(mapped.arrays, problem, kept_under)
    except BaseException:
        mapped.drop()
        raise
    kept_peers.keep(shards, levels, problem.scale, mapped, here)
    result["profile"] = {**result["profile"], "shards joined": 0, "mapped kept": True}
    found = {"classes": classes} if classes is not None else {}
    return {**result, **found, "exporters": [], "released": []}


def _export_and_fit(shards: list[dict[str, Any]], problem: Problem, levels: bool,
                    discover: bool, worker: Any,
                    kept_under: tuple[list[Any], tuple] | None) -> dict[str, Any]:
    """Have the holders export their shards, map them all and fit (:func:`fit_on_leader`)."""
    scale = problem.scale
    token = shards[0]["token"] if shards else ""
    asked = {i: (s["address"], direct.from_worker(s["address"], export_held, token,
                                                  s["keys"], s["labels"], levels, scale,
                                                  discover, s.get("keep", False),
                                                  worker=worker))
             for i, s in enumerate(shards) if "keys" in s}
    exporters = sorted({address for address, _ in asked.values()})
    released: list[concurrent.futures.Future[Any]] = []
    kept: list[bool] = []  # the holders' exports kept mapped: released when they go

    def release_holders() -> None:  # once: early where the fit no longer maps their rows
        if not released and not kept:
            released.extend(direct.from_worker(address, peer_views.release, token,
                                               worker=worker)
                            for address in exporters)

    try:
        started = time.perf_counter()
        own = {i: export_rows(token, s["own rows"], s["labels"], in_place=True, levels=levels,
                               scale=scale, discover=discover, keys=s.get("own keys"))
               for i, s in enumerate(shards) if i not in asked}
        ready = time.perf_counter()
        described = [asked[i][1].result(timeout=PEER_SECONDS) if i in asked else own[i]
                     for i in range(len(shards))]
        exported = time.perf_counter()

        def keep_mapped(arrays: list[tuple[Any, Any]], mappings: contextlib.ExitStack,
                        parts: list[Any] | None, classes: np.ndarray | None) -> None:
            kept.append(True)
            here = kept_peers.this_worker(worker)
            kept_peers.keep(shards, levels, scale, kept_peers.Mapped(
                arrays, mappings, [s["labels"] for s in shards], parts, classes,
                [(address, token) for address in exporters], here, kept_under), here)

        result = _fit_mapped(described, problem, release_holders,
                             lambda one, parts, classes: joined.keep(
                                 shards, levels, scale, one, parts, classes), kept_under,
                             keep_mapped, [s.get("weights") for s in shards])
    finally:
        if shards:
            peer_views.release(token)
        # A holder still exporting (the leader failed first) would export after its
        # release and keep the copy: let the asked exports end before releasing.
        concurrent.futures.wait([future for _, future in asked.values()], timeout=PEER_SECONDS)
        release_holders()
        for future in released:  # an exporter lost on the way: nothing of it to release
            try:
                future.result(timeout=10)
            except Exception:
                pass
    result["released"] = exporters
    if "profile" in result:
        result["profile"] = {"own export": ready - started,
                             "waiting for the holders": exported - ready, **result["profile"]}
    return result


def _shard_arrays(desc: dict[str, Any], arrays: list[Any],
                  classes: np.ndarray | None) -> tuple[Any, Any]:
    """``(rows, class indices)`` of one opened export: X, or the int8 ``Levels`` a holder
    made, and its labels as int32 indices made on their device (``classes``: of labels
    that came as they are; else they are indices already, in their smallest type)."""
    made = desc.get("info", {}).get("levels")
    X = Levels(arrays[0], None, *made) if made is not None else arrays[0]
    labels = arrays[-1]
    if on_gpu(labels):
        import cupy

        with cupy.cuda.Device(labels.device.id):
            return X, labels_mod.codes(labels, classes)
    return X, labels_mod.codes(labels, classes)


def _fit_mapped(shards: list[dict[str, Any]], problem: Problem,
                release_holders: Callable[[], None],
                keep_join: Callable[[tuple[Any, Any], list[Any] | None, Any], None],
                kept_under: tuple[list[Any], tuple] | None = None,
                keep_mapped: Callable[..., None] | None = None,
                weights: list[Any] | None = None) -> dict[str, Any]:
    """Map the exports and fit; shards that share this GPU are joined into one first
    (:mod:`.joined`), their mappings closed and ``release_holders`` called before the
    L-BFGS, and the join handed to ``keep_join`` with the label values each shard
    named (where the classes are found here) and the classes found.  Where the rows
    fitted are this process's own (its shard alone, or the join), the device L-BFGS
    is kept under ``kept_under`` for the next fit (:func:`.solvers.fit_on_device`);
    where they are other processes' mapped shards and ``kept_under`` is given, the
    device L-BFGS too, and after the fit the shards, their mappings, the label values
    and the classes are handed to ``keep_mapped`` (:mod:`.kept_peers`) instead of
    closed.  ``weights``: each shard's row weights (NumPy) or None; weighted shards are
    fitted as they are, neither joined nor kept."""
    exporters = [s["address"] for s in shards if s["address"] and s["pid"] != os.getpid()]
    if not all(s["finite"] for s in shards):  # refused in the result: no worker traceback
        return {"refused": "not finite", "exporters": exporters}
    if len({s["host"] for s in shards}) > 1:
        return {"refused": "the shards live on more than one host", "exporters": exporters}
    found: dict[str, Any] = {}
    if problem.n_classes is None:  # the labels came as they are: their classes, here
        try:
            classes = labels_mod.at_least_two(labels_mod.classes_from(
                [s["info"]["classes"] for s in shards], problem.classes))
        except DataError as exc:
            return {"refused": "labels", "message": str(exc), "exporters": exporters}
        problem, found = problem._replace(n_classes=len(classes)), {"classes": classes}
    started = time.perf_counter()
    with contextlib.ExitStack() as mappings:
        opened = mappings.enter_context(peer_views.opened(shards))
        arrays = [_shard_arrays(desc, a, found.get("classes")) for desc, a in zip(shards, opened)]
        weighted = weights is not None and any(w is not None for w in weights)
        if weighted:
            # (weighted fits export rows, never int8 levels: X is CuPy or NumPy)
            arrays = [(X, y, beside(w, X, np.float32)) for (X, y), w in zip(arrays, weights)]
        if on_device(arrays, problem):
            one = None if weighted else joined.on_leader(arrays)
            parts = [s["info"]["classes"] for s in shards] if found else None
            if one is not None:  # nothing reads the mapped shards any more
                arrays = [one]
                mappings.close()
                release_holders()
                keep_join(one, parts, found.get("classes"))
            elif not weighted and len(shards) == 1 and shards[0]["pid"] == os.getpid():
                # this worker's own rows as they are: the next fit of them starts here
                keep_join(arrays[0], parts, found.get("classes"))
            theirs = [s["pid"] != os.getpid() for s in shards]
            own = one is not None or not any(theirs)
            keeping = not own and keep_mapped is not None and kept_under is not None
            arrays, copied = (own_copies.of_mapped(arrays, theirs) if one is None and not weighted
                              else (arrays, 0))
            mapped = time.perf_counter()
            result = fit_on_device(arrays, problem, kept_under if own or keeping else None)
            if keeping:
                keep_mapped(list(arrays), mappings.pop_all(), parts, found.get("classes"))
            result["profile"] = {"map": mapped - started, **result["profile"],
                                 "shards joined": len(shards) if one is not None else 0,
                                 "peer shards copied": copied,
                                 "mapped kept": False}
            arrays.clear()
            return {**result, **found, "exporters": exporters}
        # Levels hold the scale in their step already
        objectives = [ShardObjective(X.rows() if isinstance(X, Levels) else X, labels,
                                     problem.n_classes, problem.precision,
                                     None if isinstance(X, Levels) else problem.scale,
                                     weights=w[0] if w else None)
                      for X, labels, *w in arrays]
        ran = products(objectives)
        arrays.clear()
        ready = time.perf_counter()

        def evaluate(W: np.ndarray, b: np.ndarray) -> tuple:
            for objective in objectives:
                objective.launch(W, b)
            return sum_parts([objective.collect() for objective in objectives])

        try:
            result = lbfgs_on_host(evaluate, problem,
                                   rounding_of([o.precision for o in objectives]))
        finally:
            objectives.clear()  # the mapped shards must have no users when they close
        solved = time.perf_counter()
    return {**result, **found, **ran, "optimizer": "host", "exporters": exporters,
            "profile": {"map and buffers": ready - started, "L-BFGS": solved - ready,
                        "unmap": time.perf_counter() - solved}}


def export_rows(token: str, blocks: list[Any], labels: Any, in_place: bool = False,
                 levels: bool = False, scale: float | None = None,
                 discover: bool = False, keys: list[Any] | None = None) -> dict[str, Any]:
    """On a holder: export its row blocks and their labels (on the rows' device); in place
    on the leader's own worker (the fit reads them in this process).  ``labels``: the
    class indices the client sent (NumPy, in their smallest type) or the label blocks
    held here (a list); either goes as it is, the leader widens it.  ``levels``: rows
    on a GPU that are 8-bit levels (uint8 rows always are) go as the int8 products'
    ``Levels`` of ``X * scale`` instead of X (converted here, on this GPU; the
    description says so).  ``discover``: the description names the label values
    present (``info["classes"]``).  ``keys``: the blocks' Dask keys, under which their
    levels are kept for the next fit (:mod:`.kept_with_blocks`); None keeps nothing."""
    xp = array_module(blocks[0])
    if isinstance(labels, list):
        labels = labels[0] if len(labels) == 1 else array_module(labels[0]).concatenate(labels)
    info: dict[str, Any] = {}
    if xp is not np:
        with xp.cuda.Device(blocks[0].device.id):
            labels = xp.asarray(labels)
            if discover:
                info["classes"] = labels_mod.present(labels)
            if levels:
                from ..kernels.logreg import int8

                def make() -> Any:
                    X = blocks[0] if len(blocks) == 1 else xp.concatenate(blocks)
                    # Kept levels may serve a peer next time: an allocation of their own.
                    own = in_place and keys is None
                    return int8.levels(X, None if own else peer_views.dedicated, scale=scale)

                made = kept_with_blocks.kept_or_made(blocks, keys, scale, make)
                if made is not None:
                    return peer_views.export(token, [[made.v], [labels]], in_place,
                                             owned=True,
                                             info={**info, "levels": [made.step, made.n, made.d]})
    else:
        labels = as_numpy(labels)
        if discover:
            info["classes"] = labels_mod.present(labels)
    return peer_views.export(token, [blocks, [labels]], in_place=in_place, info=info)


async def export_held(token: str, keys: list[Any], labels: Any, levels: bool,
                       scale: float | None = None, discover: bool = False, keep: bool = False,
                       dask_worker: Any = None) -> dict[str, Any]:
    """On a holder, asked by the leader (:func:`.direct.from_worker`): export the blocks it
    holds under ``keys`` (``export_rows``; labels held here come as :class:`HeldLabels`),
    in a thread of its own, not on the event loop; ``keep``: its levels are kept under
    ``keys`` for the next fit)."""
    import asyncio

    blocks, labels = _held(dask_worker, keys, labels)
    return await asyncio.to_thread(export_rows, token, blocks, labels, False, levels, scale,
                                   discover, keys if keep else None)


def _held(dask_worker: Any, keys: list[Any], labels: Any) -> tuple[list[Any], Any]:
    """The blocks this worker holds under ``keys``, and ``labels`` read here where they are
    :class:`HeldLabels`; ``PeerUnavailable`` where one is no longer here."""
    try:
        blocks = [dask_worker.data[key] for key in keys]
        if isinstance(labels, HeldLabels):
            labels = [dask_worker.data[key] for key in labels.keys]
    except KeyError as exc:
        raise peer_views.PeerUnavailable(f"block {exc} is no longer on worker "
                                         f"{dask_worker.address}") from None
    return blocks, labels


@pooled()
def fit_here(shards: list[dict[str, Any]], problem: Problem,
             dask_worker: Any = None) -> dict[str, Any]:
    """:func:`fit_on_leader`, asked straight by the client (:func:`.direct.from_client`, in a
    thread of its own on the leader, not on its event loop): the leader's own shard names
    its blocks and labels by their keys (``"own block keys"``, :class:`HeldLabels`), read
    here.  A block no longer here is refused (``"refused": "moved"``): the client then
    submits the fit as a task."""
    mine = []
    for s in shards:
        if "own block keys" in s:
            try:
                blocks, labels = _held(dask_worker, s["own block keys"], s["labels"])
            except peer_views.PeerUnavailable as exc:
                return {"refused": "moved", "message": str(exc)}
            s = {k: v for k, v in s.items() if k != "own block keys"}
            s["own rows"], s["labels"] = blocks, labels
        mine.append(s)
    return fit_on_leader(mine, problem, dask_worker)
