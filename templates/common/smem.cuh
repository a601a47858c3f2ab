// kgen: shared-memory addresses and accesses in PTX, header-free.
#ifndef KGEN_SMEM_CUH
#define KGEN_SMEM_CUH

// The 32-bit shared-memory address of a generic pointer into shared memory.
__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// Make what the generic proxy wrote to shared memory (cp.async copies, staged output)
// visible to the async proxy (wgmma reads, TMA stores).
__device__ __forceinline__ void fence_proxy_async() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

__device__ __forceinline__ void st_shared_b32(unsigned addr, unsigned v) {
    asm volatile("st.shared.b32 [%0], %1;" :: "r"(addr), "r"(v) : "memory");
}

__device__ __forceinline__ void st_shared_v2(unsigned addr, float a, float b) {
    asm volatile("st.shared.v2.f32 [%0], {{ "{" }}%1, %2};" :: "r"(addr), "f"(a), "f"(b) : "memory");
}

__device__ __forceinline__ void ld_shared_v2(unsigned addr, unsigned& x, unsigned& y) {
    asm volatile("ld.shared.v2.b32 {{ "{" }}%0, %1}, [%2];" : "=r"(x), "=r"(y) : "r"(addr) : "memory");
}

__device__ __forceinline__ float4 ld_shared_v4(unsigned addr) {
    float4 v;
    asm volatile("ld.shared.v4.f32 {{ "{" }}%0, %1, %2, %3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(addr) : "memory");
    return v;
}

__device__ __forceinline__ void st_shared_v4(unsigned addr, float a, float b, float c, float d) {
    asm volatile("st.shared.v4.f32 [%0], {{ "{" }}%1, %2, %3, %4};" :: "r"(addr), "f"(a), "f"(b), "f"(c), "f"(d)
                 : "memory");
}

#endif
