/* A graph's op whose result is its input summed over a communicator's
 * ranks (ug_comm_all_reduce inside the graph's run): the update's sum of
 * squares over every pipeline stage's gradients (graph/update.c), so
 * that clipping and the loss scaler's overflow see the whole model's. */
#include "core/comm/internal.h"
#include "core/ops/op.h"

static ug_status sum_infer(const ug_op *op, int nin, const ug_meta *in, ug_meta *out, int *nout)
{
    (void)nout;
    if (nin != 1 || in[0].dtype != UG_F32)
        return ug_set_error(UG_ERR_DTYPE, "%s: takes one f32 value", op->name);
    out[0] = in[0];
    return UG_OK;
}

static ug_status sum_launch(const ug_op *op, ug_tensor *const *out, const ug_tensor *const *in)
{
    UG_TRY(ug_tensor_copy(out[0], in[0]));
    return ug_comm_all_reduce(op->p.collective.comm, out[0], UG_COMM_SUM);
}

const ug_op_def ug_op_sum_over_ranks = {.family = "sum over ranks", .infer = sum_infer, .launch = sum_launch};
