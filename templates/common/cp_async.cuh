// kgen: cp.async copies from global into shared memory (sm_80 and later): their commit groups,
// or their arrival on an mbarrier.
#ifndef KGEN_CP_ASYNC_CUH
#define KGEN_CP_ASYNC_CUH
{% include "common/smem.cuh" %}

// Copy `bytes` (<= VEC bytes) from global to shared, zero-filling the rest of the vector.
template <int VEC>
__device__ __forceinline__ void copy_async(void* dst, const void* src, int bytes) {
    if constexpr (VEC == 16) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                     :: "r"(smem_addr(dst)), "l"(src), "r"(bytes));
    } else if constexpr (VEC == 8 || VEC == 4) {
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n"
                     :: "r"(smem_addr(dst)), "l"(src), "n"(VEC), "r"(bytes));
    } else {   // 2-byte elements at odd alignment: a plain load
        *reinterpret_cast<unsigned short*>(dst) = bytes ? *reinterpret_cast<const unsigned short*>(src)
                                                        : (unsigned short)0;
    }
}

__device__ __forceinline__ void async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N>
__device__ __forceinline__ void async_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N)); }

// 4-byte asynchronous copy to a shared address; src_bytes 0 writes a zero and reads nothing.
__device__ __forceinline__ void cp_async4(unsigned dst, const void* src, unsigned src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

// The barrier's pending count drops by one once this thread's cp.async copies have landed
// (noinc: the count set at init includes these arrivals).
__device__ __forceinline__ void cp_async_arrive(unsigned bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" :: "r"(bar) : "memory");
}

#endif
