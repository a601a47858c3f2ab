// kgen: the groups of a grouped GEMM (the mixture-of-experts case) in shared memory, and the work
// unit -> (group, tile) lookup of a persistent kernel over every group's tiles. Group g owns the
// rows [ends[g-1], ends[g]) (ends[-1] = 0) of a T-row problem, its tiles pairs of TILE_M x TILE_N
// (clusters of CLUSTER block rows); its units come after those of the groups before it.
#ifndef KGEN_GROUP_TABLE_CUH
#define KGEN_GROUP_TABLE_CUH
{% include "common/tile_scheduler.cuh" %}

// One warp writes rows[g] (group g's row end, clamped into [the previous end, T]: ends that fall
// or pass T cannot move a tile outside the T rows) and units[g] (the units of groups 0..g), 32
// groups a step: a running max makes the ends non-decreasing, a scan sums the units. The caller
// synchronises the block before reading the table.
template <int GROUPS, int PAIR_ROWS>
__device__ __forceinline__ void group_table(const int* __restrict__ ends, int total_rows, int tiles_n,
                                            int* rows, int* units) {
    const int lane = threadIdx.x & 31;
    int prev_end = 0, units_before = 0;
    for (int base = 0; base < GROUPS; base += 32) {
        const int g = base + lane;
        int end = g < GROUPS ? min(max(ends[g], 0), total_rows) : total_rows;
        #pragma unroll
        for (int d = 1; d < 32; d *= 2) {
            const int before = __shfl_up_sync(0xffffffffu, end, d);
            if (lane >= d) end = max(end, before);
        }
        end = max(end, prev_end);
        int begin = __shfl_up_sync(0xffffffffu, end, 1);
        if (lane == 0) begin = prev_end;
        int upto = g < GROUPS ? (end - begin + PAIR_ROWS - 1) / PAIR_ROWS * tiles_n : 0;
        #pragma unroll
        for (int d = 1; d < 32; d *= 2) {
            const int before = __shfl_up_sync(0xffffffffu, upto, d);
            if (lane >= d) upto += before;
        }
        if (g < GROUPS) {
            rows[g] = end;
            units[g] = units_before + upto;
        }
        units_before += __shfl_sync(0xffffffffu, upto, 31);
        prev_end = __shfl_sync(0xffffffffu, end, 31);
    }
}

// Unit `unit` (below units[GROUPS - 1]) as its group, the origin (m0: a row of the T rows, n0)
// of its tile in the group's grid of pairs (tile_origin's grouping and cluster rank), and the
// group's row end. A binary search: the first group whose units end past `unit`.
template <int GROUPS, int GM, int CLUSTER, int TILE_M, int TILE_N>
__device__ __forceinline__ void group_tile(int unit, const int* rows, const int* units, int tiles_n, int rank,
                                           int& group, int& m0, int& n0, int& row_end) {
    int lo = 0, hi = GROUPS - 1;
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (units[mid] > unit) hi = mid; else lo = mid + 1;
    }
    group = lo;
    const int first_row = lo ? rows[lo - 1] : 0;
    row_end = rows[lo];
    const int pairs_m = (row_end - first_row + TILE_M * CLUSTER - 1) / (TILE_M * CLUSTER);
    tile_origin<GM, CLUSTER, TILE_M, TILE_N>(unit - (lo ? units[lo - 1] : 0), pairs_m, tiles_n, rank, m0, n0);
    m0 += first_row;
}

#endif
