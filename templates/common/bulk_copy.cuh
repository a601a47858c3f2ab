// kgen: a contiguous copy from global to shared memory by the bulk-copy unit (sm_90), signalled
// on an mbarrier as its bytes land (complete_tx). Both addresses and the size are multiples of
// 16 bytes. Needs mbarrier.cuh for the barrier.
#ifndef KGEN_BULK_COPY_CUH
#define KGEN_BULK_COPY_CUH

__device__ __forceinline__ void bulk_copy_to_shared(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

#endif
