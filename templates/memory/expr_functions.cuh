// kgen: the functions an elementwise expression may call beyond CUDA's own (see
// kgen/kernels/memory/expr.py, which renders every call from its whitelist).
__device__ __forceinline__ float kgen_sigmoid(float x) { return 1.0f / (1.0f + __expf(-x)); }
__device__ __forceinline__ float kgen_relu(float x) { return x > 0.0f ? x : (x == x ? 0.0f : x); }
__device__ __forceinline__ float kgen_gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f)); }
__device__ __forceinline__ float kgen_silu(float x) { return x * kgen_sigmoid(x); }
__device__ __forceinline__ float kgen_pow(float a, float b) { return b == 2.0f ? a * a : powf(a, b); }
