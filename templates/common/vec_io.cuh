// kgen: vector loads and stores of N elements (N * sizeof(T) <= 16 bytes: one LDG/STG.128
// at most) and the element conversions they feed. Header-free (NVRTC needs no include path).
template <typename T, int N>
struct __align__(sizeof(T) * N) kgen_vec {
    T v[N];
};

template <typename T, int N>
__device__ __forceinline__ kgen_vec<T, N> kgen_load_vec(const T* p) {
    return *reinterpret_cast<const kgen_vec<T, N>*>(p);
}

template <typename T, int N>
__device__ __forceinline__ void kgen_store_vec(T* p, const kgen_vec<T, N>& x) {
    *reinterpret_cast<kgen_vec<T, N>*>(p) = x;
}

// A store to global memory (never shared: st.global), one st.global.v4 for 16 bytes: a vector
// of 16-bit elements built element by element is otherwise split by NVVM into narrower stores.
template <typename T, int N>
__device__ __forceinline__ void kgen_store_vec_global(T* p, const kgen_vec<T, N>& x) {
    if constexpr (sizeof(T) * N == 16) {
        const uint4 w = *reinterpret_cast<const uint4*>(&x);
        asm volatile("st.global.v4.b32 [%0], { %1, %2, %3, %4 };"
                     :: "l"(p), "r"(w.x), "r"(w.y), "r"(w.z), "r"(w.w));
    } else {
        kgen_store_vec<T, N>(p, x);
    }
}

// Whether p is aligned for a vector of N elements of T.
template <typename T, int N>
__device__ __forceinline__ bool kgen_vec_aligned(const void* p) {
    return (reinterpret_cast<unsigned long long>(p) % (sizeof(T) * N)) == 0;
}
