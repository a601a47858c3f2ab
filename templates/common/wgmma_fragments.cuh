{#-
  Warpgroup MMA (wgmma, sm_90a). Included, this file gives the plain C++ below; imported
  ({% from "common/wgmma_fragments.cuh" import wgmma_ss, wgmma_rs %}), its macros write the
  mma itself, whose asm names every accumulator register: wgmma_ss(name, n, k, ptx_t, tnsp)
  defines name(d, da, db): D(64 x n, f32) += A(64 x k) * B(k x n), both from shared memory
  through descriptors, inputs of PTX type ptx_t, tnsp = (A M-major, B N-major) or none (tf32:
  no transpose bits); wgmma_rs(name, n) defines name(d, a, db), its tf32 A (64 x 8) from four
  registers of each thread.
-#}
// kgen: warpgroup MMA (wgmma, sm_90a): shared-memory matrix descriptors, the async group's
// fence, commit and wait, and the accumulators' fence.
#ifndef KGEN_WGMMA_FRAGMENTS_CUH
#define KGEN_WGMMA_FRAGMENTS_CUH

// wgmma shared-memory matrix descriptor: start address, leading / stride byte offsets (all
// >> 4), base offset 0 (every atom is 1024-byte aligned), layout type 1 = 128-byte swizzle.
__device__ __forceinline__ unsigned long long smem_desc(unsigned addr, unsigned lbo, unsigned sbo) {
    return (unsigned long long)((addr & 0x3FFFFu) >> 4)
         | ((unsigned long long)((lbo >> 4) & 0x3FFFu) << 16)
         | ((unsigned long long)((sbo >> 4) & 0x3FFFu) << 32)
         | (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory"); }

// Keep the compiler from moving reads of the accumulators above a wgmma wait.
template <int N>
__device__ __forceinline__ void fence_acc(float (&d)[N]) {
    #pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i]) :: "memory");
}

#endif
{% macro accumulators(nacc) %}
        "{"
{% for i in range(nacc) %}
        "%{{ i }}{{ ", " if not loop.last else "" }}"
{% endfor %}
        "},\n\t"
{%- endmacro %}
{% macro accumulator_operands(nacc) %}
        : {% for i in range(nacc) %}"+f"(d[{{ i }}]){{ ", " if not loop.last else "" }}{% if loop.index % 8 == 0 and not loop.last %}

          {% endif %}{% endfor %}

{%- endmacro %}
{% macro wgmma_ss(name, n, k, ptx_t, tnsp) %}
{% set nacc = n // 2 %}
// D(64 x {{ n }}, f32) += A(64 x {{ k }}) * B({{ k }} x {{ n }}), both from shared memory through descriptors.
{% if tnsp is none %}
// Immediates: scale-a 1, scale-b 1 (tf32 has no transpose bits: both operands K-major).
{% else %}
// Immediates: scale-a 1, scale-b 1, tnspA {{ 1 if tnsp[0] else 0 }} (A {{ "M" if tnsp[0] else "K" }}-major), tnspB {{ 1 if tnsp[1] else 0 }} (B {{ "N" if tnsp[1] else "K" }}-major).
{% endif %}
__device__ __forceinline__ void {{ name }}(float (&d)[{{ nacc }}], unsigned long long da, unsigned long long db) {
    asm volatile(
        "{\n\t.reg .pred p;\n\t"
        "setp.ne.b32 p, %{{ nacc + 2 }}, 0;\n\t"
        "wgmma.mma_async.sync.aligned.m64n{{ n }}k{{ k }}.f32.{{ ptx_t }}.{{ ptx_t }}\n\t"
{{ accumulators(nacc) }}
        "%{{ nacc }}, %{{ nacc + 1 }}, p, 1, 1{% if tnsp is not none %}, {{ 1 if tnsp[0] else 0 }}, {{ 1 if tnsp[1] else 0 }}{% endif %};\n\t}"
{{ accumulator_operands(nacc) }}
        : "l"(da), "l"(db), "r"(1)
        : "memory");
}
{% endmacro %}
{% macro wgmma_rs(name, n) %}
{% set nacc = n // 2 %}
// D(64 x {{ n }}, f32) += A(64 x 8) * B(8 x {{ n }}): A from this thread's four registers (rows l/4 and
// l/4 + 8 of the warp's 16, k l%4 and l%4 + 4), B (K-major) from shared memory. wgmma reads the
// registers asynchronously: they stay unchanged until a wait covers this group.
__device__ __forceinline__ void {{ name }}(float (&d)[{{ nacc }}], const unsigned (&a)[4], unsigned long long db) {
    asm volatile(
        "{\n\t.reg .pred p;\n\t"
        "setp.ne.b32 p, %{{ nacc + 5 }}, 0;\n\t"
        "wgmma.mma_async.sync.aligned.m64n{{ n }}k8.f32.tf32.tf32\n\t"
{{ accumulators(nacc) }}
        "{{ "{" }}%{{ nacc }}, %{{ nacc + 1 }}, %{{ nacc + 2 }}, %{{ nacc + 3 }}}, %{{ nacc + 4 }}, p, 1, 1;\n\t}"
{{ accumulator_operands(nacc) }}
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1)
        : "memory");
}
{% endmacro %}
