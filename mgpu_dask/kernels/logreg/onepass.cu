// Logistic regression's whole int8 evaluation over the rows in one pass: the forward
// product, the softmax and the gradient's product v^T R, each row read from memory once.
// See onepass.py.  The arithmetic of the softmax is cuda_int8.py's (softmax_xent_i8),
// operation for operation, and the gradient's integer sums are exact, so the gradient
// and the block sums come out as the unfused kernels leave them.
//
// A block walks a run of row tiles (TM rows each, whole rows in shared memory, three
// buffers: the tile whose gradient is taken, the tile whose forward product is, and
// the next one loading), with the coefficient terms w8 loaded once.  Iteration j:
//  1. forward of tile j: warp w takes rows 16 (w % 4) .. +15 against every term column
//     over half the features (mma.sync m16n8k32, int8 in, int32 out); the two halves'
//     sums go to shared memory;
//  2. the softmax of tile j and the gradient of tile j - 1 side by side: warps 0-3 take
//     the softmax of rows 0-31, then their share of the gradient; warps 4-7 their share
//     of the gradient, then the softmax of rows 32-63, so that one half's float64 work
//     runs beside the other's tensor-core work.
//  Softmax: four threads per row, a class in four each; a row's sums over the classes go
//  through warp shuffles in class order, so every value is softmax_xent_i8's; the residual
//  goes to shared memory as I8 terms (a column per term, rows in the order the gradient's
//  fragments read them); a row's k + 1 values are added to the other tile's of its unit of
//  128 rows as the first step of softmax_xent_i8's reduction, the rest of which half a
//  warp per value takes with shuffles, in the same order, into row `unit` of bpart.
//  Gradient: warp w takes the features of k-steps w, w + 8, ... (32 each) against every
//  residual column.  Its A operand is the tile transposed (features x rows), read as words
//  of four features from four rows and transposed in registers with byte permutes; the
//  int32 sums stay in registers for the block's whole run (at most 131072 rows: exact),
//  then go into g64 (d_pad x width, int64) with atomic adds, exact in any order.
//
// Built with -DSPECIALIZED (sm_90a only: setmaxnreg), the kernel at the end instead: the
// same steps, with the softmax on four warps of its own beside eight that load and take
// the products (see there).

#define TM 64            // rows per tile
#define UNIT 128         // rows per block sum: cuda_int8.THREADS
#define THREADS 256
#ifndef CLASSES
#define CLASSES 10
#endif
#ifndef KSTEPS
#define KSTEPS 25        // 32-byte steps of a row: d_pad rounded up to 32
#endif
#ifndef WIDTH
#define WIDTH 48         // rows of w8 and columns of g32: TERMS per class, padded to 16
#endif
#define K CLASSES
#define TERMS 4          // cuda_int8.I8_TERMS
#define TOP 127.0        // cuda_int8.I8_TOP
#define BASE 254.0       // cuda_int8.I8_BASE
#define NCOL (TERMS * K)               // term columns in use
#define NTG ((NCOL + 7) / 8)           // n8 tiles of term columns
#define NTP ((NTG + 1) / 2)            // pairs of them (ldmatrix x4 loads two)
#define CPQ ((K + 3) / 4)              // classes per thread of a row's four
#define GPW ((KSTEPS + 7) / 8)         // gradient feature groups per warp
#define KH ((KSTEPS + 1) / 2)          // forward k-steps of the first half
#define PITCH (KSTEPS * 32 + 16)       // bytes per row in shared memory (an odd multiple of
                                       // 16: ldmatrix and the word loads conflict-free)
#define WROWS (NTG * 8)                // rows of w8 the forward reads
#define RPITCH (TM + 16)               // bytes per residual column in shared memory
#define SPITCH (NCOL + 1)              // int32 per row of forward sums


static_assert(K + 1 <= 2 * THREADS / 32, "the block sums' reduction takes half a warp per value");

__device__ __forceinline__ int at(int r, int c) { return r * PITCH + (c << 4); }

// mma_s8's B fragment of one n8 tile: rows r0..r0+7 (two 16-byte chunks of k-step ks).
__device__ __forceinline__ void load_b1(unsigned (&b)[2], const signed char* stage, int r0, int ks,
                                        int lane) {
    const int r = r0 + (lane & 7);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(b[0]), "=r"(b[1])
                 : "r"(smem_u32(stage + at(r, ks * 2 + ((lane >> 3) & 1)))));
}

__device__ __forceinline__ unsigned lds32(const signed char* p) {
    return *reinterpret_cast<const unsigned*>(p);
}

__device__ __forceinline__ unsigned prmt(unsigned a, unsigned b, unsigned sel) {
    unsigned r;
    asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
    return r;
}

// Four words of four bytes (rows 0..3 x features 0..3) into four words of feature j's
// bytes of rows 0..3.
__device__ __forceinline__ void transpose4(const unsigned (&w)[4], unsigned (&o)[4]) {
    const unsigned t0 = prmt(w[0], w[1], 0x5140), t1 = prmt(w[0], w[1], 0x7362);
    const unsigned t2 = prmt(w[2], w[3], 0x5140), t3 = prmt(w[2], w[3], 0x7362);
    o[0] = prmt(t0, t2, 0x5410);
    o[1] = prmt(t0, t2, 0x7632);
    o[2] = prmt(t1, t3, 0x5410);
    o[3] = prmt(t1, t3, 0x7632);
}

// Where row r (0..TM-1) of a tile sits among the gradient's k positions: in a 32-row
// step, thread t's first four k (4t..4t+3) are rows 2t, 2t+8, 2t+16, 2t+24 and its last
// four (16+4t..) rows 2t+1, ..., so the four threads of a word load hit distinct banks.
__device__ __forceinline__ int kpos(int r) {
    const int s = r & 31, t = (s & 7) >> 1, i = s >> 3;
    return (r & ~31) + ((s & 1) << 4) + 4 * t + i;
}

typedef int Sums[GPW][2][NTG][4];  // a warp's gradient sums: GPW groups of 32 features

// The gradient's products of one tile (x, its residual terms res): warp slot w (0..7) takes
// the features of k-steps w, w + 8, ... against every residual column, into acc.
__device__ __forceinline__ void gradient(Sums& acc, const signed char* res, const signed char* x,
                                         int w, int g, int t4) {
#pragma unroll
    for (int s = 0; s < TM / 32; ++s) {
        unsigned b[NTG][2];
#pragma unroll
        for (int j = 0; j < NTG; ++j) {
            const signed char* col = res + (j * 8 + g) * RPITCH + s * 32 + 4 * t4;
            b[j][0] = lds32(col);
            b[j][1] = lds32(col + 16);
        }
#pragma unroll
        for (int gq = 0; gq < GPW; ++gq) {
            const int G = w + 8 * gq;
            if (G < KSTEPS) {
                const signed char* base = x + (s * 32 + 2 * t4) * PITCH + G * 32 + 4 * g;
                unsigned wd[4], u[4], lo[4], hi[4];
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    wd[i] = lds32(base + 8 * i * PITCH);
                    u[i] = lds32(base + (8 * i + 1) * PITCH);
                }
                transpose4(wd, lo);  // lo[j]: feature 4 g + j, k = 4 t4 .. 4 t4 + 3
                transpose4(u, hi);   // hi[j]: the same, k = 16 + 4 t4 ..
                const unsigned a0[4] = {lo[0], lo[1], hi[0], hi[1]};  // features 4g, 4g+1
                const unsigned a1[4] = {lo[2], lo[3], hi[2], hi[3]};  // features 4g+2, 4g+3
#pragma unroll
                for (int j = 0; j < NTG; ++j) {
                    mma_s8(acc[gq][0][j], a0, b[j][0], b[j][1]);
                    mma_s8(acc[gq][1][j], a1, b[j][0], b[j][1]);
                }
            }
        }
    }
}

// w8's rows in use into sW, by N threads (t: this one's index among them).
template <int N>
__device__ __forceinline__ void load_w(signed char* sW, const signed char* w8, int d_pad, int t) {
    for (int i = t; i < WROWS * KSTEPS * 2; i += N) {
        const int r = i / (KSTEPS * 2), c = i % (KSTEPS * 2);
        const bool ok = c * 16 < d_pad;
        cp_async16(smem_u32(sW + at(r, c)), ok ? w8 + (long long)r * d_pad + c * 16 : w8, ok ? 16 : 0);
    }
}

// Row tile `tile` of v into dst (zeros past the rows and the row's length), by N threads.
template <int N>
__device__ __forceinline__ void load_tile(signed char* dst, const signed char* v, int tile,
                                          int v_rows, int d_pad, int t) {
    const long long row0 = (long long)tile * TM;
    for (int i = t; i < TM * KSTEPS * 2; i += N) {
        const int r = i / (KSTEPS * 2), c = i % (KSTEPS * 2);
        const bool ok = row0 + r < v_rows && c * 16 < d_pad;
        cp_async16(smem_u32(dst + at(r, c)), ok ? v + (row0 + r) * d_pad + c * 16 : v, ok ? 16 : 0);
    }
}

__device__ __forceinline__ void zero(Sums& acc) {
#pragma unroll
    for (int q = 0; q < GPW; ++q)
#pragma unroll
        for (int m = 0; m < 2; ++m)
#pragma unroll
            for (int j = 0; j < NTG; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[q][m][j][e] = 0;
}

// The block's gradient sums into g64: m-tile 0 of group G holds features 32 G + 4 g (rows g)
// and 32 G + 4 g + 1 (rows g + 8), m-tile 1 features 32 G + 4 g + 2 and + 3.
__device__ __forceinline__ void flush(const Sums& acc, unsigned long long* g64, int d_pad, int w,
                                      int g, int t4) {
#pragma unroll
    for (int gq = 0; gq < GPW; ++gq) {
        const int G = w + 8 * gq;
        if (G < KSTEPS) {
#pragma unroll
            for (int m = 0; m < 2; ++m)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int f = G * 32 + 4 * g + 2 * m + h;
                    if (f < d_pad) {
#pragma unroll
                        for (int j = 0; j < NTG; ++j)
#pragma unroll
                            for (int e = 0; e < 2; ++e) {
                                const int col = j * 8 + 2 * t4 + e;
                                const int value = acc[gq][m][j][h * 2 + e];
                                if (col < NCOL && value != 0)
                                    atomicAdd(g64 + (long long)f * WIDTH + col,
                                              (unsigned long long)(long long)value);
                            }
                    }
                }
        }
    }
}

// Class c's logit of a row from its forward sums: s0's, plus s1's where the forward split
// the features in two (HALVES 2), each term's integer sum exact.
template <int HALVES>
__device__ __forceinline__ double logit_of(const int* s0, const int* s1, int c,
                                           const double* colinfo) {
    double z = 0.0, f = 1.0;
#pragma unroll
    for (int t = 0; t < TERMS; ++t) {
        z += (double)(HALVES == 2 ? s0[t * K + c] + s1[t * K + c] : s0[t * K + c]) * f;
        f /= BASE;
    }
    return colinfo[c] * z + colinfo[K + c];
}

// The rest of a unit's reduction, its first step (v[i] += v[i + 32]) taken by the softmax:
// half a warp per value, + 16 (both here), then 8, 4, 2, 1, into row `unit` of bpart.
// WARPS warps take it, 16 values in all (the static_asserts: k + 1 of them at most).
template <int WARPS>
__device__ __forceinline__ void reduce_unit(const double* sPart, int unit, double* bpart,
                                            int warp, int lane) {
    const int l = lane & 15;
#pragma unroll
    for (int r = 0; r < 8 / WARPS; ++r) {
        const int c = 2 * warp + (lane >> 4) + 2 * WARPS * r;
        const double* pv = sPart + (unit & 1) * (K + 1) * TM + c * TM + l;
        double a = c <= K ? (pv[0] + pv[32]) + (pv[16] + pv[48]) : 0.0;
#pragma unroll
        for (int stride = 8; stride > 0; stride >>= 1)
            a += __shfl_down_sync(0xffffffffu, a, stride, 16);
        if (l == 0 && c <= K) bpart[(long long)unit * (K + 1) + c] = a;
    }
}

#ifndef SPECIALIZED
extern "C" __global__ void __launch_bounds__(THREADS, 1)
evaluate_i8(const signed char* __restrict__ v, int v_rows, int d_pad,
            const signed char* __restrict__ w8, const double* __restrict__ colinfo,
            const int* __restrict__ labels, int n, int units_per_block, int units,
            unsigned long long* __restrict__ g64, double* __restrict__ bpart)
{
    extern __shared__ __align__(128) unsigned char smem[];
    signed char* sW = (signed char*)smem;                          // WROWS x PITCH
    signed char* sX = sW + WROWS * PITCH;                          // 3 x TM x PITCH
    int* sSum = (int*)(sX + 3 * TM * PITCH);                       // 2 x TM x SPITCH
    signed char* sR = (signed char*)(sSum + 2 * TM * SPITCH);      // 2 x WROWS x RPITCH
    double* sPart = (double*)(sR + 2 * WROWS * RPITCH);            // 2 x (K+1) x TM
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t4 = lane & 3;
    const int u0 = blockIdx.x * units_per_block;
    const int u1 = min(u0 + units_per_block, units);
    const int first = 2 * u0, last = 2 * u1;  // tiles [first, last)

    for (int i = tid; i < 2 * WROWS * RPITCH / 4; i += THREADS) ((unsigned*)sR)[i] = 0u;
    load_w<THREADS>(sW, w8, d_pad, tid);
    auto load = [&](int tile, int buf) {
        load_tile<THREADS>(sX + buf * TM * PITCH, v, tile, v_rows, d_pad, tid);
    };
    if (first < last) load(first, 0);
    cp_async_commit();

    Sums acc;
    zero(acc);

    auto softmax = [&](int tile, const int rows0) {  // rows rows0 .. rows0 + 31 of the tile
        const int rl = rows0 + ((tid & 127) >> 2), q = tid & 3;
        const long long row = (long long)tile * TM + rl;
        const bool live = row < n;
        const bool odd = tile & 1;  // the unit's second tile: add to the first's values
        const int kp = kpos(rl);
        signed char* res = sR + (tile & 1) * WROWS * RPITCH;
        double* pv = sPart + ((tile >> 1) & 1) * (K + 1) * TM;
        const int* s0 = sSum + rl * SPITCH;
        const int* s1 = s0 + TM * SPITCH;
        const int target = live ? labels[row] : -1;
        // Every thread takes CPQ classes, with no branch: one past K (its lane has fewer
        // classes) takes class K - 1 again and is dropped, so the lanes of a warp run each
        // class's arithmetic side by side instead of the short lanes' last class after.
        double z[CPQ], top = __longlong_as_double(0xfff0000000000000ULL);  // -inf
#pragma unroll
        for (int m = 0; m < CPQ; ++m) {
            const int c = q + 4 * m;
            z[m] = logit_of<2>(s0, s1, c < K ? c : K - 1, colinfo);
            top = c < K && z[m] > top ? z[m] : top;
        }
        double other = __shfl_xor_sync(0xffffffffu, top, 1);
        top = other > top ? other : top;
        other = __shfl_xor_sync(0xffffffffu, top, 2);
        top = other > top ? other : top;
        double ex[CPQ];
#pragma unroll
        for (int m = 0; m < CPQ; ++m) {
            const double e = exp(z[m] - top);
            ex[m] = q + 4 * m < K ? e : 0.0;
        }
        double total = 0.0;  // in class order, as softmax_xent_i8 adds them
#pragma unroll
        for (int c = 0; c < K; ++c)
            total += __shfl_sync(0xffffffffu, ex[c >> 2], (lane & ~3) | (c & 3));
        const double lse = top + log(total);
        if (!live && q == 0) pv[K * TM + rl] = odd ? pv[K * TM + rl] + 0.0 : 0.0;
        double value[CPQ];
        signed char term[CPQ][TERMS];
#pragma unroll
        for (int m = 0; m < CPQ; ++m) {  // every class's arithmetic first, with no branch
            const int c = q + 4 * m;
            const double p = exp(z[m] - lse);
            value[m] = live ? p - (c == target ? 1.0 : 0.0) : 0.0;
            double rest = value[m] * TOP;
#pragma unroll
            for (int t = 0; t < TERMS; ++t) {
                const double qv = floor(rest + 0.5);
                term[m][t] = (signed char)(long long)qv;
                rest = (rest - qv) * BASE;
            }
        }
#pragma unroll
        for (int m = 0; m < CPQ; ++m) {
            const int c = q + 4 * m;
            if (c < K) {
                if (c == target) {  // the row's cross-entropy
                    const double loss = lse - z[m];
                    pv[K * TM + rl] = odd ? pv[K * TM + rl] + loss : loss;
                }
#pragma unroll
                for (int t = 0; t < TERMS; ++t) res[(t * K + c) * RPITCH + kp] = term[m][t];
                pv[c * TM + rl] = odd ? pv[c * TM + rl] + value[m] : value[m];
            }
        }
    };

    int buf = 0;  // tile j's buffer: (j - first) % 3
    for (int tile = first; tile <= last; ++tile) {
        const int next = buf == 2 ? 0 : buf + 1, prev = buf == 0 ? 2 : buf - 1;
        cp_async_wait<0>();
        __syncthreads();  // this tile is in; the buffer of tile - 2 is free
        if (tile + 1 < last) load(tile + 1, next);
        cp_async_commit();
        const bool fresh = tile < last, done = tile > first;

        if (fresh) {  // 1. forward: rows 16 mt .. of the tile, features of k-steps [k0, k1)
            const signed char* x = sX + buf * TM * PITCH;
            const int mt = warp & 3, kh = warp >> 2;
            const int k0 = kh ? KH : 0, k1 = kh ? KSTEPS : KH;
            int facc[NTG][4];
#pragma unroll
            for (int j = 0; j < NTG; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) facc[j][e] = 0;
#pragma unroll 2
            for (int ks = k0; ks < k1; ++ks) {
                unsigned af[4];
                load_a(af, x, mt * 16, ks, lane, at);
                unsigned bf[NTG][2];
#pragma unroll
                for (int np = 0; np < NTG / 2; ++np)
                    load_b2(bf[2 * np], bf[2 * np + 1], sW, np * 16, ks, lane, at);
                if (NTG & 1) load_b1(bf[NTG - 1], sW, (NTG - 1) * 8, ks, lane);
#pragma unroll
                for (int nt = 0; nt < NTG; ++nt) mma_s8(facc[nt], af, bf[nt][0], bf[nt][1]);
            }
            int* sums = sSum + kh * TM * SPITCH;
#pragma unroll
            for (int nt = 0; nt < NTG; ++nt)
#pragma unroll
                for (int h = 0; h < 2; ++h)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int col = nt * 8 + t4 * 2 + e;
                        if (col < NCOL) sums[(mt * 16 + g + h * 8) * SPITCH + col] = facc[nt][h * 2 + e];
                    }
        }
        if (done && !(tile & 1))  // tile - 1 ended a unit
            reduce_unit<THREADS / 32>(sPart, (tile - 1) >> 1, bpart, warp, lane);
        __syncthreads();

        // 2. the softmax of this tile beside the gradient of the one before
        const signed char* rprev = sR + ((tile - 1) & 1) * WROWS * RPITCH;  // tile - 1's
        const signed char* xprev = sX + prev * TM * PITCH;
        if (warp < 4) {
            if (fresh) softmax(tile, 0);
            if (done) gradient(acc, rprev, xprev, warp, g, t4);
        } else {
            if (done) gradient(acc, rprev, xprev, warp, g, t4);
            if (fresh) softmax(tile, 32);
        }
        buf = next;
    }

    flush(acc, g64, d_pad, warp, g, t4);
}

#else  // SPECIALIZED: sm_90a (setmaxnreg), warps of their own for the softmax

// Named barriers (0 is __syncthreads): the compute warps among themselves, the softmax
// warps among themselves, and a tile's forward sums (FULL) and residual terms (RES), two
// of each for tiles of either parity.
#define SOFT_WARPS 4
#define COMPUTE 256
#define BLOCK (SOFT_WARPS * 32 + COMPUTE)
#define BAR_COMPUTE 1
#define BAR_SOFT 2
#define BAR_FULL 3   // + tile & 1
#define BAR_RES 5    // + tile & 1
#ifndef SOFT_REGS
#define SOFT_REGS 56
#endif
#ifndef COMPUTE_REGS
#define COMPUTE_REGS 224
#endif
#define CPH ((K + 1) / 2)              // classes per thread of a row's two
#define NA ((NTG + 1) / 2)             // n8 tiles of the forward's first column half

static_assert(K + 1 <= 4 * SOFT_WARPS, "the block sums' reduction takes half a warp per value, twice");
static_assert(SOFT_REGS * 32 * SOFT_WARPS + COMPUTE_REGS * COMPUTE <= (65536 / BLOCK & ~7) * BLOCK,
              "the two roles' registers are the block's at launch (a multiple of 8 a thread)");

__device__ __forceinline__ void bar_sync(int id, int n) {
    asm volatile("bar.sync %0, %1;\n" :: "r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void bar_arrive(int id, int n) {
    asm volatile("bar.arrive %0, %1;\n" :: "r"(id), "r"(n) : "memory");
}

// The forward product of a tile's rows 16 mt .. 16 mt + 15 against term columns of n8 tiles
// [NB, NE), over every feature, into sums (TM x SPITCH int32).
template <int NB, int NE>
__device__ __forceinline__ void forward(const signed char* x, const signed char* sW, int* sums,
                                        int mt, int lane) {
    if constexpr (NE > NB) {
        constexpr int NN = NE - NB;
        const int g = lane >> 2, t4 = lane & 3;
        int facc[NN][4];
#pragma unroll
        for (int j = 0; j < NN; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) facc[j][e] = 0;
#pragma unroll
        for (int ks = 0; ks < KSTEPS; ++ks) {
            unsigned af[4];
            load_a(af, x, mt * 16, ks, lane, at);
            unsigned bf[NN][2];
#pragma unroll
            for (int np = 0; np < NN / 2; ++np)
                load_b2(bf[2 * np], bf[2 * np + 1], sW, (NB + 2 * np) * 8, ks, lane, at);
            if (NN & 1) load_b1(bf[NN - 1], sW, (NE - 1) * 8, ks, lane);
#pragma unroll
            for (int nt = 0; nt < NN; ++nt) mma_s8(facc[nt], af, bf[nt][0], bf[nt][1]);
        }
#pragma unroll
        for (int nt = 0; nt < NN; ++nt)
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int col = (NB + nt) * 8 + t4 * 2 + e;
                    if (col < NCOL) sums[(mt * 16 + g + h * 8) * SPITCH + col] = facc[nt][h * 2 + e];
                }
    }
}

// The softmax of a whole tile by the softmax warps: two threads per row (st: 0..127), the
// classes q, q + 2, ... each; the arithmetic and the order of every sum are the other
// kernel's (softmax_xent_i8's).
__device__ __forceinline__ void softmax_tile(int tile, int st, const int* sums, signed char* res,
                                             double* pv, const double* colinfo,
                                             const int* labels, int n) {
    const int rl = st >> 1, q = st & 1, lane = st & 31;
    const long long row = (long long)tile * TM + rl;
    const bool live = row < n;
    const bool odd = tile & 1;  // the unit's second tile: add to the first's values
    const int kp = kpos(rl);
    const int* s = sums + rl * SPITCH;
    const int target = live ? labels[row] : -1;
    // Every thread takes CPH classes, with no branch: one past K takes class K - 1 again
    // and is dropped.
    double z[CPH], top = __longlong_as_double(0xfff0000000000000ULL);  // -inf
#pragma unroll
    for (int m = 0; m < CPH; ++m) {
        const int c = q + 2 * m;
        z[m] = logit_of<1>(s, nullptr, c < K ? c : K - 1, colinfo);
        top = c < K && z[m] > top ? z[m] : top;
    }
    const double other = __shfl_xor_sync(0xffffffffu, top, 1);
    top = other > top ? other : top;
    double ex[CPH];
#pragma unroll
    for (int m = 0; m < CPH; ++m) {
        const double e = exp(z[m] - top);
        ex[m] = q + 2 * m < K ? e : 0.0;
    }
    double total = 0.0;  // in class order, as softmax_xent_i8 adds them
#pragma unroll
    for (int c = 0; c < K; ++c) total += __shfl_sync(0xffffffffu, ex[c >> 1], (lane & ~1) | (c & 1));
    const double lse = top + log(total);
    if (!live && q == 0) pv[K * TM + rl] = odd ? pv[K * TM + rl] + 0.0 : 0.0;
#pragma unroll
    for (int m = 0; m < CPH; ++m) {  // each class's terms written as they are made
        const int c = q + 2 * m;
        const double p = exp(z[m] - lse);
        const double value = live ? p - (c == target ? 1.0 : 0.0) : 0.0;
        double rest = value * TOP;
#pragma unroll
        for (int t = 0; t < TERMS; ++t) {
            const double qv = floor(rest + 0.5);
            if (c < K) res[(t * K + c) * RPITCH + kp] = (signed char)(long long)qv;
            rest = (rest - qv) * BASE;
        }
        if (c < K) {
            if (c == target) {  // the row's cross-entropy
                const double loss = lse - z[m];
                pv[K * TM + rl] = odd ? pv[K * TM + rl] + loss : loss;
            }
            pv[c * TM + rl] = odd ? pv[c * TM + rl] + value : value;
        }
    }
}

// The same evaluation with the softmax on warps of its own: warps 0-3 take every tile's
// softmax and its units' sums (few registers), warps 4-11 the loads, the forward products
// and the gradient's products (the registers of the gradient's sums), so that the float64
// chain of one tile runs while the tensor cores take the next.  A tile's forward sums are
// double-buffered in shared memory (the compute warps take tile j + 1's forward product
// while the softmax warps read tile j's); the compute warps' forward splits the columns,
// not the features, in two, so each sum is whole.  Iteration j of the compute warps: wait
// for tile j's rows, load tile j + 1, forward of tile j (then FULL), wait for tile j - 1's
// residual (RES), gradient of tile j - 1.  The softmax warps: wait FULL of tile j, its
// softmax, RES; after a unit's second tile, its block sums.
extern "C" __global__ void __launch_bounds__(BLOCK, 1)
evaluate_i8(const signed char* __restrict__ v, int v_rows, int d_pad,
            const signed char* __restrict__ w8, const double* __restrict__ colinfo,
            const int* __restrict__ labels, int n, int units_per_block, int units,
            unsigned long long* __restrict__ g64, double* __restrict__ bpart)
{
    extern __shared__ __align__(128) unsigned char smem[];
    signed char* sW = (signed char*)smem;                          // WROWS x PITCH
    signed char* sX = sW + WROWS * PITCH;                          // 3 x TM x PITCH
    int* sSum = (int*)(sX + 3 * TM * PITCH);                       // 2 x TM x SPITCH
    signed char* sR = (signed char*)(sSum + 2 * TM * SPITCH);      // 2 x WROWS x RPITCH
    double* sPart = (double*)(sR + 2 * WROWS * RPITCH);            // 2 x (K+1) x TM
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int u0 = blockIdx.x * units_per_block;
    const int u1 = min(u0 + units_per_block, units);
    const int first = 2 * u0, last = 2 * u1;  // tiles [first, last)

    for (int i = tid; i < 2 * WROWS * RPITCH / 4; i += BLOCK) ((unsigned*)sR)[i] = 0u;
    __syncthreads();

    if (warp < SOFT_WARPS) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(SOFT_REGS));
        for (int tile = first; tile < last; ++tile) {
            bar_sync(BAR_FULL + (tile & 1), BLOCK);
            softmax_tile(tile, tid, sSum + (tile & 1) * TM * SPITCH, sR + (tile & 1) * WROWS * RPITCH,
                         sPart + ((tile >> 1) & 1) * (K + 1) * TM, colinfo, labels, n);
            bar_arrive(BAR_RES + (tile & 1), BLOCK);
            if (tile & 1) {  // the unit is whole
                bar_sync(BAR_SOFT, SOFT_WARPS * 32);
                reduce_unit<SOFT_WARPS>(sPart, tile >> 1, bpart, warp, lane);
            }
        }
        return;
    }

    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(COMPUTE_REGS));
    const int ct = tid - SOFT_WARPS * 32, cw = ct >> 5;
    const int g = lane >> 2, t4 = lane & 3;
    load_w<COMPUTE>(sW, w8, d_pad, ct);
    auto load = [&](int tile, int buf) {
        load_tile<COMPUTE>(sX + buf * TM * PITCH, v, tile, v_rows, d_pad, ct);
    };
    if (first < last) load(first, 0);
    cp_async_commit();

    Sums acc;
    zero(acc);

    int buf = 0;  // tile j's buffer: (j - first) % 3
    for (int tile = first; tile <= last; ++tile) {
        const int next = buf == 2 ? 0 : buf + 1, prev = buf == 0 ? 2 : buf - 1;
        cp_async_wait<0>();
        bar_sync(BAR_COMPUTE, COMPUTE);  // this tile is in; the buffer of tile - 2 is free
        if (tile + 1 < last) load(tile + 1, next);
        cp_async_commit();
        if (tile < last) {  // tile's sums: its softmax read tile - 2's before RES of tile - 2
            const signed char* x = sX + buf * TM * PITCH;
            int* sums = sSum + (tile & 1) * TM * SPITCH;
            if (cw < 4) forward<0, NA>(x, sW, sums, cw, lane);
            else forward<NA, NTG>(x, sW, sums, cw & 3, lane);
            bar_arrive(BAR_FULL + (tile & 1), BLOCK);
        }
        if (tile > first) {
            bar_sync(BAR_RES + ((tile - 1) & 1), BLOCK);
            gradient(acc, sR + ((tile - 1) & 1) * WROWS * RPITCH, sX + prev * TM * PITCH, cw, g, t4);
        }
        buf = next;
    }
    flush(acc, g64, d_pad, cw, g, t4);
}
#endif
