/* Generation (generate.h) on a small language model: greedy decoding with
 * the key-value cache gives the tokens that the whole-sequence graph
 * (no cache, causal attention over every position, as trained) picks at
 * each step; sampling repeats with a seed and follows the temperature and
 * top-k; generating past the block keeps going; what ug_generate refuses. */
#include <math.h>
#include <string.h>

#include "harness.h"
#include "train_support.h"

enum { VOCAB = 11, CHANNELS = 8, HEADS = 2, BLOCK = 12 };

/* Token and position embeddings, two residual attention layers, a head. */
static ug_status tiny_lm(ug_graph *g, ug_value *tokens, ug_decoder *dec, void *user, ug_value **logits)
{
    (void)user;
    ug_value *pos = NULL, *x = NULL, *p = NULL, *a = NULL;
    ug_status st = ug_decoder_positions(g, dec, ug_value_dim(tokens, 1), &pos);
    if (st == UG_OK)
        st = ug_nn_embedding(g, "wte", tokens, VOCAB, CHANNELS, 1.0f, &x);
    if (st == UG_OK)
        st = ug_nn_embedding(g, "wpe", pos, BLOCK, CHANNELS, 1.0f, &p);
    if (st == UG_OK)
        st = ug_g_add(g, x, p, &x);
    for (int layer = 0; layer < 2 && st == UG_OK; layer++) {
        st = ug_nn_decoder_attention(g, dec, layer ? "attn1" : "attn0", x, HEADS, &a);
        if (st == UG_OK)
            st = ug_g_add(g, x, a, &x);
    }
    return st == UG_OK ? ug_nn_linear(g, "head", x, VOCAB, logits) : st;
}

/* The whole-sequence graph's pick after tokens[0..n): argmax of the last
 * position's logits. */
static int32_t full_pick(ug_device *dev, ug_model *m, const int32_t *tokens, int64_t n)
{
    ug_graph *g = ts_graph(m);
    if (!g)
        return -1;
    const int64_t shape[2] = {1, n};
    ug_value *in = NULL, *logits = NULL;
    ug_tensor *t = NULL;
    int32_t best = -1;
    if (ug_graph_input(g, "tokens", UG_I32, 2, shape, &in) == UG_OK && tiny_lm(g, in, NULL, NULL, &logits) == UG_OK &&
        ug_graph_keep(g, logits) == UG_OK && ug_graph_compile(g) == UG_OK &&
        ug_tensor_from_host(dev, UG_I32, 2, shape, tokens, &t) == UG_OK && ug_graph_bind(g, in, t) == UG_OK &&
        ug_graph_run_forward(g) == UG_OK) {
        const float *l = ts_read(g, logits);
        best = 0;
        for (int v = 1; l && v < VOCAB; v++)
            if (l[(n - 1) * VOCAB + v] > l[(n - 1) * VOCAB + best])
                best = v;
    }
    ug_tensor_free(t);
    return best;
}

static void test_greedy_matches_full(ug_device *dev)
{
    ug_model *m = ts_model(dev, 5);
    REQUIRE(m);
    const int32_t prompt[3] = {3, 7, 1};
    int32_t out[BLOCK];
    const ug_generate_config cfg = {.block_size = BLOCK, .new_tokens = BLOCK - 3, .top_k = 1, .seed = 1};
    REQUIRE_OK(ug_generate(m, tiny_lm, NULL, prompt, 3, &cfg, out));
    CHECK(!memcmp(out, prompt, sizeof prompt));
    for (int64_t n = 3; n < BLOCK; n++) {
        th_context("position %lld", (long long)n);
        const int32_t want = full_pick(dev, m, out, n);
        CHECK_MSG(out[n] == want, "the cache's greedy pick %d, the whole sequence's %d", out[n], want);
    }
    ts_cleanup();
}

static void test_sampling(ug_device *dev)
{
    ug_model *m = ts_model(dev, 9);
    REQUIRE(m);
    const int32_t prompt[1] = {0};
    enum { N = 40 };
    int32_t a[N + 1], b[N + 1], c[N + 1], greedy[N + 1];
    ug_generate_config cfg = {.block_size = BLOCK, .new_tokens = N, .temperature = 1.5f, .top_k = 3, .seed = 42};
    REQUIRE_OK(ug_generate(m, tiny_lm, NULL, prompt, 1, &cfg, a)); /* past the block: the cache restarts */
    REQUIRE_OK(ug_generate(m, tiny_lm, NULL, prompt, 1, &cfg, b));
    CHECK_MSG(!memcmp(a, b, sizeof a), "the same seed drew other tokens");
    cfg.seed = 43;
    REQUIRE_OK(ug_generate(m, tiny_lm, NULL, prompt, 1, &cfg, c));
    CHECK_MSG(memcmp(a, c, sizeof a) != 0, "another seed drew the same %d tokens", N);
    for (int i = 0; i <= N; i++)
        CHECK(a[i] >= 0 && a[i] < VOCAB);
    /* A temperature near 0 is greedy; top-k 1 whatever the temperature. */
    cfg.temperature = 1e-4f;
    cfg.top_k = 0;
    REQUIRE_OK(ug_generate(m, tiny_lm, NULL, prompt, 1, &cfg, b));
    cfg.temperature = 5.0f;
    cfg.top_k = 1;
    REQUIRE_OK(ug_generate(m, tiny_lm, NULL, prompt, 1, &cfg, greedy));
    CHECK_MSG(!memcmp(b, greedy, sizeof b), "a near-zero temperature is not the top-1 choice");
    ts_cleanup();
}

static void test_refused(ug_device *dev)
{
    ug_model *m = ts_model(dev, 3);
    REQUIRE(m);
    const int32_t bad[2] = {1, VOCAB}, good[1] = {1};
    int32_t out[8];
    const ug_generate_config cfg = {.block_size = BLOCK, .new_tokens = 4};
    if (CHECK_STATUS(ug_generate(m, tiny_lm, NULL, bad, 2, &cfg, out), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("prompt token 1");
    ug_generate_config neg = cfg;
    neg.temperature = -1.0f;
    CHECK_STATUS(ug_generate(m, tiny_lm, NULL, good, 1, &neg, out), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_generate(m, tiny_lm, NULL, good, 0, &cfg, out), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_generate(m, NULL, NULL, good, 1, &cfg, out), UG_ERR_INVALID_ARGUMENT);
    ts_cleanup();
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_DEVICE_TEST(greedy_matches_full),
        TH_DEVICE_TEST(sampling),
        TH_DEVICE_TEST(refused),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
