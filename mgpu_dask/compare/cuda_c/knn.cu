// k-nearest neighbours in CUDA C: the algorithm of knn_cuda.py (Numba), written
// for CuPy's RawModule (the cuda-c comparison backend, kernels/cuda_c.py).
//
// Scores |t|^2 - 2 q.t come from a cuBLAS product per training tile (our
// operands: bf16 or int8 tensor cores for 8-bit data, fp32 otherwise); then
//   scan_topk    folds one tile of scores into each query row's running top-K
//                (one warp per row; lane j holds entry j of the sorted list;
//                scan_topk_i32 for int8 products),
//   refine_rows  exact float64 distances of the K candidates, k best kept
//                (where the keys are not exact: data that are not 8-bit),
//   vote_rows    uniform or 1/d weighted vote (exact matches take it).
// Ties go to the smaller training index everywhere, as in the Numba kernels.

#define FULL_MASK 0xffffffffu
#define NO_COLUMN 0x7fffffff
// NVRTC compiles without the host headers that define INFINITY
#define F_INF __int_as_float(0x7f800000)
#define D_INF __longlong_as_double(0x7ff0000000000000LL)

__device__ __forceinline__ bool before(double key_a, int col_a, double key_b, int col_b) {
    return key_a < key_b || (key_a == key_b && col_a < col_b);
}

// keys/cols: (nrows, K) sorted lists, updated in place; K <= 32.  Keys are
// float64, as in the Numba kernels: for 8-bit data every key is an integer
// that float64 holds exactly, whatever its size.
// G: (nrows, ncols) products of this tile, row stride ld (float32 from fp32,
// tf32 and bf16 products, int32 from int8 ones); the tile's first training
// row is col0 and norms holds |t|^2 for every training row.
template <typename Product>
__device__ __forceinline__ void scan_rows(const Product* __restrict__ G, long long ld, int nrows,
                                          int ncols, const float* __restrict__ norms, int col0,
                                          double* __restrict__ keys, int* __restrict__ cols,
                                          int K) {
    const int row = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (row >= nrows) return;  // the whole warp: one row per warp
    double key = D_INF;
    int col = NO_COLUMN;
    if (lane < K) {
        key = keys[(long long)row * K + lane];
        col = cols[(long long)row * K + lane];
    }
    double worst_key = __shfl_sync(FULL_MASK, key, K - 1);
    int worst_col = __shfl_sync(FULL_MASK, col, K - 1);
    const Product* g = G + (long long)row * ld;
    for (int j0 = 0; j0 < ncols; j0 += 32) {
        const int j = j0 + lane;
        double v = D_INF;
        int c = NO_COLUMN;
        if (j < ncols) {
            v = (double)norms[col0 + j] - 2.0 * (double)g[j];
            c = col0 + j;
        }
        unsigned better = __ballot_sync(FULL_MASK, before(v, c, worst_key, worst_col));
        while (better) {  // rare once the list has filled: one insertion per candidate
            const int src = __ffs(better) - 1;
            better &= better - 1;
            const double cv = __shfl_sync(FULL_MASK, v, src);
            const int cc = __shfl_sync(FULL_MASK, c, src);
            if (!before(cv, cc, worst_key, worst_col)) continue;
            const int pos = __popc(__ballot_sync(FULL_MASK, lane < K && before(key, col, cv, cc)));
            const double up_key = __shfl_up_sync(FULL_MASK, key, 1);
            const int up_col = __shfl_up_sync(FULL_MASK, col, 1);
            if (lane == pos) {
                key = cv;
                col = cc;
            } else if (lane > pos && lane < K) {
                key = up_key;
                col = up_col;
            }
            worst_key = __shfl_sync(FULL_MASK, key, K - 1);
            worst_col = __shfl_sync(FULL_MASK, col, K - 1);
        }
    }
    if (lane < K) {
        keys[(long long)row * K + lane] = key;
        cols[(long long)row * K + lane] = col;
    }
}

extern "C" __global__ void scan_topk(const float* __restrict__ G, long long ld, int nrows,
                                     int ncols, const float* __restrict__ norms, int col0,
                                     double* __restrict__ keys, int* __restrict__ cols, int K) {
    scan_rows(G, ld, nrows, ncols, norms, col0, keys, cols, K);
}

extern "C" __global__ void scan_topk_i32(const int* __restrict__ G, long long ld, int nrows,
                                         int ncols, const float* __restrict__ norms, int col0,
                                         double* __restrict__ keys, int* __restrict__ cols,
                                         int K) {
    scan_rows(G, ld, nrows, ncols, norms, col0, keys, cols, K);
}

// Exact squared distances (float64) of each row's K candidate training rows;
// the k smallest, ascending (ties: smaller index), into out_sq / out_idx (m, k).
// Q rows have stride ldq, T rows ldt; d features are compared.
extern "C" __global__ void refine_rows(const float* __restrict__ Q, long long ldq,
                                       const float* __restrict__ T, long long ldt, int m, int d,
                                       const int* __restrict__ cand, int K, int k,
                                       double* __restrict__ out_sq, int* __restrict__ out_idx) {
    const int row = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (row >= m) return;
    const float* q = Q + (long long)row * ldq;
    double mine = D_INF;
    int idx = NO_COLUMN;
    for (int j = 0; j < K; ++j) {
        const int c = cand[(long long)row * K + j];
        double s = D_INF;
        if (c != NO_COLUMN) {
            const float* t = T + (long long)c * ldt;
            s = 0.0;
            for (int f = lane; f < d; f += 32) {
                const double diff = (double)q[f] - (double)t[f];
                s += diff * diff;
            }
            for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(FULL_MASK, s, o);
        }
        if (lane == j) {
            mine = s;
            idx = c;
        }
    }
    for (int r = 0; r < k; ++r) {
        double best = mine;
        int best_idx = idx;
        for (int o = 16; o > 0; o >>= 1) {
            const double other = __shfl_xor_sync(FULL_MASK, best, o);
            const int other_idx = __shfl_xor_sync(FULL_MASK, best_idx, o);
            if (other < best || (other == best && other_idx < best_idx)) {
                best = other;
                best_idx = other_idx;
            }
        }
        if (lane == 0) {
            out_sq[(long long)row * k + r] = best;
            out_idx[(long long)row * k + r] = best_idx;
        }
        if (idx == best_idx) {
            mine = D_INF;
            idx = NO_COLUMN;
        }
    }
}

// One thread per query row: the class with the largest vote (the smallest
// class index among equal votes).  Weights 1 (uniform) or 1/d; a row with an
// exact match (d = 0) counts its exact matches only.
extern "C" __global__ void vote_rows(const double* __restrict__ sq, const int* __restrict__ idx,
                                     int m, int k, const int* __restrict__ labels, int n_classes,
                                     int uniform, int* __restrict__ out) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= m) return;
    const double* s = sq + (long long)i * k;
    const int* x = idx + (long long)i * k;
    bool exact = false;
    if (!uniform)
        for (int j = 0; j < k; ++j) exact |= s[j] == 0.0;
    int best = 0;
    double best_vote = -1.0;
    for (int c = 0; c < n_classes; ++c) {
        double vote = 0.0;
        for (int j = 0; j < k; ++j) {
            if (labels[x[j]] != c) continue;
            if (uniform) vote += 1.0;
            else if (exact) vote += s[j] == 0.0 ? 1.0 : 0.0;
            else vote += 1.0 / sqrt(s[j]);
        }
        if (vote > best_vote) {
            best_vote = vote;
            best = c;
        }
    }
    out[i] = best;
}
