/* ug-bench gpt: the training step of examples/gpt.c's model in nanoGPT's
 * CPU configuration (tools/gpt_model.h; AdamW with decay on matrices,
 * warm-up and cosine, clipping at 1.0) per device on 16 batches of random
 * tokens, beside PyTorch's (tools/torch_gpt.py) as bench_model.h times
 * them; then attention alone at 1024 positions: the plan's activation
 * memory fused and composed (two products and a softmax). */
#include <stdlib.h>

#include "bench_model.h"
#include "gpt_model.h"

#ifndef UG_BENCH_TORCH_GPT
#define UG_BENCH_TORCH_GPT "tools/torch_gpt.py"
#endif

enum { BATCH = 12 };

/* examples/gpt.c's trainer settings, for 2000 steps. */
static ug_status make_step(ug_device *device, bench_model_step *s)
{
    gpt_config model_config = GPT_NANO_CPU; /* read while the step is made only */
    gpt_config *model = &model_config;
    ug_trainer_config c = ug_trainer_defaults();
    c.batch_size = BATCH;
    c.block_size = model->block;
    c.optimizer = ug_optimizer_defaults(UG_ADAMW);
    c.optimizer.lr = 1e-3f;
    c.optimizer.beta2 = 0.99f;
    c.optimizer.weight_decay = 0.1f;
    c.optimizer.schedule = UG_SCHEDULE_COSINE;
    c.optimizer.warmup_steps = 100;
    c.optimizer.total_steps = 2000;
    c.optimizer.min_lr = 1e-4f;
    c.optimizer.max_grad_norm = 1.0f;
    *s = (bench_model_step){.device = device};
    ug_status st = ug_optimizer_decay_matrices_only(&c.optimizer);
    if (st == UG_OK)
        st = ug_train_step_create(device, model->block, 0, gpt_build, model, &c, &s->step);
    const int64_t shape[2] = {BATCH, model->block}, n = BATCH * model->block;
    int32_t *ids = malloc(sizeof *ids * (size_t)(n + 1));
    if (st == UG_OK && !ids)
        st = UG_ERR_OUT_OF_MEMORY;
    uint32_t draw = 12345;
    for (int b = 0; b < BENCH_MODEL_BATCHES && st == UG_OK; b++) {
        for (int64_t i = 0; i <= n; i++) {
            draw = draw * 1664525u + 1013904223u;
            ids[i] = (int32_t)((draw >> 8) % (uint32_t)model->vocab);
        }
        st = ug_tensor_from_host(device, UG_I32, 2, shape, ids, &s->x[b]);
        if (st == UG_OK)
            st = ug_tensor_from_host(device, UG_I32, 2, shape, ids + 1, &s->y[b]);
    }
    free(ids);
    return st;
}

/* Attention alone, [1, 4, 1024, 32], causal, with its gradient: the plan's
 * activation bytes, fused (ug_g_attention) or composed. */
static ug_status attention_activations(ug_device *device, bool fused, uint64_t *bytes)
{
    const int64_t shape[4] = {1, 4, 1024, 32};
    ug_model *m = NULL;
    ug_graph *g = NULL;
    ug_tensor *tq = NULL;
    ug_value *q = NULL, *k = NULL, *v = NULL, *y = NULL, *loss = NULL, *scores = NULL, *scaled = NULL, *p = NULL;
    ug_graph_memory_info info;
    ug_status st = ug_model_create(device, 1, &m);
    if (st == UG_OK) st = ug_graph_create(m, &g);
    if (st == UG_OK) st = ug_model_param(m, "q", 4, shape, UG_INIT_UNIFORM, 1.0f, &tq);
    if (st == UG_OK) st = ug_graph_param(g, tq, &q);
    if (st == UG_OK) st = ug_graph_input(g, "k", UG_F32, 4, shape, &k);
    if (st == UG_OK) st = ug_graph_input(g, "v", UG_F32, 4, shape, &v);
    if (st == UG_OK && fused) {
        const ug_attention_options causal = {.causal = true};
        st = ug_g_attention(g, q, k, v, NULL, &causal, &y);
    } else if (st == UG_OK) { /* the causal mask left out: it adds to the composed path's memory */
        st = ug_g_matmul(g, q, k, false, true, &scores);
        if (st == UG_OK) st = ug_g_scale_shift(g, scores, 0.17677669f, 0.0f, &scaled);
        if (st == UG_OK) st = ug_g_softmax(g, scaled, &p);
        if (st == UG_OK) st = ug_g_matmul(g, p, v, false, false, &y);
    }
    if (st == UG_OK) st = ug_g_sum(g, y, 0, true, &loss);
    if (st == UG_OK) st = ug_graph_backward(g, loss);
    if (st == UG_OK) st = ug_graph_memory(g, &info);
    if (st == UG_OK) *bytes = info.activation_bytes;
    ug_graph_free(g);
    ug_model_free(m);
    return st;
}

/* Attention's activation memory at 1024 positions, fused and composed. */
static ug_status attention_report(ug_device *device)
{
    uint64_t fused = 0, composed = 0;
    const double mib = 1.0 / (1024.0 * 1024.0);
    ug_status st = attention_activations(device, true, &fused);
    if (st == UG_OK) st = attention_activations(device, false, &composed);
    if (st == UG_OK)
        printf("attention alone at 1024 positions (4 heads of 32, causal), the plan's\n"
               "  activations: fused %.2f MiB, composed %.2f MiB (x%.3f)\n",
               (double)fused * mib, (double)composed * mib, (double)fused / (double)composed);
    return st;
}

int bench_gpt(int argc, char **argv)
{
    const gpt_config model = GPT_NANO_CPU;
    char header[256];
    snprintf(header, sizeof header,
             "ug-bench gpt: examples/gpt.c's model, nanoGPT's CPU configuration\n"
             "  (%lld layers, %lld heads, %lld channels, block %lld, batch %d), AdamW\n",
             (long long)model.layers, (long long)model.heads, (long long)model.dim, (long long)model.block, BATCH);
    const bench_model gpt = {
        .command = "gpt",
        .usage = "Times the training step of examples/gpt.c's model in nanoGPT's CPU\n"
                 "configuration (4 layers, 4 heads, 128 channels, block 64, batch 12; AdamW,\n"
                 "decay on matrices, clipping at 1.0) on each device, or the one named, in N\n"
                 "rounds (default 3) of about S seconds (default 2) each device in turn: ms per\n"
                 "iteration, tokens/s, the plan's and the pool's peak memory, and each device\n"
                 "against the cpu. After the cpu in each round, PyTorch's same step\n"
                 "(" UG_BENCH_TORCH_GPT ") with 1 and 2 threads, where PATH (default\n"
                 "/usr/bin/python3) has torch; --no-torch skips it.\n"
                 "Then attention at 1024 positions: activation memory fused and composed.\n",
        .header = header,
        .rate = "tokens/s",
        .samples = BATCH * (double)model.block,
        .torch_script = UG_BENCH_TORCH_GPT,
        .make = make_step,
        .after = attention_report,
    };
    return bench_model_run(&gpt, argc, argv);
}
