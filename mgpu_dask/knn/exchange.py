"""A straight predict's exchange between the holders of the training shards
(:func:`.straight._across`): each holder searches its own query blocks and fetches the
others' (:func:`held_block`), hands the candidates of a block it does not hold to the
block's holder (:func:`deposit`), and merges and votes the blocks it holds
(:func:`candidates_here`).  Blocks and candidates go GPU to GPU where both workers can
(:mod:`~mgpu_dask.parallel.peer_copy`), else through host memory over the workers' lanes.
Runs on the workers; the search, merge and vote are :mod:`.blocks`'.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from typing import Any, NamedTuple

import numpy as np

from ..kernels.launch import array_module, on_gpu
from ..parallel import direct, peer_copy
from . import blocks


class HandOut(NamedTuple):
    """A straight predict's query blocks held here that the other shard holders fetch."""

    name: str                # the predict's
    keys: tuple[Any, ...]    # the blocks held here
    askers: int              # the other shard holders, each fetching every one of them


HAND_OUT_WAIT = 0.5
"""Seconds at most that a shard holder waits for the others to have fetched its query
blocks before it searches them itself: a search holds the interpreter, so a fetch
asked while it runs is answered about one search later, and the other holder's search
would start only then (docs/performance-history.md)."""

_SERVED: "OrderedDict[tuple[str, Any], int]" = OrderedDict()  # (predict, key) -> fetches
_REPLIES: "OrderedDict[tuple[str, Any], list[int]]" = OrderedDict()  # -> inboxes lent


class Handed(NamedTuple):
    """A query block as its holder hands it to another shard holder (:func:`held_block`)."""

    host: np.ndarray | None              # the block in host memory, where it did not land
    landed: peer_copy.Landed | None      # where it landed in the asker's inbox
    reply: dict[str, Any] | None         # an inbox of the holder's for its candidates


def held_block(key: Any, name: str = "", inbox: dict[str, Any] | None = None,
               reply: int = 0, dask_worker: Any = None) -> Handed:
    """Run on a query block's holder, asked by another worker for predict ``name``: the
    block, copied GPU to GPU into the asker's ``inbox`` where it can be
    (:mod:`~mgpu_dask.parallel.peer_copy`), else in host memory (counted for
    :func:`_handed_out`).  ``reply``: bytes of the block's candidates, for which an
    inbox of this worker's GPU is lent to the asker (given back once merged)."""
    block = dask_worker.data[key]
    landed = peer_copy.copy_into(inbox, block)
    host = back = None
    if landed is None and not hasattr(block, "get"):
        host = np.asarray(block)
    elif landed is None:
        import cupy

        with cupy.cuda.Device(block.device.id):
            stream = peer_copy.copy_stream(block.device.id)  # not behind this worker's search
            host = block.get(stream=stream)
            stream.synchronize()
    if reply and on_gpu(block):
        import cupy

        with cupy.cuda.Device(block.device.id):
            back = peer_copy.take(reply)
    dropped: list[int] = []  # inboxes of predicts that gave up long ago
    with _MAIL_CHANGED:
        _SERVED[(name, key)] = _SERVED.get((name, key), 0) + 1
        if back is not None:
            _REPLIES.setdefault((name, key), []).append(back.id)
        while len(_SERVED) > _MAIL_KEPT:
            _SERVED.popitem(last=False)
        while len(_REPLIES) > _MAIL_KEPT:
            dropped += _REPLIES.popitem(last=False)[1]
        _MAIL_CHANGED.notify_all()
    peer_copy.give_back(*dropped)
    return Handed(host, landed, back.desc if back is not None else None)


def _replies_done(name: str, key: Any) -> None:
    """The inboxes lent for block ``key``'s candidates in predict ``name``, given back."""
    with _MAIL_CHANGED:
        boxes = _REPLIES.pop((name, key), [])
    peer_copy.give_back(*boxes)


def _in_place(candidates: Any) -> Any:
    """Candidates as deposited: host arrays, or where they landed in an inbox of ours."""
    if not isinstance(candidates, peer_copy.Landed):
        return candidates
    box = peer_copy.lent(candidates.box)
    if box is None:
        raise KeyError(f"inbox {candidates.box} is not lent")
    return box.view(candidates.shape, candidates.dtype)


def _handed_out(out: HandOut, wait: float) -> bool:
    """Wait until every other shard holder has fetched each of ``out.keys`` (at most
    ``wait`` seconds); whether they all did."""
    deadline = time.monotonic() + wait
    entries = [(out.name, key) for key in out.keys]
    with _MAIL_CHANGED:
        try:
            while any(_SERVED.get(e, 0) < out.askers for e in entries):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                _MAIL_CHANGED.wait(left)
            return True
        finally:
            for e in entries:
                _SERVED.pop(e, None)


class Mail(NamedTuple):
    """Where the shard holders of one straight predict hand each query block's candidates
    to the block's holder, which merges and votes (:func:`candidates_here`)."""

    name: str                              # the predict's
    shards: tuple[int, ...]                # the training shards held here, of n_shards
    n_shards: int
    mergers: tuple[tuple[int, str], ...]   # (block, holder) of every block held elsewhere
    vote: tuple                            # as vote_pred's
    gpu: bool


RECEIVED: "deque[tuple[float, int]]" = deque(maxlen=100_000)
"""``(time, bytes)`` of each query block and each set of candidates this worker had from
another worker in a straight predict: Dask's own transfer log does not hold them."""

_MAIL: "OrderedDict[tuple[str, int], dict[int, Any]]" = OrderedDict()
_MAIL_CHANGED = threading.Condition()
_MAIL_KEPT = 256  # boxes kept at most (a merger that gave up leaves its box behind)


def deposit(name: str, block: int, candidates: dict[int, np.ndarray]) -> None:
    """Run on a query block's holder, asked by a shard holder: its shards' candidates for
    the block (``{shard: candidates}``), into the block's box."""
    RECEIVED.append((time.time(), sum(
        int(np.prod(c.shape)) * np.dtype(c.dtype).itemsize for c in candidates.values())))
    with _MAIL_CHANGED:
        _MAIL.setdefault((name, block), {}).update(candidates)
        while len(_MAIL) > _MAIL_KEPT:
            _MAIL.popitem(last=False)
        _MAIL_CHANGED.notify_all()


def _collected(name: str, block: int, shards: set[int], wait: float) -> dict[int, Any] | None:
    """The other shard holders' candidates for a block held here, once all are in; None
    past ``wait`` seconds."""
    deadline = time.monotonic() + wait
    with _MAIL_CHANGED:
        while not shards <= set(_MAIL.get((name, block), ())):
            left = deadline - time.monotonic()
            if left <= 0:
                _MAIL.pop((name, block), None)
                return None
            _MAIL_CHANGED.wait(left)
        return _MAIL.pop((name, block))


def candidates_here(worker: Any, *held: Any, offsets: tuple[int, ...], local: tuple[int, ...],
                    remote: tuple[tuple[int, str, Any, int, int], ...], wait: float, k: int,
                    margin: int | None, tile_bytes: int | None,
                    mail: Mail | None = None, hand_out: HandOut | None = None,
                    lanes: tuple[tuple[str, str], ...] = ()) -> dict[int, Any] | None:
    """On the holder of one or more training shards (``held``: each shard's rows and labels,
    at ``offsets``, then the query blocks ``local`` held here): every query block's
    candidates against each of these shards, ``{block: [per shard]}`` in host memory.

    The blocks held elsewhere (``remote``: block, holder, key, rows, bytes) are asked of
    their holders at once and searched after this worker's own, so that they cross while
    it searches: GPU to GPU into an inbox of this worker's where both sides can
    (:mod:`~mgpu_dask.parallel.peer_copy`), else through host memory.
    With ``mail``, each of those blocks' candidates go straight to its holder
    (:func:`deposit`; GPU to GPU into an inbox the holder lent with the block, where it
    did), and this worker answers with the predictions of its own blocks,
    ``{block: predictions}``, merged with the others' candidates in the tasks' tree order
    and voted.  None where a block or a box could not be had in ``wait`` seconds (moved
    on, a worker lost): the caller falls back to tasks.  ``hand_out``: the predict's
    name, and the blocks held here that the other shard holders fetch, which this worker
    lets them have before its own search (at most :data:`HAND_OUT_WAIT` seconds).
    ``lanes``: the other workers' lanes (worker, socket) where the blocks and the
    candidates cross (:func:`.direct.from_worker`; Dask's RPC for a worker without one)."""
    shards = [(held[2 * s], held[2 * s + 1], offset) for s, offset in enumerate(offsets)]
    name = hand_out.name if hand_out is not None else ""
    keys = dict(zip(local, hand_out.keys)) if hand_out is not None else {}
    paths = dict(lanes)
    gpu = bool(shards) and array_module(shards[0][0].norms) is not np
    # candidates that may land in the merger's inbox: one shard's, on a GPU
    reply = 3 * 8 * k if mail is not None and gpu and len(shards) == 1 else 0
    # A worker with nothing of its own to do meanwhile (no blocks here, none to hand out)
    # asks for its first block in its own thread, after the others (through the pool).
    idle = not local and not (hand_out is not None and hand_out.keys and hand_out.askers)
    asked: list[Any] = [None] * len(remote)
    for j in [*range(1, len(remote)), 0] if remote else []:
        i, holder, key, rows, nbytes = remote[j]
        box = peer_copy.take(nbytes) if gpu else None
        asked[j] = (i, box, direct.from_worker(
            holder, held_block, key, name, box.desc if box is not None else None,
            reply * rows, worker=worker, lane_path=paths.get(holder), here=idle and j == 0,
            timeout=wait))
    if hand_out is not None and hand_out.keys and hand_out.askers:
        _handed_out(hand_out, min(wait, HAND_OUT_WAIT))
    mergers = dict(mail.mergers) if mail else {}
    out: dict[int, Any] = {}
    sent = []

    def search_all(Qb: Any, host: bool) -> list[Any]:
        found = [blocks.search(Qb, X, y, offset, k, margin, tile_bytes)
                 for X, y, offset in shards]
        return [c.get() if host and hasattr(c, "get") else c for c in found]

    for i, Qb in zip(local, held[2 * len(shards):]):
        out[i] = search_all(Qb, host=mail is None)  # merged here with mail: kept on device
    try:
        for n, (i, box, future) in enumerate(asked):
            handed = future.result(timeout=wait)
            if handed.landed is not None:
                Qb = box.view(handed.landed.shape, handed.landed.dtype)
            else:
                peer_copy.give_back(box)
                box, Qb = None, handed.host
            RECEIVED.append((time.time(), int(Qb.nbytes)))
            found = search_all(Qb, host=mail is None or handed.reply is None)
            if mail is None:
                out[i] = found
                peer_copy.give_back(box)  # the candidates came to the host: the search is done
                continue
            landed = peer_copy.copy_into(handed.reply, found[0]) if handed.reply else None
            found = [landed] if landed is not None else [
                c.get() if hasattr(c, "get") else c for c in found]
            peer_copy.give_back(box)  # the copy or the get waited for the search
            sent.append(direct.from_worker(mergers[i], deposit, mail.name, i,  # the last: here
                                           dict(zip(mail.shards, found)), worker=worker,
                                           lane_path=paths.get(mergers[i]),
                                           here=n == len(asked) - 1, timeout=wait))
        for delivery in sent:
            delivery.result(timeout=wait)
        if mail is None:
            return out
        others = set(range(mail.n_shards)) - set(mail.shards)
        for i in local:
            got = _collected(mail.name, i, others, wait)
            if got is None:
                return None
            got.update(zip(mail.shards, out[i]))
            out[i] = blocks.merged_vote(*(_in_place(got[p]) for p in range(mail.n_shards)),
                                 vote=mail.vote, gpu=mail.gpu)
            _replies_done(mail.name, keys.get(i))
    except (OSError, KeyError, TimeoutError):  # moved on, or a worker lost
        return None
    finally:
        for i in local:
            _replies_done(name, keys.get(i))
    return out
