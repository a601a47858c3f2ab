// kgen: what the blocks of a thread-block cluster (sm_90) share besides barriers: a value read
// from another block's shared memory, and the cluster barrier's two halves apart, so that a
// block can go on working between telling its peers it has read them and waiting until they
// have read it. Needs smem.cuh. Header-free.
#ifndef KGEN_CLUSTER_CUH
#define KGEN_CLUSTER_CUH

// The T at this shared address of block `rank` of the cluster (T a whole number of words).
template <typename T>
__device__ __forceinline__ T cluster_peer_load(const T* local, unsigned rank) {
    static_assert(sizeof(T) % 4 == 0, "whole 32-bit words");
    T out;
    unsigned* words = reinterpret_cast<unsigned*>(&out);
    const unsigned addr = smem_addr(local);
#pragma unroll
    for (int i = 0; i < (int)(sizeof(T) / 4); ++i) {
        unsigned remote;
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(addr + 4u * i), "r"(rank));
        asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(words[i]) : "r"(remote) : "memory");
    }
    return out;
}

// Every thread of the block arrives (release: its reads and writes before come first) ...
__device__ __forceinline__ void cluster_arrive() {
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}

// ... and later waits until every thread of every block of the cluster has arrived.
__device__ __forceinline__ void cluster_wait() {
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

#endif
