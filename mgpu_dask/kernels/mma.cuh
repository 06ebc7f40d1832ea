// Tensor-core helpers of our CUDA C kernels (knn/fused.cu, logreg/fused.cu): loads
// into shared memory with cp.async, ldmatrix, and mma.sync m16n8k32 (int8 in, exact
// int32 out) or m16n8k16 (float16 in, float32 out), compute capability 8.0 or newer; and
// Hopper's wgmma (sm_90a only).  Put
// in front of each kernel's source by kernels/cuda_source.py, so that CuPy's cache key
// (the source) holds it.

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

// mma.sync m16n8k16 (float16 in, float32 out): the same fragments, byte for byte, as
// mma_s8's (32 bytes of a row a step), so the same loads feed both.
__device__ __forceinline__ void mma_f16(float* c, const unsigned* a, unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
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

// --- Hopper (sm_90a): warpgroup products, both operands read from shared memory ---------
// A warpgroup (four warps, 128 threads) multiplies 64 rows of A by N rows of B (both
// K-major, 32 bytes of each row per instruction), asynchronously: the products are issued,
// committed as a group and waited for.  Shared memory operands are named by descriptors.

// The descriptor of a stage of 64-byte rows in mma.cuh's swizzle (swz), which is the
// tensor cores' 64-byte swizzle: 8-row groups 512 bytes apart.  The stage must start on
// a 512-byte boundary; adding 2 moves the start 32 bytes along the rows (the next k32).
__device__ __forceinline__ unsigned long long sw64_desc(const void* p) {
    return (unsigned long long)((smem_u32(p) & 0x3FFFF) >> 4) | (1ull << 16)
           | ((unsigned long long)(512 >> 4) << 32) | (2ull << 62);
}

__device__ __forceinline__ void wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory");
}
// Writes of the generic proxy (cp.async, st.shared) made visible to the tensor cores' reads.
__device__ __forceinline__ void fence_async_shared() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Keeps the compiler from moving reads or writes of d across the asynchronous products.
__device__ __forceinline__ void fence_regs(int* d, int n) {
#pragma unroll
    for (int i = 0; i < n; ++i) asm volatile("" : "+r"(d[i]) :: "memory");
}
__device__ __forceinline__ void fence_regs(float* d, int n) {
#pragma unroll
    for (int i = 0; i < n; ++i) asm volatile("" : "+f"(d[i]) :: "memory");
}

// wgmma m64n128k32 (int8 in, int32 out) on d: its 64 registers, each under constraint C.
#define WGMMA_N128(pred, C) \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " pred ", 0;\n" \
                 "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 " \
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p;\n}\n" \
                 : WGMMA_D64(C) : "l"(a), "l"(b))
#define WGMMA_D64(C) \
    C(d[0]), C(d[1]), C(d[2]), C(d[3]), C(d[4]), C(d[5]), C(d[6]), C(d[7]), \
    C(d[8]), C(d[9]), C(d[10]), C(d[11]), C(d[12]), C(d[13]), C(d[14]), C(d[15]), \
    C(d[16]), C(d[17]), C(d[18]), C(d[19]), C(d[20]), C(d[21]), C(d[22]), C(d[23]), \
    C(d[24]), C(d[25]), C(d[26]), C(d[27]), C(d[28]), C(d[29]), C(d[30]), C(d[31]), \
    C(d[32]), C(d[33]), C(d[34]), C(d[35]), C(d[36]), C(d[37]), C(d[38]), C(d[39]), \
    C(d[40]), C(d[41]), C(d[42]), C(d[43]), C(d[44]), C(d[45]), C(d[46]), C(d[47]), \
    C(d[48]), C(d[49]), C(d[50]), C(d[51]), C(d[52]), C(d[53]), C(d[54]), C(d[55]), \
    C(d[56]), C(d[57]), C(d[58]), C(d[59]), C(d[60]), C(d[61]), C(d[62]), C(d[63])

// d (64 int32 a thread, as 16 n8 tiles of mma_s8's C layout: rows lane / 4 and + 8 of the
// warp's 16) += A (64 x 32, descriptor a) times B (128 x 32, b)^T.
__device__ __forceinline__ void wgmma_s8_n128(int* d, unsigned long long a, unsigned long long b) {
    WGMMA_N128("1", "+r");
}

// wgmma_s8_n128 with d written, not read: d = A times B^T (d's old values dead to the compiler).
__device__ __forceinline__ void wgmma_s8_n128_first(int* d, unsigned long long a, unsigned long long b) {
    WGMMA_N128("0", "=r");
}

// The float16 twins (m64n128k16, float32 out): 32 bytes of each row an instruction as the
// int8 ones, both operands K-major (no transpose), the same descriptors.
#define WGMMA_F16_N128(pred, C) \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " pred ", 0;\n" \
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " \
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n" \
                 : WGMMA_D64(C) : "l"(a), "l"(b))

__device__ __forceinline__ void wgmma_f16_n128(float* d, unsigned long long a, unsigned long long b) {
    WGMMA_F16_N128("1", "+f");
}

__device__ __forceinline__ void wgmma_f16_n128_first(float* d, unsigned long long a, unsigned long long b) {
    WGMMA_F16_N128("0", "=f");
}

// --- Hopper: the tensor memory accelerator and mbarriers (sm_90) -------------------------
// An mbarrier in shared memory counts arrivals (and, with expect_tx, bytes of bulk copies
// still to land); a wait names the phase's parity.

__device__ __forceinline__ void mbar_init(unsigned long long* bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(smem_u32(bar)), "r"(count) : "memory");
}
// The barriers' initialisation made visible to the tensor memory accelerator.
__device__ __forceinline__ void fence_mbar_init() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned long long* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(smem_u32(bar)) : "memory");
}
// One arrival, and `bytes` more for the phase to wait for (what bulk copies will bring).
__device__ __forceinline__ void mbar_expect_tx(unsigned long long* bar, int bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
                 :: "r"(smem_u32(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned long long* bar, int parity) {
    asm volatile("{\n.reg .pred done;\nWAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra WAIT;\n}\n" :: "r"(smem_u32(bar)), "r"(parity) : "memory");
}
// A tensor map (CUtensorMap, 128 bytes) that the host wrote to global memory, acquired
// before the tensor memory accelerator reads it.
__device__ __forceinline__ void tensormap_acquire(const void* map) {
    asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" :: "l"(map) : "memory");
}
// The box of the 2-D tensor map at (c0 along the rows, c1 rows down) into dst, whose
// bytes complete a transaction of bar.
__device__ __forceinline__ void tma_load_2d(void* dst, const void* map, int c0, int c1,
                                            unsigned long long* bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
                 "[%0], [%1, {%2, %3}], [%4];\n"
                 :: "r"(smem_u32(dst)), "l"(map), "r"(c0), "r"(c1), "r"(smem_u32(bar)) : "memory");
}

