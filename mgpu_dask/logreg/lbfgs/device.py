"""L-BFGS for logistic regression with every vector on the GPU (:func:`.loop.run`'s
device backend).

One process holds every shard of the fit (the single-host fit maps the other
workers' shards into it).  The optimiser's state -- point, gradient, direction,
curvature pairs, and the scalars it decides on -- lives on the *leader* GPU
(this process's own).  One iteration is queued without waiting:

1. the proposal on the leader: two-loop recursion, first step, trial
   parameters (float32) -- then an event;
2. every shard, on its own GPU and stream, once that event fires: evaluates its
   rows at those parameters, and its partial gradient and sums land in its slot
   on the leader -- then an event.  Int8 products read the parameters and write
   the slot themselves (over NVLink where the shard is on another GPU); others
   copy the parameters in and the sums out;
3. the end of the iteration on the leader, after every shard's event
   (:mod:`mgpu_dask.kernels.lbfgs.finish`): the objective and gradient at
   the trial point, the strong-Wolfe test, and the update of the point and
   the curvature pairs when the step is kept;
4. one copy of a dozen scalars to the host, the only wait of the iteration.

Steps 1-3 are the same launches every iteration (the same buffers, the
same arguments), so they are captured once per fit as one CUDA graph that
spans every GPU of the fit (stream capture follows the events from the
leader's stream to the shards' and back); each iteration is then one graph
launch instead of some twenty Python-issued launches per shard, which
would cost more host time than an MNIST evaluation takes on the GPU.  Where
capture is not possible (UCX running in the process, a driver that
refuses), the iteration is launched op by op and ``graph_note`` says why.

Most first steps are kept, so the host queues ``run_ahead`` iterations
before it reads the scalars (``advance``); a step not kept stops the ones
queued behind it on the device (:mod:`mgpu_dask.kernels.lbfgs.cuda`).
``run_ahead`` is chosen from the device time of one evaluation, then of each
look whose queued steps were all kept (:mod:`.pace`).  A look's scalars are
copied aside (:mod:`.scalars`) and a *bridge* of a few more iterations queued
behind the copy before the host waits for it, so the device runs while the
host reads the look and queues the next.  The bridge counts in the next look,
which does not re-arm the device: a stop in the look leaves it skipped.

When the first step is not kept the host's scalar line search
(:mod:`.line_search`) asks for more trial steps, two scalars back per trial.
Under Numba's CUDA simulator (NumPy shards) the kernels run on the host and
the shards are evaluated by the CPU path: how CI tests the loop.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import numpy as np

from ...kernels import peers
from ...kernels.launch import capture_allowed
from ...kernels.lbfgs import cuda as K
from ...kernels.lbfgs.rules import rounding_of
from ...kernels.logreg import ShardObjective, rows_on_gpu
from ...kernels.precision import Precision
from . import again
from .launches import bind, buffers, launch_note
from .loop import Step
from .pace import RunAhead, elapsed
from .scalars import Scalars

SIMULATOR_THREADS = 8  # the simulator runs one Python thread per CUDA thread: few, or slow


def usable(arrays: list[tuple[Any, Any]]) -> bool:
    """Whether these shards can be fitted by the device backend (all CuPy, on GPUs)."""
    return bool(arrays) and all(rows_on_gpu(a[0]) for a in arrays)


class DeviceBackend:
    """The L-BFGS state of a multinomial logistic regression on the leader GPU.

    Parameters
    ----------
    shards : list of (X, labels) or (X, labels, weights)
        Row blocks (float32 or uint8, n_i x d, or ``kernels.logreg.Levels``), class
        indices (int32), row weights (float32): CuPy arrays on any GPUs this process
        sees -- or NumPy arrays under the CUDA simulator.
    n_classes, n_rows : int, float
        Classes; rows over all shards or their weights' sum (the cross-entropy's mean).
    penalty : float
        ``1 / (C n)``: the L2 weight on the coefficients.
    memory : int
        Curvature pairs kept (at most ``kernels.lbfgs.cuda.MAX_MEMORY``).
    precision : Precision or str
        The products of each shard's evaluation (a
        :class:`~mgpu_dask.kernels.logreg.ShardObjective` precision; ``AUTO``:
        int8 where the rows are levels).
    run_ahead : int or None
        Iterations queued per look at the scalars; None: ``pace.AHEAD_SECONDS`` of
        device work (:class:`.pace.RunAhead`).
    bridge : int or None
        Iterations queued past each look (module docstring); None: ``pace.RunAhead``'s.
    graph : bool
        Capture an iteration as a CUDA graph (see the module's docstring);
        False: launch it op by op (for comparisons).
    scale : float or None
        The objective's rows are ``X * scale`` (uint8 pixels kept 8-bit; see
        ``ShardObjective``); None: ``X``.
    fit_intercept : bool
        False: the intercept's gradient is held at zero after each evaluation, so the
        intercept stays at its start, zero (scikit-learn's ``fit_intercept=False``).
    l1 : float
        The L1 weight on the coefficients; above 0: OWL-QN (:mod:`.owlqn`), same graph.
    bind_loop : bool
        Bind the loop's launches now (waiting for kernels compiled ahead); False: the caller
        binds them (``launches.bind``) or runs a host loop on the evaluations meanwhile.
    """

    def __init__(self, shards: list[tuple[Any, Any]], n_classes: int, n_rows: int,
                 penalty: float, memory: int = 10,
                 precision: Precision | str = Precision.FP32,
                 run_ahead: int | None = None, graph: bool = True,
                 scale: float | None = None, bridge: int | None = None,
                 fit_intercept: bool = True, l1: float = 0.0, bind_loop: bool = True) -> None:
        if not 1 <= memory <= K.MAX_MEMORY:
            raise ValueError(f"memory={memory} must be between 1 and {K.MAX_MEMORY}")
        self._run_ahead, self._bridge = run_ahead, bridge
        self.fit_intercept, self.owlqn = bool(fit_intercept), l1 > 0
        self.gpu = usable(shards)
        self._graph: Any = None
        self.graph_seconds: float | None = None  # host time of the capture
        self.graph_note: str | None = None if graph else "not asked for"
        if self.gpu and graph and not capture_allowed():
            self.graph_note = ("not captured: UCX runs in this process (--protocol ucx), "
                               "and its threads make CUDA calls of their own")
        if not self.gpu:
            self.graph_note = "the simulator launches op by op"
            from numba import config

            if not config.ENABLE_CUDASIM:
                raise ValueError("the device L-BFGS needs CuPy shards (or the CUDA simulator)")
        k, d = int(n_classes), int(shards[0][0].shape[1])
        m, self.shape, self.touched = d * k + k, (d, k), False  # touched: rows evaluated
        if self.gpu:
            import cupy

            xp, self.device = cupy, cupy.cuda.Device()
            self.stream = cupy.cuda.Stream(non_blocking=True)
        else:
            xp, self.device, self.stream = np, None, None
        with self._leader():
            sweep = K.SWEEP if self.gpu else SIMULATOR_THREADS
            # One entry per thread: the sweeps wait on memory side by side, not in a chain
            chunks = max(1, min(K.MAX_CHUNKS, -(-m // sweep)))
            made = buffers(xp, d, k, len(shards), memory, chunks)
            vars(self).update(made)  # self.x, self.g, ... as launches.buffers names them
            self.state = tuple(made.values())
            if self.gpu:
                # The zeros above were queued on the legacy default stream, which a
                # non-blocking stream is not ordered with: done before any kernel reads them.
                cupy.cuda.Stream.null.synchronize()
        # The evaluations first: a first fit compiles their kernels here while side
        # processes compile the loop's (launches.compile_ahead), which launches waits for.
        near = peers.enable(self.device.id, [a[0].device.id for a in shards]) if self.gpu else ()
        self.objectives = [ShardObjective(X, labels, k, precision, scale,
                                          out=(self.params, self.parts[i], self.psums[i])
                                          if self.gpu and X.device.id in near else None,
                                          weights=weights[0] if weights else None)
                           for i, (X, labels, *weights) in enumerate(shards)]
        self._loop = (memory, chunks, sweep, 1.0 / n_rows, float(penalty), float(l1), d * k)
        self._propose_launches, self._trial_blocks = None, -(-m // 256)  # launches.bind's
        with self._leader():
            self._ready = cupy.cuda.Event(disable_timing=True) if self.gpu else None
        if bind_loop:
            bind(self)
        self.scalars = Scalars(self.scal, self.device, self.stream)
        self.fresh_counts()
        self._done = []
        for o in self.objectives if self.gpu else ():
            with o.device:
                self._done.append(cupy.cuda.Event(disable_timing=True))

    def fresh_counts(self) -> None:
        """A fit's counts, pacing and scalars as before its first look (also :mod:`.again`)."""
        self._ahead = RunAhead(self._run_ahead, self._bridge)
        self.evaluations = self.graph_launches = self.bridged = 0  # bridged: queued as bridges
        self._pending = self._done_at = 0  # the live bridge past the last look; DONE there
        self.scalars.reset()

    def reuse(self, shards: list[tuple[Any, Any]]) -> bool:
        """Ready for another fit of the same rows (:func:`.again.ready`); False where
        ``shards`` are not the rows it was made for."""
        return again.ready(self, shards)

    # -- plumbing ---------------------------------------------------------------------------
    def _leader(self) -> Any:
        return self.device if self.device is not None else contextlib.nullcontext()

    def _evaluate(self, counted: bool = True) -> None:
        """Every shard at ``params``; their partial sums land in ``parts`` / ``psums``."""
        self.evaluations += counted
        self.touched = True
        if self.gpu:
            with self.device:
                self._ready.record(self.stream)
            for i, o in enumerate(self.objectives):
                if o.in_place:
                    o.queue(self._ready, self._done[i])
                else:
                    o.queue_from(self.params, self._ready, self.parts[i], self.psums[i],
                                 self._done[i])
            with self.device:
                for event in self._done:
                    self.stream.wait_event(event)
                if not self.fit_intercept:  # on the stream: in the graph, after the shards
                    with self.stream:
                        self.psums[:, : self.shape[1]] = 0.0
            return
        d, k = self.shape
        coef, intercept = self.params[: d * k].reshape(d, k), self.params[d * k:]
        for i, o in enumerate(self.objectives):
            loss, g_coef, g_intercept = o(coef, intercept)
            self.parts[i] = g_coef.ravel()
            self.psums[i, :k] = g_intercept if self.fit_intercept else 0.0
            self.psums[i, k] = loss

    def _finish(self, mode: int) -> None:
        (assemble, _), _ = self._finish_launches
        assemble.set(12, mode)
        with self._leader():
            for launcher, grid in self._finish_launches:
                launcher(grid)

    def _propose(self) -> None:
        """The proposal: its products (with those of a pair the last finish stored),
        the direction and the trial point."""
        with self._leader():
            for launcher, grid in self._propose_launches:
                launcher(grid)

    def _iterate(self) -> None:
        """Queue one iteration: propose, evaluate, finish (one graph launch once captured)."""
        if self._graph is None and self.graph_note is None:
            self._capture()
        if self._graph is not None:
            self.evaluations += 1
            self.graph_launches += 1
            with self.device:
                self._graph.launch(self.stream)
            return
        self._propose()
        self._evaluate()
        self._finish(K.AUTO)

    def _capture(self) -> None:
        """The iteration's launches, captured from the leader's stream (the shards' streams
        join through the events); on failure ``graph_note`` says why and nothing changed."""
        began = time.perf_counter()
        try:
            with self.device:
                self.stream.begin_capture()
                try:
                    self._propose()
                    self._evaluate(counted=False)
                    self._finish(K.AUTO)
                finally:
                    graph = self.stream.end_capture()
            self._graph = graph
        except Exception as exc:  # a driver or CuPy that cannot capture: op by op
            self.graph_note = f"not captured: {type(exc).__name__}: {exc}"
        self.graph_seconds = time.perf_counter() - began

    def _step(self, s: np.ndarray | None = None) -> Step:
        s = self.scalars.read() if s is None else s
        return Step(int(s[K.STATUS]), float(s[K.F]), float(s[K.GMAX]), float(s[K.DECREASE]),
                    float(s[K.SLOPE0]), float(s[K.STEP]), float(s[K.VALUE]), float(s[K.SLOPE]))

    # -- the backend --------------------------------------------------------------------------
    @property
    def graphed(self) -> bool:
        """Whether the iterations ran as one captured CUDA graph each."""
        return self.graph_launches > 0

    @property
    def syncs(self) -> int:
        """Host waits for the device so far in this fit."""
        return self.scalars.syncs

    @property
    def bridge(self) -> int:
        """Iterations queued past each look now (:meth:`.pace.RunAhead.bridge`)."""
        return self._ahead.bridge()

    @property
    def pairs(self) -> int:
        return int(self.scalars.last[K.PAIRS])

    def start(self) -> Step:
        if self.gpu:  # the device time of this first evaluation is the fit's figure
            import cupy

            for o in self.objectives:  # their set-up (levels, buffers) is not the evaluation's
                o.stream.synchronize()
            # Nor is a first touch: the first kernels to read another process's rows (CUDA IPC)
            # take many times an evaluation (run_ahead 1).  One at zero first, not counted,
            # where no evaluation read these rows yet (a kept backend's have been).
            if not self.touched:
                self._evaluate(counted=False)
            with self.device:
                self._timed = (cupy.cuda.Event(), cupy.cuda.Event())
                self._timed[0].record(self.stream)
        self._evaluate()  # at zero: params, x and p start zeroed, scal[STEP] = 0
        if self.gpu:
            with self.device:
                self._timed[1].record(self.stream)
        self._finish(K.INIT)
        return self._step()

    @property
    def launch_note(self) -> str | None:
        """Why the loop's kernels (or a shard's) go through Numba's own launch (GPU only)."""
        return launch_note(self) if self.gpu else None

    def first_evaluation_seconds(self) -> float:
        """Device time of the fit's first evaluation over every shard (CUDA events)."""
        return elapsed(self._timed) if self.gpu and hasattr(self, "_timed") else float("nan")

    @property
    def rounding(self) -> float:
        """The relative rounding of the evaluations' values (:func:`.rules.acceptable`)."""
        return rounding_of([o.precision for o in self.objectives])

    @property
    def run_ahead(self) -> int:
        return self._ahead.value or self._ahead.first(self.first_evaluation_seconds())

    def advance(self, ahead: int, gtol: float, ftol: float,
                more: int = 0) -> tuple[Step, int]:
        """``ahead`` iterations (the last look's bridge first), one read of the scalars and
        a bridge of at most ``more`` iterations queued past it (the module's docstring)."""
        pending = self._pending
        before = self.evaluations - pending  # the bridge's were counted as it was queued
        if not pending:  # nothing queued since the last look: let the proposals run
            self._k_arm.set(1, float(gtol))
            self._k_arm.set(2, float(ftol))
            self._k_arm.set(3, self.rounding)
            with self._leader():
                self._k_arm(1)
        new = max(0, ahead - pending)
        # Timed once the iteration's graph exists (its capture is host time, not theirs).
        span = self._ahead.span(self.device) if self._graph is not None and new else None
        if span is not None:
            span[0].record(self.stream)
        for _ in range(new):
            self._iterate()
        if span is not None:
            span[1].record(self.stream)
        self.scalars.copy()
        # Within what the loop allows: this look may be a last bridge longer than ``ahead``
        bridge = min(self._ahead.bridge(), max(0, ahead + more - max(ahead, pending)))
        for _ in range(bridge):
            self._iterate()
        step = self._step(s := self.scalars.wait())
        done = int(s[K.DONE]) - (self._done_at if pending else 0)
        moving = step.status == K.ACCEPTED and s[K.ACTIVE] != 0.0
        self._pending, self._done_at = (bridge, int(s[K.DONE])) if moving else (0, 0)
        self.bridged += bridge
        # Steps skipped on the device are not evaluations; a live bridge's are counted.
        self.evaluations = before + done + (step.status != K.ACCEPTED) + self._pending
        self._ahead.settle(span, new, done - pending)
        return step, done

    def probe(self, step: float) -> tuple[float, float]:
        self._k_trial.set(4, step)
        with self._leader():
            self._k_trial(self._trial_blocks)
        self._evaluate()
        self._finish(K.PROBE)
        s = self.scalars.read()
        return float(s[K.VALUE]), float(s[K.SLOPE])

    def commit(self) -> Step:
        self._finish(K.COMMIT)
        return self._step()

    def forget(self) -> None:
        with self._leader():
            self._k_forget(1)
        self.scalars.last[K.PAIRS] = 0

    def solution(self) -> np.ndarray:
        if self.gpu:
            with self.device:
                self.stream.synchronize()
                return self.x.get()
        return self.x.copy()

    def close(self) -> None:
        """Let go of the shards (mapped views must have no users) and of the graph."""
        if self.gpu:
            with self.device:
                self.stream.synchronize()
        self._graph = None
        self.objectives.clear()
