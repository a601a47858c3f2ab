// kgen softmax over a row, as the row skeleton (memory/row_kernel.cuh) uses it: the
// accumulator is the running max m and the sum s of exp(x - m) (online softmax: when the max
// grows, the sum is rescaled). exp is ex2.approx of (x - m) * log2(e), the difference taken
// first so that large values lose nothing. Special values follow the float64 definition:
// a row holding NaN or +Inf gives NaN everywhere, a row of -Inf gives NaN, -Inf elements of
// another row give 0.
__device__ __forceinline__ float kgen_ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// exp(from - to) for to >= from, exactly 1 when they are equal (both -Inf or both +Inf included)
__device__ __forceinline__ float kgen_rescale(float from, float to) {
    return from == to ? 1.0f : kgen_ex2((from - to) * 1.4426950408889634f);
}

// the max that exps are taken against: 0 for a max of -Inf (every exp is then 0, never NaN)
__device__ __forceinline__ float kgen_safe_max(float m) {
    return m == kgen_neg_inf() ? 0.0f : m;
}

struct kgen_softmax_acc {
    float m, s;
};

struct kgen_softmax_stat {
    float m;      // the row's max, made safe
    float inv;    // 1 / the row's sum
};

struct KgenSoftmax {
    using acc_t = kgen_softmax_acc;
    using stat_t = kgen_softmax_stat;
    static constexpr bool weighted = false;

    __device__ static __forceinline__ float pad() { return kgen_neg_inf(); }
    __device__ static __forceinline__ acc_t empty() { return {kgen_neg_inf(), 0.0f}; }

    __device__ static __forceinline__ acc_t merge(acc_t a, acc_t b) {
        const float m = fmaxf(a.m, b.m);
        return {m, a.s * kgen_rescale(a.m, m) + b.s * kgen_rescale(b.m, m)};
    }

    __device__ static __forceinline__ acc_t shfl_xor(acc_t a, int offset) {
        return {__shfl_xor_sync(0xffffffffu, a.m, offset), __shfl_xor_sync(0xffffffffu, a.s, offset)};
    }

    // streamed: N more values (pads are neutral)
    template <int N>
    __device__ static __forceinline__ void add(acc_t& a, const float (&v)[N]) {
        float m = a.m;
#pragma unroll
        for (int i = 0; i < N; ++i) m = fmaxf(m, v[i]);
        const float ms = kgen_safe_max(m);
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < N; ++i) s += kgen_ex2((v[i] - ms) * 1.4426950408889634f);
        a.s = a.s * kgen_rescale(a.m, m) + s;
        a.m = m;
    }

    // held: this thread's values, replaced by their exps against this thread's max
    template <int N>
    __device__ static __forceinline__ acc_t hold(float (&v)[N]) {
        float m = kgen_neg_inf();
#pragma unroll
        for (int i = 0; i < N; ++i) m = fmaxf(m, v[i]);
        const float ms = kgen_safe_max(m);
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < N; ++i) {
            v[i] = kgen_ex2((v[i] - ms) * 1.4426950408889634f);
            s += v[i];
        }
        return {m, s};
    }

    __device__ static __forceinline__ stat_t stat(acc_t total, int cols, float param) {
        return {kgen_safe_max(total.m), 1.0f / total.s};
    }

    __device__ static __forceinline__ float out(float x, const stat_t& st, float w) {
        return kgen_ex2((x - st.m) * 1.4426950408889634f) * st.inv;
    }

    // held: the factor of this thread's exps (its max against the row's, over the row's sum)
    __device__ static __forceinline__ float held_scale(acc_t total, acc_t mine, const stat_t& st) {
        return kgen_rescale(mine.m, total.m) * st.inv;
    }

    __device__ static __forceinline__ float held_out(float v, float scale, float w) {
        return v * scale;
    }
};
