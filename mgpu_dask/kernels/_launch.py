"""Small helpers shared by the kernel modules: array module, allocation, grids."""

from __future__ import annotations

import math
from types import ModuleType
from typing import Any

import numpy as np

def array_module(x: Any) -> ModuleType:
    """``cupy`` for CuPy arrays, ``numpy`` otherwise (never imports CuPy needlessly)."""
    if type(x).__module__.startswith("cupy"):
        import cupy

        return cupy
    return np


def on_gpu(x: Any) -> bool:
    return type(x).__module__.startswith("cupy")


def thread_grid(n_rows: int, threads: int = 128) -> tuple[int, int]:
    """Grid for kernels that give each row one thread."""
    return max(1, math.ceil(n_rows / threads)), threads
