"""What a KNN fit decides before it places the training rows: the precision of the
product, the plan (replicate or shard) from the memory each worker has, and whether its
kernels will compile first (:func:`announce`)."""

from __future__ import annotations

from typing import Any, NamedTuple

import dask.array as da
import numpy as np
from dask.utils import parse_bytes

from .. import config
from ..exceptions import DataError
from ..kernels.knn import floats
from ..kernels.knn import precision as precisions
from ..kernels.precision import Precision
from ..parallel import placement
from ..parallel import inputs
from ..parallel.first_use import announce_compiles
from ..parallel.workers import fixed_facts, free_gpu_memory, gpu_capability, scheduler_workers
from .layout import block_stats


class Choice(NamedTuple):
    """How a fit places its training rows, and why."""

    plan: str                    # "replicate" or "shard"
    precision: Precision         # of the distance product, as it runs
    precision_note: str | None   # why it is not the one asked for
    eight_bit: precisions.EightBit
    memory_budget: int | None    # bytes per worker the plan was chosen against


SMALL_SHARE = 0.01
"""Training rows under this share of the smallest GPU's memory are replicated without
asking the workers how much of it is free (a round trip per fit)."""


def worker_budget(client: Any, device: str, needed: int | None = None) -> int:
    """Bytes one worker may use for the training set and scratch (80% of the smallest);
    with ``needed`` bytes under ``SMALL_SHARE`` of every GPU, 80% of the GPU's memory."""
    import psutil

    if client is None:
        return int(0.8 * psutil.virtual_memory().available)
    if device == "gpu":
        whole = [f.gpu_bytes for f in fixed_facts(client).values()]
        if needed is not None and whole and None not in whole and \
                needed <= SMALL_SHARE * min(whole):
            return int(0.8 * min(whole))
        return int(0.8 * min(free_gpu_memory(client)))
    limits = [w.get("memory_limit") or 0 for w in scheduler_workers(client).values()]
    return int(0.8 * min((x for x in limits if x), default=psutil.virtual_memory().total))


def capability(client: Any, device: str) -> tuple[int, int] | None:
    """The smallest compute capability of the workers' GPUs; None on CPU."""
    if device != "gpu":
        return None
    if client is None:
        return gpu_capability()
    found = [f.capability for f in fixed_facts(client).values() if f.capability is not None]
    return min(found) if found else min(client.run(gpu_capability).values())


def eight_bit(X: Any) -> precisions.EightBit:
    """Whether the training rows are 8-bit integers (by dtype, else by their values)."""
    if X.dtype in (np.uint8, np.int8):
        return precisions.eight_bit_of(X.dtype)
    if not isinstance(X, da.Array):
        return precisions.eight_bit_of(X.dtype, *precisions.eight_bit_stats(inputs.as_numpy(X)))
    stats = inputs.to_host(placement.map_blocks(inputs.active_client(), block_stats, X,
                                                name=placement.fresh_name("knn-range"),
                                                chunks=((1,) * X.numblocks[0], (3,)),
                                                meta=np.empty((0, 0))))
    return precisions.eight_bit_of(X.dtype, float(stats[:, 0].min()), float(stats[:, 1].max()),
                                   bool(stats[:, 2].all()))


def bytes_per_value(precision: Precision, exact: bool, method: str) -> int:
    """Bytes a worker keeps per training value (operand plus exact rows where needed; a
    float16 operand in three parts, :mod:`mgpu_dask.kernels.knn.floats`)."""
    if method == "direct":
        return 4
    operand = {Precision.INT8: 1, Precision.BF16: 2, Precision.FP16: 6}.get(precision, 4)
    return operand + (0 if exact else 4)


def choose(X: Any, client: Any, device: str, *, plan: str, precision: str, method: str,
           memory_budget: int | str | None, metric: str = "euclidean") -> Choice:
    """The plan and precision for training rows ``X`` on ``client``'s workers (or here).

    ``plan="auto"`` replicates when the rows fit the per-worker memory budget,
    except rows already persisted on the workers above
    ``mgpu-dask.knn.replicate-max-move``: those stay where they are, sharded.
    A sharded set that does not fit even then is a DataError.
    """
    # 8-bit rows keep exact integer keys under a distance; an inner product is not shift
    # invariant, so its rows go as float data.
    eight = precisions.EightBit(False, 0) if floats.inner(metric) else eight_bit(X)
    requested = Precision.parse(precision)
    try:
        chosen, note = precisions.choose(requested, eight.exact, capability(client, device))
    except ValueError as exc:
        raise DataError(str(exc)) from None
    if method == "direct" and chosen is not Precision.FP32:
        if requested is not Precision.AUTO:
            note = (f"method='direct' computes its differences in float32: precision "
                    f"{requested} does not apply")
        chosen = Precision.FP32
    train_bytes = int(X.shape[0]) * int(X.shape[1]) * bytes_per_value(chosen, eight.exact, method)
    budget = parse_bytes(memory_budget) if memory_budget else None
    if plan == "auto":
        budget = budget or worker_budget(client, device, train_bytes)
        # Rows already spread over the workers (generated there) stay put
        # when copying them to every worker would move gigabytes.
        moving = (isinstance(X, da.Array) and client is not None
                  and X.nbytes > parse_bytes(config.get("knn.replicate-max-move"))
                  and placement.locate(client, X) is not None)
        plan = "replicate" if train_bytes <= budget and not moving else "shard"
    if plan == "shard" and (memory_budget or budget):
        budget = budget or worker_budget(client, device)
        n_workers = len(scheduler_workers(client)) if client else 1
        if train_bytes / n_workers > budget:
            raise DataError(
                f"the training set ({train_bytes / 2**30:.2f} GiB in {chosen}) does not "
                f"fit {n_workers} worker(s) x {budget / 2**30:.2f} GiB memory budget even "
                "when sharded; add workers (GPUs), raise --memory-budget or use a smaller "
                "--fraction")
    return Choice(plan, chosen, note, eight, budget)


def announce(X: Any, choice: Choice, device: str, model: Any, client: Any) -> None:
    """Warn before a fit and search whose kernels are not in the workers' cache
    (``first_use``): their kind as ``warmup.Search`` has it (8-bit values search as 8-bit
    rows, whatever their dtype)."""
    dtype, d = np.dtype(X.dtype).name, int(X.shape[1])
    fields = {
        "gpu": device == "gpu", "n_features": d,
        "dtype": "uint8" if choice.eight_bit.exact else dtype,
        "precision": choice.precision.value, "method": model.method, "k": model.n_neighbors,
        "margin": model.margin, "weights": model.weights, "merge": choice.plan == "shard"}
    if announce_compiles("knn", f"{dtype} rows of {d} features", fields, client,
                         stacklevel=4) and device == "gpu":  # the user's line: 4 frames up
        compile_ahead_on_hosts(client, fields)


def compile_ahead_on_hosts(client: Any, fields: dict[str, Any]) -> None:
    """Have one worker of each host (this process, with no client) start compiling the
    first predict's kernels beside the fit (``knn.ahead``); a failure says nothing (the
    predict compiles what it needs)."""
    from ..parallel.by_name import WorkerFunction

    try:
        if client is None:
            from .ahead import compile_ahead

            compile_ahead(**fields)
            return
        from distributed.comm import get_address_host

        one_each: dict[str, str] = {}
        for w in sorted(client.nthreads()):
            one_each.setdefault(get_address_host(w), w)
        client.run(WorkerFunction("mgpu_dask.knn.ahead.compile_ahead"),
                   workers=list(one_each.values()), **fields)
    except Exception:  # noqa: BLE001 - compiling ahead never stops a fit
        pass
