// Logistic regression's softmax cross-entropy in CUDA C, for CuPy's RawModule
// (the cuda-c comparison backend, kernels/cuda_c.py): the kernel our "cublas"
// evaluation puts between its two cuBLAS products (logreg_cuda.py, Numba).
//
// logits (n, k) = X W from cuBLAS; per row, with z = logits + bias:
//   resid[i, c] = softmax(z)[c] - [c == y_i]      (float32, for X^T resid)
//   sums[c]    += resid[i, c]                      (the intercept's gradient)
//   sums[k]    += logsumexp(z) - z[y_i]            (the summed loss)
// in float64; launch with blockDim a multiple of 32 and (k + 1) doubles of
// dynamic shared memory.

#define FULL_MASK 0xffffffffu
// NVRTC compiles without the host headers that define INFINITY
#define D_INF __longlong_as_double(0x7ff0000000000000LL)

extern "C" __global__ void softmax_xent(const float* __restrict__ logits,
                                        const float* __restrict__ bias,
                                        const int* __restrict__ labels, int n, int k,
                                        float* __restrict__ resid, double* __restrict__ sums) {
    extern __shared__ double block_sums[];
    for (int c = threadIdx.x; c <= k; c += blockDim.x) block_sums[c] = 0.0;
    __syncthreads();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const bool active = i < n;  // every thread takes part in the shuffles below
    const float* z = logits + (long long)(active ? i : 0) * k;
    double top = -D_INF;
    double total = 0.0;
    if (active) {
        for (int c = 0; c < k; ++c) top = fmax(top, (double)z[c] + (double)bias[c]);
        for (int c = 0; c < k; ++c) total += exp((double)z[c] + (double)bias[c] - top);
    }
    const double lse = active ? log(total) : 0.0;
    const int y = active ? labels[i] : -1;
    double loss = 0.0;
    for (int c = 0; c < k; ++c) {
        double r = 0.0;
        if (active) {
            const double zc = (double)z[c] + (double)bias[c] - top;
            r = exp(zc - lse);
            if (c == y) {
                loss = lse - zc;
                r -= 1.0;
            }
            resid[(long long)i * k + c] = (float)r;
        }
        for (int o = 16; o > 0; o >>= 1) r += __shfl_xor_sync(FULL_MASK, r, o);
        if ((threadIdx.x & 31) == 0) atomicAdd(&block_sums[c], r);
    }
    for (int o = 16; o > 0; o >>= 1) loss += __shfl_xor_sync(FULL_MASK, loss, o);
    if ((threadIdx.x & 31) == 0) atomicAdd(&block_sums[k], loss);
    __syncthreads();
    for (int c = threadIdx.x; c <= k; c += blockDim.x) atomicAdd(&sums[c], block_sums[c]);
}
