/*
 * Channel-wise node perturbation (--estimator channel, and np-channel's layers where
 * adaptive would perturb the weights): node perturbation with one xi per output channel,
 * added at every position of the channel, which trains the per-channel biases alone
 * (d = channels; numpy twin: the "CH" branches of zocodegen/training/estimators/
 * layerwise.py). The queries are NP's (zo_node_queries.c) with `channels` draws each.
 * --scales: each query also moves the channel's scale by xi' / 32 (zo_node_queries.c), and
 * the same losses estimate the scales' gradient (their update: zo_scales.c).
 */
#include "zo_train_engine.h"
#include "zo_update_rules.h"

/* Sample n's share of the channel gradient: g_c += sum_q D_q xi_qc, the draws of the
 * sample's stream replayed (`channels` per query, as the queries drew them). The
 * simulator's int64 sums agree while no partial sum leaves int32: always with Rademacher
 * draws (N Q terms, |D| <= diff_limit = (2^31 - 1) / (N Q)); uniform ones (|xi| <= 2)
 * would need N Q >= 512 loss differences near 2^21 of one sign, and sat_s32 keeps even
 * that defined. */
static void channel_gradient(const zo_train_model *m, const zo_train_layer *L, uint32_t seed,
                             uint32_t n, int32_t *g)
{
    zo_perturb_stream replay;
    zo_perturb_start(&replay, zo_sample_seed(seed, n), L->perturb_shift);
    ZO_PROFILE_BEGIN(ZO_PROFILE_UPDATE);
    /* --scales: the xi' follow the xi in the stream; their sums go to g[channels..) */
    const uint32_t rounds = L->scales ? 2u : 1u;
    for (uint32_t r = 0; r < rounds; ++r) {
        int32_t *sums = g + r * L->channels;
        for (uint32_t q = 0; q < m->queries; ++q) {
            const int32_t d = m->query_sums[q];
            for (uint32_t c = 0; c < L->channels; ++c) {
                sums[c] = sat_s32((int64_t)sums[c] + (int64_t)zo_perturb_next(&replay) * d);
            }
        }
    }
    ZO_PROFILE_END();
}

#if ZO_TRAIN_SCALES
/* --scales: sample n's sum of (h(z) - zp)^2 per channel, h(z) from its h(z -+ 1). */
static void add_squares(const zo_train_layer *L, const int8_t *shifted, int64_t *squares)
{
    const zo_train_scales *S = L->scales;
    const int8_t *down = shifted, *up = shifted + L->output_count;
    for (uint32_t k = 0; k < L->output_count; ++k) {
        const int32_t v = zo_clean_output(down[k], up[k], S->act_min) - S->output_zero_point;
        squares[k % L->channels] += (int64_t)(v * v);
    }
}
#endif

/* Layer i's N samples' queries, the channel gradient summed over them, the saved
 * activations advanced with the old biases, then the biases' update (no clipping: the
 * weights stay, and --max-step bounds weight steps). */
uint32_t zo_estimate_ch(const zo_train_model *m, const zo_train_state *s, uint32_t i,
                        uint32_t seed, float eta)
{
    (void)s;
    const zo_train_layer *L = &m->layers[i];
    const float coef = (eta * L->gscale) * m->inv_nq;
    /* the region: `channels` int32 bias sums (--scales: then as many scale sums and int64
     * sums of squares), then h(z + delta): d_a bytes each */
    int32_t *g = layer_gradient(m, L);
    const uint32_t words = (L->scales ? 4u : 1u) * L->channels;
    int8_t *shifted = (int8_t *)(g + words);
    memset(g, 0, words * sizeof g[0]);
    for (uint32_t n = 0; n < m->batch; ++n) {
        zo_node_queries(m, L, seed, n, L->channels, shifted, m->query_sums);
        channel_gradient(m, L, seed, n, g);
#if ZO_TRAIN_SCALES
        if (L->scales) {
            add_squares(L, shifted, (int64_t *)(g + 2u * L->channels));
        }
#endif
    }
    zo_advance_all(m, L);
    ZO_PROFILE_BEGIN(ZO_PROFILE_UPDATE);
    for (uint32_t c = 0; L->bias && c < L->bias_count; ++c) {
        update_bias(L, coef, c, g[c]);
    }
#if ZO_TRAIN_SCALES
    if (L->scales) {
        zo_scales_update(L, coef, g + L->channels, (const int64_t *)(g + 2u * L->channels),
                         L->output_count / L->channels * m->batch);
    }
#endif
    ZO_PROFILE_END();
    zo_refold(L);
    return i;
}
