"""A picture of what a data set trains on: source images beside their deformed copies."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..kernels.deform.params import Deformation
from ..kernels.deform.rows import deform_rows
from .files import atomic_file


def preview_png(path: str | Path, images: np.ndarray, *, copies: int = 6, seed: int = 0,
                deformation: Deformation | None = Deformation()) -> Path:
    """Write a PNG grid: one row per source image, copy 0 (the image) then ``copies - 1`` more.

    ``deformation=None`` shows the images alone (a data set without deformations).
    The file appears whole or not at all.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    images = np.ascontiguousarray(images, dtype=np.uint8)
    n, side = len(images), int(round(math.sqrt(images.shape[1])))
    columns = copies if deformation is not None else 1
    grid = [images]
    if deformation is not None:
        grid = [deform_rows(images, c * n, n, seed, deformation) for c in range(columns)]
    fig, axes = plt.subplots(n, columns, figsize=(1.1 * columns, 1.1 * n), squeeze=False)
    for c in range(columns):
        for i in range(n):
            axes[i, c].imshow(grid[c][i].reshape(side, side), cmap="gray_r", vmin=0, vmax=255)
            axes[i, c].set_xticks([])
            axes[i, c].set_yticks([])
        axes[0, c].set_title("image" if c == 0 else f"copy {c}", fontsize=8)
    fig.tight_layout()
    try:
        with atomic_file(path) as tmp:
            fig.savefig(tmp, format="png", dpi=80)
    finally:
        plt.close(fig)
    return Path(path)
