{#-
  Split-K over a workspace, for a persistent wgmma kernel whose work units are (tile, part)
  pairs: macros writing the workspace's helpers and, inside a consumer warp's loop over its
  units, how the parts of a tile meet.
    split_k_workspace(nacc, slabs, split) how many loads a reading warp keeps in flight,
                                          polling, relaxed global accesses
    split_k_meet(nacc)                    each warp of a part writes its sums to its slot; the
                                          warp that finishes the tile adds the parts' sums
                                          (polling each part's flag where every unit has a
                                          block, else counting arrivals on the tile's
                                          counter), several parts' sums in flight at once, in
                                          part order, puts the flags or counter back to 0 and
                                          goes on to the epilogue; the others `continue` to
                                          their next unit
  nacc: a thread's accumulators per m64 slab (n / 2); slabs: its m64 slabs; split: SPLITK.
  The workspace: ws, SPLITK float slots per (tile, rows of a consumer, warp), and flags, an
  int per slot (zero between launches). split_k_meet reads, from the scope it is
  written into: acc (float[SLABS][nacc]), m0, n0, row_off, warp, lane, M, part, polled, ws,
  flags, tiles_n, t, cw, tid; RS, RPC, BM, BN, SPLITK, SLABS; and the trace marks
  (common/trace.cuh).
-#}
{% macro split_k_workspace(nacc, slabs, split) %}
{#- a reading lane's float4 loads in flight, in chunks of 8 of a part: 128 registers beside 32
    accumulators, 96 beside 64, else 32 #}
{% set in_flight = 32 if slabs * nacc <= 32 else (24 if slabs * nacc <= 64 else 8) %}
{% set poll_loads = [nacc // 4, 8] | min %}
constexpr int POLL_LOADS = {{ poll_loads }};   // a reading lane's float4 loads of one part's slab in flight together
constexpr int PARTS_TOGETHER = {{ [[in_flight // poll_loads, 1] | max, split] | min }};   // parts read together
static_assert(({{ nacc }} / 4) % POLL_LOADS == 0, "a slab's float4 sums are read in whole chunks");
static_assert(SPLITK <= 33, "a polling warp's lanes watch one part's flag each");
constexpr unsigned POLL_NS = 64;  // between polls

// Another part's four sums added to this thread's accumulators acc[0..3].
__device__ __forceinline__ void add_sums(float* acc, float4 v) {
    acc[0] += v.x;
    acc[1] += v.y;
    acc[2] += v.z;
    acc[3] += v.w;
}

// Global memory, relaxed at GPU scope: seen by (and seeing) other blocks' such accesses,
// never served from this multiprocessor's L1.
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

__device__ __forceinline__ void st_relaxed(int* p, int v) {
    asm volatile("st.relaxed.gpu.global.s32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ int ld_relaxed(const int* p) {
    int v;
    asm volatile("ld.relaxed.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
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
                                          acc[s][4 * q], acc[s][4 * q + 1], acc[s][4 * q + 2], acc[s][4 * q + 3]);
                    }
                    __threadfence();                            // the sums, before the flag or the count
                    __syncwarp();
                    if (t == 0 && cw == 0 && tid == 0) KGEN_MARK(16);   // (trace: the part's sums written)
                }
                if (polled) {
                    if (!adds_by_polling) {                     // the last part adds this one's sums
                        if (lane == 0) st_relaxed(flags + slot + part, 1);
                        continue;
                    }
                    if (t == 0 && cw == 0 && tid == 0) KGEN_MARK(18);   // (trace: its turn known)
                    // lane p waits (backing off: polls read L2) for part p's flag and puts it back to 0
                    if (lane < SPLITK - 1) {
                        while (ld_relaxed(flags + slot + lane) == 0) __nanosleep(POLL_NS);
                        st_relaxed(flags + slot + lane, 0);
                    }
                } else {                                        // by the counters
                    int arrived = 0;
                    if (lane == 0) arrived = atomicAdd(flags + slot, 1);
                    arrived = __shfl_sync(0xffffffffu, arrived, 0);
                    if (t == 0 && cw == 0 && tid == 0) {                 // (trace: its turn known)
                        if (arrived == SPLITK - 1) KGEN_MARK(18); else KGEN_MARK(17);
                    }
                    if (arrived != SPLITK - 1) continue;        // a later part finishes this tile
                    if (lane == 0) flags[slot] = 0;             // ready for the next launch
                    // whichever part arrives last, the sum is 0 + part 0 + part 1 + ...: its own
                    // sums are read back from its slot in their turn
                    #pragma unroll
                    for (int s = 0; s < SLABS; ++s) {
                        #pragma unroll
                        for (int i = 0; i < {{ nacc }}; ++i) acc[s][i] = 0.0f;
                    }
                }
                __syncwarp();
                __threadfence();                                // every part's sums, after its flag or count
                // The parts' sums, PARTS_TOGETHER parts x POLL_LOADS float4s of a lane in flight
                // at once (one memory round trip a group, where reading a part at a time costs
                // one each), added part by part in increasing order: the bits of the result do
                // not depend on the timing. Polling, the last part (the reader) has no slot and
                // its sums come first.
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
                            #pragma unroll
                            for (int g = 0; g < PARTS_TOGETHER; ++g) {
                                if (p0 + g >= SPLITK || (polled && p0 + g == part)) continue;
                                #pragma unroll
                                for (int c = 0; c < POLL_LOADS; ++c) add_sums(&acc[s][4 * (q0 + c)], v[g][c]);
                            }
                        }
                    }
                }
                if (t == 0 && cw == 0 && tid == 0) KGEN_MARK(19);   // (trace: the other parts added)
{% endmacro %}
