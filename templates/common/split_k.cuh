{#-
  Split-K over a workspace, for a persistent wgmma kernel whose work units are (tile, part)
  pairs: macros writing the workspace's helpers and, inside a consumer warp's loop over its
  units, how the parts of a tile meet.
    split_k_workspace(empty_bits, nacc, slabs, split)
                                          the "empty" slot pattern (a NaN the host puts in every
                                          slot), how many loads a reading warp keeps in flight,
                                          polling, relaxed 16-byte global accesses
    split_k_meet(nacc)                    each warp of a part writes its sums to its slot; the
                                          warp that finishes the tile adds the others' (polling
                                          where every unit has a block, else counting arrivals
                                          on the tile's counter), several parts' sums in flight
                                          at once, puts "empty" back, and goes on to the
                                          epilogue; the others `continue` to their next unit
  nacc: a thread's accumulators per m64 slab (n / 2); slabs: its m64 slabs; split: SPLITK.
  split_k_meet reads, from the scope it is written into: acc (float[SLABS][nacc]), m0, n0, row_off, warp, lane, M, part, polled, ws,
  counters, tiles_n, t, cw, tid; RS, RPC, BM, BN, SPLITK, SLABS; and the trace marks
  (common/trace.cuh).
-#}
{% macro split_k_workspace(empty_bits, nacc, slabs, split) %}
{#- a reading lane's float4 loads in flight, in chunks of 8 of a part: 128 registers beside 32
    accumulators, 96 beside 64, else 32 #}
{% set in_flight = 32 if slabs * nacc <= 32 else (24 if slabs * nacc <= 64 else 8) %}
{% set poll_loads = [nacc // 4, 8] | min %}
// Split-K workspace slots hold this NaN bit pattern ("empty") between launches.
constexpr unsigned EMPTY_BITS = {{ empty_bits }}u;
#define EMPTY __uint_as_float(EMPTY_BITS)
constexpr int POLL_LOADS = {{ poll_loads }};   // a reading lane's float4 loads of one part's slab in flight together
constexpr int PARTS_TOGETHER = {{ [[in_flight // poll_loads, 1] | max, split] | min }};   // parts read together
static_assert(({{ nacc }} / 4) % POLL_LOADS == 0, "a slab's float4 sums are read in whole chunks");
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
                    if (lane == 0) counters[slot / SPLITK] = 0;     // ready for the next launch
                    // whichever part arrives last, the sum is 0 + part 0 + part 1 + ...: its own
                    // sums are read back from its slot in their turn
                    #pragma unroll
                    for (int s = 0; s < SLABS; ++s) {
                        #pragma unroll
                        for (int i = 0; i < {{ nacc }}; ++i) acc[s][i] = 0.0f;
                    }
                }
                // The parts' sums, PARTS_TOGETHER parts x POLL_LOADS float4s of a lane in flight
                // at once (one memory round trip a group, where reading a part at a time cost one
                // or two each), added part by part in increasing order, whatever order they land
                // in: the bits of the result do not depend on the timing. Polling, the last part
                // (the reader) has no slot and its sums come first. A value still "empty" (polling:
                // that part is not done) is read again; every slot is left "empty" for the next
                // launch.
                for (int p0 = 0; p0 < SPLITK; p0 += PARTS_TOGETHER) {
                    #pragma unroll
                    for (int s = 0; s < SLABS; ++s) {
                        if (first_row + 64 * s >= M) continue;
                        #pragma unroll
                        for (int q0 = 0; q0 < {{ nacc }} / 4; q0 += POLL_LOADS) {
                            float4 v[PARTS_TOGETHER][POLL_LOADS];
                            #pragma unroll
                            for (int g = 0; g < PARTS_TOGETHER; ++g) {
                                const float* at = ws + (slot + p0 + g) * SLOT_FLOATS + ((s * ({{ nacc }} / 4) + q0) * 32 + lane) * 4;
                                #pragma unroll
                                for (int c = 0; c < POLL_LOADS; ++c)
                                    v[g][c] = (p0 + g < SPLITK && !(polled && p0 + g == part))
                                            ? ld_relaxed_v4(at + c * 128) : make_float4(0.f, 0.f, 0.f, 0.f);
                            }
                            for (;;) {          // what has not landed is read again, all in flight together
                                bool waiting = false;
                                #pragma unroll
                                for (int g = 0; g < PARTS_TOGETHER; ++g) {
                                    #pragma unroll
                                    for (int c = 0; c < POLL_LOADS; ++c) waiting |= any_empty(v[g][c]);
                                }
                                if (!waiting) break;
                                __nanosleep(POLL_NS);
                                #pragma unroll
                                for (int g = 0; g < PARTS_TOGETHER; ++g) {
                                    const float* at = ws + (slot + p0 + g) * SLOT_FLOATS + ((s * ({{ nacc }} / 4) + q0) * 32 + lane) * 4;
                                    #pragma unroll
                                    for (int c = 0; c < POLL_LOADS; ++c)
                                        if (any_empty(v[g][c])) v[g][c] = ld_relaxed_v4(at + c * 128);
                                }
                            }
                            #pragma unroll
                            for (int g = 0; g < PARTS_TOGETHER; ++g) {
                                const int p = p0 + g;
                                if (p >= SPLITK || (polled && p == part)) continue;   // (polling: no slot of its own)
                                float* at = ws + (slot + p) * SLOT_FLOATS + ((s * ({{ nacc }} / 4) + q0) * 32 + lane) * 4;
                                #pragma unroll
                                for (int c = 0; c < POLL_LOADS; ++c) {
                                    add_sums(&acc[s][4 * (q0 + c)], v[g][c]);
                                    st_relaxed_v4(at + c * 128, EMPTY, EMPTY, EMPTY, EMPTY);
                                }
                            }
                        }
                    }
                }
                if (t == 0 && cw == 0 && tid == 0) KGEN_MARK(19);   // (trace: the other parts added)
{% endmacro %}
