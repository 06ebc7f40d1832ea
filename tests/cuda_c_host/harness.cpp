// Our CUDA C kernels (mgpu_dask/compare/cuda_c/*.cu) on the host through cuda_host.h, as a
// shared library for ctypes: one launch_<kernel>(grid, block, kernel arguments...) each.
#include "cuda_host.h"

#include "knn.cu"
#include "logreg.cu"

double block_sums[4096];  // logreg.cu's dynamic shared memory (k + 1 doubles)

extern "C" {

void launch_scan_topk(unsigned grid, unsigned block, const float* G, long long ld, int nrows,
                      int ncols, const float* norms, int col0, double* keys, int* cols, int K) {
    cuda_host::launch(grid, block, [&] { scan_topk(G, ld, nrows, ncols, norms, col0, keys, cols, K); });
}

void launch_scan_topk_i32(unsigned grid, unsigned block, const int* G, long long ld, int nrows,
                          int ncols, const float* norms, int col0, double* keys, int* cols,
                          int K) {
    cuda_host::launch(grid, block,
                      [&] { scan_topk_i32(G, ld, nrows, ncols, norms, col0, keys, cols, K); });
}

void launch_refine_rows(unsigned grid, unsigned block, const float* Q, long long ldq,
                        const float* T, long long ldt, int m, int d, const int* cand, int K,
                        int k, double* out_sq, int* out_idx) {
    cuda_host::launch(grid, block,
                      [&] { refine_rows(Q, ldq, T, ldt, m, d, cand, K, k, out_sq, out_idx); });
}

void launch_vote_rows(unsigned grid, unsigned block, const double* sq, const int* idx, int m,
                      int k, const int* labels, int n_classes, int uniform, int* out) {
    cuda_host::launch(grid, block,
                      [&] { vote_rows(sq, idx, m, k, labels, n_classes, uniform, out); });
}

int launch_softmax_xent(unsigned grid, unsigned block, const float* logits, const float* bias,
                        const int* labels, int n, int k, float* resid, double* sums) {
    if (k + 1 > 4096) return 1;
    cuda_host::launch(grid, block,
                      [&] { softmax_xent(logits, bias, labels, n, k, resid, sums); });
    return 0;
}
}
