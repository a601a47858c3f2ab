// kgen: float <-> the CUDA 16-bit types of cuda_fp16.h and cuda_bf16.h (which the includer
// includes): one value (to_f32, from_f32<T>) or a pair of adjacent values as one access
// (Pair<T>::type, pack2<T>, unpack2).
#ifndef KGEN_CONVERT_FP16_CUH
#define KGEN_CONVERT_FP16_CUH

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

template <class T> struct Pair;
template <> struct Pair<float> { typedef float2 type; };
template <> struct Pair<__half> { typedef __half2 type; };
template <> struct Pair<__nv_bfloat16> { typedef __nv_bfloat162 type; };

template <class T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

template <class T> __device__ __forceinline__ typename Pair<T>::type pack2(float a, float b);
template <> __device__ __forceinline__ float2 pack2<float>(float a, float b) { return make_float2(a, b); }
template <> __device__ __forceinline__ __half2 pack2<__half>(float a, float b) { return __floats2half2_rn(a, b); }
template <> __device__ __forceinline__ __nv_bfloat162 pack2<__nv_bfloat16>(float a, float b) {
    return __floats2bfloat162_rn(a, b);
}

__device__ __forceinline__ float2 unpack2(float2 v) { return v; }
__device__ __forceinline__ float2 unpack2(__half2 v) { return __half22float2(v); }
__device__ __forceinline__ float2 unpack2(__nv_bfloat162 v) { return __bfloat1622float2(v); }

#endif
