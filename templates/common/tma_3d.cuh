// kgen: 3-D TMA loads and stores, (inner, outer, batch) coordinates, for a batch of matrices in
// one tensor map: the same boxes as common/tma.cuh's 2-D ones (box extent 1 in the batch), each
// matrix's edges clipping them as a 2-D map's would.
#ifndef KGEN_TMA_3D_CUH
#define KGEN_TMA_3D_CUH

__device__ __forceinline__ void tma_load_3d(unsigned dst, const TmaDesc* map, unsigned bar, int c0, int c1, int c2) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {{ "{" }}%2, %3, %4}], [%5];"
                 :: "r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
                 : "memory");
}

template <int CLUSTER>
__device__ __forceinline__ void tma_load_3d_multicast(unsigned dst, const TmaDesc* map, unsigned bar, int c0, int c1,
                                                      int c2) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {{ "{" }}%2, %3, %4}], [%5], %6;"
                 :: "r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar),
                    "h"((unsigned short)((1u << CLUSTER) - 1))
                 : "memory");
}

__device__ __forceinline__ void tma_store_3d(const TmaDesc* map, unsigned src, int c0, int c1, int c2) {
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {{ "{" }}%1, %2, %3}], [%4];"
                 :: "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(src) : "memory");
}

#endif
