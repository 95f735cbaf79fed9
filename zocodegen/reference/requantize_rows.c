/* The fast kernels' requantization (reference/fast.py, FloatRequant) as one pass in C:
 *
 *     out = clamp(floor(acc * scale + (acc < threshold ? offset - step : offset)), lo, hi)
 *
 * per channel row.  fast.py proves this float64 expression equal to TFLite's integer
 * requantization for the accumulators it is given; numpy evaluates it in four passes over
 * memory, this loop in one.  The arithmetic is the same IEEE float64 operations in the same
 * order (built with -ffp-contract=off, so no fused multiply-add), hence the same bits.
 * lo and hi are integers of int8 range, so clamping before the floor equals clamping after
 * it, and the floor of a clamped value is its conversion to int32 (which truncates) less one
 * where that rounded up.  Written without branches, so the compiler vectorizes every loop.
 */
#include <stdint.h>

#define ROW(ACC_T, BELOW_EXPR)                                                            \
    for (int64_t i = 0; i < n; ++i) {                                                     \
        const double x = (double)a[i];                                                    \
        double t = x * s + (BELOW_EXPR);                                                  \
        t = t < lo ? lo : t;                                                              \
        t = t > hi ? hi : t;                                                              \
        const int32_t k = (int32_t)t;                                                     \
        const double kd = (double)k;                                                      \
        y[i] = (float)(kd - (t < kd ? 1.0 : 0.0));                                        \
    }

#define ROWS(NAME, ACC_T)                                                                 \
    static void NAME(const ACC_T *restrict acc, int64_t channels, int64_t n,              \
                     int64_t acc_stride, const double *restrict scale,                    \
                     const double *restrict offset, const double *restrict threshold,     \
                     const double *restrict step, double lo, double hi,                   \
                     float *restrict out, int64_t out_stride)                             \
    {                                                                                     \
        for (int64_t c = 0; c < channels; ++c) {                                          \
            const ACC_T *restrict a = acc + c * acc_stride;                               \
            float *restrict y = out + c * out_stride;                                     \
            const double s = scale[c], above = offset[c];                                 \
            if (threshold) {                                                              \
                const double below = offset[c] - step[c], limit = threshold[c];           \
                ROW(ACC_T, x < limit ? below : above)                                     \
            } else {                                                                      \
                ROW(ACC_T, above)                                                         \
            }                                                                             \
        }                                                                                 \
    }

ROWS(rows_from_float, float)
ROWS(rows_from_double, double)
ROWS(rows_from_int32, int32_t)

/* acc: float32 (acc_type 0), float64 (1) or int32 (2), rows acc_stride elements apart;
 * out: float32 rows out_stride elements apart; threshold and step may be NULL (no step
 * anywhere).  Returns 0. */
int64_t zo_requantize_rows(const void *acc, int acc_type, int64_t channels, int64_t n,
                           int64_t acc_stride, const double *scale, const double *offset,
                           const double *threshold, const double *step, double lo, double hi,
                           float *out, int64_t out_stride)
{
    if (acc_type == 1) {
        rows_from_double(acc, channels, n, acc_stride, scale, offset, threshold, step, lo, hi,
                         out, out_stride);
    } else if (acc_type == 2) {
        rows_from_int32(acc, channels, n, acc_stride, scale, offset, threshold, step, lo, hi,
                        out, out_stride);
    } else {
        rows_from_float(acc, channels, n, acc_stride, scale, offset, threshold, step, lo, hi,
                        out, out_stride);
    }
    return 0;
}
