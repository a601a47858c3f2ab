// kgen: a block's threads copy a tile of a matrix from global into shared memory with cp.async
// (common/cp_async.cuh), zero-filling what lies past the matrix. A tile is ROWS x COLS stored
// elements of type T, COLS contiguous in global memory, in chunks of V elements; row r of the
// tile starts SROW elements after row r - 1 in shared memory; NTHREADS threads share the copies.
#ifndef KGEN_TILE_COPY_CUH
#define KGEN_TILE_COPY_CUH
{% include "common/cp_async.cuh" %}

// One tile: `rows_left` / `cols_left` bound what exists in global memory.
template <int NTHREADS, int ROWS, int COLS, int V, int SROW, class T>
__device__ __forceinline__ void load_tile(T* dst, const T* src, long long ld, int rows_left,
                                          int cols_left, int tid) {
    constexpr int PER_ROW = COLS / V;
    constexpr int CHUNKS = ROWS * PER_ROW;
    #pragma unroll
    for (int i = 0; i < (CHUNKS + NTHREADS - 1) / NTHREADS; ++i) {
        const int c = tid + i * NTHREADS;
        if (CHUNKS % NTHREADS != 0 && c >= CHUNKS) break;
        const int r = c / PER_ROW;
        const int col = (c % PER_ROW) * V;
        int n = cols_left - col;
        n = r < rows_left ? (n < 0 ? 0 : (n > V ? V : n)) : 0;
        const T* from = n ? src + r * ld + col : src;
        copy_async<V * (int)sizeof(T)>(dst + r * SROW + col, from, n * (int)sizeof(T));
    }
}

// load_tile for a tile that lies wholly inside the matrix: every chunk is whole.
template <int NTHREADS, int ROWS, int COLS, int V, int SROW, class T>
__device__ __forceinline__ void load_whole_tile(T* dst, const T* src, long long ld, int tid) {
    constexpr int PER_ROW = COLS / V;
    constexpr int CHUNKS = ROWS * PER_ROW;
    #pragma unroll
    for (int i = 0; i < (CHUNKS + NTHREADS - 1) / NTHREADS; ++i) {
        const int c = tid + i * NTHREADS;
        if (CHUNKS % NTHREADS != 0 && c >= CHUNKS) break;
        const int r = c / PER_ROW;
        const int col = (c % PER_ROW) * V;
        copy_async<V * (int)sizeof(T)>(dst + r * SROW + col, src + r * ld + col, V * (int)sizeof(T));
    }
}

// One operand tile's copies by one thread, planned once: k runs along COLS when KMAJOR, else
// along ROWS. The copies go in k order, a tile at a time, so each chunk's global pointer
// advances by a fixed step and its bound is one comparison with the k left; a chunk past the
// matrix copies nothing (zero fill) from the tile's origin.
template <int NTHREADS, int ROWS, int COLS, int V, int SROW, bool KMAJOR, class T>
struct CopyPlan {
    static constexpr int PER_ROW = COLS / V, CHUNKS = ROWS * PER_ROW, N = (CHUNKS + NTHREADS - 1) / NTHREADS;
    const T* origin;
    const T* src[N];
    int dst[N];       // element offset in the tile
    int edge[N];      // KMAJOR: the chunk's column (huge past the rows); else its row
    int width[N];     // else: the elements of the chunk inside the columns

    __device__ __forceinline__ void init(const T* base, long long ld, int mn_left, int tid) {
        origin = base;
        #pragma unroll
        for (int i = 0; i < N; ++i) {
            const int c = tid + i * NTHREADS;
            const int r = c / PER_ROW, col = (c % PER_ROW) * V;
            src[i] = base + r * ld + col;
            dst[i] = r * SROW + col;
            if constexpr (KMAJOR) {
                edge[i] = r < mn_left ? col : (1 << 30);
            } else {
                edge[i] = r;
                width[i] = min(max(mn_left - col, 0), V);
            }
        }
    }

    // the next k tile into `tile`, `k_left` elements of k from its start on; WHOLE: every chunk
    // whole (a tile inside the matrix in all directions: no bounds, no zero fill)
    template <bool WHOLE>
    __device__ __forceinline__ void copy(T* tile, int k_left, long long step, int tid) {
        #pragma unroll
        for (int i = 0; i < N; ++i) {
            if (CHUNKS % NTHREADS != 0 && tid + i * NTHREADS >= CHUNKS) break;
            if constexpr (WHOLE) {
                copy_async<V * (int)sizeof(T)>(tile + dst[i], src[i], V * (int)sizeof(T));
            } else {
                int n;
                if constexpr (KMAJOR) n = min(max(k_left - edge[i], 0), V);
                else n = edge[i] < k_left ? width[i] : 0;
                copy_async<V * (int)sizeof(T)>(tile + dst[i], n ? src[i] : origin, n * (int)sizeof(T));
            }
            src[i] += step;
        }
    }
};

#endif
