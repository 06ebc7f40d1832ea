"""The arithmetic of a product, named once for both estimators."""

from __future__ import annotations

from enum import Enum


class Precision(str, Enum):
    """Operands and accumulation of a matrix product on a GPU.

    ``AUTO`` asks the estimator to choose; the others name what runs:
    ``INT8`` (int8 tensor cores, exact int32 sums), ``BF16`` (bfloat16 tensor
    cores, float32 sums), ``FP16`` (float16 tensor cores, float32 sums),
    ``TF32`` (tf32 tensor cores) and ``FP32`` (float32 CUDA cores).  A member compares equal to its value (``Precision.INT8 ==
    "int8"``) and is written as it in JSON and text.
    """

    AUTO = "auto"
    INT8 = "int8"
    BF16 = "bf16"
    FP16 = "fp16"
    TF32 = "tf32"
    FP32 = "fp32"

    def __str__(self) -> str:
        return self.value

    def __hash__(self) -> int:  # as its value's, since it compares equal to it
        return str.__hash__(self)

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @property
    def needs(self) -> tuple[int, int]:
        """The compute capability (major, minor) whose tensor cores this precision needs."""
        return NEEDS[self]

    @classmethod
    def parse(cls, value: "str | Precision", allowed: "tuple[Precision, ...] | None" = None
              ) -> "Precision":
        """``value`` as a member; ValueError naming the choices for anything else."""
        choices = allowed or tuple(cls)
        try:
            found = cls(value)
        except ValueError:
            found = None
        if found is None or found not in choices:
            raise ValueError(f"precision={value!r} must be one of "
                             f"{', '.join(p.value for p in choices)}")
        return found


NEEDS = {Precision.AUTO: (0, 0), Precision.INT8: (7, 5), Precision.BF16: (8, 0),
         Precision.FP16: (7, 0), Precision.TF32: (8, 0), Precision.FP32: (0, 0)}
