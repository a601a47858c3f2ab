// kgen: the Tensor Memory Accelerator (sm_90): 2-D tiled loads and 4-D im2col loads (an NHWC
// image's pixels under a filter tap) into shared memory, completing on an mbarrier
// (common/mbarrier.cuh), multicast to a cluster, and 2-D stores from shared memory in bulk
// async-groups.
#ifndef KGEN_TMA_CUH
#define KGEN_TMA_CUH
{% include "common/smem.cuh" %}
{% include "common/mbarrier.cuh" %}

// The CUtensorMap the host encoded (kgen.tma), by value: 128 bytes, 64-byte aligned.
struct alignas(64) TmaDesc { unsigned long long words[16]; };

__device__ __forceinline__ void tma_prefetch_desc(const TmaDesc* map) {
    asm volatile("prefetch.tensormap [%0];" :: "l"(reinterpret_cast<unsigned long long>(map)) : "memory");
}

// 2-D TMA load of one box at (c0 = inner, c1 = outer) element coordinates into shared memory,
// completing `bytes` of the barrier's transaction count. Out-of-bounds elements become 0.
__device__ __forceinline__ void tma_load_2d(unsigned dst, const TmaDesc* map, unsigned bar, int c0, int c1) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {{ "{" }}%2, %3}], [%4];"
                 :: "r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(bar)
                 : "memory");
}

// 4-D TMA load in im2col mode (an NHWC image; the map gives channels and pixels per load):
// from channel c, the pixels the map's bounding box and traversal strides walk from the window
// corner (w, h) of image n on, each shifted by (dw, dh), the filter tap. Pixels outside the
// image become 0.
__device__ __forceinline__ void tma_load_im2col_4d(unsigned dst, const TmaDesc* map, unsigned bar, int c, int w,
                                                   int h, int n, unsigned short dw, unsigned short dh) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {{ "{" }}%2, %3, %4, %5}], [%6], {{ "{" }}%7, %8};"
                 :: "r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(c), "r"(w), "r"(h), "r"(n),
                    "r"(bar), "h"(dw), "h"(dh)
                 : "memory");
}

// The same box into the shared memory of every block of a cluster of CLUSTER blocks (same
// offset), completing bytes on each block's barrier at the same offset.
template <int CLUSTER>
__device__ __forceinline__ void tma_load_2d_multicast(unsigned dst, const TmaDesc* map, unsigned bar, int c0, int c1) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {{ "{" }}%2, %3}], [%4], %5;"
                 :: "r"(dst), "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(bar),
                    "h"((unsigned short)((1u << CLUSTER) - 1))
                 : "memory");
}

// 2-D TMA store of one box from shared memory at (c0 = inner, c1 = outer); elements outside
// the tensor are not written. Tracked in this thread's bulk async-group.
__device__ __forceinline__ void tma_store_2d(const TmaDesc* map, unsigned src, int c0, int c1) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {{ "{" }}%1, %2}], [%3];"
                 :: "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(src) : "memory");
}

__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }

// Wait until at most N of this thread's committed stores still read their shared buffer.
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;" :: "n"(N) : "memory");
}

__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

#endif
