// kgen: the entry of a row-wise normalisation over {{ dtype }} rows (their sizes are arguments, so
// that one binary serves every shape): {{ TPR }} threads a row, {{ ROWS }} rows a block of {{ BLOCK }}, {{ VEC }}-element vectors,
// {{ ITEMS }} of them a thread {% if HOLD == "regs" %}held in registers{% elif HOLD == "smem" %}a step, the row held in shared memory{% elif HOLD == "bulk" %}pieces of the row bulk-copied into shared memory{% else %}a step, the row read twice{% endif %}{% if SPLIT > 1 %}; a row split over a cluster of {{ SPLIT }} blocks{% endif %}.
{# the context's op names the Op struct; weighted: a weight vector follows x, and eps the sizes #}
struct KgenElem {
    using t = {{ x_t }};
    __device__ static __forceinline__ float load(t v) { return {{ x_load }}(v); }
    __device__ static __forceinline__ t store(float f) { return {{ x_store }}(f); }
};

extern "C" __global__ void __launch_bounds__({{ BLOCK }}, 1){% if SPLIT > 1 %} __cluster_dims__({{ SPLIT }}, 1, 1){% endif %} {{ entry }}(
    const {{ x_t }}* __restrict__ x,
{% if weighted %}
    const {{ x_t }}* __restrict__ w,
{% endif %}
    {{ x_t }}* __restrict__ y, long long rows, int cols{% if weighted %}, float eps{% endif %})
{
    __shared__ {{ op }}::acc_t scratch[{{ SCRATCH }}];
{% if HOLD == "smem" %}
    extern __shared__ __align__(16) unsigned char kgen_row_smem[];
    {{ x_t }}* smem = reinterpret_cast<{{ x_t }}*>(kgen_row_smem);
{% elif HOLD == "bulk" %}
    extern __shared__ __align__(16) unsigned char kgen_row_smem[];
    {{ x_t }}* smem = reinterpret_cast<{{ x_t }}*>(kgen_row_smem + KGEN_BULK_BAR_BYTES);
{% else %}
    {{ x_t }}* smem = nullptr;
{% endif %}
    kgen_rownorm_rows<{{ op }}, KgenElem, {{ TPR }}, {{ ROWS }}, {{ VEC }}, {{ ITEMS }}, KGEN_HOLD_{{ HOLD | upper }}, {{ SPLIT }}>(
        x, {% if weighted %}w{% else %}nullptr{% endif %}, y, rows, cols, {% if weighted %}eps{% else %}0.0f{% endif %}, scratch, smem);
}
