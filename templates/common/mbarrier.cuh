// kgen: mbarriers in shared memory (sm_90), in this block or another block of its cluster.
#ifndef KGEN_MBARRIER_CUH
#define KGEN_MBARRIER_CUH

__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count) : "memory");
}

// Make the initialised barriers visible to the async (TMA) proxy and the other threads of the
// cluster.
__device__ __forceinline__ void mbar_init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// Arrive once and raise the expected transaction bytes of the current phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(bar) : "memory");
}

// Spin until the phase with the given parity has completed. A fresh barrier is in phase 0,
// so waiting for parity 1 returns at once (the producer's first pass over the ring).
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    unsigned done;
    do {
        asm volatile("{\n\t.reg .pred p;\n\t"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    } while (!done);
}

// Arrive on the barrier at this shared offset in block `rank` of the cluster. CTA-scope
// release (the default) orders this thread's reads of its own ring, which is all a freed
// stage needs; cluster scope would put a GPU-wide memory barrier before every arrive.
__device__ __forceinline__ void mbar_arrive_in(unsigned bar, unsigned rank) {
    asm volatile("{\n\t.reg .b32 remote;\n\t"
                 "mapa.shared::cluster.u32 remote, %0, %1;\n\t"
                 "mbarrier.arrive.shared::cluster.b64 _, [remote];\n\t}"
                 :: "r"(bar), "r"(rank) : "memory");
}

// Arrive on the barrier at this shared offset in every block of a cluster of CLUSTER blocks
// (this block's alone without clusters): a stage freed in every block whose multicasts fill it.
template <int CLUSTER>
__device__ __forceinline__ void mbar_arrive_cluster(unsigned bar) {
    if constexpr (CLUSTER > 1) {
        #pragma unroll
        for (unsigned r = 0; r < CLUSTER; ++r) mbar_arrive_in(bar, r);
    } else {
        mbar_arrive(bar);
    }
}

// This block's rank in its cluster of CLUSTER blocks (0 without clusters).
template <int CLUSTER>
__device__ __forceinline__ unsigned cluster_rank() {
    if constexpr (CLUSTER > 1) {
        unsigned r;
        asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
        return r;
    } else {
        return 0;
    }
}

// Every thread of every block of the cluster (a plain block barrier without clusters).
template <int CLUSTER>
__device__ __forceinline__ void cluster_sync() {
    if constexpr (CLUSTER > 1) {
        asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
    } else {
        __syncthreads();
    }
}

#endif
