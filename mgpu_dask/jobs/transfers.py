"""Bytes moved between workers, per phase, from Dask's own transfer records.

Every worker logs each transfer it receives from another worker
(``Worker.transfer_incoming_log``: when, how many bytes, from whom), and each
query block or set of candidates it has from another worker in a straight KNN
predict, which Dask does not see (:data:`mgpu_dask.knn.exchange.RECEIVED`).  After a
job one message collects those logs, and each transfer counts in the phase
whose wall-clock span holds its midpoint.  Rows sent by the client (sharding)
are not worker-to-worker transfers and do not appear here.
"""

from __future__ import annotations

from typing import Any

from .phases import Phases


def _incoming(dask_worker: Any) -> list[tuple[float, int]]:
    from ..knn import exchange  # on the worker: the client's first imports stay light

    return [(float(e["middle"]), int(e["total"])) for e in dask_worker.transfer_incoming_log] + [
        (float(when), int(size)) for when, size in list(exchange.RECEIVED)]


def _phase_of(when: float, windows: dict[str, list[tuple[float, float]]]) -> str | None:
    for name, spans in windows.items():
        if any(start <= when <= stop for start, stop in spans):
            return name
    return None


def by_phase(client: Any, cold: Phases, warm: list[Phases],
             repeats: int | None = None) -> dict[str, Any]:
    """``{"cold": {phase: bytes}, "warm per repetition": {phase: bytes}, "elsewhere": bytes}``.

    ``cold`` holds the cold phases, ``warm`` the warm repetitions' phases
    (summed by name, then divided by ``repeats``, default ``len(warm)``).
    """
    logs = client.run(_incoming, on_error="return")
    entries = [e for log in logs.values() if isinstance(log, list) for e in log]
    warm_windows: dict[str, list[tuple[float, float]]] = {}
    for phases in warm:
        for name, spans in phases.windows.items():
            warm_windows.setdefault(name, []).extend(spans)
    out_cold = {name: 0 for name in cold.windows}
    out_warm = {name: 0 for name in warm_windows}
    elsewhere = 0
    for middle, total in entries:
        name = _phase_of(middle, cold.windows)
        if name is not None:
            out_cold[name] += total
            continue
        name = _phase_of(middle, warm_windows)
        if name is not None:
            out_warm[name] += total
        else:
            elsewhere += total
    repeats = max(1, repeats or len(warm))
    return {"cold": out_cold,
            "warm per repetition": {k: v // repeats for k, v in out_warm.items()},
            "elsewhere": elsewhere}


def human(n: int) -> str:
    """``1234567`` -> ``"1.2 MB"``."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"
