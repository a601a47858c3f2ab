// kgen: which output tile a block, or each work unit of a persistent block, computes.
#ifndef KGEN_TILE_SCHEDULER_CUH
#define KGEN_TILE_SCHEDULER_CUH

// Block-row grouping: tile `pid` of a tiles_m x tiles_n grid is (tm, tn), numbered so that
// GROUP rows of tiles sweep the columns together and their operands stay in L2.
template <int GROUP>
__device__ __forceinline__ void group_tiles(int pid, int tiles_m, int tiles_n, int& tm, int& tn) {
    const int per_group = GROUP * tiles_n;
    const int first_m = (pid / per_group) * GROUP;
    const int rows = min(tiles_m - first_m, GROUP);
    const int in_group = pid % per_group;
    tm = first_m + in_group % rows;
    tn = in_group / rows;
}

// The origin (m0, n0) of tile `pair` of a grid of pairs_m x tiles_n pairs of CLUSTER block rows
// each (one block row without clusters), grouped GROUP rows of pairs at a time; `rank` picks
// the block row of the pair. Tiles are TILE_M x TILE_N.
template <int GROUP, int CLUSTER, int TILE_M, int TILE_N>
__device__ __forceinline__ void tile_origin(int pair, int pairs_m, int tiles_n, int rank, int& m0, int& n0) {
    int pm, tn;
    group_tiles<GROUP>(pair, pairs_m, tiles_n, pm, tn);
    m0 = (pm * CLUSTER + rank) * TILE_M;
    n0 = tn * TILE_N;
}

// Persistent blocks: the grid's clusters of CLUSTER blocks (its blocks, without clusters) take
// the work units in turn, cluster c the units c, c + C, c + 2 C, ... of the grid's C clusters.
// Special registers, cheap to read again where used (a kept copy costs a register).
template <int CLUSTER>
__device__ __forceinline__ int first_unit() { return (int)(blockIdx.x / CLUSTER); }

template <int CLUSTER>
__device__ __forceinline__ int unit_step() { return (int)(gridDim.x / CLUSTER); }

// Split-K: the k-blocks [kb0, kb1) of part `part` of a tile's kblocks split in SPLITS parts.
template <int SPLITS>
__device__ __forceinline__ void part_range(int part, int kblocks, int& kb0, int& kb1) {
    kb0 = (int)((long long)part * kblocks / SPLITS);
    kb1 = (int)((long long)(part + 1) * kblocks / SPLITS);
}

#endif
