// kgen: reductions over the TPR threads that share one row (TPR a power of two, consecutive
// threads). Generic over an Op giving acc_t, merge(a, b) and shfl_xor(a, offset):
// a group within a warp reduces by butterfly shuffles; a group of several warps adds one
// step through shared memory (one slot per warp, one __syncthreads, which every thread of
// the block must reach), after which every warp reduces the slots of its row by shuffles.
// Every thread of the group ends with the row's total. Header-free.
__device__ __forceinline__ float kgen_neg_inf() { return __int_as_float(0xff800000); }

template <class Op, int OFFSET>
__device__ __forceinline__ typename Op::acc_t kgen_butterfly(typename Op::acc_t a) {
#pragma unroll
    for (int o = OFFSET; o > 0; o >>= 1)
        a = Op::merge(a, Op::shfl_xor(a, o));
    return a;
}

// scratch: ROWS * (TPR / 32) slots in shared memory (unused when TPR <= 32).
template <class Op, int TPR>
__device__ __forceinline__ typename Op::acc_t kgen_row_reduce(typename Op::acc_t a, typename Op::acc_t* scratch) {
    constexpr int IN_WARP = TPR < 32 ? TPR : 32;
    a = kgen_butterfly<Op, IN_WARP / 2>(a);
    if constexpr (TPR > 32) {
        constexpr int WARPS = TPR / 32;
        const int lane = threadIdx.x & 31;
        const int warp = threadIdx.x >> 5;                  // warps of a row are consecutive
        typename Op::acc_t* slots = scratch + (warp / WARPS) * WARPS;
        if (lane == 0)
            slots[warp % WARPS] = a;
        __syncthreads();
        a = slots[lane % WARPS];                            // each aligned group of WARPS lanes: every slot
        a = kgen_butterfly<Op, WARPS / 2>(a);
    }
    return a;
}

// A row split over the SPLIT blocks of a cluster (sm_90; SPLIT == 1: the block's total as it
// is): each block's total, merged in rank order in every block, so that all compute the same
// statistics. slots: SPLIT + 1 in shared memory. Each block tells its peers when it has read
// them (cluster_arrive); kgen_split_done, its last statement, waits until they have read it,
// so that no block's shared memory goes while a peer may still read it. Needs cluster.cuh and
// mbarrier.cuh.
template <class Op, int SPLIT>
__device__ __forceinline__ typename Op::acc_t kgen_split_merge(typename Op::acc_t total, typename Op::acc_t* slots) {
    if constexpr (SPLIT == 1) {
        return total;
    } else {
        if (threadIdx.x == 0) slots[0] = total;
        cluster_sync<SPLIT>();                          // every block's total is in its slot
        if (threadIdx.x < SPLIT) slots[1 + threadIdx.x] = cluster_peer_load(slots, threadIdx.x);
        cluster_arrive();
        __syncthreads();
        typename Op::acc_t t = slots[1];
#pragma unroll
        for (int r = 1; r < SPLIT; ++r) t = Op::merge(t, slots[1 + r]);
        return t;
    }
}

template <int SPLIT>
__device__ __forceinline__ void kgen_split_done() {
    if constexpr (SPLIT > 1) cluster_wait();
}
