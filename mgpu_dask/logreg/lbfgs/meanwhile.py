"""A device fit's evaluations driven by the host's L-BFGS while the loop's kernels compile.

A machine's first device fit has its loop's Numba kernels compiled in side processes
(:func:`.launches.compile_ahead`): seconds that would otherwise pass after the fit's
evaluations are ready, waiting for them.  Meanwhile those same evaluations -- the
backend's own, on every shard's GPU, written where the loop's kernels would read them
-- serve the host's L-BFGS (the same :func:`.loop.run` with its host backend: the same
stopping rules, OWL-QN with an L1 part).  The host reads the summed gradient once per
evaluation, which costs far less than the compile it does not wait for.  One fit of a
process runs so; the next binds the loop (:func:`.launches.bind`), waiting for what is
left of the compile.
"""

from __future__ import annotations

from typing import Any

import numpy as np

NOTE = ("the L-BFGS ran on the host this once, while its GPU kernels compile (a first fit "
        "on this machine); later fits run it on the GPU")


def evaluate(backend: Any, coef: np.ndarray, intercept: np.ndarray,
             ) -> tuple[float, np.ndarray, np.ndarray]:
    """Every shard of ``backend`` (a :class:`.device.DeviceBackend`) at ``coef`` (d x k) and
    ``intercept``: the summed loss, coefficient gradient and intercept gradient on the host,
    summed over the shards in their order (float64), as the loop's ``assemble`` sums them."""
    d, k = backend.shape
    flat = np.concatenate([np.ravel(coef), np.ravel(intercept)]).astype(np.float32)
    if backend.gpu:
        with backend.device:
            backend.params.set(flat, stream=backend.stream)
        backend._evaluate()
        with backend.device:
            parts = backend.parts.get(stream=backend.stream)
            psums = backend.psums.get(stream=backend.stream)
    else:
        backend.params[...] = flat
        backend._evaluate()
        parts, psums = backend.parts, backend.psums
    gradient = np.zeros(d * k)
    for shard in parts:
        gradient += shard
    return float(psums[:, k].sum()), gradient.reshape(d, k), psums[:, :k].sum(axis=0)
