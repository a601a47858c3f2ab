// kgen: a phase trace of a kernel's blocks. Rendered with TRACE = 1 (scripts/trace_phases.py),
// KGEN_MARK / KGEN_STAMP / KGEN_STAMP_MAX write 32 words per block: SM clocks (one clock per
// multiprocessor, so a block's marks compare) and global-timer stamps; otherwise they are
// nothing, and the kernel is as without them.
{% if TRACE is defined and TRACE %}
constexpr int KGEN_TRACE_WORDS = 32;
__device__ unsigned long long kgen_trace[1024 * KGEN_TRACE_WORDS];
#define KGEN_MARK(slot) (kgen_trace[blockIdx.x * KGEN_TRACE_WORDS + (slot)] = clock64())
#define KGEN_STAMP(slot) do { unsigned long long t_; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_)); \
                              kgen_trace[blockIdx.x * KGEN_TRACE_WORDS + (slot)] = t_; } while (0)
#define KGEN_STAMP_MAX(slot) do { unsigned long long t_; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_)); \
                                  atomicMax(&kgen_trace[blockIdx.x * KGEN_TRACE_WORDS + (slot)], t_); } while (0)
{% else %}
#define KGEN_MARK(slot) ((void)0)
#define KGEN_STAMP(slot) ((void)0)
#define KGEN_STAMP_MAX(slot) ((void)0)
{% endif %}
