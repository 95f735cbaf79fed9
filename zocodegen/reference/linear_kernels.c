/* The fast kernels' accumulations (reference/fast.py, Linear) compiled: CONV_2D and
 * FULLY_CONNECTED as an integer matrix product, DEPTHWISE_CONV_2D tap by tap with the
 * batch rows as the vector axis.  Both give exactly the integers of numpy's float32 forms:
 *
 * - zo_gemm_u8s8: int32 accumulators sum_k w[m,k] x[k,n] of int8 weights and engine-form
 *   activations x (float32 q - zp).  The activations enter as the unsigned bytes
 *   u = x + shift (shift = zp + 128, so u = q + 128 in 0..255) and the product as AVX-512
 *   VNNI's u8 x s8 dot products of four (no saturation: each 32-bit lane adds four products
 *   of at most 255 * 128); the caller subtracts shift * sum_k w[m,k] through ``correction``.
 *   int32 is exact while K * 255 * 128 < 2^31, which the caller checks.  Built only where
 *   the compiler targets AVX-512 VNNI (-march=native on such a CPU); elsewhere
 *   zo_gemm_available() says 0 and numpy's float product runs.
 * - zo_depthwise: float32 sums of integer products, exact while every partial sum stays
 *   below 2^24 (the caller's bound), so the order of the additions does not matter.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>
#define ZO_VNNI 1
#else
#define ZO_VNNI 0
#endif

int64_t zo_gemm_available(void) { return ZO_VNNI; }

#if ZO_VNNI
#define MR 8   /* weight rows per micro-tile */
#define NR 32  /* columns per packed panel: two vectors of 16 int32 */

/* Columns n0 .. n0 + NR of x as bytes u = x + shift, four k at a time: panel[q][col][t] is
 * row 4 q + t, column n0 + col (zero past k or n; the weights past k are zero too). */
static void pack_panel(const float *x, int64_t k, int64_t n, int64_t x_stride, float shift,
                       int64_t n0, int64_t k4, uint8_t *panel)
{
    const __m512 add = _mm512_set1_ps(shift);
    for (int64_t q = 0; q < k4; ++q) {
        for (int half = 0; half < 2; ++half) {
            const int64_t c0 = n0 + 16 * half;
            const int64_t left = n - c0;
            const __mmask16 mask = left >= 16 ? (__mmask16)0xFFFF
                                 : left <= 0 ? (__mmask16)0 : (__mmask16)((1u << left) - 1);
            __m128i r[4];
            for (int t = 0; t < 4; ++t) {
                const int64_t row = 4 * q + t;
                if (row < k && mask) {
                    const __m512 v = _mm512_maskz_loadu_ps(mask, x + row * x_stride + c0);
                    r[t] = _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(_mm512_add_ps(v, add)));
                } else {
                    r[t] = _mm_setzero_si128();
                }
            }
            const __m128i t0 = _mm_unpacklo_epi8(r[0], r[1]), t1 = _mm_unpackhi_epi8(r[0], r[1]);
            const __m128i t2 = _mm_unpacklo_epi8(r[2], r[3]), t3 = _mm_unpackhi_epi8(r[2], r[3]);
            uint8_t *dst = panel + q * (4 * NR) + 64 * half;
            _mm_storeu_si128((__m128i *)(dst + 0), _mm_unpacklo_epi16(t0, t2));
            _mm_storeu_si128((__m128i *)(dst + 16), _mm_unpackhi_epi16(t0, t2));
            _mm_storeu_si128((__m128i *)(dst + 32), _mm_unpacklo_epi16(t1, t3));
            _mm_storeu_si128((__m128i *)(dst + 48), _mm_unpackhi_epi16(t1, t3));
        }
    }
}

static inline __m512i broadcast4(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* MR weight rows (row stride ka bytes, zero-padded to MR rows) times one packed panel; the
 * sixteen accumulators are named, so the compiler keeps them in registers. */
#define ZO_ROW(R)                                                                          \
    do {                                                                                   \
        const __m512i w = broadcast4(a + (R) * ka + 4 * q);                                \
        c##R##0 = _mm512_dpbusd_epi32(c##R##0, b0, w);                                     \
        c##R##1 = _mm512_dpbusd_epi32(c##R##1, b1, w);                                     \
    } while (0)
#define ZO_STORE(R)                                                                        \
    if ((R) < rows) {                                                                      \
        const __m512i c = _mm512_set1_epi32(correction[R]);                                \
        _mm512_mask_storeu_epi32(out + (R) * out_stride, m0, _mm512_sub_epi32(c##R##0, c)); \
        _mm512_mask_storeu_epi32(out + (R) * out_stride + 16, m1,                          \
                                 _mm512_sub_epi32(c##R##1, c));                            \
    }

static void micro_tile(const int8_t *a, int64_t ka, int64_t k4, const uint8_t *panel,
                       int64_t rows, const int32_t *correction, int64_t cols, int32_t *out,
                       int64_t out_stride)
{
    __m512i c00 = _mm512_setzero_si512(), c01 = c00, c10 = c00, c11 = c00, c20 = c00,
            c21 = c00, c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00,
            c60 = c00, c61 = c00, c70 = c00, c71 = c00;
    for (int64_t q = 0; q < k4; ++q) {
        const __m512i b0 = _mm512_load_si512(panel + q * (4 * NR));
        const __m512i b1 = _mm512_load_si512(panel + q * (4 * NR) + 64);
        ZO_ROW(0); ZO_ROW(1); ZO_ROW(2); ZO_ROW(3);
        ZO_ROW(4); ZO_ROW(5); ZO_ROW(6); ZO_ROW(7);
    }
    const __mmask16 m0 = cols >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << cols) - 1);
    const __mmask16 m1 = cols >= 32 ? (__mmask16)0xFFFF
                       : cols <= 16 ? (__mmask16)0 : (__mmask16)((1u << (cols - 16)) - 1);
    ZO_STORE(0) ZO_STORE(1) ZO_STORE(2) ZO_STORE(3)
    ZO_STORE(4) ZO_STORE(5) ZO_STORE(6) ZO_STORE(7)
}
#endif

/* out (m, n) int32, rows out_stride apart = a (m, ka bytes a row, m padded to a multiple of
 * 8 with zero rows, ka = 4 ceil(k / 4) with zeros past k) times x (k, n) float32, rows
 * x_stride apart, as bytes x + shift, minus correction[m].  Returns 0 (nothing written)
 * when not built with VNNI. */
int64_t zo_gemm_u8s8(const int8_t *a, int64_t m, int64_t k, int64_t ka, const int32_t *correction,
                     const float *x, int64_t n, int64_t x_stride, float shift, int32_t *out,
                     int64_t out_stride)
{
#if ZO_VNNI
    const int64_t k4 = ka / 4;
    uint8_t *panel = aligned_alloc(64, (size_t)(k4 > 0 ? k4 : 1) * 4 * NR);
    if (!panel)
        return 0;
    for (int64_t n0 = 0; n0 < n; n0 += NR) {
        pack_panel(x, k, n, x_stride, shift, n0, k4, panel);
        const int64_t cols = n - n0 < NR ? n - n0 : NR;
        for (int64_t m0 = 0; m0 < m; m0 += MR)
            micro_tile(a + m0 * ka, ka, k4, panel, m - m0, correction + m0, cols,
                       out + m0 * out_stride + n0, out_stride);
    }
    free(panel);
    return 1;
#else
    (void)a; (void)m; (void)k; (void)ka; (void)correction; (void)x; (void)n; (void)x_stride;
    (void)shift; (void)out; (void)out_stride;
    return 0;
#endif
}

/* One step of a depthwise convolution on 16 output lanes: the lanes ``mask`` of output
 * vector ``ov`` get tap ``tap`` times input vector ``src``'s lanes ``idx``. */
typedef struct {
    int32_t idx[16];
    int32_t ov, src, tap;
    uint32_t mask;
} zo_move;

/* The moves of a group of g rows: output element e (row e / out_hw, position e % out_hw) of
 * the group's g out_hw, for each tap that reaches the input, reads input element
 * row in_hw + ih in_w + iw of the group's g in_hw.  Grouped by output vector, then tap,
 * then input vector.  Returns the count; with moves == NULL only counts.  They depend on
 * the geometry only, so the caller computes them once (zo_depthwise_group gives g). */
int64_t zo_depthwise_moves(int64_t g, int64_t in_h, int64_t in_w, int64_t kh, int64_t kw,
                           int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t pad_top,
                           int64_t pad_left, int64_t out_h, int64_t out_w, zo_move *moves)
{
    const int64_t in_hw = in_h * in_w, out_hw = out_h * out_w;
    const int64_t nout = (g * out_hw + 15) / 16, nin = (g * in_hw + 15) / 16;
    int64_t count = 0;
    for (int64_t ov = 0; ov < nout; ++ov) {
        for (int64_t t = 0; t < kh * kw; ++t) {
            const int64_t i = t / kw, j = t % kw;
            for (int64_t src = 0; src < nin; ++src) {
                zo_move move = {{0}, (int32_t)ov, (int32_t)src, (int32_t)t, 0};
                for (int64_t lane = 0; lane < 16; ++lane) {
                    const int64_t e = 16 * ov + lane;
                    if (e >= g * out_hw)
                        break;
                    const int64_t row = e / out_hw, oh = (e % out_hw) / out_w,
                                  ow = e % out_w;
                    const int64_t ih = oh * sh + i * dh - pad_top, iw = ow * sw + j * dw - pad_left;
                    if (ih < 0 || ih >= in_h || iw < 0 || iw >= in_w)
                        continue;
                    const int64_t at = row * in_hw + ih * in_w + iw;
                    if (at / 16 == src) {
                        move.idx[lane] = (int32_t)(at % 16);
                        move.mask |= 1u << lane;
                    }
                }
                if (move.mask) {
                    if (moves)
                        moves[count] = move;
                    ++count;
                }
            }
        }
    }
    return count;
}

/* Depthwise accumulators out (c, rows, out_h, out_w) float32 of x (input channel c / mult
 * at x + (c / mult) x_channel_stride, then rows of in_h in_w values, contiguous) and taps
 * (c, kh kw): g rows at a time (zo_depthwise_group), DB such groups together, each output
 * vector a sum of permuted input vectors times a tap (``moves``, zo_depthwise_moves: each
 * read once for the DB groups).  Returns 0 (nothing written) when not built with AVX-512
 * or the scratch cannot be had. */
#define DB 8
#define ZO_DW_ACC(B) acc##B = _mm512_fmadd_ps(                                            \
    _mm512_maskz_permutexvar_ps(mask, idx, _mm512_load_ps(in + (B) * nin * 16)), wv, acc##B)
#define ZO_DW_STORE(B)                                                                     \
    {                                                                                      \
        const int64_t left = have_out - (B) * g * out_hw - 16 * ov;                        \
        const int64_t lim = left < g * out_hw - 16 * ov ? left : g * out_hw - 16 * ov;     \
        if (lim > 0)                                                                       \
            _mm512_mask_storeu_ps(dst + (r0 + (B) * g) * out_hw + 16 * ov,                 \
                                  lim >= 16 ? (__mmask16)0xFFFF                            \
                                            : (__mmask16)((1u << lim) - 1), acc##B);       \
    }

/* Rows a group of zo_depthwise holds: as many as one vector does, at least one. */
int64_t zo_depthwise_group(int64_t in_hw, int64_t out_hw)
{
    const int64_t wide = in_hw > out_hw ? in_hw : out_hw;
    return wide >= 16 ? 1 : 16 / wide;
}

int64_t zo_depthwise(const float *x, int64_t channels, int64_t rows, int64_t x_channel_stride,
                     int64_t mult, int64_t in_h, int64_t in_w, const float *taps, int64_t kh,
                     int64_t kw, const zo_move *moves, int64_t count, int64_t out_h, int64_t out_w,
                     float *out)
{
#if ZO_VNNI
    const int64_t in_hw = in_h * in_w, out_hw = out_h * out_w;
    const int64_t g = zo_depthwise_group(in_hw, out_hw);
    const int64_t nin = (g * in_hw + 15) / 16, nout = (g * out_hw + 15) / 16;
    float *buf = aligned_alloc(64, (size_t)(DB * nin) * 64);
    if (!buf)
        return 0;
    for (int64_t c = 0; c < channels; ++c) {
        const float *src = x + (c / mult) * x_channel_stride;
        const float *w = taps + c * kh * kw;
        float *dst = out + c * rows * out_hw;
        for (int64_t r0 = 0; r0 < rows; r0 += DB * g) {  /* DB groups of g rows */
            const int64_t block = rows - r0 < DB * g ? rows - r0 : DB * g;
            const int64_t have_in = block * in_hw, have_out = block * out_hw;
            for (int64_t b = 0; b < DB; ++b) {
                for (int64_t v = 0; v < nin; ++v) {
                    const int64_t at = b * g * in_hw + 16 * v;
                    const int64_t left = (have_in - at < g * in_hw - 16 * v
                                          ? have_in - at : g * in_hw - 16 * v);
                    const __mmask16 m = left >= 16 ? (__mmask16)0xFFFF
                                      : left <= 0 ? (__mmask16)0
                                                  : (__mmask16)((1u << left) - 1);
                    _mm512_store_ps(buf + (b * nin + v) * 16,
                                    _mm512_maskz_loadu_ps(m, src + r0 * in_hw + at));
                }
            }
            int64_t k = 0;
            for (int64_t ov = 0; ov < nout; ++ov) {
                __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0,
                       acc4 = acc0, acc5 = acc0, acc6 = acc0, acc7 = acc0;
                for (; k < count && moves[k].ov == ov; ++k) {
                    const __m512i idx = _mm512_loadu_si512(moves[k].idx);
                    const __mmask16 mask = (__mmask16)moves[k].mask;
                    const __m512 wv = _mm512_set1_ps(w[moves[k].tap]);
                    const float *in = buf + 16 * moves[k].src;
                    ZO_DW_ACC(0); ZO_DW_ACC(1); ZO_DW_ACC(2); ZO_DW_ACC(3);
                    ZO_DW_ACC(4); ZO_DW_ACC(5); ZO_DW_ACC(6); ZO_DW_ACC(7);
                }
                ZO_DW_STORE(0) ZO_DW_STORE(1) ZO_DW_STORE(2) ZO_DW_STORE(3)
                ZO_DW_STORE(4) ZO_DW_STORE(5) ZO_DW_STORE(6) ZO_DW_STORE(7)
            }
        }
    }
    free(buf);
    return 1;
#else
    (void)x; (void)channels; (void)rows; (void)x_channel_stride; (void)mult; (void)in_h;
    (void)in_w; (void)taps; (void)kh; (void)kw; (void)moves; (void)count; (void)out_h;
    (void)out_w; (void)out;
    return 0;
#endif
}
