"""Compile CUDA C with NVRTC through ctypes: no GPU and no CUDA driver needed, so CI on
CPU machines checks that our .cu sources compile (``pip install nvidia-cuda-nvrtc``)."""

from __future__ import annotations

import ctypes
import glob
import os
import sys


def library_path() -> str | None:
    """libnvrtc from an nvidia-cuda-nvrtc wheel on sys.path, or None."""
    for root in sys.path:
        for pattern in ("nvidia/cu*/lib/libnvrtc.so*", "nvidia/cuda_nvrtc/lib/libnvrtc.so*"):
            found = sorted(p for p in glob.glob(os.path.join(root, pattern))
                           if "builtins" not in p)
            if found:
                return found[0]
    return None


def _load(path: str) -> ctypes.CDLL:
    """libnvrtc at ``path``, its builtins library loaded first from the same folder: NVRTC
    opens that one by name when it compiles, and a wheel's folder is not on the loader's
    path (PyTorch's CUDA 13 wheels bring NVRTC in ``nvidia/cu13/lib``)."""
    folder = os.path.dirname(path)
    for builtins in sorted(glob.glob(os.path.join(folder, "libnvrtc-builtins.so*"))):
        if ".alt." not in builtins:
            ctypes.CDLL(builtins, mode=ctypes.RTLD_GLOBAL)
            break
    return ctypes.CDLL(path)


def compile_source(source: str, name: str, options: list[str]) -> tuple[bool, str, bytes]:
    """``(compiled, log, ptx)`` of one source under ``options``."""
    lib = _load(library_path())
    prog = ctypes.c_void_p()
    rc = lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None)
    if rc:
        raise RuntimeError(f"nvrtcCreateProgram failed ({rc})")
    try:
        opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
        compiled = lib.nvrtcCompileProgram(prog, len(options), opts) == 0
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, log)
        ptx = b""
        if compiled:
            lib.nvrtcGetPTXSize(prog, ctypes.byref(size))
            buf = ctypes.create_string_buffer(size.value)
            lib.nvrtcGetPTX(prog, buf)
            ptx = buf.raw
        return compiled, log.value.decode(errors="replace"), ptx
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
