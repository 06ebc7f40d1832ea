// Run our CUDA C kernels on the host, for tests on machines without a GPU.
//
// Each block of a launch runs as blockDim.x std::threads (blocks one after the
// other); the warp intrinsics our kernels use exchange values through the
// warp's slots between two barriers, so the 32 lanes of a warp move in
// lockstep at every intrinsic as they do on a GPU.  Enough CUDA for
// mgpu_dask/compare/cuda_c/*.cu, no more: what a kernel needs beyond it fails to compile.
#pragma once

#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __shared__

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};

namespace cuda_host {

struct Warp {
    std::barrier<> lockstep{32};
    std::uint64_t slot[32];
};

inline dim3 block_dim, grid_dim;
inline std::barrier<>* block_barrier = nullptr;
inline std::mutex atomics;
inline thread_local Warp* warp = nullptr;
inline thread_local dim3 thread_idx, block_idx;

template <class T>
T exchange(T value, int src) {
    const int lane = thread_idx.x & 31;
    static_assert(sizeof(T) <= sizeof(std::uint64_t));
    std::memcpy(&warp->slot[lane], &value, sizeof(T));
    warp->lockstep.arrive_and_wait();
    T out;
    std::memcpy(&out, &warp->slot[src & 31], sizeof(T));
    warp->lockstep.arrive_and_wait();
    return out;
}

// grid x block threads, blocks in turn; body() is the kernel call of each thread.
inline void launch(unsigned grid, unsigned block, const std::function<void()>& body) {
    block_dim = dim3{block, 1, 1};
    grid_dim = dim3{grid, 1, 1};
    for (unsigned b = 0; b < grid; ++b) {
        std::vector<Warp> warps(block / 32);
        std::barrier<> whole_block(block);
        block_barrier = &whole_block;
        std::vector<std::thread> threads;
        for (unsigned t = 0; t < block; ++t)
            threads.emplace_back([&, t] {
                thread_idx = dim3{t, 0, 0};
                block_idx = dim3{b, 0, 0};
                warp = &warps[t / 32];
                body();
            });
        for (auto& th : threads) th.join();
    }
}

}  // namespace cuda_host

#define threadIdx cuda_host::thread_idx
#define blockIdx cuda_host::block_idx
#define blockDim cuda_host::block_dim
#define gridDim cuda_host::grid_dim

template <class T>
T __shfl_sync(unsigned, T v, int src) { return cuda_host::exchange(v, src); }
template <class T>
T __shfl_xor_sync(unsigned, T v, int mask) {
    return cuda_host::exchange(v, (threadIdx.x & 31) ^ mask);
}
template <class T>
T __shfl_up_sync(unsigned, T v, unsigned delta) {  // lanes below delta keep their own value
    const int lane = threadIdx.x & 31;
    return cuda_host::exchange(v, lane >= (int)delta ? lane - (int)delta : lane);
}
inline unsigned __ballot_sync(unsigned, int predicate) {
    cuda_host::Warp* w = cuda_host::warp;
    w->slot[threadIdx.x & 31] = predicate ? 1 : 0;
    w->lockstep.arrive_and_wait();
    unsigned mask = 0;
    for (int i = 0; i < 32; ++i)
        if (w->slot[i]) mask |= 1u << i;
    w->lockstep.arrive_and_wait();
    return mask;
}
inline void __syncthreads() { cuda_host::block_barrier->arrive_and_wait(); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(unsigned x) { return __builtin_ffs((int)x); }
inline float __int_as_float(int x) {
    float f;
    std::memcpy(&f, &x, sizeof f);
    return f;
}
inline double __longlong_as_double(long long x) {
    double d;
    std::memcpy(&d, &x, sizeof d);
    return d;
}
inline double atomicAdd(double* address, double value) {
    std::lock_guard<std::mutex> hold(cuda_host::atomics);
    const double old = *address;
    *address = old + value;
    return old;
}
