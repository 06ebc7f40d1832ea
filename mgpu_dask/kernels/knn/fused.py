"""KNN on 8-bit data in one kernel: int8 tensor-core products folded straight into each
query row's running top-K, so the distance matrix is never written or read back.

The tile loop (:mod:`.search`) writes every product tile to memory and scans it
again (what each costs: docs/performance-history.md).  ``fused.cu`` keeps
the products in registers instead.  A block of 256 threads owns 128 query rows
and one *split* of the training rows; for each tile of :data:`COLS` training rows
it computes the 128 x COLS products with ``mma.sync`` (int8 in, int32 out, exact: see
:mod:`.precision`), makes them keys ``|t|^2 - 2 q.t`` and compares each with its
row's current K-th key.  The few keys that pass go through a per-row queue into
the row's list in shared memory, a heap (a key that enters sinks in log2(K) steps;
each split's lists are sorted as they go out).  The splits share each query row's
threshold, the lowest K-th key any of them has so far (an ``atomicMin`` in global
memory at each merge, read every few tiles): a split keeps only keys that may be among
the row's K best over all splits, so a row's passes no longer grow with the splits, and
the lists' merge is the same as without.  A second kernel keeps the K best
over the splits.  Keys and columns come out as the tile loop's scan leaves them, ties
to the smaller column, so everything after the search is unchanged.

On Hopper (compute capability 9.0) the products are ``wgmma`` instead: each
warpgroup's 64 rows times the tile's COLS, issued asynchronously from the same
shared-memory stages (their swizzle is the tensor cores' own), one stage's
products in flight while the next is waited for.  ``wgmma`` leaves the search
bound by the bytes it moves into shared memory, so where they fit the block's
query rows are loaded once and stay (:data:`WGMMA_RESIDENT`): only training rows
stream through the ring, half the bytes a tile moves, one block an SM, the
tile's norms loaded while its products run.  Their fastest build (:data:`WGMMA_TMA`)
adds a ninth warp that loads the ring by the tensor memory accelerator (one bulk copy a
stage, from a tensor map of the training rows: :mod:`..tensor_map`; where the driver
cannot make one, the next build runs), mbarriers in place of block-wide barriers, so that
each warpgroup runs at its own pace and one takes its keys while the other's products
run.  :class:`Build` names each build, :func:`build_for` picks one
(docs/performance-history.md: what each measured).

Float data run the same kernel built with ``HALF``: float16 operands (centred and
scaled, :mod:`.floats`), float32 sums, each key a float whose bits are made to order
as integers, so that the lists, queues and merges are the int8 build's own; a split
operand's plain product reads the first part of each row, its three-part product all of
it.  Those keys are approximate, and the search certifies them as the tile loop's.

It needs int8 operands (8-bit data, ``precision="int8"``) or float16 ones, ``mma.sync`` and
``cp.async`` (compute capability 8.0 or newer) and enough shared memory for the
lists; :func:`usable` says whether a search qualifies, and the tile loop runs
otherwise.  Plain CUDA C, compiled by NVRTC through CuPy once per GPU and
process (CuPy keeps the binary in its cache folder; the Hopper build adds
``-arch=sm_90a``, which NVRTC takes over CuPy's ``sm_90``): Numba has no
tensor-core instructions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import tensor_map
from ..cuda_source import module
from ..precision import Precision

ROWS, STAGE_BYTES, THREADS, QUEUE = 128, 64, 256, 32   # as fused.cu has them
LOADER = 32       # the TMA build's loading warp, beside THREADS
# The block's shape, passed to fused.cu: training rows per tile (a multiple of 64), the
# depth of the operand ring, and blocks per SM the registers must allow.
COLS, STAGES, MIN_BLOCKS = 128, 3, 2
WGMMA = (9, 0)    # the compute capability whose products are wgmma (sm_90a; not Blackwell's)
MAX_K = 64
OPEN_KEY = 0x7FFFFFFE  # as fused.cu has it: a threshold that every real key passes
MAX_SPLITS = 512  # a few query rows over many training rows still fill the GPU
NEEDS = (8, 0)
# Per-block start-up (pipeline fill, the first tiles' flood of candidates) in tiles of
# work: what makes a split shorter than a few tiles a loss.  The TMA build's blocks
# start slower (their query rows, mbarriers and tensor map first): its own, Build.start_tiles.
START_TILES = 1.5
MERGE_THREADS = 32
"""Threads of a ``fused_merge`` block, a row each: its rows are few (10,000 queries, 79
blocks of 128, left most SMs idle), so small blocks spread them over every SM."""
RANKED_SPLITS, RANKED_THREADS = 16, 256
"""Up to this many splits the lists are merged a thread an entry (``fused_merge_ranked``,
blocks of ``RANKED_THREADS``: each entry placed by binary searches in the other lists, a
few loads each) rather than a thread a row, whose insertions wait on each other's
loads; past it an entry's searches would outnumber a row's insertions."""
_OPTIN: dict[int, tuple[int, int, tuple[int, int]]] = {}


@dataclass(frozen=True)
class Build:
    """One build of ``fused.cu``: its products (``wgmma`` or ``mma.sync``), whether the
    block's query rows stay in shared memory (``resident``: only training rows stream
    through the ring), whether a warp of its own loads the ring by TMA (``tma``), the
    ring's depth and the blocks an SM holds."""

    wgmma: bool
    resident: bool
    stages: int
    min_blocks: int
    tma: bool = False
    start_tiles: float = START_TILES  # a block's start-up in tiles of work, for splits()

    def options(self, half: bool = False) -> tuple[str, ...]:
        """NVRTC's options (CuPy adds its own architecture after them); ``half``: the
        float16 build."""
        out = ("--std=c++17", f"-DBN={COLS}", f"-DSTAGES={self.stages}",
               f"-DMIN_BLOCKS={self.min_blocks}") + (("-DHALF",) if half else ())
        resident = ("-DRESIDENT",) if self.resident else ()
        if not self.wgmma:
            return out + resident
        return out + ("-DWGMMA",) + resident + (("-DTMA",) if self.tma else ()) + ("-arch=sm_90a",)

    @property
    def threads(self) -> int:
        """Threads of a block: two warpgroups, and the TMA build's loading warp."""
        return THREADS + (LOADER if self.tma else 0)

    @property
    def label(self) -> str:
        """The build as a run's JSON names the search it ran."""
        if not self.wgmma:
            return "fused, mma.sync" + (", query rows resident" if self.resident else "")
        if self.tma:
            return "fused, wgmma, query rows resident, TMA ring"
        return "fused, wgmma, query rows resident" if self.resident else "fused, wgmma"

    def shared_bytes(self, K: int, d_pad: int) -> int:
        """Dynamic shared memory of a block for lists of ``K`` over ``d_pad`` features:
        the query rows (all of them when resident, else a ring's worth), the training
        rows' ring, the lists, the queues, a count and threshold (an integer and a
        float) per row, and the TMA ring's two mbarriers a stage."""
        queries = -(-d_pad // STAGE_BYTES) if self.resident else self.stages
        return ((queries * ROWS + self.stages * COLS) * STAGE_BYTES
                + ROWS * (K + QUEUE) * 8 + ROWS * 12 + (16 * self.stages if self.tma else 0))


MMA_SYNC = Build(wgmma=False, resident=False, stages=STAGES, min_blocks=MIN_BLOCKS)
"""Compute capability 8.0 and newer but Hopper: mma.sync, two blocks an SM."""
WGMMA_STREAMED = Build(wgmma=True, resident=False, stages=4, min_blocks=2)
"""Hopper where the query rows do not fit beside the ring: one stage's products in flight."""
WGMMA_RESIDENT = Build(wgmma=True, resident=True, stages=6, min_blocks=1)
"""Hopper: the query rows loaded once, half the bytes a tile moves, one block an SM."""
WGMMA_TMA = Build(wgmma=True, resident=True, stages=8, min_blocks=1, tma=True, start_tiles=12)
"""Hopper: as :data:`WGMMA_RESIDENT`, the ring loaded by TMA from a warp of its own and
the two warpgroups each at its own pace.  Its blocks start slower than the others'
(query rows, mbarriers and tensor map first): 12 tiles of start-up (how that was
found: docs/performance-history.md)."""


MMA_SYNC_SHORT = Build(wgmma=False, resident=True, stages=STAGES, min_blocks=MIN_BLOCKS,
                       start_tiles=30)
"""Hopper, float16 rows of at most :data:`SHORT_ROW` bytes and lists of at most
:data:`SHORT_LISTS`: mma.sync, two blocks an SM, the block's query rows loaded once (no
more shared memory than a ring of them: such rows are at most three stages).  A tile of
such rows is so little work that a block's start-up (the first tiles' flood of
candidates) costs about 30 tiles, and two blocks an SM hide each other's waits better
than wgmma's one (docs/performance-history.md, "the per-row work in one launch")."""
SHORT_ROW = 192
"""Bytes of a float16 row up to which Hopper runs :data:`MMA_SYNC_SHORT`: 96 features in
the plain product, 32 in the three-part one."""
SHORT_LISTS = 32
"""Longest lists :data:`MMA_SYNC_SHORT` runs (lists of 64 ran faster on wgmma)."""


def build_for(K: int, d_pad: int, capability: tuple[int, int], optin: int,
              tma: bool = True, half: bool = False) -> Build | None:
    """The build a search for lists of ``K`` over ``d_pad`` features runs on a GPU of
    ``capability`` with ``optin`` bytes of shared memory a block (None: none fits);
    ``tma`` False: not the TMA build (its tensor map could not be made); ``half``: float16
    operands."""
    builds = (WGMMA_TMA, WGMMA_RESIDENT, WGMMA_STREAMED) if capability == WGMMA else (MMA_SYNC,)
    if capability == WGMMA and half and d_pad <= SHORT_ROW and K <= SHORT_LISTS:
        builds = (MMA_SYNC_SHORT,) + builds
    return next((b for b in builds if b.shared_bytes(K, d_pad) <= optin and (tma or not b.tma)),
                None)


def _device() -> tuple[int, int, tuple[int, int]]:
    """(opt-in shared memory per block, SMs, compute capability) of the current GPU."""
    import cupy

    device = cupy.cuda.Device()
    if device.id not in _OPTIN:
        attrs, cc = device.attributes, device.compute_capability  # cc: "90", "100"
        _OPTIN[device.id] = (int(attrs.get("MaxSharedMemoryPerBlockOptin", 48 << 10)),
                             int(attrs.get("MultiProcessorCount", 1)), (int(cc[:-1]), int(cc[-1])))
    return _OPTIN[device.id]


FLOAT = True
"""Float16 operands search fused too (``False``: the tile loop, for a comparison)."""


def usable_for(K: int, precision: Precision, eight_bit: bool, method: str, d_pad: int) -> bool:
    """Whether a search for lists of ``K`` over ``d_pad`` bytes of each (padded) row of
    data so described runs fused on this GPU: int8 operands of 8-bit data or float16
    operands through a product, compute capability 8.0 or newer, and lists that fit the
    shared memory."""
    half = precision is Precision.FP16 and FLOAT
    if method != "gemm" or not (half or (precision is Precision.INT8 and eight_bit)):
        return False
    if not 1 <= K <= MAX_K or (not half and 3 * d_pad * 128 * 128 >= 2 ** 31):  # int32 keys
        return False
    try:
        optin, _, capability = _device()
    except Exception:  # no CuPy or no GPU in this process
        return False
    return capability >= NEEDS and build_for(K, d_pad, capability, optin) is not None


def row_bytes(train: Any, split: bool = False) -> int:
    """Bytes of each training row a search reads: a split operand's first part (plain) or
    all three, else the whole padded row."""
    item = int(train.operand.dtype.itemsize)
    part = train.frame.part if train.frame is not None else None
    return item * (int(train.operand.shape[1]) if part is None or split else part)


def usable(train: Any, K: int, split: bool = False) -> bool:
    """:func:`usable_for` a prepared training block (``operands.TrainBlock``)."""
    return (train.operand.dtype in (np.int8, np.float16)
            and usable_for(K, train.precision, train.eight_bit, train.method,
                           row_bytes(train, split)))


def _kernels(build: Build, half: bool = False) -> tuple[Any, Any, Any]:
    built = module(__package__, "fused.cu", build.options(half))
    return (built.get_function("fused_int8_topk"), built.get_function("fused_merge"),
            built.get_function("fused_merge_ranked"))


def splits(query_blocks: int, tiles: int, sms: int, start_tiles: float = START_TILES) -> int:
    """Splits of the training rows: the count whose waves of blocks (one per SM) finish
    soonest, counting each block's start-up (``start_tiles``, in tiles of work)."""
    best, best_cost = 1, math.inf
    for s in range(1, min(tiles, MAX_SPLITS) + 1):
        waves = -(-query_blocks * s // sms)
        cost = waves * (-(-tiles // s) + start_tiles)
        if cost < best_cost - 1e-9:
            best, best_cost = s, cost
    return best


class FusedTopK:
    """Running top-K of ``m`` query rows (prepared into ``queries``, int8) over ``train``.

    Calling it launches both kernels on the current CuPy stream; ``keys``
    (float64 ``|t|^2 - 2 q.t``, inf where none) and ``cols`` (int32, 2^31 - 1
    where none), each ``(m, K)`` ascending, then hold the result, as a
    :class:`.search.Scan`'s do.  ``build`` picks the kernel's build (None:
    :func:`build_for` this GPU); every build gives the same keys and columns.
    """

    def __init__(self, queries: Any, train: Any, m: int, K: int,
                 build: Build | None = None, split: bool = False) -> None:
        import cupy

        optin, sms, capability = _device()
        self.half = train.operand.dtype == np.float16
        d_pad = row_bytes(train, split)
        self.ld = int(train.operand.shape[1]) * int(train.operand.dtype.itemsize)
        self.d_pad = d_pad
        self.build = build or build_for(K, d_pad, capability, optin, half=self.half)
        if self.build is None:
            raise ValueError(f"lists of {K} over {d_pad} features do not fit the shared memory")
        # The TMA build's map of the training rows: boxes of a tile's rows x a stage's bytes.
        # A driver that cannot make it (older than CUDA 12) runs the next build instead.
        self.tmap, self.note = None, None
        if self.build.tma:
            try:
                self.tmap = tensor_map.rows_2d(train.operand.view(np.int8), COLS, STAGE_BYTES,
                                               STAGE_BYTES)
            except (OSError, AttributeError, RuntimeError) as exc:
                self.note = f"no tensor map ({type(exc).__name__}: {exc}): {self.build.label} not run"
                self.build = build_for(K, d_pad, capability, optin, tma=False, half=self.half)
        self.search, self.merge, self.merge_ranked = _kernels(self.build, self.half)
        self.queries, self.train, self.m, self.K = queries, train, m, K
        tiles = max(1, -(-train.n // COLS))
        self.splits = splits(-(-m // ROWS), tiles, sms * self.build.min_blocks,
                             self.build.start_tiles)
        self.tiles_per_split = -(-tiles // self.splits)
        self.shared_bytes = self.build.shared_bytes(K, d_pad)
        self.search.max_dynamic_shared_size_bytes = self.shared_bytes
        self.parts = cupy.empty((self.splits, m, K), dtype=np.int64)
        # the splits' shared thresholds, a query row's lowest K-th key so far (fused.cu)
        self.thresholds = cupy.empty(m, dtype=np.int32) if self.splits > 1 else None
        self.keys = cupy.empty((m, K), dtype=np.float64)
        self.cols = cupy.empty((m, K), dtype=np.int32)

    def __call__(self) -> None:
        t, q = self.train, self.queries
        tmap = self.tmap if self.tmap is not None else np.uint64(0)
        thresholds = np.uint64(0)  # (null: one split)
        if self.thresholds is not None:
            self.thresholds.fill(OPEN_KEY)
            thresholds = self.thresholds
        self.search((-(-self.m // ROWS), self.splits), (self.build.threads,),
                    (q, np.int32(self.m), np.int32(q.shape[0]), t.operand,
                     np.int32(t.operand.shape[0]), np.int32(t.n), t.norms,
                     np.int32(self.d_pad), np.int32(self.ld), np.int32(self.tiles_per_split),
                     np.int32(self.K), self.parts, tmap, thresholds), shared_mem=self.shared_bytes)
        merged = (self.parts, np.int32(self.splits), np.int32(self.m), np.int32(self.K),
                  self.keys, self.cols)
        if self.splits <= RANKED_SPLITS:
            entries = self.splits * self.m * self.K
            self.merge_ranked((-(-entries // RANKED_THREADS),), (RANKED_THREADS,), merged)
        else:
            self.merge((-(-self.m // MERGE_THREADS),), (MERGE_THREADS,), merged)
