// kgen RMSNorm over a row, as the row skeleton (memory/row_kernel.cuh) uses it:
// y = x * rsqrt(mean(x^2) + eps) * weight, the sum of squares accumulated in float.
// A NaN or Inf in a row makes the sum NaN or Inf, as in float64.
struct KgenRmsnorm {
    using acc_t = float;
    using stat_t = float;     // rsqrt(mean(x^2) + eps)
    static constexpr bool weighted = true;

    __device__ static __forceinline__ float pad() { return 0.0f; }
    __device__ static __forceinline__ acc_t empty() { return 0.0f; }
    __device__ static __forceinline__ acc_t merge(acc_t a, acc_t b) { return a + b; }
    __device__ static __forceinline__ acc_t shfl_xor(acc_t a, int offset) {
        return __shfl_xor_sync(0xffffffffu, a, offset);
    }

    template <int N>
    __device__ static __forceinline__ void add(acc_t& a, const float (&v)[N]) {
#pragma unroll
        for (int i = 0; i < N; ++i) a = fmaf(v[i], v[i], a);
    }

    template <int N>
    __device__ static __forceinline__ acc_t hold(float (&v)[N]) {
        acc_t a = 0.0f;
        add<N>(a, v);
        return a;
    }

    __device__ static __forceinline__ stat_t stat(acc_t total, int cols, float eps) {
        return rsqrtf(total / (float)cols + eps);
    }

    __device__ static __forceinline__ float out(float x, const stat_t& r, float w) { return x * r * w; }

    __device__ static __forceinline__ float held_scale(acc_t total, acc_t mine, const stat_t& r) { return r; }

    __device__ static __forceinline__ float held_out(float v, float scale, float w) { return v * scale * w; }
};
