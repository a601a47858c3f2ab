{#-
  The epilogue of a consumer warp's wgmma accumulators: macros writing, inside the warp's loop
  over its m64 slabs, the stores of slab s into C (row-major, ldc elements of out_t):
  out = act(alpha * acc + beta * C + bias[col]). In the fragment wgmma leaves, lane l of warp w
  holds, for each 8 columns j, columns 8 j + 2 (l%4) + {0,1} of rows 16 w + l/4 and + 8:
  acc[s][4 j + 0, 1] on the first, acc[s][4 j + 2, 3] on the second (with RS, the tile's rows
  frag_row and frag_row + 1). with_beta: C is read and scaled by beta (the loop without it is
  straight-line code).
    store_band(with_beta, batched)
                              the warp's 16 rows from `band` on, 128 bytes of columns at a time,
                              staged in its two 2 KiB swizzled shared buffers and sent by TMA store
                              (batched: into C's 3-D map at the scope's `batch`)
    store_band_rows(with_beta)
                              the same band through the warp's first buffer, then out a row at a
                              time by lanes at consecutive columns (2- or 4-byte stores: a C whose
                              rows TMA cannot store)
    stage_chunk(by_pairs)     their common part: a chunk of the band into the swizzled buffer
                              (by_pairs: C read a pair at a time, as TMA's alignment allows)
    store_rows(with_beta)     the thread's two rows, from registers
    store_rows_transposed()   the same for a kernel computing C^T (its rows are C's columns)
  The code reads, from the scope it is written into: acc, s, lane, warp, cw, m0, n0, row_off,
  M, N, C, ldc, bias, alpha, beta, vec_ok, frag_row, band, store_bufs, stores, tmap_c, kgen_smem; BN,
  STORE_COLS, STORE_BUF, RS, OUT_F32; out_t, out2_t, finish(v, bias, col) (bias and
  activation), to_f32, from_f32, pack2, unpack2 (common/convert_fp16.cuh), the TMA store of
  common/tma.cuh. Macros, not device functions: written as forceinline functions, the same
  instructions came out of ptxas with other register numbers in 27 of the 59 shipped wgmma
  kernels (docs/templates.md).
-#}
{% macro store_band(with_beta, batched=False) %}
                        constexpr bool WITH_BETA = {{ "true" if with_beta else "false" }};   // C read, scaled by beta
                        #pragma unroll
                        for (int q = 0; q < BN / STORE_COLS; ++q) {
                            const unsigned buf = store_bufs + ((cw * 4 + warp) * 2 + (stores & 1)) * STORE_BUF;
                            if (lane == 0) bulk_wait_read<1>();   // the store two back has read this buffer
                            __syncwarp();
{{ stage_chunk(True) }}                            fence_proxy_async();                      // the staged rows, for the TMA unit
                            __syncwarp();
                            if (lane == 0) {
{% if batched %}
                                tma_store_3d(&tmap_c, buf, n0 + q * STORE_COLS, band, batch);
{% else %}
                                tma_store_2d(&tmap_c, buf, n0 + q * STORE_COLS, band);
{% endif %}
                                bulk_commit();
                            }
                            ++stores;
                        }
{% endmacro %}
{% macro store_band_rows(with_beta) %}
                        constexpr bool WITH_BETA = {{ "true" if with_beta else "false" }};   // C read, scaled by beta
                        const unsigned buf = store_bufs + (cw * 4 + warp) * 2 * STORE_BUF;   // the warp's first buffer
                        const unsigned char* const buf_at = kgen_smem + (buf - smem_addr(kgen_smem));
                        #pragma unroll
                        for (int q = 0; q < BN / STORE_COLS; ++q) {
                            const int c0 = n0 + q * STORE_COLS;       // the chunk's first column
                            if (c0 >= N) break;
                            __syncwarp();                             // the chunk before is read
{{ stage_chunk(False) }}                            __syncwarp();
                            // row r of the band by lanes at consecutive columns: 32 values a store
                            #pragma unroll
                            for (int r = 0; r < STORE_ROWS; ++r) {
                                if (band + r >= M) break;
                                out_t* crow = C + (long long)(band + r) * ldc + c0;
                                #pragma unroll
                                for (int p = 0; p < STORE_COLS / 32; ++p) {
                                    const int c = 32 * p + lane;
                                    const unsigned byte = c * sizeof(out_t);
                                    const unsigned at = r * 128 + ((((byte >> 4) ^ (r & 7))) << 4) + (byte & 15);
                                    if (c0 + c < N) crow[c] = *reinterpret_cast<const out_t*>(buf_at + at);
                                }
                            }
                        }
{% endmacro %}
{% macro stage_chunk(by_pairs) %}
                            #pragma unroll
                            for (int jj = 0; jj < STORE_COLS / 8; ++jj) {
                                const int j = q * (STORE_COLS / 8) + jj;
                                const int col = n0 + 8 * j + 2 * (lane % 4);
                                #pragma unroll
                                for (int h = 0; h < 2; ++h) {
                                    const int r = lane / 4 + 8 * h;           // row in the band
                                    float v0 = alpha * acc[s][4 * j + 2 * h];
                                    float v1 = alpha * acc[s][4 * j + 2 * h + 1];
                                    if (WITH_BETA && band + r < M) {
                                        const out_t* crow = C + (long long)(band + r) * ldc;
{% if by_pairs %}
                                        if (col + 1 < N) {   // TMA's alignment implies the pair's
                                            const float2 old = unpack2(*reinterpret_cast<const out2_t*>(crow + col));
                                            v0 = fmaf(beta, old.x, v0);
                                            v1 = fmaf(beta, old.y, v1);
                                        } else if (col < N) {
                                            v0 = fmaf(beta, to_f32(crow[col]), v0);
                                        }
{% else %}
                                        if (col < N) v0 = fmaf(beta, to_f32(crow[col]), v0);   // rows of any alignment
                                        if (col + 1 < N) v1 = fmaf(beta, to_f32(crow[col + 1]), v1);
{% endif %}
                                    }
                                    v0 = col < N ? finish(v0, bias, col) : 0.0f;
                                    v1 = col + 1 < N ? finish(v1, bias, col + 1) : 0.0f;
                                    // byte (8 jj + 2 (l%4)) * size of the 128-byte row r: its 16-byte
                                    // unit goes to unit ^ (r % 8), as the map's 128-byte swizzle reads it
                                    const unsigned byte = (8 * jj + 2 * (lane % 4)) * sizeof(out_t);
                                    const unsigned at = buf + r * 128 + ((((byte >> 4) ^ (r & 7))) << 4) + (byte & 15);
                                    if constexpr (OUT_F32) {
                                        st_shared_v2(at, v0, v1);
                                    } else {
                                        const out2_t pair = pack2<out_t>(v0, v1);
                                        st_shared_b32(at, *reinterpret_cast<const unsigned*>(&pair));
                                    }
                                }
                            }
{% endmacro %}
{% macro store_rows(with_beta) %}
                    constexpr bool WITH_BETA = {{ "true" if with_beta else "false" }};   // C read, scaled by beta
                    #pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int row = RS ? m0 + row_off + s * 64 + frag_row + h
                                           : m0 + row_off + s * 64 + warp * 16 + lane / 4 + 8 * h;
                        if (row >= M) continue;
                        out_t* crow = C + (long long)row * ldc;
                        #pragma unroll
                        for (int j = 0; j < BN / 8; ++j) {
                            const int col = n0 + 8 * j + 2 * (lane % 4);
                            float v0 = alpha * acc[s][4 * j + 2 * h];
                            float v1 = alpha * acc[s][4 * j + 2 * h + 1];
                            if (vec_ok && col + 1 < N) {
                                if (WITH_BETA) {
                                    const float2 old = unpack2(*reinterpret_cast<const out2_t*>(crow + col));
                                    v0 = fmaf(beta, old.x, v0);
                                    v1 = fmaf(beta, old.y, v1);
                                }
                                *reinterpret_cast<out2_t*>(crow + col) = pack2<out_t>(finish(v0, bias, col),
                                                                                finish(v1, bias, col + 1));
                            } else {
                                if (col < N) {
                                    if (WITH_BETA) v0 = fmaf(beta, to_f32(crow[col]), v0);
                                    crow[col] = from_f32<out_t>(finish(v0, bias, col));
                                }
                                if (col + 1 < N) {
                                    if (WITH_BETA) v1 = fmaf(beta, to_f32(crow[col + 1]), v1);
                                    crow[col + 1] = from_f32<out_t>(finish(v1, bias, col + 1));
                                }
                            }
                        }
                    }
{% endmacro %}
{% macro store_rows_transposed() %}
                    // kernel rows mrow, mrow + 1 (C's columns) of kernel column ncol (C's row): the
                    // thread's accumulators 4 j + e (row l/4) and 4 j + 2 + e (row l/4 + 8)
                    const int mrow = m0 + row_off + s * 64 + frag_row;
                    if (mrow >= M) continue;
                    const bool pair_ok = vec_ok && mrow + 1 < M;
                    #pragma unroll
                    for (int j = 0; j < BN / 8; ++j) {
                        #pragma unroll
                        for (int e = 0; e < 2; ++e) {
                            const int ncol = n0 + 8 * j + 2 * (lane % 4) + e;
                            if (ncol >= N) continue;
                            out_t* crow = C + (long long)ncol * ldc;
                            float v0 = alpha * acc[s][4 * j + e];
                            float v1 = alpha * acc[s][4 * j + 2 + e];
                            if (pair_ok) {
                                if (beta != 0.0f) {
                                    const float2 old = unpack2(*reinterpret_cast<const out2_t*>(crow + mrow));
                                    v0 = fmaf(beta, old.x, v0);
                                    v1 = fmaf(beta, old.y, v1);
                                }
                                *reinterpret_cast<out2_t*>(crow + mrow) = pack2<out_t>(finish(v0, bias, mrow),
                                                                                 finish(v1, bias, mrow + 1));
                            } else {
                                if (beta != 0.0f) v0 = fmaf(beta, to_f32(crow[mrow]), v0);
                                crow[mrow] = from_f32<out_t>(finish(v0, bias, mrow));
                                if (mrow + 1 < M) {
                                    if (beta != 0.0f) v1 = fmaf(beta, to_f32(crow[mrow + 1]), v1);
                                    crow[mrow + 1] = from_f32<out_t>(finish(v1, bias, mrow + 1));
                                }
                            }
                        }
                    }
{% endmacro %}
