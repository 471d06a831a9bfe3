/* The attention family: the library's fused attention or the module's own
 * kernels, per pass and shape (attention_choice.cpp), and the own kernels
 * (kernels/hip/attention.h): one thread per query row forward; backward,
 * one per query row (delta and dq), then one per key row (dk and dv),
 * queued in order on the stream. */
#include "backends/hip/launchers.h"
#include "kernels/hip/attention.h"

/* Threads per block: each holds up to four rows of floats in registers. */
enum { ATTENTION_BLOCK = 64 };

ug_status ug_hip_attention(ug_bdev *dev, const ug_attention_args *a)
{
    if (a->batch * a->heads <= 0)
        return UG_OK;
    UG_BACKEND_TRY(ug_hip_enter(dev));
    if (ug_hip_attention_path(dev, a) == UG_HIP_ATTENTION_LIBRARY)
        return ug_hip_library_attention(dev, a);
    return ug_hip_attention_own(dev, a);
}

ug_status ug_hip_attention_own(ug_bdev *dev, const ug_attention_args *a)
{
    attention_k k;
    memset(&k, 0, sizeof k);
    k.q = ug_hip_ptr(&a->q);
    k.k = ug_hip_ptr(&a->k);
    k.v = ug_hip_ptr(&a->v);
    k.mask = ug_hip_ptr(&a->mask);
    k.dout = ug_hip_ptr(&a->dout);
    k.o = ug_hip_ptr(&a->o);
    k.out = ug_hip_ptr(a->backward ? &a->dq : &a->o);
    k.dk = ug_hip_ptr(&a->dk);
    k.dv = ug_hip_ptr(&a->dv);
    k.lse = (float *)ug_hip_ptr(&a->lse);
    k.delta = (float *)ug_hip_ptr(&a->delta);
    k.batch_heads = a->batch * a->heads;
    k.heads = a->heads;
    k.q_len = a->q_len;
    k.kv_len = a->kv_len;
    k.d = a->head_dim;
    memcpy(k.ms, a->mask_strides, sizeof k.ms);
    const ug_attention_layout *at[4] = {&a->q_at, &a->k_at, &a->v_at, &a->o_at};
    for (int i = 0; i < 4; i++) {
        k.at[i][0] = at[i]->batch;
        k.at[i][1] = at[i]->head;
        k.at[i][2] = at[i]->row;
    }
    k.scale = a->scale;
    k.dropout = a->dropout;
    k.keep = 1.0f / (1.0f - a->dropout);
    k.seed = a->seed;
    k.offset = a->offset;
    k.runs = (const float *)ug_hip_ptr(&a->runs);
    k.causal = a->causal;
    if (k.batch_heads <= 0)
        return UG_OK;
    ug_status st = ug_hip_enter(dev);
    if (st != UG_OK)
        return st;
    hipStream_t stream = ug_hip_current(dev)->stream;
    const unsigned queries = ug_hip_blocks(k.batch_heads * k.q_len, ATTENTION_BLOCK);
    const unsigned keys = ug_hip_blocks(k.batch_heads * k.kv_len, ATTENTION_BLOCK);
    return ug_with_type(a->q.dtype, [&](auto tag) {
        typedef typename decltype(tag)::type T;
        if (!a->backward) {
            if (k.q_len > 0)
                ug_attention_forward<T><<<queries, ATTENTION_BLOCK, 0, stream>>>(k);
            return ug_hip_launched("attention");
        }
        if (k.q_len > 0)
            ug_attention_dq<T><<<queries, ATTENTION_BLOCK, 0, stream>>>(k);
        ug_status launched = ug_hip_launched("attention dq");
        if (launched != UG_OK || k.kv_len <= 0)
            return launched;
        ug_attention_dkv<T><<<keys, ATTENTION_BLOCK, 0, stream>>>(k);
        return ug_hip_launched("attention dk, dv");
    });
}
