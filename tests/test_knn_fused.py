"""The fused int8 KNN search (``kernels/knn/fused``): when it runs, how it splits the
work, and -- on a GPU -- that it finds exactly the brute-force neighbours."""

from __future__ import annotations

import os
import re
from importlib import resources

import numpy as np
import pytest

from mgpu_dask.kernels import cuda_source
from mgpu_dask.kernels.knn import fused
from mgpu_dask.kernels.precision import Precision


def _defines() -> dict[str, int]:
    text = resources.files("mgpu_dask.kernels.knn").joinpath("fused.cu").read_text()
    return {name: int(value) for name, value in
            re.findall(r"^#define (\w+) (-?\d+)\b", text, flags=re.MULTILINE)}


def test_source_ships_and_agrees_with_the_python_side():
    """The constants both sides use to size the blocks and shared memory are the same, and
    the block shape Python passes in is the source's default."""
    d = _defines()
    assert (d["BM"], d["BK"], d["THREADS"], d["QCAP"], d["LK"]) == (
        fused.ROWS, fused.STAGE_BYTES, fused.THREADS, fused.QUEUE, fused.MAX_K)
    assert (d["BN"], d["STAGES"], d["MIN_BLOCKS"]) == (fused.COLS, fused.STAGES, fused.MIN_BLOCKS)
    assert fused.COLS % 64 == 0


def test_shared_memory_fits_the_gpus_it_is_meant_for():
    """Lists of any K fit an A100's 163 KiB per block, and k up to 16 a consumer
    Ampere or Ada GPU's 99 KiB; longer lists take more."""
    assert fused.MMA_SYNC.shared_bytes(fused.MAX_K, 784) <= 163 * 1024
    assert fused.MMA_SYNC.shared_bytes(16, 784) <= 99 * 1024
    assert fused.MMA_SYNC.shared_bytes(2, 784) < fused.MMA_SYNC.shared_bytes(3, 784)
    # Hopper: the streamed build's deeper ring still leaves two blocks an SM (228 KiB, 1 KiB
    # reserved each) at k=3, and MNIST's query rows stay resident with lists of 3 or 10
    assert 2 * (fused.WGMMA_STREAMED.shared_bytes(3, 784) + 1024) <= 228 * 1024
    assert fused.WGMMA_RESIDENT.shared_bytes(10, 784) <= 227 * 1024
    assert fused.WGMMA_TMA.shared_bytes(10, 784) <= 227 * 1024
    assert fused.WGMMA_TMA.shared_bytes(3, 784) == fused.WGMMA_RESIDENT.shared_bytes(3, 784) + (
        (fused.WGMMA_TMA.stages - fused.WGMMA_RESIDENT.stages) * fused.COLS * 64
        + 16 * fused.WGMMA_TMA.stages)
    assert fused.WGMMA_RESIDENT.shared_bytes(3, 784) < fused.WGMMA_RESIDENT.shared_bytes(3, 840)


@pytest.mark.parametrize("start_tiles", [fused.START_TILES, fused.WGMMA_TMA.start_tiles])
@pytest.mark.parametrize("query_blocks, tiles, sms", [
    (1, 1, 132), (137, 410, 132), (547, 1640, 132), (137, 63574, 132), (3, 7, 108),
    (1000, 5, 264), (2, 500, 264)])
def test_splits_fill_the_gpu_without_empty_splits(query_blocks, tiles, sms, start_tiles):
    s = fused.splits(query_blocks, tiles, sms, start_tiles)
    assert 1 <= s <= min(tiles, fused.MAX_SPLITS)
    per = -(-tiles // s)
    assert (s - 1) * per < tiles  # no split is left without a tile
    if query_blocks < sms and tiles >= sms:  # a lone wave of few blocks would idle most SMs
        assert query_blocks * s >= 0.9 * sms   # (short of all: as many tiles per split)


def test_a_slower_block_start_takes_fewer_longer_splits():
    """MNIST's 137 query blocks over 411 tiles of training rows on 132 SMs: the TMA build's
    blocks start slower, so its search splits the rows fewer times."""
    assert fused.WGMMA_TMA.start_tiles > fused.START_TILES == fused.WGMMA_RESIDENT.start_tiles
    tma = fused.splits(137, 411, 132, fused.WGMMA_TMA.start_tiles)
    assert tma < fused.splits(137, 411, 132)
    assert -(-411 // tma) > 2 * fused.WGMMA_TMA.start_tiles  # each split long beside its start


@pytest.fixture
def device(monkeypatch):
    """Pretend to be a GPU: (opt-in shared memory, SMs, compute capability)."""
    def pretend(optin=227 * 1024, capability=(9, 0)):
        monkeypatch.setattr(fused, "_device", lambda: (optin, 132, capability))
    pretend()
    return pretend


def test_usable_only_for_int8_products_of_8bit_data(device):
    assert fused.usable_for(3, Precision.INT8, True, "gemm", 784)
    assert not fused.usable_for(3, Precision.BF16, True, "gemm", 784)
    assert not fused.usable_for(3, Precision.INT8, False, "gemm", 784)
    assert not fused.usable_for(3, Precision.INT8, True, "direct", 784)
    assert not fused.usable_for(0, Precision.INT8, True, "gemm", 784)
    assert not fused.usable_for(fused.MAX_K + 1, Precision.INT8, True, "gemm", 784)
    assert not fused.usable_for(3, Precision.INT8, True, "gemm", 50_000)  # keys past int32


def test_usable_needs_ampere_and_the_shared_memory(device):
    device(capability=(7, 5))
    assert not fused.usable_for(3, Precision.INT8, True, "gemm", 784)
    device(capability=(8, 0), optin=fused.MMA_SYNC.shared_bytes(10, 784))
    assert fused.usable_for(10, Precision.INT8, True, "gemm", 784)
    assert not fused.usable_for(11, Precision.INT8, True, "gemm", 784)
    # Hopper's rings are deeper
    device(capability=(9, 0), optin=fused.MMA_SYNC.shared_bytes(10, 784))
    assert not fused.usable_for(10, Precision.INT8, True, "gemm", 784)
    device(capability=(9, 0), optin=fused.WGMMA_STREAMED.shared_bytes(10, 784))
    assert fused.usable_for(10, Precision.INT8, True, "gemm", 784)


@pytest.mark.parametrize("capability", [(8, 0), (8, 9), (10, 0), (12, 0)])
def test_wgmma_only_on_hopper(capability):
    """wgmma is sm_90a's alone: Ampere, Ada and Blackwell run the mma.sync build."""
    assert fused.build_for(3, 784, capability, 227 * 1024) == fused.MMA_SYNC
    assert "-DWGMMA" not in fused.MMA_SYNC.options()


def test_each_build_has_its_own_name_for_the_runs_json():
    labels = {b.label for b in (fused.MMA_SYNC, fused.WGMMA_STREAMED, fused.WGMMA_RESIDENT,
                                fused.WGMMA_TMA)}
    assert len(labels) == 4 and all(label.startswith("fused, ") for label in labels)


def test_hopper_keeps_the_query_rows_where_they_fit():
    """The TMA build where the block's query rows fit beside its deeper ring and the
    lists; else the resident build's shorter ring; else the streamed one; else none."""
    optin = 227 * 1024
    assert fused.build_for(3, 784, (9, 0), optin) == fused.WGMMA_TMA
    assert fused.build_for(10, 784, (9, 0), optin) == fused.WGMMA_TMA
    assert fused.build_for(32, 784, (9, 0), optin) == fused.WGMMA_RESIDENT
    assert fused.build_for(fused.MAX_K, 784, (9, 0), optin) == fused.WGMMA_STREAMED
    assert fused.build_for(3, 2048, (9, 0), optin) == fused.WGMMA_STREAMED
    assert fused.build_for(3, 784, (9, 0), 64 * 1024) is None
    assert all(o in fused.WGMMA_RESIDENT.options() for o in ("-DWGMMA", "-DRESIDENT", "-arch=sm_90a"))
    assert "-DRESIDENT" not in fused.WGMMA_STREAMED.options()
    assert "-DTMA" in fused.WGMMA_TMA.options() and "-DTMA" not in fused.WGMMA_RESIDENT.options()
    assert fused.WGMMA_TMA.threads == fused.THREADS + 32 and fused.WGMMA_RESIDENT.threads == 256


# --- on a GPU --------------------------------------------------------------------------


def _gpu():
    cupy = pytest.importorskip("cupy")
    from mgpu_dask.config.environment import has_gpu

    if not has_gpu() or os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        pytest.skip("needs a CUDA GPU (not the simulator)")
    return cupy


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, d, k, levels", [
    (1, 1, 1, 1, 256), (5, 7, 16, 3, 256), (130, 300, 17, 3, 4), (257, 1000, 100, 10, 256),
    (129, 777, 64, 64, 3), (1000, 3000, 48, 16, 2), (64, 600, 784, 5, 256),
    (17, 20000, 33, 7, 256), (300, 4, 784, 9, 256)])
def test_fused_search_finds_the_brute_force_neighbours(m, n, d, k, levels):
    """Exact int64 distances, ties to the smaller training row; few levels make many ties,
    and shapes off every multiple of the block's."""
    cupy = _gpu()
    from mgpu_dask.kernels.knn import local_candidates
    from mgpu_dask.kernels.knn.operands import prepare_train

    rng = np.random.default_rng(m * 7 + n)
    Q = rng.integers(0, levels, (m, d)).astype(np.uint8)
    T = rng.integers(0, levels, (n, d)).astype(np.uint8)
    y = rng.integers(0, 10, n).astype(np.int32)
    train = prepare_train(cupy.asarray(T), "int8", True, 128)
    cand = cupy.asnumpy(local_candidates(cupy.asarray(Q), train, cupy.asarray(y),
                                         cupy.arange(n, dtype=np.int64), k))
    loop = next(iter(train.loops.values()))
    assert loop.fused is not None and loop.kind == loop.fused.build.label
    diff = Q[:, None, :].astype(np.int64) - T[None].astype(np.int64)
    dist = (diff * diff).sum(-1)
    order = np.argsort(dist, axis=1, kind="stable")[:, :k]
    kk = min(k, n)
    np.testing.assert_array_equal(cand[:, :kk, 1], order)
    np.testing.assert_array_equal(cand[:, :kk, 0], np.sqrt(np.take_along_axis(dist, order, 1)))
    np.testing.assert_array_equal(cand[:, :kk, 2], y[order])
    assert (cand[:, kk:, 1] == -1).all() and np.isinf(cand[:, kk:, 0]).all()


@pytest.mark.gpu
def test_fused_search_equals_the_tile_loop(monkeypatch):
    """The same candidates as the cuBLAS product and scan on the same int8 operands, a
    second search of the same size included (its buffers are reused)."""
    cupy = _gpu()
    from mgpu_dask.kernels.knn import local_candidates
    from mgpu_dask.kernels.knn.operands import prepare_train

    rng = np.random.default_rng()
    T = cupy.asarray(rng.integers(0, 256, (9000, 784)).astype(np.uint8))
    y = cupy.asarray(rng.integers(0, 10, 9000).astype(np.int32))
    index = cupy.arange(9000, dtype=np.int64)
    train = prepare_train(T, "int8", True, 128)
    searches = [cupy.asarray(rng.integers(0, 256, (700, 784)).astype(np.uint8)) for _ in range(2)]
    got = [cupy.asnumpy(local_candidates(Q, train, y, index, 3)) for Q in searches]
    monkeypatch.setattr(fused, "usable", lambda *a: False)
    tiles = prepare_train(T, "int8", True, 128)
    want = [cupy.asnumpy(local_candidates(Q, tiles, y, index, 3)) for Q in searches]
    assert next(iter(tiles.loops.values())).fused is None
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype, precision, capability, scan", [
    ("uint8", "auto", (9, 0), False), ("uint8", "int8", (8, 0), False),
    ("uint8", "bf16", (9, 0), True), ("uint8", "auto", (7, 5), True),
    ("float32", "auto", (9, 0), False), ("float32", "fp32", (9, 0), True),
    ("float32", "auto", (7, 5), True)])
def test_warm_up_compiles_the_scan_only_where_the_search_is_not_fused(
        device, monkeypatch, dtype, precision, capability, scan):
    """What a worker's warm-up (and its check of Numba's cache) counts on: the scan kernel
    where the search runs the tile loop, none where it runs fused (8-bit rows' int8
    operands, float rows' float16 ones)."""
    from mgpu_dask.knn import warmup

    device(capability=capability)
    monkeypatch.setattr(warmup, "gpu_capability", lambda: capability)
    search = warmup.Search(gpu=True, dtype=dtype, n_features=784, precision=precision,
                           method="gemm", k=3, margin=8, weights="distance", merge=False)
    names = [kernel.__name__ if hasattr(kernel, "__name__") else str(kernel)
             for kernel in warmup._kernels(search)]
    assert any(name.startswith("scan_tile") for name in names) == scan


BUILDS = {"mma.sync": fused.MMA_SYNC, "wgmma streamed": fused.WGMMA_STREAMED,
          "wgmma resident": fused.WGMMA_RESIDENT, "wgmma TMA": fused.WGMMA_TMA}


@pytest.mark.parametrize("arch, build", [("compute_80", "mma.sync"), ("compute_90", "mma.sync"),
                                         ("sm_90", "wgmma streamed"), ("sm_90", "wgmma resident"),
                                         ("sm_90", "wgmma TMA")])
def test_fused_source_compiles_with_nvrtc_without_warnings(arch, build):
    """NVRTC needs no GPU: CI compiles the fused kernels with the options CuPy is given
    (CuPy adds its own architecture after ours; the Hopper build's sm_90a wins)."""
    import nvrtc_compile

    if nvrtc_compile.library_path() is None:
        pytest.skip("NVRTC not installed (pip install nvidia-cuda-nvrtc; the test extra has it)")
    source = cuda_source.source("mgpu_dask.kernels.knn", "fused.cu")
    ok, log, ptx = nvrtc_compile.compile_source(
        source, "fused.cu", [*BUILDS[build].options(), f"--gpu-architecture={arch}"])
    assert ok and not log.strip(), log
    assert set(re.findall(rb"\.entry (\w+)", ptx)) == {b"fused_int8_topk", b"fused_merge",
                                                       b"fused_merge_ranked"}
    wgmma = BUILDS[build].wgmma
    assert (b".target sm_90a" in ptx) == wgmma
    assert (b"wgmma.mma_async" in ptx) == wgmma
    assert (b"cp.async.bulk.tensor.2d" in ptx) == BUILDS[build].tma


def test_fused_kernel_fits_its_registers_without_spilling():
    """Two blocks of 256 threads per SM leave 128 registers a thread: the search kernel
    must fit them (spilling to local memory would cost every tile)."""
    import nvrtc_compile

    if nvrtc_compile.library_path() is None:
        pytest.skip("NVRTC not installed (pip install nvidia-cuda-nvrtc; the test extra has it)")
    source = cuda_source.source("mgpu_dask.kernels.knn", "fused.cu")
    ok, log, _ = nvrtc_compile.compile_source(
        source, "fused.cu", ["--gpu-architecture=sm_90", *fused.MMA_SYNC.options(), "-Xptxas", "-v"])
    assert ok, log
    search = log[log.index("Compiling entry function 'fused_int8_topk'"):]
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", search)
    registers = re.search(r"Used (\d+) registers", search)
    assert spills and spills.groups() == ("0", "0"), search[:400]
    assert registers and int(registers.group(1)) <= 65536 // (fused.THREADS * fused.MIN_BLOCKS)


@pytest.mark.parametrize("build", ["wgmma streamed", "wgmma resident", "wgmma TMA"])
def test_wgmma_search_issues_its_products_without_serializing(build):
    """ptxas serializes wgmma (each waited for as issued) where it cannot prove the
    accumulators untouched while in flight, and says so (C7517-C7520): the Hopper
    build must give it no cause, or its products would gain nothing."""
    import nvrtc_compile

    if nvrtc_compile.library_path() is None:
        pytest.skip("NVRTC not installed (pip install nvidia-cuda-nvrtc; the test extra has it)")
    source = cuda_source.source("mgpu_dask.kernels.knn", "fused.cu")
    ok, log, _ = nvrtc_compile.compile_source(
        source, "fused.cu", [*BUILDS[build].options(), "-Xptxas", "-v"])
    assert ok, log
    search = log[log.index("Compiling entry function 'fused_int8_topk'"):]
    assert "for 'sm_90a'" in search[:200]
    assert not re.search(r"C75\d\d|serialized|injected", log), log
    registers = re.search(r"Used (\d+) registers", search)
    assert registers and int(registers.group(1)) <= 65536 // (
        BUILDS[build].threads * BUILDS[build].min_blocks)
    if BUILDS[build].min_blocks == 1:  # its registers hold the tile's norms: none spilled
        assert re.search(r"0 bytes spill stores, 0 bytes spill loads", search)


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k, levels", [(17500, 6000, 3, 256), (300, 20000, 10, 256),
                                             (129, 777, 64, 3), (5, 7, 1, 256)])
def test_every_build_finds_the_same_neighbours(m, n, k, levels):
    """On Hopper every build runs; the same keys and columns to the bit, ties included."""
    cupy = _gpu()
    from mgpu_dask.kernels.knn.operands import operand_dtype, padded_shape, prepare_queries
    from mgpu_dask.kernels.knn.operands import prepare_train

    optin, _, capability = fused._device()
    if capability != fused.WGMMA:
        pytest.skip("wgmma needs a Hopper GPU (compute capability 9.0)")
    rng = np.random.default_rng(m + n)
    T = cupy.asarray(rng.integers(0, levels, (n, 784)).astype(np.uint8))
    Q = cupy.asarray(rng.integers(0, levels, (m, 784)).astype(np.uint8))
    train = prepare_train(T, "int8", True, 128)
    q = cupy.zeros(padded_shape(m, 784), dtype=operand_dtype(train.precision, True))
    prepare_queries(Q, train, out=q)
    out = []
    for build in BUILDS.values():
        if build.shared_bytes(k, 784) <= optin:
            search = fused.FusedTopK(q, train, m, k, build=build)
            search()
            out.append((search.keys.get(), search.cols.get()))
    assert len(out) == 4 if k <= 10 else len(out) == 2
    for keys, cols in out[1:]:
        np.testing.assert_array_equal(keys, out[0][0])
        np.testing.assert_array_equal(cols, out[0][1])


def test_a_tensor_map_needs_rows_on_16_byte_boundaries():
    """The driver takes a row pitch and an address on 16-byte boundaries only: anything
    else is refused before the driver is asked (so on any machine)."""
    from mgpu_dask.kernels import tensor_map

    with pytest.raises(ValueError, match="16-byte"):
        tensor_map.encode_bytes_2d(10, 785, 785, 0, 128, 64, 64)
    with pytest.raises(ValueError, match="16-byte"):
        tensor_map.encode_bytes_2d(10, 784, 784, 8, 128, 64, 64)


def test_without_a_tensor_map_hopper_takes_the_next_build():
    """A driver that cannot make the TMA build's tensor map leaves the resident build (or
    the streamed one where that does not fit), never none."""
    optin = 227 * 1024
    assert fused.build_for(3, 784, (9, 0), optin, tma=False) == fused.WGMMA_RESIDENT
    assert fused.build_for(fused.MAX_K, 784, (9, 0), optin, tma=False) == fused.WGMMA_STREAMED
    assert fused.build_for(3, 784, (8, 0), optin, tma=False) == fused.MMA_SYNC


@pytest.mark.gpu
def test_on_hopper_a_driver_without_tensor_maps_runs_the_resident_build(monkeypatch):
    """Where the driver cannot make the tensor map, the search runs the resident build,
    says why, and finds the same neighbours."""
    cupy = _gpu()
    from mgpu_dask.kernels import tensor_map
    from mgpu_dask.kernels.knn.operands import operand_dtype, padded_shape, prepare_queries
    from mgpu_dask.kernels.knn.operands import prepare_train

    if fused._device()[2] != fused.WGMMA:
        pytest.skip("the TMA build is Hopper's (compute capability 9.0)")
    rng = np.random.default_rng(1)
    T = cupy.asarray(rng.integers(0, 256, (3000, 784)).astype(np.uint8))
    Q = cupy.asarray(rng.integers(0, 256, (200, 784)).astype(np.uint8))
    train = prepare_train(T, "int8", True, 128)
    q = cupy.zeros(padded_shape(200, 784), dtype=operand_dtype(train.precision, True))
    prepare_queries(Q, train, out=q)
    whole = fused.FusedTopK(q, train, 200, 3)
    whole()

    def refuse(*args, **kwargs):
        raise AttributeError("libcuda.so.1 has no cuTensorMapEncodeTiled")

    monkeypatch.setattr(tensor_map, "rows_2d", refuse)
    fallback = fused.FusedTopK(q, train, 200, 3)
    fallback()
    assert whole.build == fused.WGMMA_TMA and whole.note is None
    assert fallback.build == fused.WGMMA_RESIDENT and "no tensor map" in fallback.note
    np.testing.assert_array_equal(fallback.keys.get(), whole.keys.get())
    np.testing.assert_array_equal(fallback.cols.get(), whole.cols.get())


def test_hopper_searches_short_float16_rows_two_blocks_an_sm():
    """Float16 rows of up to 192 bytes and short lists: the mma.sync build, two blocks an SM,
    with the long start-up that such cheap tiles measured; int8 rows, longer rows and
    lists of 64 keep wgmma."""
    optin = 227 * 1024
    assert fused.build_for(18, 64, (9, 0), optin, half=True) == fused.MMA_SYNC_SHORT
    assert fused.build_for(18, 192, (9, 0), optin, half=True) == fused.MMA_SYNC_SHORT
    assert fused.build_for(18, 256, (9, 0), optin, half=True) == fused.WGMMA_TMA
    assert fused.build_for(64, 64, (9, 0), optin, half=True) == fused.WGMMA_TMA
    assert fused.build_for(18, 64, (9, 0), optin) == fused.WGMMA_TMA  # int8 rows
    assert fused.build_for(18, 64, (8, 0), optin, half=True) == fused.MMA_SYNC
    assert "-DWGMMA" not in fused.MMA_SYNC_SHORT.options()
    # 10,000 queries (79 blocks of 128) over 100,000 rows (782 tiles) on 132 SMs: one wave
    # of long splits (measured best: 3 splits, 1.38 ms against 1.72 for 10)
    slots = 132 * fused.MMA_SYNC_SHORT.min_blocks
    assert fused.splits(79, 782, slots, fused.MMA_SYNC_SHORT.start_tiles) == 3
    assert fused.splits(79, 782, slots, fused.MMA_SYNC.start_tiles) == 10
