/* bf16 GEMM tiles through oneDNN's matmul primitive on processors with
 * native bf16 products (AVX512-BF16's dot products, AMX's tiles): the
 * operands are read as bf16 in place, where the generic path widens every
 * panel to f32 first and multiplies at f32's rate. Debian's OpenBLAS has no
 * cblas_sbgemm and oneDNN's C API no bf16 GEMM call, so the matmul
 * primitive, described by strides over the caller's buffers (transposes
 * included), is the library's way in.
 *
 * Each tile runs on its worker thread alone (gemm.c), so a primitive is
 * made per tile shape once and kept; executions share it, each with its
 * own stream and scratchpad. The cache never evicts (a primitive may be
 * running on another thread): past its capacity a shape's primitive lives
 * for its call only. */
#include "backends/cpu/matmul_bf16.h"

#include <stdlib.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

#include "base/fault.h"

enum { CACHE_CAPACITY = 256 };

/* What identifies a tile's primitive (compared with memcmp: zeroed first). */
typedef struct product_key {
    bool trans_a, trans_b;
    ug_dtype c_dtype;
    int64_t m, n, k, lda, ldb, ldc;
    float alpha, beta;
} product_key;

typedef struct product_entry {
    product_key key;
    dnnl_primitive_t primitive; /* NULL: oneDNN has no native kernel for it */
    dnnl_memory_desc_t a, b, c, scratchpad;
    size_t scratchpad_bytes;
} product_entry;

struct ug_cpu_matmuls {
    dnnl_engine_t engine;
    pthread_mutex_t mutex;
    product_entry *entries[CACHE_CAPACITY];
    int count;
};

bool ug_cpu_native_bf16(void)
{
    const unsigned need = dnnl_cpu_isa_avx512_core_bf16;
    return ((unsigned)dnnl_get_effective_cpu_isa() & need) == need;
}

ug_status ug_cpu_matmuls_create(ug_cpu_matmuls **out)
{
    *out = NULL;
    ug_cpu_matmuls *m = ug_calloc(1, sizeof *m);
    if (!m)
        return UG_CPU_ERROR(UG_ERR_OUT_OF_MEMORY, "cpu: out of host memory opening the device");
    if (dnnl_engine_create(&m->engine, dnnl_cpu, 0) != dnnl_success) {
        free(m);
        return UG_CPU_ERROR(UG_ERR_BACKEND, "cpu: oneDNN's CPU engine could not be made");
    }
    pthread_mutex_init(&m->mutex, NULL);
    *out = m;
    return UG_OK;
}

static void free_entry(product_entry *e)
{
    if (e && e->primitive)
        dnnl_primitive_destroy(e->primitive);
    free(e);
}

void ug_cpu_matmuls_destroy(ug_cpu_matmuls *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->count; i++)
        free_entry(m->entries[i]);
    dnnl_engine_destroy(m->engine);
    pthread_mutex_destroy(&m->mutex);
    free(m);
}

/* A rows x cols matrix of type at row stride ld, or its transpose's view
 * (stored cols x rows). */
static bool matrix_desc(dnnl_memory_desc_t *md, int64_t rows, int64_t cols, int64_t ld,
                        bool transposed, dnnl_data_type_t type)
{
    dnnl_dims_t dims = {rows, cols};
    dnnl_dims_t strides = {transposed ? 1 : ld, transposed ? ld : 1};
    return dnnl_memory_desc_init_by_strides(md, 2, dims, type, strides) == dnnl_success;
}

/* Fills e's primitive for its key; a library without a native kernel for it
 * (only the reference one) leaves it NULL. false: out of memory or an error. */
static bool make_primitive(ug_cpu_matmuls *m, product_entry *e)
{
    const product_key *k = &e->key;
    dnnl_data_type_t c_type = k->c_dtype == UG_BF16 ? dnnl_bf16 : dnnl_f32;
    if (!matrix_desc(&e->a, k->m, k->k, k->lda, k->trans_a, dnnl_bf16) ||
        !matrix_desc(&e->b, k->k, k->n, k->ldb, k->trans_b, dnnl_bf16) ||
        !matrix_desc(&e->c, k->m, k->n, k->ldc, false, c_type))
        return false;
    dnnl_matmul_desc_t desc;
    if (dnnl_matmul_desc_init(&desc, &e->a, &e->b, NULL, &e->c) != dnnl_success)
        return false;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t ops = NULL;
    bool ok = dnnl_primitive_attr_create(&attr) == dnnl_success &&
              dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success;
    if (ok && k->alpha != 1.0f) /* dst = alpha (A B) + beta dst */
        ok = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &k->alpha) == dnnl_success;
    if (ok && k->beta != 0.0f)
        ok = dnnl_post_ops_create(&ops) == dnnl_success && dnnl_post_ops_append_sum(ops, k->beta) == dnnl_success &&
             dnnl_primitive_attr_set_post_ops(attr, ops) == dnnl_success;
    dnnl_primitive_desc_t pd = NULL;
    if (ok && dnnl_primitive_desc_create(&pd, &desc, attr, m->engine, NULL) == dnnl_success) {
        const char *impl = NULL;
        bool native = dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success &&
                      impl && !strstr(impl, "ref");
        const dnnl_memory_desc_t *pad = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
        if (pad) {
            e->scratchpad = *pad;
            e->scratchpad_bytes = dnnl_memory_desc_get_size(pad);
        }
        if (native)
            ok = dnnl_primitive_create(&e->primitive, pd) == dnnl_success;
        dnnl_primitive_desc_destroy(pd);
    }
    if (ops)
        dnnl_post_ops_destroy(ops);
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    return ok;
}

/* The entry of key, made on first use; *owned when it is not cached (the
 * caller frees it). NULL: out of memory or a library error. */
static product_entry *find_entry(ug_cpu_matmuls *m, const product_key *key, bool *owned)
{
    *owned = false;
    pthread_mutex_lock(&m->mutex);
    for (int i = 0; i < m->count; i++)
        if (!memcmp(&m->entries[i]->key, key, sizeof *key)) {
            product_entry *e = m->entries[i];
            pthread_mutex_unlock(&m->mutex);
            return e;
        }
    product_entry *e = ug_calloc(1, sizeof *e);
    if (e) {
        e->key = *key;
        if (!make_primitive(m, e)) {
            free_entry(e);
            e = NULL;
        }
    }
    if (e && m->count < CACHE_CAPACITY)
        m->entries[m->count++] = e;
    else if (e)
        *owned = true;
    pthread_mutex_unlock(&m->mutex);
    return e;
}

static product_key key_of(const ug_cpu_product *p, ug_dtype c_dtype, int64_t ldc, float beta)
{
    product_key k;
    memset(&k, 0, sizeof k);
    k.trans_a = p->trans_a;
    k.trans_b = p->trans_b;
    k.c_dtype = c_dtype;
    k.m = p->m;
    k.n = p->n;
    k.k = p->k;
    k.lda = p->lda;
    k.ldb = p->ldb;
    k.ldc = ldc;
    k.alpha = p->alpha;
    k.beta = beta;
    return k;
}

/* Executes e on A, B and C at the given addresses. */
static bool execute(ug_cpu_matmuls *m, const product_entry *e, const void *a, const void *b,
                    void *c, void *scratchpad)
{
    dnnl_stream_t stream = NULL;
    dnnl_memory_t mem[4] = {NULL};
    bool ok = dnnl_stream_create(&stream, m->engine, dnnl_stream_default_flags) == dnnl_success &&
              dnnl_memory_create(&mem[0], &e->a, m->engine, (void *)a) == dnnl_success &&
              dnnl_memory_create(&mem[1], &e->b, m->engine, (void *)b) == dnnl_success &&
              dnnl_memory_create(&mem[2], &e->c, m->engine, c) == dnnl_success &&
              (!e->scratchpad_bytes ||
               dnnl_memory_create(&mem[3], &e->scratchpad, m->engine, scratchpad) == dnnl_success);
    if (ok) {
        dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, mem[0]}, {DNNL_ARG_WEIGHTS, mem[1]},
                                   {DNNL_ARG_DST, mem[2]}, {DNNL_ARG_SCRATCHPAD, mem[3]}};
        ok = dnnl_primitive_execute(e->primitive, stream, e->scratchpad_bytes ? 4 : 3, args) == dnnl_success;
    }
    for (int i = 0; i < 4; i++)
        if (mem[i])
            dnnl_memory_destroy(mem[i]);
    if (stream)
        dnnl_stream_destroy(stream);
    return ok;
}

ug_cpu_product_result ug_cpu_matmul_bf16(ug_cpu_matmuls *m, const ug_cpu_product *p)
{
    /* C half and several entries: an f32 sum rounded once, as the widening
     * path does. */
    const bool staged = p->c_dtype != UG_F32 && p->entries > 1;
    const int64_t ldc = staged ? p->n : p->ldc;
    const ug_dtype c_dtype = staged ? UG_F32 : p->c_dtype;
    bool owned_first = false, owned_rest = false;
    product_key kf = key_of(p, c_dtype, ldc, p->beta), kr = key_of(p, c_dtype, ldc, 1.0f);
    product_entry *first = find_entry(m, &kf, &owned_first);
    product_entry *rest = p->entries > 1 ? find_entry(m, &kr, &owned_rest) : NULL;
    ug_cpu_product_result result = UG_CPU_PRODUCT_FAILED;
    float *stage = NULL;
    char *pad = NULL;
    if (!first || (p->entries > 1 && !rest))
        goto done;
    result = UG_CPU_PRODUCT_NOT_TAKEN;
    if (!first->primitive || (rest && !rest->primitive))
        goto done;
    result = UG_CPU_PRODUCT_FAILED;
    size_t pad_bytes = first->scratchpad_bytes;
    if (rest && rest->scratchpad_bytes > pad_bytes)
        pad_bytes = rest->scratchpad_bytes;
    stage = staged ? malloc((size_t)(p->m * p->n) * sizeof *stage) : NULL;
    pad = pad_bytes ? malloc(pad_bytes) : NULL;
    if ((staged && !stage) || (pad_bytes && !pad))
        goto done;
    const size_t c_size = ug_dtype_size(p->c_dtype);
    if (staged && p->beta != 0.0f)
        for (int64_t r = 0; r < p->m; r++)
            ug_cpu_load((const char *)p->c + r * p->ldc * (int64_t)c_size, p->c_dtype, 1, p->n, stage + r * p->n);
    void *c = staged ? (void *)stage : p->c;
    const size_t half = sizeof(uint16_t);
    bool ok = true;
    for (int64_t e = 0; e < p->entries && ok; e++)
        ok = execute(m, e ? rest : first, (const char *)p->a + (size_t)(e * p->stride_a) * half,
                     (const char *)p->b + (size_t)(e * p->stride_b) * half, c, pad);
    if (ok && staged)
        for (int64_t r = 0; r < p->m; r++)
            ug_cpu_store((char *)p->c + r * p->ldc * (int64_t)c_size, p->c_dtype, p->n, stage + r * p->n);
    result = ok ? UG_CPU_PRODUCT_DONE : UG_CPU_PRODUCT_FAILED;
done:
    free(stage);
    free(pad);
    if (owned_first)
        free_entry(first);
    if (owned_rest)
        free_entry(rest);
    return result;
}
