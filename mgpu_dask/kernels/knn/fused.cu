// KNN on 8-bit data in one pass: int8 tensor-core products and each query row's
// running top-K, without writing the distance matrix.  See fused.py.
//
// A block owns BM query rows and one split of the training rows, which it walks
// BN rows at a time.  Its 8 warps (2 x 4) each compute a 64 x BN/4 piece of the
// BM x BN product with mma.sync m16n8k32 (int8 in, int32 out: exact), the
// operands streaming through a STAGES-deep cp.async ring in shared memory.  A
// product becomes a key |t|^2 - 2 q.t (exact int32) and is compared with the
// row's current K-th key; the rare key that can enter goes through a small
// per-row queue into the row's list (a heap) in shared memory.  With WGMMA (Hopper,
// sm_90a) each warpgroup (warps 0-3, 4-7) takes its 64 rows x BN with wgmma instead,
// from the same stages, one stage's products in flight while the next is waited for.
// With RESIDENT (either products) the block's query rows are loaded once, every
// k-stage of them, and only the training rows stream through the ring.  With WGMMA,
// RESIDENT and TMA, one warp more loads the ring by the tensor memory accelerator (a
// tensor map of the training rows,
// one bulk copy a stage, mbarriers saying when a stage landed and when both
// warpgroups have read it), and the warpgroups, no longer held together by block-wide
// barriers, run at their own pace: one takes its keys while the other's products run.
// Lists hold key * 2^32 + column, so one comparison orders by key, then by the smaller
// column.  The splits share each row's threshold (the lowest K-th key of any, in global
// memory), so that none takes keys that cannot be among the row's K best over all of
// them.  Each split writes its rows' lists; fused_merge (fused_merge_ranked for a few
// splits) keeps the K best of the splits.  With HALF the operands are float16 (mma.sync
// m16n8k16, wgmma m64n128k16: the same bytes a step, the same fragments and descriptors),
// the sums float32, and a key |t|^2 - 2 q.t is a float whose bits, made to order as
// integers do, take the int key's place: everything after the products is the same code
// (each threshold kept as a float too, which the keys are tested against first).  Rows
// are LD bytes apart, of which the first D_PAD take part (the first part of a split
// operand, or all of it).

#define BM 128
#ifndef BN
#define BN 128           // training rows per tile: 4 warps of BN / 4 columns each
#endif
#define BK 64            // bytes of a row per pipeline stage (mma.cuh's swz: 64)
#ifndef STAGES
#define STAGES 3
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 2
#endif
#ifdef TMA
#if !defined(RESIDENT) || !defined(WGMMA)
#error "TMA needs RESIDENT and WGMMA"
#endif
#define THREADS 288      // two warpgroups of products and keys, and one warp that loads
#else
#define THREADS 256
#endif
#ifdef WGMMA             // Hopper: each warpgroup's 64 rows x BN with wgmma (sm_90a)
#if BN != 128
#error "the wgmma search takes BN 128"
#endif
#define MT 1             // m16 tiles of a warp
#define NT (BN / 8)      // n8 tiles of a warp
#define AHEAD (STAGES - 2)   // stages loaded ahead: the products of one stage stay in flight
#else
#define MT 4
#define NT (BN / 32)
#define AHEAD (STAGES - 1)
#endif
#define LK 64            // longest list (MAX_K); a block's lists take BM * K entries
#define QCAP 32          // queue entries per row between two merges
#define LOOK 8           // tiles between two reads of the shared thresholds (a power of two)
#define EMPTY 0x7fffffffffffffffLL
#define NO_KEY 0x7fffffff
#define OPEN_KEY 0x7ffffffe   // threshold of a list not yet full: every real key passes
#define CLOSED_KEY (-0x7fffffff - 1)   // threshold of a padding row: nothing passes

#ifdef HALF
typedef float acc_t;
// A float's bits as an int that orders as the float does (and back: the map is its own inverse).
__device__ __forceinline__ int ordered(float f) {
    const int i = __float_as_int(f);
    return i >= 0 ? i : i ^ 0x7fffffff;
}
__device__ __forceinline__ float unordered(int i) { return __int_as_float(i >= 0 ? i : i ^ 0x7fffffff); }
// A float key |t|^2 - 2 q.t from a column's norm and product: one fused multiply-add,
// the value of nrm - 2.f * a (2a is exact, so both round once).
__device__ __forceinline__ float key_value(float nrm, float a) { return __fmaf_rn(-2.f, a, nrm); }
#else
typedef int acc_t;
#endif

__device__ __forceinline__ long long pack(int key, int col) {
    return (long long)key * 4294967296LL + (long long)col;
}

__device__ __forceinline__ int key_of(long long p) { return (int)(p >> 32); }

__device__ __forceinline__ void zero(acc_t (&acc)[MT][NT][4]) {
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int v = 0; v < 4; ++v) acc[i][j][v] = 0;
}

// Insert p into the ascending list of K entries (nothing if it is not better than the last).
__device__ __forceinline__ void insert(long long* list, int K, long long p) {
    if (p >= list[K - 1]) return;
    int j = K - 1;
    while (j > 0 && list[j - 1] > p) {
        list[j] = list[j - 1];
        --j;
    }
    list[j] = p;
}

// A row's list in shared memory is a max-heap of its K best (the K-th at the top, the
// row's threshold), entry j at list[j * BM]: the rows side by side, so that the threads
// of a warp, a row each, take distinct banks.  A key that enters replaces the top and
// sinks: log2(K) steps, where a sorted list shifts K / 2 entries on average.
#define AT(list, j) (list)[(j) * BM]
// p placed in the heap of its first n entries from j down, its top (entry j) replaced.
__device__ __forceinline__ void sift_down(long long* list, int j, int n, long long p) {
    while (true) {
        const int a = 2 * j + 1;
        if (a >= n) break;
        int c = a;
        long long vc = AT(list, a);
        if (a + 1 < n) {
            const long long vb = AT(list, a + 1);
            if (vb > vc) { c = a + 1; vc = vb; }
        }
        if (vc <= p) break;
        AT(list, j) = vc;
        j = c;
    }
    AT(list, j) = p;
}

__device__ __forceinline__ void heap_replace(long long* list, int K, long long p) {
    if (p < AT(list, 0)) sift_down(list, 0, K, p);
}

// The heap of one row (its thread) sorted ascending, in place, as the splits' lists go out.
__device__ __forceinline__ void heap_sort(long long* list, int K) {
    for (int end = K - 1; end > 0; --end) {
        const long long p = AT(list, end);
        AT(list, end) = AT(list, 0);
        sift_down(list, 0, end, p);
    }
}

// Row r's threshold lowered to t where t is lower (r's thread; the others may read the
// old one or the new one meanwhile: either lets in every key that may enter).
__device__ __forceinline__ void lower(int* thr, float* thrf, int r, int t) {
    if (t < thr[r]) {
        thr[r] = t;
#ifdef HALF
        thrf[r] = unordered(t);
#endif
    }
}

// Row r's queue (entry i at queue[i * BM + r]) into its heap (r's thread); whether the
// queue had overflowed.  With bound (the block's rows' slots in the search's shared
// thresholds), the row's K-th goes there and the lowest any split has put there comes
// back (atomicMin: the old value).
__device__ __forceinline__ bool merge_queue(long long* lists, const long long* queue, int* count,
                                            int* thr, float* thrf, int r, int K, int* bound) {
    const int c = count[r];
    if (!c) return false;
    long long* list = lists + r;
    for (int i = 0; i < min(c, QCAP); ++i) heap_replace(list, K, queue[i * BM + r]);
    int t = thr[r];
    if (AT(list, 0) != EMPTY) t = min(t, key_of(AT(list, 0)));
    if (bound) t = min(t, atomicMin(bound + r, t));
    lower(thr, thrf, r, t);
    count[r] = 0;
    return c > QCAP;
}

#ifdef WGMMA
// A warpgroup's products of one stage added into d (first: written, the tile's first
// stage), A's 64 rows at a, B's BN rows at b.  They stay in flight while the next stage
// is waited for; those of the stage before are done when this returns, so its buffer
// may be loaded again.  (Past d_pad a stage holds zeros.)
__device__ __forceinline__ void stage_products(acc_t* d, const signed char* a, const signed char* b,
                                               bool first) {
    wgmma_fence();
    const unsigned long long da = sw64_desc(a), db = sw64_desc(b);
#ifdef HALF
    if (first) wgmma_f16_n128_first(d, da, db);   // (the last tile's keys are dead)
    else wgmma_f16_n128(d, da, db);
    wgmma_f16_n128(d, da + 2, db + 2);
#else
    if (first) wgmma_s8_n128_first(d, da, db);   // (the last tile's keys are dead)
    else wgmma_s8_n128(d, da, db);
    wgmma_s8_n128(d, da + 2, db + 2);
#endif
    wgmma_commit();
    wgmma_wait<1>();
    fence_regs(d, NT * 4);
}
#endif

// __syncthreads_or and __syncthreads over barrier id of n threads (0 and THREADS: the block).
__device__ __forceinline__ int group_or(int id, int n, int pred) {
    int out;
    asm volatile("{\n.reg .pred p, q;\nsetp.ne.s32 p, %1, 0;\nbar.red.or.pred q, %2, %3, p;\n"
                 "selp.s32 %0, 1, 0, q;\n}\n" : "=r"(out) : "r"(pred), "r"(id), "r"(n) : "memory");
    return out;
}

__device__ __forceinline__ void group_sync(int id, int n) {
    asm volatile("bar.sync %0, %1;\n" :: "r"(id), "r"(n) : "memory");
}

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
fused_int8_topk(const signed char* __restrict__ Q, int m, int q_rows,
                const signed char* __restrict__ T, int t_rows, int n_valid,
                const float* __restrict__ norms, int d_pad, int ld, int tiles_per_split, int K,
                long long* __restrict__ out, const void* __restrict__ tmap,
                int* __restrict__ thresholds)
{
    extern __shared__ __align__(1024) unsigned char smem[];  // (wgmma: stages on 512-byte boundaries)
    const int nk = (d_pad + BK - 1) / BK;
    signed char* sA = (signed char*)smem;
#ifdef RESIDENT
    signed char* sB = sA + nk * BM * BK;   // the block's query rows stay: every k-stage of them
#else
    signed char* sB = sA + STAGES * BM * BK;
#endif
    long long* lists = (long long*)(sB + STAGES * BN * BK);
    long long* queue = lists + BM * K;
    int* count = (int*)(queue + BM * QCAP);
    int* thr = count + BM;
    float* thrf = (float*)(thr + BM);   // (HALF) each threshold as the float it stands for
#ifdef TMA
    unsigned long long* full_bar = (unsigned long long*)(thrf + BM);  // a ring stage landed
    unsigned long long* empty_bar = full_bar + STAGES;                 // both warpgroups read it
#endif

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp >> 2, wn = warp & 3;
    const int row0 = blockIdx.x * BM;
    const int ntiles = (n_valid + BN - 1) / BN;
    const int tile_begin = blockIdx.y * tiles_per_split;
    const int tile_end = min(tile_begin + tiles_per_split, ntiles);
    const int total = tile_end > tile_begin ? (tile_end - tile_begin) * nk : 0;
    // The search's thresholds shared by the splits (null: one split), a query row's
    // lowest K-th key of any split so far: no key above it is among the row's K best
    // over all splits (that split alone has K better), so each split's lists take only
    // what may be, and their merge is what it would be without.
    int* const bound = thresholds ? thresholds + row0 : nullptr;

    for (int i = tid; i < BM * K; i += THREADS) lists[i] = EMPTY;
    for (int i = tid; i < BM; i += THREADS) {
        count[i] = 0;
        thr[i] = row0 + i < m ? OPEN_KEY : CLOSED_KEY;
#ifdef HALF
        thrf[i] = __int_as_float(row0 + i < m ? 0x7f800000 : 0xff800000);   // +inf, -inf
#endif
    }

#ifndef TMA
    // Each thread copies the same 16-byte chunk c of rows r, r + 64, ... of every stage.
    // Rows 64 apart share a swizzle: row lr + i * 64's chunk is i * 64 * BK bytes past
    // row lr's, and its source 64 rows further on.  (Offsets and pointers are made once,
    // not again each stage.)
    const int lr = tid >> 2, lc = tid & 3;
    const unsigned dst = smem_u32(smem) + swz(lr, lc);
    const long long far = 64LL * ld;
#ifndef RESIDENT
    const signed char* q_src = Q + (long long)(row0 + lr) * ld + lc * 16;
#endif
    const signed char* t_src = T + (long long)(tile_begin * BN + lr) * ld + lc * 16;
    int load_row = tile_begin * BN + lr, load_k0 = 0, load_stage = 0;
    auto load = [&]() {
        const unsigned b = dst + (unsigned)(sB - (signed char*)smem) + load_stage * BN * BK;
        const bool kin = load_k0 + lc * 16 < d_pad;
#ifndef RESIDENT
        const unsigned a = dst + load_stage * BM * BK;
#pragma unroll
        for (int i = 0; i < BM / 64; ++i) {
            const bool ok = kin && row0 + lr + i * 64 < q_rows;
            cp_async16(a + i * 64 * BK, ok ? q_src + i * far + load_k0 : Q, ok ? 16 : 0);
        }
#endif
#pragma unroll
        for (int i = 0; i < BN / 64; ++i) {
            const bool ok = kin && load_row + i * 64 < t_rows;
            cp_async16(b + i * 64 * BK, ok ? t_src + i * far + load_k0 : T, ok ? 16 : 0);
        }
        load_stage = load_stage + 1 == STAGES ? 0 : load_stage + 1;
        load_k0 += BK;
        if (load_k0 >= d_pad) {
            load_k0 = 0;
            load_row += BN;
            t_src += BN * ld;
        }
    };
#endif

#ifdef RESIDENT
    // The query rows once, as their own group: the first stage's wait covers them too.
    for (int i = tid; i < nk * BM * 4; i += THREADS) {
        const int ks = i / (BM * 4), r = (i >> 2) % BM, c = i & 3;
        const int gk = ks * BK + c * 16, grow = row0 + r;
        const bool ok = gk < d_pad && grow < q_rows;
        cp_async16(smem_u32(sA + ks * BM * BK + swz(r, c)), ok ? Q + (long long)grow * ld + gk : Q,
                   ok ? 16 : 0);
    }
    cp_async_commit();
#endif
#ifdef TMA
    // The ring's barriers; the query rows landed and seen by the tensor cores.
    if (tid == 0) {
        for (int st = 0; st < STAGES; ++st) {
            mbar_init(full_bar + st, 1);
            mbar_init(empty_bar + st, 2);
        }
        fence_mbar_init();
    }
    cp_async_wait<0>();
    fence_async_shared();
    __syncthreads();
#else
#pragma unroll
    for (int s = 0; s < AHEAD; ++s) {
        if (s < total) load();
        cp_async_commit();
    }
#endif

    acc_t acc[MT][NT][4];
    zero(acc);

#ifdef WGMMA
    const int my_row = wm * 64 + wn * 16 + (lane >> 2);   // + h * 8: warpgroup wm, its warp wn
    const int my_col = (lane & 3) * 2;                    // + nt * 8 + (v & 1), within the tile
#else
    const int my_row = wm * 64 + (lane >> 2);        // + mt * 16 + h * 8
    const int my_col = wn * (BN / 4) + (lane & 3) * 2;     // + nt * 8 + (v & 1), within the tile
#endif

#ifndef TMA
#ifndef WGMMA
    // This thread's ldmatrix offsets in a stage at k-step 0, as load_a and load_b2 (mma.cuh)
    // make them for the warp's first m16 tile and first pair of n8 tiles: the next tiles'
    // rows are 16 further on (the same swizzle, 16 rows further), and k-step 1 reads
    // chunk 2 + c for chunk c (offset ^ 32).
    const int a_frag = swz(wm * 64 + (lane & 7) + ((lane >> 3) & 1) * 8, lane >> 4);
    const int b_frag = swz(wn * (BN / 4) + (lane & 7) + (lane >> 4) * 8, (lane >> 3) & 1);
#endif
    // One stage of the operand ring: wait for it, start loading the stage AHEAD of it,
    // and add its products into acc (first: the tile's first stage).
    int stage = 0, g = 0;
    auto step = [&](const int kb, const bool first) {
        cp_async_wait<AHEAD - 1>();
#ifdef WGMMA
        fence_async_shared();
#endif
        __syncthreads();
        if (g + AHEAD < total) load();
        cp_async_commit();
        ++g;

#ifdef RESIDENT
        const signed char* a = sA + kb * BM * BK;
#else
        const signed char* a = sA + stage * BM * BK;
#endif
        const signed char* b = sB + stage * BN * BK;
        stage = stage + 1 == STAGES ? 0 : stage + 1;
#ifdef WGMMA
        stage_products(&acc[0][0][0], a + wm * 64 * BK, b, first);
#else
        // (a stage holds at least one step: the first, whose sums start from zero, runs
        // unconditionally so that its products take zeros for sums, not registers)
        const int steps = min(2, (d_pad - kb * BK + 31) / 32);
        if (first) zero(acc);
#pragma unroll
        for (int ks = 0; ks < 2; ++ks) {
            if (ks == 0 || ks < steps) {
                // load_a's and load_b2's fragments (mma.cuh), from this thread's offsets
                const unsigned a_at = smem_u32(a) + (a_frag ^ (ks << 5));
                const unsigned b_at = smem_u32(b) + (b_frag ^ (ks << 5));
                unsigned af[4][4];
#pragma unroll
                for (int mt = 0; mt < 4; ++mt)
                    ldmatrix_x4(af[mt][0], af[mt][1], af[mt][2], af[mt][3], a_at + mt * 16 * BK);
                unsigned bf[NT][2];
#pragma unroll
                for (int np = 0; np < NT / 2; ++np)
                    ldmatrix_x4(bf[2 * np][0], bf[2 * np][1], bf[2 * np + 1][0], bf[2 * np + 1][1],
                                b_at + np * 16 * BK);
#pragma unroll
                for (int mt = 0; mt < 4; ++mt)
#pragma unroll
#ifdef HALF
                    for (int nt = 0; nt < NT; ++nt) mma_f16(acc[mt][nt], af[mt], bf[nt][0], bf[nt][1]);
#else
                    for (int nt = 0; nt < NT; ++nt) mma_s8(acc[mt][nt], af[mt], bf[nt][0], bf[nt][1]);
#endif
            }
        }
#endif
    };
#endif

    // A finished tile's keys, each compared with its row's K-th as of the last merge; one
    // that may enter goes to the row's queue (its bit in done).  The lists take their
    // queues only once one is half full: the thresholds tighten fast, so merges (and the
    // waits around them) grow rare.  A queue that overflowed is pushed again, pass after
    // pass, once the lists have taken what fitted.  nrm[nt * step + e]: the column's
    // norm (the tile's norms in registers, or in memory).
    // With TMA a row belongs to one warpgroup, whose merges wait for it alone (barrier
    // 1 + wm); the other builds merge as a block.
#ifdef TMA
    const int gid = 1 + wm, gsize = 128, gtid = tid & 127, row_lo = wm * 64, rows = 64;
#else
    const int gid = 0, gsize = THREADS, gtid = tid, row_lo = 0, rows = BM;
#endif
    // Column col's key from its norm and product, as the lists hold it (NO_KEY past the
    // training rows): with HALF a float whose bits are made to order as integers do,
    // made again in the passes after a merge (the int8 build keeps its keys in place of
    // the products instead).  The resident builds' norms are loaded for every column
    // (step 2); the others' are read from memory, within the rows only.
#ifdef RESIDENT
    // The norms of this thread's columns of the tile at col0 (nf[nt][e]: column
    // col0 + my_col + nt * 8 + e), for the resident builds; a column past the rows reads
    // the last row's (its key is NO_KEY whatever it is).
    auto tile_norms = [&](float (&nf)[NT][2], const int col0) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) nf[nt][e] = __ldg(norms + min(col0 + my_col + nt * 8 + e, n_valid - 1));
    };
#endif
#ifdef HALF
    auto norm_at = [&](const float* nrm_at, const int step, const int i, const int col) -> float {
        return step == 2 || col < n_valid ? nrm_at[i] : 0.f;
    };
    auto key_at = [&](const float nrm, const acc_t a, const int col) -> int {
        return col < n_valid ? ordered(key_value(nrm, a)) : NO_KEY;
    };
#endif
    // The row whose threshold this thread keeps (merges it, lowers it to the shared one).
    const int own = row_lo + gtid;
    const bool keeps = gtid < rows && bound != nullptr && row0 + own < m;
    auto tile_keys = [&](const int col0, const float* nrm_at, const int step) {
        // Every LOOK tiles, the shared threshold of this thread's row, read now (from L2,
        // where the splits' atomicMin leave it) and taken after the tile's tests, so that
        // its latency hides behind them.
        const bool look = keeps && ((col0 / BN) & (LOOK - 1)) == 0;
        const int fresh = look ? __ldcg(bound + own) : OPEN_KEY;
#ifdef HALF
        // The thresholds as floats (thrf): a key is compared as the float it is, and made
        // an ordered integer only where it passes (rare once the lists have filled), then
        // compared with the integer threshold.  The float test takes every key the
        // integer one does (and +0 at a threshold of -0; a NaN threshold takes all).
        float tf[MT * 2];
#pragma unroll
        for (int h = 0; h < MT * 2; ++h) tf[h] = thrf[my_row + (h >> 1) * 16 + (h & 1) * 8];
#else
        int th[MT * 2];
#pragma unroll
        for (int h = 0; h < MT * 2; ++h) th[h] = thr[my_row + (h >> 1) * 16 + (h & 1) * 8];
#endif
        unsigned long long done[MT];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) done[mt] = 0ull;
        int full = 0;
        // The tile's norms in registers, every load issued before the first is used (a
        // column past the rows reads the last row's: its key is NO_KEY whatever it is).
        float nv[NT][2];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int i = nt * step + e;
                nv[nt][e] = step == 2 ? nrm_at[i]
                          : nrm_at[min(i, n_valid - 1 - col0 - my_col)];
            }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            // Whether any key of this n8 tile may enter, with no branch a key: once the
            // lists have filled, none does in nearly every tile.
            // (an answer an m16 tile, ORed at the end: four short chains of tests, not one long)
            bool part[MT];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) part[mt] = false;
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int col = col0 + my_col + nt * 8 + e;
#ifndef HALF
                const int nrm = __float2int_rn(nv[nt][e]);
#endif
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
#ifdef HALF
                        part[mt] |= !(key_value(nv[nt][e], acc[mt][nt][h * 2 + e]) > tf[mt * 2 + h]);
#else
                        const int v = col < n_valid ? nrm - 2 * acc[mt][nt][h * 2 + e] : NO_KEY;
                        acc[mt][nt][h * 2 + e] = v;  // the key, for the passes after a merge
                        part[mt] |= v <= th[mt * 2 + h];
#endif
                    }
                }
            }
            bool any = false;
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) any |= part[mt];
            if (!any) continue;
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                if (!part[mt]) continue;   // (no key of this m16 tile may enter)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int col = col0 + my_col + nt * 8 + e;
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int r = my_row + mt * 16 + h * 8;
#if defined(HALF) && defined(WGMMA)
                        // the float test again, then the integer one (the float test takes
                        // every key it does): most of a passing n8 tile's keys stay out.  (A
                        // wgmma build's thread holds one m16 tile's rows: the keys themselves
                        // are what it can skip.)
                        const float kv = key_value(nv[nt][e], acc[mt][nt][h * 2 + e]);
                        if (kv > tf[mt * 2 + h]) continue;
                        const int v = col < n_valid ? ordered(kv) : NO_KEY, t = thr[r];
#elif defined(HALF)
                        // (the integer test alone: the float one above takes every key it does)
                        const int v = key_at(nv[nt][e], acc[mt][nt][h * 2 + e], col), t = thr[r];
#else
                        const int v = acc[mt][nt][h * 2 + e], t = th[mt * 2 + h];  // (the key, as taken above)
#endif
                        if (v <= t) {  // rare once the lists have filled
                            const int slot = atomicAdd(&count[r], 1);
                            if (slot < QCAP) {
                                queue[slot * BM + r] = pack(v, col);
                                done[mt] |= 1ull << (nt * 4 + h * 2 + e);
                            }
                            full |= slot >= QCAP / 2;
                        }
                    }
                }
            }
        }
        if (fresh != OPEN_KEY) lower(thr, thrf, own, fresh);
        if (!group_or(gid, gsize, full)) return;
        while (true) {
            const int more = gtid < rows && merge_queue(lists, queue, count, thr, thrf, own, K,
                                                        keeps ? bound : nullptr);
            if (!group_or(gid, gsize, more)) break;
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int r = my_row + mt * 16 + h * 8;
                    const int t = thr[r];
#pragma unroll
                    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
                        for (int e = 0; e < 2; ++e) {
                            const int bit = nt * 4 + h * 2 + e;
                            if (done[mt] >> bit & 1ull) continue;
                            const int col = col0 + my_col + nt * 8 + e;
#ifdef HALF
                            const int v = key_at(norm_at(nrm_at, step, nt * step + e, col),
                                                 acc[mt][nt][h * 2 + e], col);
#else
                            const int v = acc[mt][nt][h * 2 + e];  // the key, as taken above
#endif
                            if (v <= t) {
                                const int slot = atomicAdd(&count[r], 1);
                                if (slot < QCAP) {
                                    queue[slot * BM + r] = pack(v, col);
                                    done[mt] |= 1ull << bit;
                                }
                            }
                        }
                    }
                }
            }
            group_sync(gid, gsize);
        }
    };

#ifdef TMA
    // The last warp's first lane loads the ring: each stage once both warpgroups have
    // read it (empty_bar), one bulk copy of the tile's BN rows x BK bytes, in the tensor
    // cores' swizzle, zeros past the rows and features (the tensor map's bounds), and
    // full_bar says when its bytes have landed.  The warpgroups take stages as they land.
    if (warp == 8) {
        if (lane == 0) {
            tensormap_acquire(tmap);
            for (int g = 0; g < total; ++g) {
                const int st = g % STAGES, k0 = (g % nk) * BK, r0 = (tile_begin + g / nk) * BN;
                if (g >= STAGES) mbar_wait(empty_bar + st, (g / STAGES - 1) & 1);
                mbar_expect_tx(full_bar + st, BN * BK);
                tma_load_2d(sB + st * BN * BK, tmap, k0, r0, full_bar + st);
            }
        }
    } else {
        // A stage's products in flight while the next stage is waited for; the stage
        // before is then read, and handed back (first: the tile's first stage).
        int g = 0;
        auto mma_stage = [&](const int kb, const bool first) {
            const int st = g % STAGES;
            mbar_wait(full_bar + st, (g / STAGES) & 1);
            stage_products(&acc[0][0][0], sA + kb * BM * BK + wm * 64 * BK, sB + st * BN * BK, first);
            if (!first && gtid == 0) mbar_arrive(empty_bar + (g - 1) % STAGES);
            ++g;
        };
        for (int col0 = tile_begin * BN; col0 < tile_end * BN; col0 += BN) {
            float nf[NT][2];
            tile_norms(nf, col0);   // (loaded while its products run)
            mma_stage(0, true);
            for (int kb = 1; kb < nk; ++kb) mma_stage(kb, false);
            wgmma_wait<0>();
            fence_regs(&acc[0][0][0], NT * 4);
            if (gtid == 0) mbar_arrive(empty_bar + (g - 1) % STAGES);
            tile_keys(col0, &nf[0][0], 2);
        }
    }
#else
    for (int col0 = tile_begin * BN; col0 < tile_end * BN; col0 += BN) {
#ifdef RESIDENT
        // (loaded while its products run: too few warps an SM to hide their latency at the keys)
        float nf[NT][2];
        tile_norms(nf, col0);
#endif
        step(0, true);
        for (int kb = 1; kb < nk; ++kb) step(kb, false);
#ifdef WGMMA
        wgmma_wait<0>();
        fence_regs(&acc[0][0][0], NT * 4);
#endif
#ifdef RESIDENT
        tile_keys(col0, &nf[0][0], 2);
#else
        tile_keys(col0, norms + col0 + my_col, 8);   // (read as the keys are taken)
#endif
    }
#endif
    cp_async_wait<0>();
    __syncthreads();
    if (tid < BM) {
        merge_queue(lists, queue, count, thr, thrf, tid, K, nullptr);  // what the last tiles queued
        heap_sort(lists + tid, K);
    }
    __syncthreads();
    for (int i = tid; i < BM * K; i += THREADS) {
        const int r = i / K, j = i % K;
        if (row0 + r < m) out[((long long)blockIdx.y * m + row0 + r) * K + j] = lists[j * BM + r];
    }
}

// Entry j of a row's merged list, v, as the scan kernels leave it: its key as float64 (inf
// where none) and its column (2^31 - 1 where none).
__device__ __forceinline__ void put(double* keys, int* cols, int row, int K, int j, long long v) {
#ifdef HALF
    keys[(long long)row * K + j] = v == EMPTY ? __longlong_as_double(0x7ff0000000000000LL)
                                              : (double)unordered(key_of(v));
#else
    keys[(long long)row * K + j] = v == EMPTY ? __longlong_as_double(0x7ff0000000000000LL)
                                              : (double)key_of(v);
#endif
    cols[(long long)row * K + j] = v == EMPTY ? 0x7fffffff : (int)(v & 0xffffffffLL);
}

// The K best of each row over the splits' lists, a thread a row: each list's entries
// inserted into the row's best K until one is no better than the K-th (lists ascend).
extern "C" __global__ void fused_merge(const long long* __restrict__ parts, int splits, int m, int K,
                                       double* __restrict__ keys, int* __restrict__ cols)
{
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= m) return;
    long long best[LK];
    for (int j = 0; j < K; ++j) best[j] = EMPTY;
    for (int s = 0; s < splits; ++s) {
        const long long* p = parts + ((long long)s * m + row) * K;
        for (int j = 0; j < K; ++j) {
            const long long v = p[j];
            if (v >= best[K - 1]) break;  // each list is ascending
            insert(best, K, v);
        }
    }
    for (int j = 0; j < K; ++j) put(keys, cols, row, K, j, best[j]);
}

// The same for a few splits, a thread an entry: entry j of split s's list goes to place
// j + (the entries of the other lists before it: smaller, or equal in an earlier split,
// found by binary search) if that is within the K best.  The places are distinct, so
// the K first are each written once, with what fused_merge writes there.
extern "C" __global__ void fused_merge_ranked(const long long* __restrict__ parts, int splits,
                                              int m, int K, double* __restrict__ keys,
                                              int* __restrict__ cols)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;  // ((s * m) + row) * K + j
    if (i >= (long long)splits * m * K) return;
    const int j = (int)(i % K), row = (int)((i / K) % m), s = (int)(i / ((long long)m * K));
    const long long v = parts[i];
    int place = j;
    for (int o = 0; o < splits && place < K; ++o) {
        if (o == s) continue;
        const long long* p = parts + ((long long)o * m + row) * K;
        int lo = 0, hi = K;
        while (lo < hi) {
            const int mid = (lo + hi) >> 1;
            const long long w = p[mid];
            if (w < v || (w == v && o < s)) lo = mid + 1;
            else hi = mid;
        }
        place += lo;
    }
    if (place < K) put(keys, cols, row, K, place, v);
}
