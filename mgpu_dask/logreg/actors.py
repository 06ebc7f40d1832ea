"""The fit by messages, for any cluster: the L-BFGS loop on the client, one Dask Actor
per worker holding its shards, one message round per evaluation.

Each evaluation is one direct call to every :class:`ShardLossGrad` actor, which
returns one float and the gradient of its rows.  A worker lost during the fit
takes its actor with it: its shards are rebuilt from their lineage on the
survivors, new actors take them, and the loop goes on.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import numpy as np

from ..kernels.launch import array_module
from ..kernels.logreg import ShardObjective
from ..kernels.precision import Precision
from ..parallel import placement
from ..parallel.workers import alive_workers, scheduler_workers
from .problem import sum_parts


class ShardLossGrad:
    """A Dask Actor holding one worker's row blocks; returns their summed loss and gradient."""

    def __init__(self, n_blocks: int, *blocks: Any, precision: Precision = Precision.FP32,
                 scale: float | None = None) -> None:
        self._precision = precision
        self._scale = scale
        xp = array_module(blocks[0])
        parts = [blocks[i:i + n_blocks] for i in range(0, len(blocks), n_blocks)]
        # rows, labels, and each row's sample weight where the fit has them
        self.X, self.y, *weights = [p[0] if n_blocks == 1 else xp.concatenate(p) for p in parts]
        self.weights = weights[0] if weights else None
        self._objective: ShardObjective | None = None

    def loss_grad(self, coef: np.ndarray, intercept: np.ndarray) -> tuple:
        if self._objective is None:
            self._objective = ShardObjective(self.X, self.y, len(intercept), self._precision,
                                             self._scale, weights=self.weights)
        return self._objective(coef, intercept)

    def products(self) -> tuple[str, str | None, str | None]:
        """What this actor's evaluations run in, why not the precision asked for, and why
        its kernels go through Numba's own launch (None: they do not)."""
        if self._objective is None:
            return str(self._precision), None, None
        return (str(self._objective.precision), self._objective.fallback,
                self._objective.launch_note)


def rows_by_worker(X: Any, y: Any, client: Any) -> tuple[list, list, dict]:
    """The persisted row blocks of X and y (future, holder) and, per holder, its block indices."""
    from ..exceptions import MgpuDaskError

    found = [placement.locate(client, a) for a in (X, y)]
    if any(f is None for f in found):
        raise MgpuDaskError("could not locate the persisted row blocks of X; persist X first")
    placed, labels = (list(zip(*f)) for f in found)
    by_worker: dict[str, list[int]] = {}
    for i, (_, worker) in enumerate(placed):
        by_worker.setdefault(worker, []).append(i)
    return placed, labels, by_worker


class ActorEvaluator:
    """Loss and gradient through one Actor per worker holding its blocks.

    Calling it evaluates every shard at ``(coef, intercept)`` and returns the
    sums; ``calls`` counts the message rounds, ``rebuilds`` the worker losses
    it recovered from.
    """

    def __init__(self, X: Any, y: Any, client: Any, timeout: float,
                 precision: Precision = Precision.FP32, scale: float | None = None,
                 weights: Any = None) -> None:
        self._precision = precision
        self._scale = scale
        self.timeout = timeout
        self.calls = 0
        self.rebuilds = 0
        self._client = client
        self._keep = (X, y) if weights is None else (X, y, weights)
        self._start_actors()

    def _start_actors(self) -> None:
        deadline = time.perf_counter() + self.timeout
        while True:
            try:
                self.actors = self._try_start_actors(deadline)
                return
            except (OSError, RuntimeError) as exc:  # "Worker holding Actor was lost"
                if isinstance(exc, TimeoutError) or time.perf_counter() > deadline:
                    raise
                # A worker died while the actors started: its blocks get rebuilt; again.

    def _try_start_actors(self, deadline: float) -> list[Any]:
        from distributed import futures_of, wait

        client, (X, y, *w), timeout = self._client, self._keep, self.timeout
        while True:  # after a worker loss, lost blocks are recomputed and get a holder
            wait(futures_of([X, y, *w]), timeout=max(1.0, deadline - time.perf_counter()))
            placed, labels, by_worker = rows_by_worker(X, y, client)
            weights = list(zip(*placement.locate(client, w[0]))) if w else []
            alive = set(client.run_on_scheduler(alive_workers))
            if all(a in alive for _, a in placed + labels + weights):  # who_has can lag
                break
            if time.perf_counter() > deadline:
                raise TimeoutError(f"row blocks of X had no worker after {timeout:.0f} s")
            time.sleep(0.1)
        # Loose placement: should that worker die now, the actor starts on another.
        started = [client.submit(ShardLossGrad, len(idx), *[placed[i][0] for i in idx],
                                 *[labels[i][0] for i in idx],
                                 *[weights[i][0] for i in idx if weights],
                                 precision=self._precision,
                                 scale=self._scale, workers=[worker],
                                 allow_other_workers=True, actor=True,
                                 key=f"logreg-shard-{uuid.uuid4().hex[:12]}")
                   for worker, idx in by_worker.items()]
        return [f.result(timeout=max(1.0, deadline - time.perf_counter())) for f in started]

    def __call__(self, coef: np.ndarray, intercept: np.ndarray) -> tuple:
        self.calls += 1
        try:
            parts = self._evaluate(coef, intercept)
        except (OSError, RuntimeError, ValueError, KeyError) as exc:
            if isinstance(exc, TimeoutError) or self.rebuilds >= 3:
                raise
            # A worker died (its actor with it): its shards are rebuilt from their
            # slices on the survivors, new actors take them, and L-BFGS goes on.
            self.rebuilds += 1
            self._start_actors()
            parts = self._evaluate(coef, intercept)
        return sum_parts(parts)

    def _evaluate(self, coef: np.ndarray, intercept: np.ndarray) -> list:
        pending = [(a, a.loss_grad(coef, intercept)) for a in self.actors]
        deadline = time.perf_counter() + self.timeout
        parts = []
        for actor, future in pending:
            while True:  # a call to a dead worker may never answer: look, every 2 s
                try:
                    parts.append(future.result(timeout=2.0))  # stops waiting, not the call
                    break
                except TimeoutError:
                    workers = scheduler_workers(self._client)
                    if actor._address not in workers:
                        raise OSError(f"worker {actor._address} (holding a shard) was lost")
                    if time.perf_counter() > deadline:
                        raise TimeoutError(f"a loss/gradient evaluation took over "
                                           f"{self.timeout:.0f} s") from None
        return parts

    def products(self) -> dict[str, Any]:
        """What the actors' evaluations ran: ``{"precision": ..., "precision_note": ...}``."""
        answers = [a.products().result(timeout=self.timeout) for a in self.actors]
        ran = sorted({p for p, _, _ in answers})
        notes = sorted({n for _, n, _ in answers if n})
        launch = next((n for _, _, n in answers if n), None)
        return {"precision": ",".join(ran), "precision_note": "; ".join(notes) or None,
                "launch_note": launch}

    def close(self) -> None:
        self.actors = []
        self._keep = None

