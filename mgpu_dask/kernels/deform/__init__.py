"""Deformed copies of square images, made where they will live: an integer CUDA kernel
(:mod:`.cuda`) and its bit-identical CPU twin (:func:`.rows.deform_rows`), with the
bounds of the random deformations (:mod:`.params`, importable without Numba)."""
