// Logistic regression's forward product and softmax over int8 rows in one pass: the
// logits' int32 term sums stay in shared memory instead of going to memory and back.
// See fused.py; the arithmetic is cuda_int8.py's (softmax_xent_i8), operation for
// operation, so the residual terms and the block sums come out the same.
//
// A block owns BM data rows.  Its 8 warps each compute 16 rows x WIDTH term columns of
// v (rows x d_pad, int8) times w8^T (w8: WIDTH x d_pad) with mma.sync m16n8k32, both
// operands streaming through a STAGES-deep cp.async ring.  Then the ring holds the
// block's int32 sums, one thread per row puts its logits together in float64, takes the
// softmax and the cross-entropy, writes the residual as I8 terms (resid8: WIDTH x
// pitch, a column per row) and leaves its K + 1 values for the block's sums, which are
// reduced in cuda_int8's order into row blockIdx.x of bpart.

#define BM 128           // data rows per block: cuda_int8.THREADS, so bpart's rows are its
#ifndef BK
#define BK 128           // bytes of a row per pipeline stage: whole 128-byte lines
#endif
#ifndef STAGES
#define STAGES 3
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 3     // blocks per SM the registers must allow (the shared memory allows 3)
#endif
#define CH (BK / 16)     // 16-byte chunks of a row per stage
#ifndef CLASSES
#define CLASSES 10       // k: a kernel per class count, its loops over classes unrolled
#endif
#ifndef WIDTH
#define WIDTH 48         // term columns: TERMS per class, padded to 16
#endif
#define THREADS 256
#define NT (WIDTH / 8)   // n8 tiles: every warp computes all of them
#define PITCH (WIDTH + 1)  // int32 per row of the block's sums in shared memory
#define TERMS 4          // cuda_int8.I8_TERMS
#define TOP 127.0        // cuda_int8.I8_TOP
#define BASE 254.0       // cuda_int8.I8_BASE
#define LOCAL_K 15       // cuda_int8.I8_LOCAL_K: the most classes
#define K CLASSES

// Byte offset of chunk c of row r in a stage: chunks swizzled so that the 8 rows one
// ldmatrix reads fall in 8 different bank groups.
__device__ __forceinline__ int at(int r, int c) {
#if BK == 128
    return r * 128 + ((c ^ (r & 7)) << 4);
#else
    return swz(r, c);
#endif
}

__device__ __forceinline__ double logit_of(const int* sums, int c, const double* colinfo) {
    double z = 0.0, f = 1.0;
#pragma unroll
    for (int t = 0; t < TERMS; ++t) {
        z += (double)sums[t * K + c] * f;
        f /= BASE;
    }
    return colinfo[c] * z + colinfo[K + c];
}

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
forward_softmax_i8(const signed char* __restrict__ v, int v_rows, int d_pad,
                   const signed char* __restrict__ w8, const double* __restrict__ colinfo,
                   const int* __restrict__ labels, int n,
                   signed char* __restrict__ resid8, long long pitch,
                   double* __restrict__ bpart)
{
    extern __shared__ __align__(128) unsigned char smem[];
    signed char* sA = (signed char*)smem;
    signed char* sB = sA + STAGES * BM * BK;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int row0 = blockIdx.x * BM;
    const int nk = (d_pad + BK - 1) / BK;

    // Each thread copies the same 16-byte chunk c of rows r, r + THREADS / CH, ... of
    // every stage; a row's chunks are adjacent threads (whole lines per warp).
    const int lr = tid / CH, lc = tid % CH;
    int load_k0 = 0, load_stage = 0;
    auto load = [&]() {
        signed char* a = sA + load_stage * BM * BK;
        signed char* b = sB + load_stage * WIDTH * BK;
        const int gk = load_k0 + lc * 16;
        const bool kin = gk < d_pad;
#pragma unroll
        for (int r = lr; r < BM; r += THREADS / CH) {
            const int grow = row0 + r;
            const bool ok = kin && grow < v_rows;
            cp_async16(smem_u32(a + at(r, lc)), ok ? v + (long long)grow * d_pad + gk : v, ok ? 16 : 0);
        }
#pragma unroll
        for (int r = lr; r < WIDTH; r += THREADS / CH)
            cp_async16(smem_u32(b + at(r, lc)), kin ? w8 + (long long)r * d_pad + gk : w8, kin ? 16 : 0);
        load_stage = load_stage + 1 == STAGES ? 0 : load_stage + 1;
        load_k0 += BK;
    };

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < nk) load();
        cp_async_commit();
    }

    int acc[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[j][e] = 0;

    int stage = 0;
    for (int kb = 0; kb < nk; ++kb) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        if (kb + STAGES - 1 < nk) load();
        cp_async_commit();

        const signed char* a = sA + stage * BM * BK;
        const signed char* b = sB + stage * WIDTH * BK;
        const int steps = min(BK / 32, (d_pad - kb * BK + 31) / 32);
#pragma unroll
        for (int ks = 0; ks < BK / 32; ++ks) {
            if (ks < steps) {
                unsigned af[4];
                load_a(af, a, warp * 16, ks, lane, at);
                unsigned bf[NT][2];
#pragma unroll
                for (int np = 0; np < NT / 2; ++np)
                    load_b2(bf[2 * np], bf[2 * np + 1], b, np * 16, ks, lane, at);
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) mma_s8(acc[nt], af, bf[nt][0], bf[nt][1]);
            }
        }
        stage = stage + 1 == STAGES ? 0 : stage + 1;
    }
    cp_async_wait<0>();
    __syncthreads();  // the ring is free: the block's sums and the parts take its place

    int* sums = (int*)smem;                                   // BM x PITCH
    double* part = (double*)(smem + ((BM * PITCH * 4 + 15) / 16) * 16);   // (K + 1) x BM
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int e = 0; e < 2; ++e)
                sums[(warp * 16 + (lane >> 2) + h * 8) * PITCH + nt * 8 + (lane & 3) * 2 + e] =
                    acc[nt][h * 2 + e];
    __syncthreads();

    if (tid < BM) {  // the classes' loops unrolled: z in registers, the exps side by side
        const int row = row0 + tid;
        if (row < n) {
            const int* mine = sums + tid * PITCH;
            const int target = labels[row];
            double z[K];
            double top = logit_of(mine, 0, colinfo);
            z[0] = top;
#pragma unroll
            for (int c = 1; c < K; ++c) {
                z[c] = logit_of(mine, c, colinfo);
                top = z[c] > top ? z[c] : top;
            }
            double total = 0.0;
#pragma unroll
            for (int c = 0; c < K; ++c) total += exp(z[c] - top);
            const double lse = top + log(total);
            double loss = 0.0;
#pragma unroll
            for (int c = 0; c < K; ++c) loss = c == target ? lse - z[c] : loss;
            part[K * BM + tid] = loss;  // the row's cross-entropy
#pragma unroll
            for (int c = 0; c < K; ++c) {
                const double value = exp(z[c] - lse) - (c == target ? 1.0 : 0.0);
                double rest = value * TOP;
#pragma unroll
                for (int t = 0; t < TERMS; ++t) {
                    const double q = floor(rest + 0.5);
                    resid8[(long long)(t * K + c) * pitch + row] = (signed char)(long long)q;
                    rest = (rest - q) * BASE;
                }
                part[c * BM + tid] = value;
            }
        } else {
#pragma unroll
            for (int c = 0; c <= K; ++c) part[c * BM + tid] = 0.0;
        }
    }
    __syncthreads();
    for (int stride = BM / 2; stride > 0; stride >>= 1) {  // cuda_int8's order
        if (tid < stride) {
#pragma unroll
            for (int c = 0; c <= K; ++c) part[c * BM + tid] += part[c * BM + tid + stride];
        }
        __syncthreads();
    }
    if (tid <= K) bpart[(long long)blockIdx.x * (K + 1) + tid] = part[tid * BM];
}
