{#-
  Split-K over a workspace, for a persistent wgmma kernel whose work units are (tile, part)
  pairs: macros writing the workspace's helpers and, inside a consumer warp's loop over its
  units, how the parts of a tile meet.
    split_k_workspace(empty_bits, nacc)   the "empty" slot pattern (a NaN the host puts in every
                                          slot), polling, relaxed 16-byte global accesses
    split_k_meet(nacc)                    each warp of a part writes its sums to its slot; the
                                          warp that finishes the tile adds the others' (polling
                                          where every unit has a block, else counting arrivals
                                          on the tile's counter), puts "empty" back, and goes on
                                          to the epilogue; the others `continue` to their next unit
  nacc: a thread's accumulators per m64 slab (n / 2). split_k_meet reads, from the scope it is
  written into: acc (float[SLABS][nacc]), m0, n0, row_off, warp, lane, M, part, polled, ws,
  counters, tiles_n, t, cw, tid; RS, RPC, BM, BN, SPLITK, SLABS; and the trace marks
  (common/trace.cuh).
-#}
{% macro split_k_workspace(empty_bits, nacc) %}
// Split-K workspace slots hold this NaN bit pattern ("empty") between launches.
constexpr unsigned EMPTY_BITS = {{ empty_bits }}u;
#define EMPTY __uint_as_float(EMPTY_BITS)
constexpr int POLL_LOADS = {{ nacc // 4 if nacc // 4 <= 16 else 8 }};   // a polling warp's float4 loads in flight together
static_assert(({{ nacc }} / 4) % POLL_LOADS == 0, "a slab's float4 sums are polled in whole chunks");
constexpr unsigned POLL_NS = 64;  // between polls

__device__ __forceinline__ bool is_empty(float v) { return __float_as_uint(v) == EMPTY_BITS; }

__device__ __forceinline__ bool any_empty(float4 v) {
    return is_empty(v.x) | is_empty(v.y) | is_empty(v.z) | is_empty(v.w);
}

// Another part's four sums added to this thread's accumulators acc[0..3].
__device__ __forceinline__ void add_sums(float* acc, float4 v) {
    acc[0] += v.x;
    acc[1] += v.y;
    acc[2] += v.z;
    acc[3] += v.w;
}

// A sum as written to the workspace: never "empty" (that NaN becomes the canonical one).
__device__ __forceinline__ float not_empty(float v) { return is_empty(v) ? __uint_as_float(0x7fffffffu) : v; }

// 16 bytes to / from global memory, relaxed at GPU scope: seen by (and seeing) other blocks'
// such accesses without a fence, never served from this multiprocessor's L1.
__device__ __forceinline__ void st_relaxed_v4(float* p, float a, float b, float c, float d) {
    asm volatile("st.relaxed.gpu.global.v4.f32 [%0], {{ "{" }}%1, %2, %3, %4};"
                 :: "l"(p), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
}

__device__ __forceinline__ float4 ld_relaxed_v4(const float* p) {
    float4 v;
    asm volatile("ld.relaxed.gpu.global.v4.f32 {{ "{" }}%0, %1, %2, %3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p) : "memory");
    return v;
}
{% endmacro %}
{% macro split_k_meet(nacc) %}
                // ------------------------------------------------ split-K: add up the parts
                // This warp's rows of slab s start at first_row + 64 s; a slab with none
                // below M is neither written nor read (the same for every part).
                const int first_row = RS ? m0 + row_off + 32 * (warp / 2) + 8 * (warp % 2) : m0 + row_off + warp * 16;
                if (first_row >= M) continue;               // no row of this warp is stored
                const int group = row_off / RPC;            // which rows of the tile (0 with ping-pong)
                const int tile = (m0 / BM) * tiles_n + n0 / BN;   // below tiles_m x tiles_n: first_row < M
                const long long slot = ((long long)((tile * (BM / RPC) + group) * 4 + warp)) * SPLITK;
                constexpr int SLOT_FLOATS = 32 * SLABS * {{ nacc }};
                float* mine = ws + (slot + part) * SLOT_FLOATS;
                const bool adds_by_polling = polled && part == SPLITK - 1;   // writes no sums of its own
                if (!adds_by_polling) {
                    #pragma unroll
                    for (int s = 0; s < SLABS; ++s) {
                        if (first_row + 64 * s >= M) continue;
                        #pragma unroll
                        for (int q = 0; q < {{ nacc }} / 4; ++q)
                            st_relaxed_v4(mine + ((s * ({{ nacc }} / 4) + q) * 32 + lane) * 4,
                                          not_empty(acc[s][4 * q]), not_empty(acc[s][4 * q + 1]),
                                          not_empty(acc[s][4 * q + 2]), not_empty(acc[s][4 * q + 3]));
                    }
                }
                if (polled) {
                    if (!adds_by_polling) continue;             // the last part adds this one's sums
                    if (t == 0 && cw == 0 && tid == 0) KGEN_MARK(18);   // (trace: its turn known)
                    const int last_slab = min(SLABS - 1, (M - 1 - first_row) / 64);   // the last one written
                    for (int p = 0; p < SPLITK - 1; ++p) {
                        float* theirs = ws + (slot + p) * SLOT_FLOATS;
                        // lane 0 waits (backing off: polls read L2) for the part's last float4, lane
                        // 31's of its last store; then every lane reads its sums, what is not yet
                        // there again
                        if (lane == 0) {
                            const float* tail = theirs + ((last_slab * ({{ nacc }} / 4) + {{ nacc }} / 4 - 1) * 32 + 31) * 4;
                            while (any_empty(ld_relaxed_v4(tail))) __nanosleep(POLL_NS);
                        }
                        __syncwarp();
                        #pragma unroll
                        for (int s = 0; s < SLABS; ++s) {
                            if (first_row + 64 * s >= M) continue;
                            #pragma unroll
                            for (int q0 = 0; q0 < {{ nacc }} / 4; q0 += POLL_LOADS) {
                                float* at = theirs + ((s * ({{ nacc }} / 4) + q0) * 32 + lane) * 4;
                                float4 v[POLL_LOADS];
                                #pragma unroll
                                for (int c = 0; c < POLL_LOADS; ++c) v[c] = ld_relaxed_v4(at + c * 128);
                                for (;;) {          // what has not landed is read again, all in flight together
                                    bool waiting = false;
                                    #pragma unroll
                                    for (int c = 0; c < POLL_LOADS; ++c) waiting |= any_empty(v[c]);
                                    if (!waiting) break;
                                    __nanosleep(POLL_NS);
                                    #pragma unroll
                                    for (int c = 0; c < POLL_LOADS; ++c)
                                        if (any_empty(v[c])) v[c] = ld_relaxed_v4(at + c * 128);
                                }
                                #pragma unroll
                                for (int c = 0; c < POLL_LOADS; ++c) {
                                    add_sums(&acc[s][4 * (q0 + c)], v[c]);
                                    st_relaxed_v4(at + c * 128, EMPTY, EMPTY, EMPTY, EMPTY);   // for the next launch
                                }
                            }
                        }
                    }
                } else {                                        // by the counters
                    __threadfence();                            // the sums, before the count
                    __syncwarp();
                    if (t == 0 && cw == 0 && tid == 0) KGEN_MARK(16);   // (trace: the part's sums written)
                    int arrived = 0;
                    if (lane == 0) arrived = atomicAdd(counters + (slot / SPLITK), 1);
                    arrived = __shfl_sync(0xffffffffu, arrived, 0);
                    if (t == 0 && cw == 0 && tid == 0) {                 // (trace: its turn known)
                        if (arrived == SPLITK - 1) KGEN_MARK(18); else KGEN_MARK(17);
                    }
                    if (arrived != SPLITK - 1) continue;        // a later part finishes this tile
                    __threadfence();
                    for (int p = 0; p < SPLITK; ++p) {
                        float4* theirs = reinterpret_cast<float4*>(ws + (slot + p) * SLOT_FLOATS);
                        #pragma unroll
                        for (int s = 0; s < SLABS; ++s) {
                            if (first_row + 64 * s >= M) continue;
                            #pragma unroll
                            for (int q = 0; q < {{ nacc }} / 4; ++q) {
                                float4* at = theirs + (s * ({{ nacc }} / 4) + q) * 32 + lane;
                                if (p != part) add_sums(&acc[s][4 * q], __ldcg(at));
                                *at = make_float4(EMPTY, EMPTY, EMPTY, EMPTY);   // as a polling launch expects
                            }
                        }
                    }
                    if (lane == 0) counters[slot / SPLITK] = 0;     // ready for the next launch
                }
                if (t == 0 && cw == 0 && tid == 0) KGEN_MARK(19);   // (trace: the other parts added)
{% endmacro %}
