// kgen: the skeleton of the row-wise normalisations (softmax, RMSNorm) over rows x cols
// row-major elements: TPR consecutive threads own one row, ROWS rows a block. A row is read
// once into an accumulator (Op::add / Op::hold), reduced over its threads
// (memory/row_reduce.cuh), and written once (Op::out / Op::held_out).
//
// HOLD says where the row waits between the reduction's two sides:
//   KGEN_HOLD_REGS    in registers: ITEMS vectors a thread, read once (the row fits them);
//   KGEN_HOLD_SMEM    in shared memory (a row's slot: cols elements), read once; ITEMS
//                     vectors a thread in flight a step;
//   KGEN_HOLD_REREAD  nowhere: read again (from L2, mostly) after the reduction;
//   KGEN_HOLD_BULK    in shared memory (sm_90, one row a block, 16-byte vectors), copied there
//                     by the bulk-copy unit in ITEMS pieces, each on its own mbarrier, so that
//                     no thread holds a load in flight and the first piece is summed while the
//                     rest arrive; two vectors a thread a step from there on.
// A thread owns the same elements in both passes, so an output may alias the input.
//
// SPLIT > 1 (sm_90): a row is split over the SPLIT blocks of a cluster (ROWS == 1), each
// taking a SPLIT-th of the row's body vectors (block 0 the edges too); their totals meet
// through the cluster's shared memory (memory/row_reduce.cuh), so that a few long rows still
// fill the device.
//
// A row's body is its whole VEC-element vectors from the first element aligned for them
// (16 bytes at most); the elements before it (head) and after the last whole vector (tail),
// fewer than VEC each, are its edges, EDGE of them a thread, read element by element. Where
// x and y are not aligned alike (ALIGNED false) the body starts at the row's first element
// and is read and written element by element. Every thread reaches the reduction (rows past
// the last are "dead": they read and write nothing). Needs convert.cuh, vec_io.cuh and
// row_reduce.cuh. Header-free.
#define KGEN_HOLD_REGS 0
#define KGEN_HOLD_SMEM 1
#define KGEN_HOLD_REREAD 2
#define KGEN_HOLD_BULK 3
#define KGEN_BULK_BAR_BYTES 64      // the pieces' mbarriers (8 at most), just before the row's slot

template <typename T, int VEC, bool VECTOR>
__device__ __forceinline__ kgen_vec<T, VEC> kgen_row_vec_load(const T* p) {
    if constexpr (VECTOR) {
        return kgen_load_vec<T, VEC>(p);
    } else {
        kgen_vec<T, VEC> r;
#pragma unroll
        for (int e = 0; e < VEC; ++e) r.v[e] = p[e];
        return r;
    }
}

// A vector store to global memory (kgen_store_vec_global) on the vector path, element by element otherwise.
template <typename T, int VEC, bool VECTOR>
__device__ __forceinline__ void kgen_row_vec_store(T* p, const kgen_vec<T, VEC>& r) {
    if constexpr (VECTOR) {
        kgen_store_vec_global<T, VEC>(p, r);
    } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) p[e] = r.v[e];
    }
}

// VEC weights as floats: one vector load where w is aligned for it, else element by element
template <class E, int VEC, bool ALIGNED>
__device__ __forceinline__ void kgen_row_weights(float (&wf)[VEC], const typename E::t* w, bool vector) {
    if (ALIGNED && vector) {
        const kgen_vec<typename E::t, VEC> r = kgen_load_vec<typename E::t, VEC>(w);
#pragma unroll
        for (int e = 0; e < VEC; ++e) wf[e] = E::load(r.v[e]);
    } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) wf[e] = E::load(w[e]);
    }
}

// KGEN_HOLD_BULK: the block's NB body vectors from xb to its row's slot srow, in PIECES bulk
// copies, each signalled on its mbarrier (a piece without bytes arrives at once).
template <typename T, int VEC, int PIECES>
__device__ __forceinline__ void kgen_row_bulk_load(T* srow, const T* xb, int nb) {
    const unsigned slot = (unsigned)__cvta_generic_to_shared(srow);
    const unsigned bars = slot - KGEN_BULK_BAR_BYTES;
    const int per = (nb + PIECES - 1) / PIECES;
    if (threadIdx.x == 0) {
#pragma unroll
        for (int c = 0; c < PIECES; ++c) mbar_init(bars + 8 * c, 1);
        mbar_init_fence();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
#pragma unroll 1
        for (int c = 0; c < PIECES; ++c) {
            const int lo = c * per;
            const unsigned bytes = (unsigned)max(0, min(per, nb - lo)) * (VEC * sizeof(T));
            if (bytes > 0) {
                mbar_arrive_expect_tx(bars + 8 * c, bytes);
                bulk_copy_to_shared(slot + lo * (VEC * sizeof(T)), xb + (long long)lo * VEC, bytes, bars + 8 * c);
            } else {
                mbar_arrive(bars + 8 * c);
            }
        }
    }
}

// KGEN_HOLD_BULK's first pass: each piece, once landed, added to acc from shared memory, two
// vectors a thread a step.
template <class Op, class E, int TPR, int VEC, int PIECES>
__device__ __forceinline__ void kgen_row_bulk_add(typename Op::acc_t& acc, const typename E::t* srow, int nb,
                                                  int lane) {
    using T = typename E::t;
    constexpr int U = 2;
    const unsigned bars = (unsigned)__cvta_generic_to_shared(srow) - KGEN_BULK_BAR_BYTES;
    const int per = (nb + PIECES - 1) / PIECES;
#pragma unroll 1
    for (int c = 0; c < PIECES; ++c) {
        mbar_wait(bars + 8 * c, 0);
        const int hi = min(nb, (c + 1) * per);
        for (int base = c * per; base < hi; base += TPR * U) {
            float f[U * VEC];
#pragma unroll
            for (int k = 0; k < U; ++k) {
                const int j = base + lane + k * TPR;
                kgen_vec<T, VEC> raw;
                if (j < hi) raw = kgen_load_vec<T, VEC>(srow + j * VEC);
#pragma unroll
                for (int e = 0; e < VEC; ++e) f[k * VEC + e] = j < hi ? E::load(raw.v[e]) : Op::pad();
            }
            Op::add(acc, f);
        }
    }
}

template <class Op, class E, int TPR, int ROWS, int VEC, int ITEMS, int HOLD, int SPLIT, bool ALIGNED>
__device__ __forceinline__ void kgen_rownorm(const typename E::t* __restrict__ x, const typename E::t* __restrict__ w,
                                             typename E::t* __restrict__ y, long long rows, int cols, float param,
                                             typename Op::acc_t* scratch, typename E::t* smem) {
    static_assert(SPLIT == 1 || ROWS == 1, "a split row has its blocks to itself");
    using T = typename E::t;
    using V = kgen_vec<T, VEC>;
    using acc_t = typename Op::acc_t;
    constexpr int EDGE = VEC == 1 ? 0 : (2 * (VEC - 1) + TPR - 1) / TPR;
    constexpr int EDGE_SLOTS = EDGE > 0 ? EDGE : 1;
    constexpr int STEP = TPR * ITEMS;
    constexpr int OUT_ITEMS = HOLD == KGEN_HOLD_BULK ? 2 : ITEMS;     // vectors a thread a step of the second pass
    constexpr int REDUCE_SLOTS = TPR > 32 ? ROWS * TPR / 32 : 0;    // scratch's slots for the reduction; then SPLIT + 1

    const int lane = threadIdx.x % TPR;
    const int slot = threadIdx.x / TPR;
    const int part = (int)cluster_rank<SPLIT>();
    const long long row = SPLIT > 1 ? (long long)blockIdx.x / SPLIT : (long long)blockIdx.x * ROWS + slot;
    const bool live = row < rows;
    const T* xr = x + (live ? row : 0) * cols;
    T* yr = y + (live ? row : 0) * cols;

    int head = 0;
    if constexpr (ALIGNED && VEC > 1) {
        head = (int)(((0ull - (unsigned long long)xr) % (VEC * sizeof(T))) / sizeof(T));
        head = min(head, cols);
    }
    const int row_vectors = (cols - head) / VEC;
    const int per_part = (row_vectors + SPLIT - 1) / SPLIT;
    const int first = part * per_part;                     // this block's first body vector
    const int nb = live ? max(0, min(per_part, row_vectors - first)) : 0;   // its body vectors (none: a dead row)
    const int tail0 = head + row_vectors * VEC;
    const int edges = live && part == 0 ? head + cols - tail0 : 0;
    const T* xb = xr + head + (long long)first * VEC;
    T* yb = yr + head + (long long)first * VEC;
    const T* wb = Op::weighted ? w + head + (long long)first * VEC : w;
    const bool wvec = Op::weighted && ((unsigned long long)wb % (VEC * sizeof(T))) == 0;
    auto edge_col = [&](int e) { return e < head ? e : tail0 + (e - head); };

    if constexpr (HOLD == KGEN_HOLD_REGS) {
        float v[ITEMS * VEC + EDGE];
        {
            V raw[ITEMS];
            T eraw[EDGE_SLOTS];
#pragma unroll
            for (int k = 0; k < ITEMS; ++k) {
                const int j = lane + k * TPR;
                if (j < nb) raw[k] = kgen_row_vec_load<T, VEC, ALIGNED>(xb + j * VEC);
            }
#pragma unroll
            for (int i = 0; i < EDGE; ++i) {
                const int e = lane + i * TPR;
                if (e < edges) eraw[i] = xr[edge_col(e)];
            }
#pragma unroll
            for (int k = 0; k < ITEMS; ++k) {
                const bool here = lane + k * TPR < nb;
#pragma unroll
                for (int e = 0; e < VEC; ++e) v[k * VEC + e] = here ? E::load(raw[k].v[e]) : Op::pad();
            }
#pragma unroll
            for (int i = 0; i < EDGE; ++i)
                v[ITEMS * VEC + i] = lane + i * TPR < edges ? E::load(eraw[i]) : Op::pad();
        }
        const acc_t mine = Op::hold(v);
        const acc_t total = kgen_split_merge<Op, SPLIT>(kgen_row_reduce<Op, TPR>(mine, scratch), scratch + REDUCE_SLOTS);
        const typename Op::stat_t st = Op::stat(total, cols, param);
        const float scale = Op::held_scale(total, mine, st);
#pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const int j = lane + k * TPR;
            if (j < nb) {
                float wf[VEC];
                if constexpr (Op::weighted) kgen_row_weights<E, VEC, ALIGNED>(wf, wb + j * VEC, wvec);
                V o;
#pragma unroll
                for (int e = 0; e < VEC; ++e)
                    o.v[e] = E::store(Op::held_out(v[k * VEC + e], scale, Op::weighted ? wf[e] : 1.0f));
                kgen_row_vec_store<T, VEC, ALIGNED>(yb + j * VEC, o);
            }
        }
#pragma unroll
        for (int i = 0; i < EDGE; ++i) {
            const int e = lane + i * TPR;
            if (e < edges) {
                const int c = edge_col(e);
                yr[c] = E::store(Op::held_out(v[ITEMS * VEC + i], scale, Op::weighted ? E::load(w[c]) : 1.0f));
            }
        }
    } else {
        acc_t acc = Op::empty();
        T* srow = nullptr;
        if constexpr (HOLD == KGEN_HOLD_SMEM || HOLD == KGEN_HOLD_BULK) {
            constexpr int ALIGN = 16 / sizeof(T);
            srow = smem + (long long)slot * ((cols + ALIGN - 1) / ALIGN * ALIGN);
        }
        if constexpr (HOLD == KGEN_HOLD_BULK) kgen_row_bulk_load<T, VEC, ITEMS>(srow, xb, nb);
        if constexpr (EDGE > 0) {
            float ev[EDGE];
#pragma unroll
            for (int i = 0; i < EDGE; ++i) {
                const int e = lane + i * TPR;
                ev[i] = e < edges ? E::load(xr[edge_col(e)]) : Op::pad();
            }
            Op::add(acc, ev);
        }
        // pass 1: ITEMS vectors in flight a step
        if constexpr (HOLD == KGEN_HOLD_BULK) kgen_row_bulk_add<Op, E, TPR, VEC, ITEMS>(acc, srow, nb, lane);
        else for (int base = 0; base < nb; base += STEP) {
            V raw[ITEMS];
#pragma unroll
            for (int k = 0; k < ITEMS; ++k) {
                const int j = base + lane + k * TPR;
                if (j < nb) raw[k] = kgen_row_vec_load<T, VEC, ALIGNED>(xb + j * VEC);
            }
            float f[ITEMS * VEC];
#pragma unroll
            for (int k = 0; k < ITEMS; ++k) {
                const bool here = base + lane + k * TPR < nb;
#pragma unroll
                for (int e = 0; e < VEC; ++e) f[k * VEC + e] = here ? E::load(raw[k].v[e]) : Op::pad();
                if constexpr (HOLD == KGEN_HOLD_SMEM) {
                    if (here) kgen_store_vec<T, VEC>(srow + (base + lane + k * TPR) * VEC, raw[k]);
                }
            }
            Op::add(acc, f);
        }
        const acc_t total = kgen_split_merge<Op, SPLIT>(kgen_row_reduce<Op, TPR>(acc, scratch), scratch + REDUCE_SLOTS);
        const typename Op::stat_t st = Op::stat(total, cols, param);
        // pass 2
        for (int base = 0; base < nb; base += TPR * OUT_ITEMS) {
            V raw[OUT_ITEMS];
#pragma unroll
            for (int k = 0; k < OUT_ITEMS; ++k) {
                const int j = base + lane + k * TPR;
                if (j < nb) {
                    if constexpr (HOLD != KGEN_HOLD_REREAD) raw[k] = kgen_load_vec<T, VEC>(srow + j * VEC);
                    else raw[k] = kgen_row_vec_load<T, VEC, ALIGNED>(xb + j * VEC);
                }
            }
#pragma unroll
            for (int k = 0; k < OUT_ITEMS; ++k) {
                const int j = base + lane + k * TPR;
                if (j < nb) {
                    float wf[VEC];
                    if constexpr (Op::weighted) kgen_row_weights<E, VEC, ALIGNED>(wf, wb + j * VEC, wvec);
                    V o;
#pragma unroll
                    for (int e = 0; e < VEC; ++e)
                        o.v[e] = E::store(Op::out(E::load(raw[k].v[e]), st, Op::weighted ? wf[e] : 1.0f));
                    kgen_row_vec_store<T, VEC, ALIGNED>(yb + j * VEC, o);
                }
            }
        }
#pragma unroll
        for (int i = 0; i < EDGE; ++i) {
            const int e = lane + i * TPR;
            if (e < edges) {
                const int c = edge_col(e);
                yr[c] = E::store(Op::out(E::load(xr[c]), st, Op::weighted ? E::load(w[c]) : 1.0f));
            }
        }
    }
    kgen_split_done<SPLIT>();
}

// The kernel's body: the vector path where x and y are aligned alike (then every row's body
// is aligned in both), the element path otherwise.
template <class Op, class E, int TPR, int ROWS, int VEC, int ITEMS, int HOLD, int SPLIT>
__device__ __forceinline__ void kgen_rownorm_rows(const typename E::t* __restrict__ x,
                                                  const typename E::t* __restrict__ w,
                                                  typename E::t* __restrict__ y, long long rows, int cols,
                                                  float param, typename Op::acc_t* scratch, typename E::t* smem) {
    const unsigned long long apart = (unsigned long long)x - (unsigned long long)y;
    if constexpr (VEC == 1) {
        kgen_rownorm<Op, E, TPR, ROWS, VEC, ITEMS, HOLD, SPLIT, true>(x, w, y, rows, cols, param, scratch, smem);
    } else if (apart % (VEC * sizeof(typename E::t)) == 0) {
        kgen_rownorm<Op, E, TPR, ROWS, VEC, ITEMS, HOLD, SPLIT, true>(x, w, y, rows, cols, param, scratch, smem);
    } else if constexpr (HOLD == KGEN_HOLD_BULK) {   // a bulk copy needs the body aligned: the threads copy it
        kgen_rownorm<Op, E, TPR, ROWS, VEC, 2, KGEN_HOLD_SMEM, SPLIT, false>(x, w, y, rows, cols, param, scratch, smem);
    } else {
        kgen_rownorm<Op, E, TPR, ROWS, VEC, ITEMS, HOLD, SPLIT, false>(x, w, y, rows, cols, param, scratch, smem);
    }
}
