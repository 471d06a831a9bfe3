/* What a backend's GEMM may lean on where its product does less than
 * ug_gemm_args asks: the epilogue as a binary op over C's rows, and a
 * sum over the batch as one product per entry. */
#ifndef UG_BACKENDS_GEMM_HELPERS_H
#define UG_BACKENDS_GEMM_HELPERS_H

#include "backends/backend.h"

/* A GEMM's epilogue (ug_gemm_args) on rows [row0, row0 + rows) of C, its
 * batches' rows counted one after another, as a binary op in place. */
static inline void ug_gemm_epilogue_rows(const ug_gemm_args *args, int64_t row0, int64_t rows, ug_binary_args *op)
{
    const ug_epilogue *e = &args->epi;
    const bool first = e->first;
    memset(op, 0, sizeof *op); /* C and C++ alike: the epilogue's other parts none */
    ug_kview c = args->c, operand = e->operand;
    c.offset += row0 * args->n;
    operand.offset += row0 * e->operand_rows;
    op->op = e->op;
    op->epi.post = e->post;
    op->alpha = e->alpha;
    op->y = c;
    op->a = first ? operand : c;
    op->b = first ? c : operand;
    op->ndim = 2;
    op->shape[0] = rows;
    op->shape[1] = args->n;
    op->a_strides[0] = first ? e->operand_rows : args->n;
    op->b_strides[0] = first ? args->n : e->operand_rows;
    op->a_strides[1] = op->b_strides[1] = 1;
}

/* The epilogue as one binary launch over C, for a backend whose product
 * does not apply it. */
static inline ug_status ug_gemm_epilogue_by_binary(ug_bdev *dev, const ug_gemm_args *args,
                                                   ug_status (*binary)(ug_bdev *, const ug_binary_args *))
{
    if (!args->epi.operand.mem || args->m <= 0 || args->n <= 0 || args->batch <= 0)
        return UG_OK;
    ug_binary_args op;
    ug_gemm_epilogue_rows(args, 0, args->m * args->batch, &op);
    return binary(dev, &op);
}

/* A sum_batch GEMM as one GEMM per batch entry into the one C, beta 1 after
 * the first, for backends whose BLAS has no such call. */
static inline ug_status ug_gemm_sum_batch_by_loop(ug_bdev *dev, const ug_gemm_args *args,
                                                  ug_status (*gemm)(ug_bdev *, const ug_gemm_args *))
{
    for (int64_t b = 0; b < args->batch; b++) {
        ug_gemm_args one = *args;
        one.sum_batch = false;
        one.batch = 1;
        one.a.offset += b * args->stride_a;
        one.b.offset += b * args->stride_b;
        one.beta = b ? 1.0f : args->beta;
        ug_status st = gemm(dev, &one);
        if (st != UG_OK)
            return st;
    }
    return UG_OK;
}

#endif
