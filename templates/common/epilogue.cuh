// kgen: the fused epilogue's activations, on the accumulator type (float or double), named as
// the problem's epilogue names them.
#ifndef KGEN_EPILOGUE_CUH
#define KGEN_EPILOGUE_CUH

enum class Activation { none, relu, gelu };

__device__ __forceinline__ float kgen_erf(float x) { return erff(x); }
__device__ __forceinline__ double kgen_erf(double x) { return erf(x); }
__device__ __forceinline__ float kgen_relu(float x) { return fmaxf(x, 0.0f); }
__device__ __forceinline__ double kgen_relu(double x) { return fmax(x, 0.0); }

template <Activation ACT, class T>
__device__ __forceinline__ T activate(T x) {
    if constexpr (ACT == Activation::relu) {
        return kgen_relu(x);
    } else if constexpr (ACT == Activation::gelu) {
        return T(0.5) * x * (T(1) + kgen_erf(x * T(0.70710678118654752440)));
    } else {
        return x;
    }
}

#endif
