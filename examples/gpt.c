/* A character-level GPT on any text, nanoGPT's CPU configuration (4
 * layers, 4 heads, 128 channels, 64 positions, batches of 12; AdamW with
 * weight decay on matrices only, warm-up and cosine, clipping at 1.0),
 * trained through the library's trainer with an evaluation and a
 * checkpoint every 250 steps, then sampled. Stopped, it resumes from the checkpoint to the same
 * weights bit for bit; run again after the last step, it only samples.
 *
 *   gpt [TEXT [CHECKPOINT [STEPS [SEED]]]]
 *
 * TEXT defaults to ../shared/data/tinyshakespeare.txt; STEPS to 2000;
 * SEED (the initial weights and the batches) to the trainer's;
 * UG_DEVICE picks the device (cpu, opencl:0, hip:0, cuda:0). */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <unigrad/unigrad.h>

enum { LAYERS = 4, HEADS = 4, DIM = 128, BLOCK = 64, BATCH = 12 };

/* The model once, for training (decoder NULL) and for generation:
 * tokens [rows, T] to logits [rows, T, vocab]; the head is the token
 * table (tied). */
static ug_status gpt(ug_graph *g, ug_value *tokens, ug_decoder *dec, void *user, ug_value **logits)
{
    const int64_t vocab = *(const int64_t *)user;
    ug_value *pos = NULL, *x = NULL, *p = NULL, *h = NULL, *a = NULL, *wte = NULL;
    ug_tensor *table = NULL;
    char name[32];
    ug_status st = ug_decoder_positions(g, dec, ug_value_dim(tokens, 1), &pos);
    if (st == UG_OK) st = ug_nn_embedding(g, "wte", tokens, vocab, DIM, 0.02f, &x);
    if (st == UG_OK) st = ug_nn_embedding(g, "wpe", pos, BLOCK, DIM, 0.02f, &p);
    if (st == UG_OK) st = ug_g_add(g, x, p, &x);
    for (int l = 0; l < LAYERS && st == UG_OK; l++) {
        snprintf(name, sizeof name, "h%d.ln1", l);
        st = ug_nn_layernorm(g, name, x, 1e-5f, &h);
        snprintf(name, sizeof name, "h%d.attn", l);
        if (st == UG_OK) st = ug_nn_decoder_attention(g, dec, name, h, HEADS, &a);
        if (st == UG_OK) st = ug_g_add(g, x, a, &x);
        snprintf(name, sizeof name, "h%d.ln2", l);
        if (st == UG_OK) st = ug_nn_layernorm(g, name, x, 1e-5f, &h);
        snprintf(name, sizeof name, "h%d.fc", l);
        if (st == UG_OK) st = ug_nn_linear(g, name, h, 4 * DIM, &h);
        if (st == UG_OK) st = ug_g_gelu(g, h, &h);
        snprintf(name, sizeof name, "h%d.proj", l);
        if (st == UG_OK) st = ug_nn_linear(g, name, h, DIM, &h);
        if (st == UG_OK) st = ug_g_add(g, x, h, &x);
    }
    if (st == UG_OK) st = ug_nn_layernorm(g, "ln_f", x, 1e-5f, &h);
    if (st == UG_OK) st = ug_model_find_param(ug_graph_model(g), "wte.weight", &table);
    if (st == UG_OK) st = ug_graph_param(g, table, &wte);
    return st == UG_OK ? ug_g_matmul(g, h, wte, false, true, logits) : st;
}

static ug_status build(ug_graph *g, ug_value *x, ug_value *y, void *user, ug_trainer_outputs *out)
{
    ug_status st = gpt(g, x, NULL, user, &out->logits);
    return st == UG_OK ? ug_g_cross_entropy(g, out->logits, y, 0.0f, &out->loss) : st;
}

/* At each evaluation: the step, the two losses. */
static ug_status show(const ug_trainer_epoch *e, void *user)
{
    (void)user;
    printf("step %lld: train loss %.4f, val loss %.4f (%.2f bits/char), %.0f tokens/s\n",
           (long long)e->updates, e->train.loss, e->validation.loss, e->validation.loss / 0.6931471805599453,
           e->samples_per_second * BLOCK);
    return fflush(stdout) == 0 ? UG_OK : UG_ERR_IO;
}

/* The file's bytes (NUL-terminated) and their count; NULL if unreadable. */
static char *slurp(const char *path, size_t *bytes)
{
    FILE *f = fopen(path, "rb");
    char *text = NULL;
    if (f && fseek(f, 0, SEEK_END) == 0 && (*bytes = (size_t)ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (text = malloc(*bytes + 1)) && fread(text, 1, *bytes, f) == *bytes)
        text[*bytes] = '\0';
    else
        free(text), text = NULL;
    if (f) fclose(f);
    return text;
}

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : "../shared/data/tinyshakespeare.txt";
    const char *checkpoint = argc > 2 ? argv[2] : "gpt.safetensors";
    size_t bytes = 0;
    char *text = slurp(path, &bytes);
    if (!text) {
        fprintf(stderr, "gpt: cannot read %s\n", path);
        return 1;
    }
    ug_trainer_config c = ug_trainer_defaults();
    c.batch_size = BATCH;
    c.block_size = BLOCK;
    c.max_steps = argc > 3 ? atoll(argv[3]) : 2000;
    c.seed = argc > 4 ? strtoull(argv[4], NULL, 10) : c.seed;
    c.eval_every = c.max_steps >= 1000 ? 250 : c.max_steps / 4 + 1; /* short runs: four reports */
    c.optimizer = ug_optimizer_defaults(UG_ADAMW);
    c.optimizer.lr = 1e-3f;
    c.optimizer.beta2 = 0.99f;
    c.optimizer.weight_decay = 0.1f;
    c.optimizer.schedule = UG_SCHEDULE_COSINE;
    c.optimizer.warmup_steps = c.max_steps >= 1000 ? 100 : c.max_steps / 10;
    c.optimizer.min_lr = 1e-4f;
    c.optimizer.max_grad_norm = 1.0f;
    c.checkpoint = checkpoint;
    c.checkpoint_every_updates = c.eval_every;
    c.resume = access(checkpoint, R_OK) == 0 ? checkpoint : NULL;
    c.on_epoch = show;
    ug_char_vocab *vocab = NULL;
    ug_tokens *all = NULL, *train = NULL, *val = NULL;
    ug_device *device = NULL;
    ug_trainer *trainer = NULL;
    int64_t vocab_size = 0;
    int32_t out[1 + 500];
    char sampled[1 + 500 + 1] = "";
    const int32_t prompt = 0; /* the first symbol: a newline in most texts */
    const ug_generate_config sample = {.block_size = BLOCK, .new_tokens = 500, .temperature = 0.8f, .top_k = 200,
                                       .seed = 1337};
    ug_status st = ug_optimizer_decay_matrices_only(&c.optimizer);
    if (st == UG_OK) st = ug_char_vocab_build(text, bytes, &vocab);
    if (st == UG_OK) st = ug_tokens_from_text(vocab, text, bytes, &all);
    if (st == UG_OK) st = ug_tokens_split(all, 0.9, &train, &val);
    if (st == UG_OK) st = ug_device_open(NULL, &device);
    vocab_size = vocab ? ug_char_vocab_size(vocab) : 0;
    if (st == UG_OK) st = ug_trainer_create_tokens(device, train, val, build, &vocab_size, &c, &trainer);
    if (st == UG_OK) st = ug_trainer_fit(trainer);
    if (st == UG_OK) st = ug_generate(ug_trainer_model(trainer), gpt, &vocab_size, &prompt, 1, &sample, out);
    if (st == UG_OK) st = ug_char_vocab_decode(vocab, out, 501, sampled);
    if (st == UG_OK) printf("%s\n", sampled);
    if (st != UG_OK) fprintf(stderr, "gpt: %s\n", ug_last_error());
    ug_trainer_free(trainer);
    ug_device_close(device);
    ug_tokens_free(all);
    ug_tokens_free(train);
    ug_tokens_free(val);
    ug_char_vocab_free(vocab);
    free(text);
    return st == UG_OK ? 0 : 1;
}
