// Logistic regression's whole float32 evaluation over the rows in one pass, on the tensor
// cores: the forward product, the softmax and the gradient's product v^T R from one read
// of each row.  See onepass_tf32.py.
//
// Products in float32 accuracy from tf32 tensor cores ("3xTF32"): each operand x is split
// into hi = tf32(x) and lo = tf32(x - hi), and a product is lo*hi' + hi*lo' + hi*hi'
// (mma.sync m16n8k8, float32 sums); the dropped lo*lo' is below float32's rounding.
//
// A block (WARPS warps) walks a run of row tiles (TM rows each, whole rows in shared memory,
// STAGES buffers: the tile taken and the next ones arriving through cp.async), with the
// coefficients and intercepts loaded once (and split once, WSPLIT).  For each tile:
//  1. forward: warp w takes rows 16 (w % FM) .. +15 against every class over its share
//     (1 / FK) of the features; the FK shares' sums go to shared memory;
//  2. softmax: TPR threads a row, classes s, s + TPR, ...: the share's sums added in
//     order to the intercept (float32 logits), the row's largest logit and float64
//     exp-sum through warp shuffles, the log-sum-exp; each residual (float64, times the
//     row's weight) is added into the thread's intercept sums and goes to shared memory as
//     float32; the row's cross-entropy is added by the thread holding its label;
//  3. gradient: warp w takes the features of m-tiles w % GM, + GM, ... (16 each) against
//     every class, over the tile's row k-steps w / GM, + GK, ... (8 rows each: k index
//     t is row 2t, t + 4 row 2t + 1, so that the fragments' loads fall on distinct banks).
//     Each k-step's products are summed from zero on the tensor cores, whose float32 sums
//     round toward zero, and added to the block's float32 sums (registers, for the
//     block's whole run) by a float32 add, which rounds to nearest.
// At the end the GK row groups' sums are added in order and written as the block's part
// of the gradient, and the intercept sums and cross-entropies (float64) in row order.

#ifndef D
#define D 96             // features of a row
#endif
#ifndef K
#define K 10             // classes
#endif
#ifndef TM
#define TM 64            // rows per tile: 16, 32 or 64
#endif
#ifndef WARPS
#define WARPS 8          // warps a block: 4, 8 or 16
#endif
#ifndef GM
#define GM 1             // gradient: warps along the features (WARPS / GM along the rows)
#endif
#ifndef STAGES
#define STAGES 2         // tile buffers: the one taken and STAGES - 1 arriving
#endif
#ifndef WSPLIT
#define WSPLIT 1         // 1: the coefficients' tf32 parts made once (twice their memory)
#endif
#ifndef VEC
#define VEC 4            // 4: rows copied 16 bytes at a time (D % 4 == 0, X 16-byte aligned)
#endif
#ifndef MINB
#define MINB 2           // blocks an SM the registers must allow
#endif
#define THREADS (32 * WARPS)
#define DP (((D + 15) / 16) * 16)     // features padded to whole m16 tiles (zeros)
#define KP (((K + 7) / 8) * 8)        // classes padded to whole n8 tiles (zeros)
#define NT (KP / 8)
#define KS (DP / 8)                   // forward k-steps
#define MT (DP / 16)                  // gradient m-tiles
#define FM (TM / 16)                  // forward: warps along the rows
#define FK (WARPS / FM)               // forward: warps along the features
#define GK (WARPS / GM)               // gradient: warps along the rows
#define TK (TM / 8)                   // gradient: k-steps of a tile
#define MPW ((MT + GM - 1) / GM)      // gradient: m-tiles a warp
#define ACC (MPW * NT * 4)            // gradient: sums a thread
#define FSETS (NT <= 4 ? 2 : 1)       // forward: sets of sums a thread (even and odd k-steps)
#define TPR (THREADS / TM)            // softmax: threads a row
#define CPT ((KP + TPR - 1) / TPR)    // softmax: classes a thread
#define PX (DP + 4)                   // a tile row's stride: 4 times an odd number, so that
                                      // both products' loads fall on distinct banks
#define PW ((KP % 16 == 8) ? KP : KP + 8)   // a coefficient row's: 8 times an odd number
#define PR (KP + 4)                   // a residual row's

__device__ __forceinline__ void cp_async4(unsigned dst, const void* src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" :: "r"(dst), "l"(src));
}

// hi = tf32(x) rounded to nearest (ties away, as cvt.rna.tf32.f32, which Hopper runs as
// several instructions: here an integer add and a mask; finite x only, as every value the
// kernel splits is), lo = x - hi (exact), whose low 13 bits the tensor cores drop:
// x = hi + lo to 2^-21 of x.
#ifndef ROUND_LO
#define ROUND_LO 0
#endif
__device__ __forceinline__ void split(float x, unsigned& hi, unsigned& lo) {
    hi = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
    lo = __float_as_uint(x - __uint_as_float(hi));
#if ROUND_LO
    lo = (lo + 0x1000u) & 0xffffe000u;
#endif
}

// c += a * b: mma.sync m16n8k8, tf32 in, float32 sums.
__device__ __forceinline__ void mma_tf32(float* c, const unsigned* a, unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// c += a * b in float32 accuracy: the small terms first, then the large.
__device__ __forceinline__ void mma3(float* c, const unsigned* ah, const unsigned* al,
                                     unsigned bh0, unsigned bh1, unsigned bl0, unsigned bl1) {
    mma_tf32(c, al, bh0, bh1);
    mma_tf32(c, ah, bl0, bl1);
    mma_tf32(c, ah, bh0, bh1);
}

// Rows row0 .. row0 + rows - 1 of X into a tile buffer (one cp.async group).
__device__ __forceinline__ void load_tile(float* dst, const float* __restrict__ X, long long row0,
                                          int rows, int tid) {
#if VEC == 4
    constexpr int CH = D / 4;
    for (int e = tid; e < rows * CH; e += THREADS) {
        const int r = e / CH, c = e - r * CH;
        cp_async16(smem_u32(dst + r * PX + 4 * c), X + (row0 + r) * D + 4 * c, 16);
    }
#else
    for (int e = tid; e < rows * D; e += THREADS) {
        const int r = e / D, c = e - r * D;
        cp_async4(smem_u32(dst + r * PX + c), X + (row0 + r) * D + c);
    }
#endif
    cp_async_commit();
}

// One forward k-step (8 features from ks * 8) of the warp's 16 rows into acc.  The
// coefficients: wh (and wl) their tf32 parts where WSPLIT, else float32 split here.
__device__ __forceinline__ void forward_step(float (&acc)[NT][4], const float* xa,
                                             const unsigned* wh, const unsigned* wl, int ks,
                                             int g, int t) {
    const float* xk = xa + ks * 8;
    unsigned ah[4], al[4];
    split(xk[0], ah[0], al[0]);
    split(xk[8 * PX], ah[1], al[1]);
    split(xk[4], ah[2], al[2]);
    split(xk[8 * PX + 4], ah[3], al[3]);
    const int at = (ks * 8 + t) * PW + g;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        unsigned bh0, bl0, bh1, bl1;
#if WSPLIT
        bh0 = wh[at + nt * 8]; bl0 = wl[at + nt * 8];
        bh1 = wh[at + 4 * PW + nt * 8]; bl1 = wl[at + 4 * PW + nt * 8];
#else
        split(__uint_as_float(wh[at + nt * 8]), bh0, bl0);
        split(__uint_as_float(wh[at + 4 * PW + nt * 8]), bh1, bl1);
#endif
        mma3(acc[nt], ah, al, bh0, bh1, bl0, bl1);
    }
}

extern "C" __global__ void __launch_bounds__(THREADS, MINB)
evaluate_tf32(const float* __restrict__ X, const int* __restrict__ labels,
              const float* __restrict__ params, const float* __restrict__ weights, int weighted,
              int n, float* __restrict__ grad_parts, double* __restrict__ sum_parts) {
    extern __shared__ __align__(16) unsigned char smem[];
    float* xs = reinterpret_cast<float*>(smem);   // STAGES tile buffers
    unsigned* wh = reinterpret_cast<unsigned*>(xs + STAGES * TM * PX);  // coefficients,
    unsigned* wl = wh + (WSPLIT ? DP * PW : 0);   // DP x PW: tf32 parts, or float32 in wh
    float* bs = reinterpret_cast<float*>(wl + DP * PW);  // intercepts, KP
    float* ps = bs + KP;                           // forward sums, FK x TM x KP
    float* rs = ps + FK * TM * KP;                 // residuals, TM x PR
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int tiles = (n + TM - 1) / TM;

    for (int e = tid; e < STAGES * TM * PX; e += THREADS) xs[e] = 0.f;  // padding stays zero
    for (int e = tid; e < DP * PW; e += THREADS) {
        const int j = e / PW, c = e - j * PW;
        const float w = (j < D && c < K) ? params[j * K + c] : 0.f;
#if WSPLIT
        split(w, wh[e], wl[e]);
#else
        wh[e] = __float_as_uint(w);
#endif
    }
    for (int e = tid; e < KP; e += THREADS) bs[e] = e < K ? params[D * K + e] : 0.f;
    for (int e = tid; e < TM * PR; e += THREADS) rs[e] = 0.f;
    __syncthreads();

    float gacc[MPW][NT][4];
#pragma unroll
    for (int mi = 0; mi < MPW; ++mi)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int q = 0; q < 4; ++q) gacc[mi][nt][q] = 0.f;
    double bsum[CPT];
#pragma unroll
    for (int i = 0; i < CPT; ++i) bsum[i] = 0.0;
    double loss = 0.0;
    const int r = tid / TPR, s = tid % TPR;       // softmax: row r, classes s + i TPR
    const int fm = warp % FM, fk = warp / FM;     // forward
    const int gm = warp % GM, gk = warp / GM;     // gradient

    // Tile j of the block is tile blockIdx.x + j * gridDim.x, in buffer j % STAGES; a
    // cp.async group is committed for every tile index, empty past the last tile.
#pragma unroll
    for (int i = 0; i < STAGES - 1; ++i) {
        const int at = blockIdx.x + i * gridDim.x;
        if (at < tiles)
            load_tile(xs + i * TM * PX, X, (long long)at * TM, min(TM, n - at * TM), tid);
        else
            cp_async_commit();
    }
    int tile = blockIdx.x;
    for (int j = 0; tile < tiles; tile += gridDim.x, ++j) {
        float* cur = xs + (j % STAGES) * TM * PX;
        const int row0 = tile * TM, rows = min(TM, n - row0);
        const int next = tile + (STAGES - 1) * gridDim.x;
        if (next < tiles) {
            load_tile(xs + ((j + STAGES - 1) % STAGES) * TM * PX, X, (long long)next * TM,
                      min(TM, n - next * TM), tid);
        } else {
            cp_async_commit();
        }
        cp_async_wait<STAGES - 1>();
        __syncthreads();

        {   // 1. forward: FSETS sets of sums (even and odd k-steps), added at the end
            const int k0 = fk * KS / FK, k1 = (fk + 1) * KS / FK;
            float acc0[NT][4], acc1[NT][4];
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int q = 0; q < 4; ++q) acc0[nt][q] = acc1[nt][q] = 0.f;
            const float* xa = cur + (fm * 16 + g) * PX + t;
            int ks = k0;
#if FSETS == 2
            for (; ks + 1 < k1; ks += 2) {
                forward_step(acc0, xa, wh, wl, ks, g, t);
                forward_step(acc1, xa, wh, wl, ks + 1, g, t);
            }
#endif
            for (; ks < k1; ++ks) forward_step(acc0, xa, wh, wl, ks, g, t);
            float* pp = ps + (fk * TM + fm * 16 + g) * KP + 2 * t;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
#if FSETS == 2
#pragma unroll
                for (int q = 0; q < 4; ++q) acc0[nt][q] += acc1[nt][q];
#endif
                pp[nt * 8] = acc0[nt][0];
                pp[nt * 8 + 1] = acc0[nt][1];
                pp[8 * KP + nt * 8] = acc0[nt][2];
                pp[8 * KP + nt * 8 + 1] = acc0[nt][3];
            }
        }
        __syncthreads();

        {   // 2. softmax, cross-entropy and residuals
            const bool live = r < rows;
            float z[CPT];
            float top = __int_as_float(0xff800000);  // -inf
#pragma unroll
            for (int i = 0; i < CPT; ++i) {
                const int c = s + i * TPR;
                z[i] = 0.f;
                if (live && c < K) {
                    float v = bs[c];
#pragma unroll
                    for (int h = 0; h < FK; ++h) v += ps[(h * TM + r) * KP + c];
                    z[i] = v;
                    top = fmaxf(top, v);
                }
            }
#pragma unroll
            for (int o = TPR / 2; o > 0; o >>= 1)
                top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, o));
            double total = 0.0;
#pragma unroll
            for (int i = 0; i < CPT; ++i)
                if (live && s + i * TPR < K) total += (double)expf(z[i] - top);
#pragma unroll
            for (int o = TPR / 2; o > 0; o >>= 1) total += __shfl_xor_sync(0xffffffffu, total, o);
            if (live) {
                const double lse = (double)top + log(total);
                const int y = labels[row0 + r];
                const double wr = weighted ? (double)weights[row0 + r] : 1.0;
#pragma unroll
                for (int i = 0; i < CPT; ++i) {
                    const int c = s + i * TPR;
                    if (c < K) {
                        const double e = wr * ((double)expf((float)((double)z[i] - lse))
                                               - (c == y ? 1.0 : 0.0));
                        bsum[i] += e;
                        if (c == y) loss += wr * (lse - (double)z[i]);
                        rs[r * PR + c] = (float)e;
                    }
                }
            } else {
#pragma unroll
                for (int i = 0; i < CPT; ++i) {
                    const int c = s + i * TPR;
                    if (c < K) rs[r * PR + c] = 0.f;   // a short tile's stale rows add nothing
                }
            }
        }
        __syncthreads();

        // 3. gradient: gacc[mi][nt] += X[rows, features of m-tile]^T R[rows, classes of nt]
        for (int kk = gk; kk < TK; kk += GK) {
            const int rb = kk * 8 + 2 * t;
            unsigned bh[NT][2], bl[NT][2];
            const float* rr = rs + rb * PR + g;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                split(rr[nt * 8], bh[nt][0], bl[nt][0]);
                split(rr[PR + nt * 8], bh[nt][1], bl[nt][1]);
            }
            const float* xr = cur + rb * PX + g;
#pragma unroll
            for (int mi = 0; mi < MPW; ++mi) {
                const int mt = gm + mi * GM;
                if (MT % GM != 0 && mt >= MT) break;
                const float* xm = xr + mt * 16;
                unsigned ah[4], al[4];
                split(xm[0], ah[0], al[0]);
                split(xm[8], ah[1], al[1]);
                split(xm[PX], ah[2], al[2]);
                split(xm[PX + 8], ah[3], al[3]);
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    // The tensor cores' float32 sums round toward zero: over a block's
                    // thousands of rows that drifts.  A k-step's sums start from zero and
                    // are added to the block's by a float32 add (round to nearest).
                    float c[4] = {0.f, 0.f, 0.f, 0.f};
                    mma3(c, ah, al, bh[nt][0], bh[nt][1], bl[nt][0], bl[nt][1]);
#pragma unroll
                    for (int q = 0; q < 4; ++q) gacc[mi][nt][q] += c[q];
                }
            }
        }
        __syncthreads();
    }
    cp_async_wait<0>();
    __syncthreads();

    // The row groups' gradient sums, added in order (group 0 first) through shared memory.
    float* red = reinterpret_cast<float*>(smem) + gm * 32 + lane;
    float* sums = &gacc[0][0][0];   // indexed by unrolled loops: still registers
    for (int step = 1; step < GK; ++step) {
        if (gk == step) {
#pragma unroll
            for (int i = 0; i < ACC; ++i) red[i * (GM * 32)] = sums[i];
        }
        __syncthreads();
        if (gk == 0) {
#pragma unroll
            for (int i = 0; i < ACC; ++i) sums[i] += red[i * (GM * 32)];
        }
        __syncthreads();
    }
    float* gout = grad_parts + (size_t)blockIdx.x * (D * K);
    if (gk == 0) {
#pragma unroll
        for (int mi = 0; mi < MPW; ++mi) {
            const int f0 = (gm + mi * GM) * 16 + g;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                const int c0 = nt * 8 + 2 * t;
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    const int f = f0 + (q >> 1) * 8, c = c0 + (q & 1);
                    if (f < D && c < K) gout[f * K + c] = gacc[mi][nt][q];
                }
            }
        }
    }

    // Intercept sums: each class's rows in row order; then the cross-entropies.
    double* dred = reinterpret_cast<double*>(smem);
    __syncthreads();
#pragma unroll
    for (int i = 0; i < CPT; ++i) {
        const int c = s + i * TPR;
        if (c < KP) dred[r * KP + c] = bsum[i];
    }
    __syncthreads();
    double* sout = sum_parts + (size_t)blockIdx.x * (K + 1);
    if (tid < K) {
        double total = 0.0;
        for (int i = 0; i < TM; ++i) total += dred[i * KP + tid];
        sout[tid] = total;
    }
    __syncthreads();
    dred[tid] = loss;
    __syncthreads();
    if (tid == 0) {
        double total = 0.0;
        for (int i = 0; i < THREADS; ++i) total += dred[i];
        sout[K] = total;
    }
}
