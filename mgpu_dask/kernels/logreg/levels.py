"""Rows of 8-bit levels: values that are integer multiples of one step, as pixels / 255
are, which the tensor-core evaluations take exactly (:mod:`.int8`, :mod:`.bf16`)."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ..launch import array_module, bound_launch, on_gpu


def level_step(X: Any) -> float:
    """The step of 8-bit levels the rows would be (``max|X| / 255``; 1 for all-zero rows);
    whether they are is ``cuda_bf16.to_levels``'s check."""
    xp = array_module(X)
    top = float(xp.maximum(xp.abs(X.max()), xp.abs(X.min())))
    return top / 255.0 if top > 0 else 1.0


def level_steps(X: Any, scale: float | None = None) -> tuple[float, float]:
    """``(to levels, of the rows)``: the step that turns ``X`` into integer levels, and the
    step of those levels in the rows ``X * scale`` that the objective sees.  uint8 rows are
    their own levels (no pass over them: 1 and ``scale``); others ``level_step``'s."""
    if X.dtype == np.uint8:
        return 1.0, float(scale or 1.0)
    step = level_step(X)
    return step, step * float(scale or 1.0)


def scaled_rows(X: Any, scale: float | None = None) -> Any:
    """The rows the objective sees, float32 in ``X``'s array module: ``X * scale`` (a new
    array), or ``X`` itself where it is float32 and unscaled."""
    xp = array_module(X)
    rows = xp.asarray(X, dtype=np.float32)
    if scale is not None:
        rows = rows * np.float32(scale)
    return rows


def converted_levels(device: Any, kernel: Any, x: Any, step: float, out: Any) -> bool:
    """Run a level conversion ``kernel(x, inv_step, out, bad)`` (``cuda_bf16.to_levels``,
    ``to_int8_levels``) over the CuPy rows ``x`` on ``device`` (current), on the current
    stream, grid-stride over at most 32 blocks of 256 threads per SM; whether every value
    was a level the kernel takes (one wait for its flag)."""
    import cupy

    bad = cupy.zeros(1, dtype=np.int32)
    sms = device.attributes["MultiProcessorCount"]
    bound_launch(kernel, [x, cupy.asarray([1.0 / step]), out, bad],
                 (min(-(-int(x.size) // 256), 32 * sms),), 256, cupy.cuda.get_current_stream())()
    return not int(bad.get()[0])


class Levels(NamedTuple):
    """Rows of 8-bit levels as the int8 products take them (``int8.levels``):
    ``X = step * (v + 128)`` for the first ``n`` rows and ``d`` columns of ``v`` (int8,
    padded with zeros), ``vt`` its transpose or None where it is not made (the evaluation
    that reads it makes it, ``int8.transposed``; the one-pass evaluation reads v alone).
    Made where the rows live (a peer worker exports these instead of X: a quarter of
    float32's bytes, and its GPU does the conversion)."""

    v: Any
    vt: Any
    step: float
    n: int
    d: int

    @property
    def shape(self) -> tuple[int, int]:
        return self.n, self.d

    @property
    def device(self) -> Any:
        return self.v.device

    def rows(self) -> Any:
        """X again, float32 (exact: levels times the step), for paths that need X."""
        with self.v.device:
            return ((self.v[: self.n, : self.d].astype(np.float32) + 128)
                    * np.float32(self.step))


def rows_on_gpu(X: Any) -> bool:
    """Whether ``X`` (an array or :class:`Levels`) lives on a GPU."""
    return on_gpu(X.v if isinstance(X, Levels) else X)
