{#-
  An implicit GEMM's A gathered from an NHWC image, as the conv families load it: macros writing
  the convolution's sizes (compiled in; the batch is M's), where each of a thread's output pixels'
  windows starts, and where a column k = (r, s, c) of A lies in that window. A column beyond
  R*S*C, a row beyond M and a tap outside the image read as zeros.
    im2col_sizes()                 CONV_H ... CONV_DW and CONV_GK = R*S*C
    window_corners(count, step)    for i < count, the corner of output pixel m0 + row + i*step:
                                   h0[i], w0[i] (far outside for a row past M) and corner[i], the
                                   element offset of (r = s = 0, c = 0), which may lie outside
    im2col_tap(k)                  column k's c, rs, tap shift dh, dw, k_in (k < R*S*C) and the
                                   element offset of (tap, channel) from a corner
    tap_inside()                   `inside`: row i's tap reads inside the image
  The names they read (m0, M, row, h0, w0, corner; i) are the caller's.
-#}
{% macro im2col_sizes() %}
constexpr int CONV_H = {{ CONV_H }}, CONV_W = {{ CONV_W }}, CONV_C = {{ CONV_C }};
constexpr int CONV_P = {{ CONV_P }}, CONV_Q = {{ CONV_Q }}, CONV_R = {{ CONV_R }}, CONV_S = {{ CONV_S }};
constexpr int CONV_SH = {{ CONV_SH }}, CONV_SW = {{ CONV_SW }}, CONV_PH = {{ CONV_PH }}, CONV_PW = {{ CONV_PW }};
constexpr int CONV_DH = {{ CONV_DH }}, CONV_DW = {{ CONV_DW }};
constexpr int CONV_GK = CONV_R * CONV_S * CONV_C;
{%- endmacro %}
{% macro window_corners(count, step) %}
        #pragma unroll
        for (int i = 0; i < {{ count }}; ++i) {
            const int m = m0 + row + i * {{ step }};
            const bool real = m < M;
            const int b = real ? m / (CONV_P * CONV_Q) : 0, pq = real ? m - b * (CONV_P * CONV_Q) : 0;
            const int p = pq / CONV_Q, q = pq - p * CONV_Q;
            h0[i] = real ? p * CONV_SH - CONV_PH : -(1 << 29);
            w0[i] = q * CONV_SW - CONV_PW;
            corner[i] = ((long long)b * CONV_H * CONV_W + (long long)h0[i] * CONV_W + w0[i]) * CONV_C;
        }
{%- endmacro %}
{% macro im2col_tap(k) %}
        const int k = {{ k }};
        const int c = k % CONV_C, rs = k / CONV_C;
        const int dh = (rs / CONV_S) * CONV_DH, dw = (rs % CONV_S) * CONV_DW;
        const bool k_in = k < CONV_GK;
        const int offset = (dh * CONV_W + dw) * CONV_C + c;
{%- endmacro %}
{% macro tap_inside() %}
            const bool inside = k_in && (unsigned)(h0[i] + dh) < (unsigned)CONV_H
                                && (unsigned)(w0[i] + dw) < (unsigned)CONV_W;
{%- endmacro %}
