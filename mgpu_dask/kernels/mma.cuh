// int8 tensor-core helpers of our CUDA C kernels (knn/fused.cu, logreg/fused.cu): loads
// into shared memory with cp.async, ldmatrix, and mma.sync m16n8k32 (int8 in, exact
// int32 out).  Compute capability 8.0 or newer.  Put in front of each kernel's source
// by kernels/cuda_source.py, so that CuPy's cache key (the source) holds it.

__device__ __forceinline__ unsigned smem_u32(const void* p) {
    return (unsigned)__cvta_generic_to_shared(p);
}

// 16 bytes from global to shared memory, of which `bytes` (0 or 16) are read; the rest zeros.
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(dst), "l"(src), "r"(bytes));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N)); }

__device__ __forceinline__ void ldmatrix_x4(unsigned& r0, unsigned& r1, unsigned& r2, unsigned& r3,
                                            unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}

__device__ __forceinline__ void mma_s8(int* c, const unsigned* a, unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Byte offset of 16-byte chunk c (0..3) of row r in a stage of 64-byte rows, chunks
// swizzled so that the 8 rows one ldmatrix reads fall in 8 different bank groups.
__device__ __forceinline__ int swz(int r, int c) { return r * 64 + ((c ^ ((r >> 1) & 3)) << 4); }

// mma_s8's A fragment: rows r0..r0+15 of a stage at k-step ks (32 bytes), where
// at(r, c) is the stage's byte offset of 16-byte chunk c of row r.
template <typename At>
__device__ __forceinline__ void load_a(unsigned (&a)[4], const signed char* stage, int r0, int ks,
                                       int lane, At at) {
    const int r = r0 + (lane & 7) + ((lane >> 3) & 1) * 8;
    ldmatrix_x4(a[0], a[1], a[2], a[3], smem_u32(stage + at(r, ks * 2 + (lane >> 4))));
}

// mma_s8's B fragments of two n8 tiles: rows r0..r0+7 into b0, r0+8..r0+15 into b1.
template <typename At>
__device__ __forceinline__ void load_b2(unsigned (&b0)[2], unsigned (&b1)[2],
                                        const signed char* stage, int r0, int ks, int lane, At at) {
    const int r = r0 + (lane & 7) + (lane >> 4) * 8;
    ldmatrix_x4(b0[0], b0[1], b1[0], b1[1], smem_u32(stage + at(r, ks * 2 + ((lane >> 3) & 1))));
}
