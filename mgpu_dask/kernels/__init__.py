"""Numba kernels, CUDA and CPU side by side, with their launch helpers.

Nothing here imports Dask: block functions take arrays and return arrays.
CUDA kernels accept CuPy arrays on a GPU, or NumPy arrays under Numba's CUDA
simulator (``NUMBA_ENABLE_CUDASIM=1``), which is how CI tests them.
"""
