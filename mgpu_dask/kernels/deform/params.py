"""The settings of a deformation (pure Python: no Numba, so the client parses and checks
them without importing the kernels of :mod:`mgpu_dask.kernels.deform`)."""

from __future__ import annotations

import math
from typing import NamedTuple

Q14 = 16384  # the kernels' fixed point for angles, scale and shear


class Deformation(NamedTuple):
    """How far a copy may move from its source image (all drawn uniformly)."""

    shift: float = 2.0      # pixels, each axis
    rotate: float = 12.0    # degrees
    scale: float = 0.10     # relative, isotropic
    shear: float = 0.15     # x shear per unit y
    elastic: float = 1.25   # pixels, at each elastic control point

    def integer_args(self) -> tuple[int, int, int, int, int]:
        """The kernels' fixed-point bounds: shift and elastic in Q8, the rest in Q14."""
        tan_half = math.tan(math.radians(self.rotate) / 2)
        return (int(round(self.shift * 256)), int(round(tan_half * Q14)),
                int(round(self.scale * Q14)), int(round(self.shear * Q14)),
                int(round(self.elastic * 256)))


LIMITS = {"shift": (0.0, 6.0), "rotate": (0.0, 45.0), "scale": (0.0, 0.5), "shear": (0.0, 0.6),
          "elastic": (0.0, 4.0)}
"""Allowed range of each setting (a copy must stay a recognisable digit)."""


def parse_deformation(text: str | None) -> Deformation:
    """``"shift=2,rotate=12"`` -> Deformation; ValueError naming what is wrong."""
    values: dict[str, float] = {}
    for item in filter(None, (text or "").split(",")):
        key, _, value = item.partition("=")
        key = key.strip()
        if key not in LIMITS:
            raise ValueError(f"unknown deformation setting {key!r}; use "
                             f"{', '.join(f'{k}=' for k in LIMITS)} (e.g. shift=2,rotate=12)")
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"deformation setting {key}={value!r} is not a number") from None
        low, high = LIMITS[key]
        if not low <= number <= high:
            raise ValueError(f"deformation setting {key}={number:g} is outside [{low:g}, {high:g}]")
        values[key] = number
    return Deformation(**values)
