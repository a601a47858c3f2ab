// kgen: one warp's mma.sync (sm_80 and later) on tiles in shared memory. A fragment of A is
// 16 rows x one mma's k at tile row r0, k k0; load_b2 reads two fragments of B, 8 columns each,
// at n0 and n0 + 8. A tile's rows are SROW elements apart; KMAJOR: rows m (or n), k contiguous,
// else rows k, m (or n) contiguous. The tile's element type picks the fragments:
//   16-bit (unsigned short: float16 or bfloat16 bits): ldmatrix (.trans for an m- or
//     n-contiguous tile), m16n8k16, mma_f16 or mma_bf16;
//   float: plain loads rounded to tf32, m16n8k8, mma_tf32;
//   double: plain loads, m16n8k8, mma_f64.
#ifndef KGEN_MMA_FRAGMENTS_CUH
#define KGEN_MMA_FRAGMENTS_CUH
{% include "common/smem.cuh" %}

__device__ __forceinline__ void ldsm_x4(unsigned (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 { %0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}

__device__ __forceinline__ void ldsm_x4_trans(unsigned (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 { %0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}

// ---- 16-bit inputs: ldmatrix

template <bool KMAJOR, int SROW>
__device__ __forceinline__ void load_a(unsigned (&f)[4], const unsigned short* As, int r0, int k0, int lane) {
    if constexpr (KMAJOR) {
        ldsm_x4(f, As + (r0 + (lane & 15)) * SROW + k0 + (lane >> 4) * 8);
    } else {
        ldsm_x4_trans(f, As + (k0 + (lane >> 4) * 8 + (lane & 7)) * SROW + r0 + ((lane >> 3) & 1) * 8);
    }
}

template <bool KMAJOR, int SROW>
__device__ __forceinline__ void load_b2(unsigned (&f0)[2], unsigned (&f1)[2], const unsigned short* Bs, int n0,
                                        int k0, int lane) {
    unsigned r[4];
    const int j = lane >> 3;
    if constexpr (KMAJOR) {
        ldsm_x4(r, Bs + (n0 + (j >> 1) * 8 + (lane & 7)) * SROW + k0 + (j & 1) * 8);
    } else {
        ldsm_x4_trans(r, Bs + (k0 + (j & 1) * 8 + (lane & 7)) * SROW + n0 + (j >> 1) * 8);
    }
    f0[0] = r[0]; f0[1] = r[1]; f1[0] = r[2]; f1[1] = r[3];
}

__device__ __forceinline__ void mma_f16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{ %0,%1,%2,%3}, { %4,%5,%6,%7}, { %8,%9}, { %0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{ %0,%1,%2,%3}, { %4,%5,%6,%7}, { %8,%9}, { %0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// ---- tf32 (float tiles) and fp64 (double tiles): fragments of the same shape from plain loads

__device__ __forceinline__ unsigned mma_operand(float x) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}

__device__ __forceinline__ double mma_operand(double x) { return x; }

// element (mn, k) of a tile
template <bool KMAJOR, int SROW, class T>
__device__ __forceinline__ T tile_at(const T* tile, int mn, int k) {
    if constexpr (KMAJOR) {
        return tile[mn * SROW + k];
    } else {
        return tile[k * SROW + mn];
    }
}

template <bool KMAJOR, int SROW, class T, class F>
__device__ __forceinline__ void load_a(F (&f)[4], const T* As, int r0, int k0, int lane) {
    const int g = lane >> 2, t = lane & 3;
    f[0] = mma_operand(tile_at<KMAJOR, SROW>(As, r0 + g, k0 + t));
    f[1] = mma_operand(tile_at<KMAJOR, SROW>(As, r0 + g + 8, k0 + t));
    f[2] = mma_operand(tile_at<KMAJOR, SROW>(As, r0 + g, k0 + t + 4));
    f[3] = mma_operand(tile_at<KMAJOR, SROW>(As, r0 + g + 8, k0 + t + 4));
}

template <bool KMAJOR, int SROW, class T, class F>
__device__ __forceinline__ void load_b2(F (&f0)[2], F (&f1)[2], const T* Bs, int n0, int k0, int lane) {
    const int g = lane >> 2, t = lane & 3;
    f0[0] = mma_operand(tile_at<KMAJOR, SROW>(Bs, n0 + g, k0 + t));
    f0[1] = mma_operand(tile_at<KMAJOR, SROW>(Bs, n0 + g, k0 + t + 4));
    f1[0] = mma_operand(tile_at<KMAJOR, SROW>(Bs, n0 + 8 + g, k0 + t));
    f1[1] = mma_operand(tile_at<KMAJOR, SROW>(Bs, n0 + 8 + g, k0 + t + 4));
}

__device__ __forceinline__ void mma_tf32(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                 "{ %0,%1,%2,%3}, { %4,%5,%6,%7}, { %8,%9}, { %0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void mma_f64(double (&d)[4], const double (&a)[4], const double (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 "
                 "{ %0,%1,%2,%3}, { %4,%5,%6,%7}, { %8,%9}, { %0,%1,%2,%3};\n"
                 : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
                 : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(b[0]), "d"(b[1]));
}

#endif
