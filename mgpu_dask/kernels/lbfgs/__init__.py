"""Numba CUDA kernels of the device-resident L-BFGS (:mod:`.cuda`) and the step rules it
shares with the host loop (:mod:`.rules`)."""
