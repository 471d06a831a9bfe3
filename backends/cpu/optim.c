/* Optimizer steps with PyTorch's update rules (torch.optim.SGD, Adam, AdamW,
 * single-tensor path), one pass over the parameter. The operation order
 * follows PyTorch's so results match it to the last bit or two. Each
 * tensor's weight decay and rate scale are its parameter group's. */
#include <math.h>
#include <string.h>

#include "backends/cpu/internal.h"

typedef struct opt_job {
    const ug_optim_args *args;
    float *p, *s0, *s1;
    const float *g;
    float gscale, lr;
    bool first_step;
    float step, sqrt_bc2, decay; /* Adam: lr/bc1, sqrt(bc2); AdamW: 1 - lr*wd */
} opt_job;

/* Each update returns whether a gradient it read was NaN or infinite (for
 * a folded numeric check), found in the same pass. */
UG_CPU_WIDE
static bool sgd_range(const opt_job *j, int64_t b, int64_t e)
{
    const ug_optim_args *a = j->args;
    float wd = a->weight_decay, mom = a->momentum, damp = 1.0f - a->dampening, lr = j->lr;
    int bad = 0;
    for (int64_t i = b; i < e; i++) {
        bad |= j->g[i] - j->g[i] != 0.0f;
        float g = j->g[i] * j->gscale;
        if (wd != 0.0f)
            g = g + wd * j->p[i];
        if (mom != 0.0f) {
            /* buf = g on the first step, else momentum * buf + (1 - dampening) * g. */
            float buf = j->first_step ? g : mom * j->s0[i] + damp * g;
            j->s0[i] = buf;
            g = a->nesterov ? g + mom * buf : buf;
        }
        j->p[i] = j->p[i] - lr * g;
    }
    return bad;
}

UG_CPU_WIDE
static bool adam_range(const opt_job *j, int64_t b, int64_t e)
{
    const ug_optim_args *a = j->args;
    bool adamw = a->kind == UG_OPTIM_ADAMW;
    /* Branch-free so the loop vectorises: multiplying by 1 and adding 0 * p
     * leave the values exact where scaling, decay or L2 are off. */
    const float gscale = j->gscale;
    const float decay = adamw ? j->decay : 1.0f;   /* AdamW: p *= 1 - lr * wd first */
    const float l2 = adamw ? 0.0f : a->weight_decay; /* Adam: wd * p joins the gradient */
    const float b2 = a->beta2, c1 = 1.0f - a->beta1, c2 = 1.0f - b2, eps = a->eps;
    const bool small_w = c1 < 0.5f;
    const float step = j->step, sqrt_bc2 = j->sqrt_bc2;
    float *restrict p = j->p, *restrict m = j->s0, *restrict v = j->s1;
    const float *restrict grad = j->g;
    int bad = 0;
    for (int64_t i = b; i < e; i++) {
        bad |= grad[i] - grad[i] != 0.0f;
        float pi = p[i] * decay;
        float g = grad[i] * gscale + l2 * pi;
        /* torch.lerp(m, g, w), as PyTorch's Adam and the other backends:
         * m + w (g - m) for w < 0.5, else g - (g - m) (1 - w). */
        float mi = small_w ? m[i] + c1 * (g - m[i]) : g - (g - m[i]) * (1.0f - c1);
        float vi = b2 * v[i] + c2 * g * g;
        m[i] = mi;
        v[i] = vi;
        /* PyTorch: denom = sqrt(v) / sqrt(bc2) + eps; p -= (lr / bc1) * m / denom. */
        p[i] = pi + (-step) * (mi / (sqrtf(vi) / sqrt_bc2 + eps));
    }
    return bad;
}

static void optim_range(void *vjob, int64_t b, int64_t e)
{
    const opt_job *j = vjob;
    const bool bad = j->args->kind == UG_OPTIM_SGD ? sgd_range(j, b, e) : adam_range(j, b, e);
    if (bad && j->args->epi.check.mem)
        ug_cpu_set_check(j->args->epi.check);
    const ug_kview copy = j->args->copy;
    if (copy.mem) /* while the range is still in cache */
        ug_cpu_store(ug_cpu_ptr(copy) + b * (int64_t)ug_dtype_size(copy.dtype), copy.dtype, e - b,
                     j->p + b);
}

static ug_status step_update(const ug_optim_args *a)
{
    if (!a->param.mem || !a->state0.mem)
        return UG_CPU_ERROR(UG_ERR_INVALID_ARGUMENT, "cpu optimizer step: missing state or gate buffer");
    float state[UG_STEP_STATE_SIZE], gate[UG_GATE_SIZE];
    memcpy(state, ug_cpu_ptr(a->state0), sizeof state);
    const float sum = a->grad.mem ? *(const float *)ug_cpu_ptr(a->grad) : 0.0f;
    ug_optim_step(state, gate, sum, &a->rule);
    memcpy(ug_cpu_ptr(a->state0), state, sizeof state);
    memcpy(ug_cpu_ptr(a->param), gate, sizeof gate);
    return UG_OK;
}

/* One tensor's update checked and set up as a job; false: nothing to do
 * (a skipped step). */
static ug_status prepare_job(const ug_optim_args *a, opt_job *j, bool *run)
{
    *run = false;
    bool sgd = a->kind == UG_OPTIM_SGD;
    if (!sgd && a->kind != UG_OPTIM_ADAM && a->kind != UG_OPTIM_ADAMW)
        return UG_CPU_ERROR(UG_ERR_INVALID_ARGUMENT, "cpu optimizer: bad kind %d", (int)a->kind);
    bool need0 = !sgd || a->momentum != 0.0f, need1 = !sgd;
    if (!a->param.mem || !a->grad.mem || !a->gate.mem || (need0 && !a->state0.mem) ||
        (need1 && !a->state1.mem))
        return UG_CPU_ERROR(UG_ERR_INVALID_ARGUMENT,
                            "cpu optimizer: missing parameter, gradient, gate or state buffer");
    if (a->param.dtype != UG_F32 || a->grad.dtype != UG_F32 ||
        (need0 && a->state0.dtype != UG_F32) || (need1 && a->state1.dtype != UG_F32) ||
        a->gate.dtype != UG_F32 ||
        (a->copy.mem && a->copy.dtype != UG_F16 && a->copy.dtype != UG_BF16) ||
        (a->epi.check.mem && a->epi.check.dtype != UG_F32))
        return UG_CPU_ERROR(UG_ERR_DTYPE,
                            "cpu optimizer: every buffer must be f32 (the half copy f16 or bf16)");
    const float *gate = (const float *)ug_cpu_ptr(a->gate);
    if (a->n <= 0 || gate[UG_GATE_SKIP] != 0.0f)
        return UG_OK;
    *j = (opt_job){.args = a, .p = (float *)ug_cpu_ptr(a->param), .g = (const float *)ug_cpu_ptr(a->grad),
                   .s0 = need0 ? (float *)ug_cpu_ptr(a->state0) : NULL,
                   .s1 = need1 ? (float *)ug_cpu_ptr(a->state1) : NULL, .gscale = gate[UG_GATE_FACTOR],
                   .lr = gate[UG_GATE_LR] * a->lr_scale, .first_step = gate[UG_GATE_STEP] == 1.0f};
    if (!sgd) {
        j->step = j->lr / gate[UG_GATE_BC1];
        j->sqrt_bc2 = sqrtf(gate[UG_GATE_BC2]);
        j->decay = 1.0f - j->lr * a->weight_decay;
    }
    *run = true;
    return UG_OK;
}

/* A multi-tensor update: one parallel pass over every tensor's elements
 * end to end, each range split where tensors meet. */
typedef struct multi_job {
    const opt_job *jobs;
    const int64_t *starts; /* one more than jobs: where each tensor begins, then the end */
} multi_job;

static void multi_range(void *vjob, int64_t b, int64_t e)
{
    const multi_job *m = vjob;
    int t = 0;
    while (m->starts[t + 1] <= b)
        t++;
    for (; b < e; t++) {
        const int64_t end = e < m->starts[t + 1] ? e : m->starts[t + 1];
        optim_range((void *)&m->jobs[t], b - m->starts[t], end - m->starts[t]);
        b = end;
    }
}

/* Tensors per parallel pass of a multi-tensor update (stack arrays). */
enum { MULTI_MAX = 32 };

ug_status ug_cpu_optimizer(ug_bdev *dev, const ug_optim_args *args)
{
    if (args->kind == UG_OPTIM_STEP)
        return step_update(args);
    if (args->count <= 0) {
        opt_job j;
        bool run = false;
        UG_BACKEND_TRY(prepare_job(args, &j, &run));
        if (run)
            ug_cpu_parallel_for(dev->workers, args->n, UG_CPU_MIN_PARALLEL, optim_range, &j);
        return UG_OK;
    }
    for (int first = 0; first < args->count; first += MULTI_MAX) {
        ug_optim_args ones[MULTI_MAX];
        opt_job jobs[MULTI_MAX];
        int64_t starts[MULTI_MAX + 1];
        int count = 0;
        int64_t total = 0;
        for (int i = first; i < args->count && i < first + MULTI_MAX; i++) {
            bool run = false;
            ones[count] = ug_optim_args_at(args, i);
            UG_BACKEND_TRY(prepare_job(&ones[count], &jobs[count], &run));
            if (run) {
                starts[count] = total;
                total += ones[count++].n;
            }
        }
        starts[count] = total;
        multi_job m = {.jobs = jobs, .starts = starts};
        if (count)
            ug_cpu_parallel_for(dev->workers, total, UG_CPU_MIN_PARALLEL, multi_range, &m);
    }
    return UG_OK;
}
