/* Launching the attention family (kernels/opencl/attention.cl): one item
 * per query row forward; backward, one per query row (delta and dq), then
 * one per key row (dk and dv), queued in order. CPU devices take the
 * blocks kernels: an item per block of UG_AR rows. */
#include "backends/opencl/internal.h"

enum { BLOCK_ROWS = 16 }; /* attention.cl's UG_AR */

/* Items for rows rows of every head: one a row, or on CPU devices one a block. */
static size_t items(const ug_bdev *dev, cl_long batch_heads, cl_long rows)
{
    return (size_t)(batch_heads * (dev->is_cpu ? (rows + BLOCK_ROWS - 1) / BLOCK_ROWS : rows));
}

ug_status ug_opencl_attention(ug_bdev *dev, const ug_attention_args *a)
{
    cl_long batch_heads = a->batch * a->heads, heads = a->heads, q_len = a->q_len, kv_len = a->kv_len,
            d = a->head_dim;
    if (batch_heads <= 0 || (q_len <= 0 && kv_len <= 0))
        return UG_OK;
    cl_float scale = a->scale;
    cl_int causal = a->causal, has_mask = a->mask.mem != NULL;
    cl_long ms0 = a->mask_strides[0], ms1 = a->mask_strides[1], ms2 = a->mask_strides[2],
            ms3 = a->mask_strides[3];
    const ug_attention_layout *at[4] = {&a->q_at, &a->k_at, &a->v_at, &a->o_at};
    cl_long layout[12];
    for (int i = 0; i < 4; i++) {
        layout[3 * i] = at[i]->batch;
        layout[3 * i + 1] = at[i]->head;
        layout[3 * i + 2] = at[i]->row;
    }
    UG_OPENCL_VIEW(q, a->q);
    UG_OPENCL_VIEW(k, a->k);
    UG_OPENCL_VIEW(v, a->v);
    UG_OPENCL_VIEW(o, a->o);
    UG_OPENCL_VIEW(lse, a->lse);
    /* Without a mask, q is bound in its place (never read). */
    cl_mem mask = has_mask ? (cl_mem)a->mask.mem : q;
    cl_ulong mask_off = (cl_ulong)a->mask.offset;
    /* Dropout's draw; without a run count, lse is bound for it (never read). */
    cl_float dropout = a->dropout, keep = 1.0f / (1.0f - a->dropout);
    cl_ulong seed = a->seed, offset = a->offset, runs_off = (cl_ulong)a->runs.offset;
    cl_int has_runs = a->runs.mem != NULL;
    cl_mem runs = has_runs ? (cl_mem)a->runs.mem : lse;
#define PARAMS                                                                                        \
    UG_OPENCL_ARG(mask), UG_OPENCL_ARG(mask_off), UG_OPENCL_ARG(batch_heads), UG_OPENCL_ARG(heads),   \
        UG_OPENCL_ARG(q_len), UG_OPENCL_ARG(kv_len), UG_OPENCL_ARG(d), UG_OPENCL_ARG(scale),          \
        UG_OPENCL_ARG(causal), UG_OPENCL_ARG(has_mask), UG_OPENCL_ARG(ms0), UG_OPENCL_ARG(ms1),       \
        UG_OPENCL_ARG(ms2), UG_OPENCL_ARG(ms3), UG_OPENCL_ARG(layout[0]), UG_OPENCL_ARG(layout[1]),  \
        UG_OPENCL_ARG(layout[2]), UG_OPENCL_ARG(layout[3]), UG_OPENCL_ARG(layout[4]),                 \
        UG_OPENCL_ARG(layout[5]), UG_OPENCL_ARG(layout[6]), UG_OPENCL_ARG(layout[7]),                 \
        UG_OPENCL_ARG(layout[8]), UG_OPENCL_ARG(layout[9]), UG_OPENCL_ARG(layout[10]),                \
        UG_OPENCL_ARG(layout[11]), UG_OPENCL_ARG(dropout), UG_OPENCL_ARG(keep), UG_OPENCL_ARG(seed),       \
        UG_OPENCL_ARG(offset), UG_OPENCL_ARG(runs), UG_OPENCL_ARG(runs_off), UG_OPENCL_ARG(has_runs)
    const ug_opencl_kernel *kernel;
    if (!a->backward) {
        if (q_len <= 0)
            return UG_OK;
        UG_BACKEND_TRY(ug_opencl_kernel_for(dev, dev->is_cpu ? UG_OPENCL_ATTENTION_FWD_BLOCKS : UG_OPENCL_ATTENTION_FWD, a->q.dtype, UG_F32, &kernel));
        ug_opencl_arg args[] = {UG_OPENCL_ARG(o), UG_OPENCL_ARG(o_off), UG_OPENCL_ARG(lse), UG_OPENCL_ARG(lse_off),
                                UG_OPENCL_ARG(q), UG_OPENCL_ARG(q_off), UG_OPENCL_ARG(k), UG_OPENCL_ARG(k_off),
                                UG_OPENCL_ARG(v), UG_OPENCL_ARG(v_off), PARAMS};
        return ug_opencl_launch_1d(dev, kernel, items(dev, batch_heads, q_len), args,
                                   (cl_uint)(sizeof args / sizeof args[0]));
    }
    UG_OPENCL_VIEW(dout, a->dout);
    UG_OPENCL_VIEW(dq, a->dq);
    UG_OPENCL_VIEW(dk, a->dk);
    UG_OPENCL_VIEW(dv, a->dv);
    UG_OPENCL_VIEW(delta, a->delta);
    if (q_len > 0) {
        UG_BACKEND_TRY(ug_opencl_kernel_for(dev, dev->is_cpu ? UG_OPENCL_ATTENTION_DQ_BLOCKS : UG_OPENCL_ATTENTION_DQ, a->q.dtype, UG_F32, &kernel));
        ug_opencl_arg args[] = {UG_OPENCL_ARG(dq),    UG_OPENCL_ARG(dq_off),   UG_OPENCL_ARG(delta),
                                UG_OPENCL_ARG(delta_off), UG_OPENCL_ARG(dout), UG_OPENCL_ARG(dout_off),
                                UG_OPENCL_ARG(o),     UG_OPENCL_ARG(o_off),    UG_OPENCL_ARG(lse),
                                UG_OPENCL_ARG(lse_off), UG_OPENCL_ARG(q),      UG_OPENCL_ARG(q_off),
                                UG_OPENCL_ARG(k),     UG_OPENCL_ARG(k_off),    UG_OPENCL_ARG(v),
                                UG_OPENCL_ARG(v_off), PARAMS};
        UG_BACKEND_TRY(ug_opencl_launch_1d(dev, kernel, items(dev, batch_heads, q_len), args,
                                           (cl_uint)(sizeof args / sizeof args[0])));
    }
    if (kv_len <= 0)
        return UG_OK;
    UG_BACKEND_TRY(ug_opencl_kernel_for(dev, dev->is_cpu ? UG_OPENCL_ATTENTION_DKV_BLOCKS : UG_OPENCL_ATTENTION_DKV, a->q.dtype, UG_F32, &kernel));
    ug_opencl_arg args[] = {UG_OPENCL_ARG(dk),    UG_OPENCL_ARG(dk_off),   UG_OPENCL_ARG(dv),
                            UG_OPENCL_ARG(dv_off), UG_OPENCL_ARG(delta),   UG_OPENCL_ARG(delta_off),
                            UG_OPENCL_ARG(dout),  UG_OPENCL_ARG(dout_off), UG_OPENCL_ARG(lse),
                            UG_OPENCL_ARG(lse_off), UG_OPENCL_ARG(q),      UG_OPENCL_ARG(q_off),
                            UG_OPENCL_ARG(k),     UG_OPENCL_ARG(k_off),    UG_OPENCL_ARG(v),
                            UG_OPENCL_ARG(v_off), PARAMS};
#undef PARAMS
    return ug_opencl_launch_1d(dev, kernel, items(dev, batch_heads, kv_len), args,
                               (cl_uint)(sizeof args / sizeof args[0]));
}
