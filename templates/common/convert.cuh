// kgen: storage <-> compute conversions, header-free (NVRTC needs no include path).
// Half precision is stored as unsigned short and converted with PTX cvt.
__device__ __forceinline__ float kgen_to_float(float x) { return x; }
__device__ __forceinline__ double kgen_to_double(double x) { return x; }
__device__ __forceinline__ float kgen_half_to_float(unsigned short h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
__device__ __forceinline__ unsigned short kgen_float_to_half(float f) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
__device__ __forceinline__ float kgen_bf16_to_float(unsigned short h) {
    return __uint_as_float(((unsigned int)h) << 16);
}
__device__ __forceinline__ unsigned short kgen_float_to_bf16(float f) {
    unsigned short h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
