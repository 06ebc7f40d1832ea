"""Wall-clock phases, printed as they finish so long runs show progress."""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Callable, Iterator


class Phases:
    """Ordered ``name -> seconds``; ``with phases("transfer"): ...`` times one phase.

    Parameters
    ----------
    echo : callable or None, default None
        Called with a one-line progress message when a phase starts and ends.
    """

    def __init__(self, echo: Callable[[str], None] | None = None) -> None:
        self.seconds: dict[str, float] = {}
        self.windows: dict[str, list[tuple[float, float]]] = {}  # wall-clock spans of each
        self._echo = echo

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        if self._echo:
            self._echo(f"  {name} ...")
        started, wall = time.perf_counter(), time.time()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started
            self.windows.setdefault(name, []).append((wall, time.time()))
            if self._echo:
                self._echo(f"  {name}: {self.seconds[name]:.3f} s")

    def record(self, name: str, seconds: float, window: tuple[float, float]) -> None:
        """A phase timed elsewhere (on another thread, or from before this table): its
        seconds and wall-clock window, echoed as the phases timed here are."""
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds
        self.windows.setdefault(name, []).append(window)
        if self._echo:
            self._echo(f"  {name}: {self.seconds[name]:.3f} s")

    def total(self, names: list[str] | None = None) -> float:
        return sum(v for k, v in self.seconds.items() if names is None or k in names)


def stderr_echo(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
