/* Shared by the files of the conformance suite (test_conformance.c: the
 * op tables and the elementwise ops; conformance_ops.c: reductions, matmul,
 * softmax, layout, casts, fill, clone, random; conformance_grad.c: gradients
 * of graph ops; conformance_conv.c and conformance_conv_grad.c: conv.h,
 * eager and in graphs; conformance_upsample.c, conformance_norm.c,
 * conformance_xent.c): shapes, inputs and the gradient runner. */
#ifndef UG_TESTS_CONFORMANCE_H
#define UG_TESTS_CONFORMANCE_H

#include <stdbool.h>
#include <stdint.h>

#include "harness.h"
#include "reference.h"

typedef struct cf_shape {
    int ndim;
    int64_t d[UG_MAX_DIMS];
} cf_shape;

#define CF_COUNT(a) (int)(sizeof(a) / sizeof(a)[0])

int64_t cf_numel(const cf_shape *s);
/* "[7,33]" */
const char *cf_shape_str(const cf_shape *s, char *buf, size_t len);

/* n values uniform in [lo, hi]; those closer than away to zero are pushed
 * out to magnitude away (keeping their sign). Tracked. */
double *cf_values(int64_t n, double lo, double hi, double away);

/* A tensor holding v, first rounded in place to what dtype stores (so the
 * reference sees the device's numbers): plain, or a guarded view whose
 * parent is checked afterwards with th_guard_check. NULL on failure. */
ug_tensor *cf_input(ug_device *dev, ug_dtype dtype, const cf_shape *s, double *v, bool guarded,
                    th_guard **guard);

/* Checks an op's status, its result's dtype and shape, and its values
 * against want (already rounded to dtype) within tol (NMSE; NaN and inf at
 * the same places). Tracks out. False (failure recorded) when it differs. */
bool cf_check_result(ug_status status, ug_tensor *out, ug_dtype dtype, const cf_shape *s,
                     const double *want, double tol, const char *what);

/* ---- gradients through graph.h (conformance_grad.c) ---- */

enum { CF_MAX_PARAMS = 3 };

/* A parameter of a gradient case: its shape and values. */
typedef struct cf_param {
    cf_shape shape;
    double lo, hi, away; /* see cf_values */
} cf_param;

typedef struct cf_grad_case cf_grad_case;

/* What a build may add besides parameters: i32 labels bound at run time. */
typedef struct cf_graph {
    ug_graph *g;
    ug_value *labels;
    ug_tensor *labels_tensor;
} cf_graph;

/* Adds the op to the graph: y = op(p...). */
typedef ug_status (*cf_build_fn)(cf_graph *cg, const cf_grad_case *c, ug_value *const *p,
                                 ug_value **y);
/* In double: y = op(p...), and the gradient of sum(y * w) with respect to
 * each parameter, from the analytic derivative. y_dev is the device's
 * forward output (dropout recovers its mask from it). */
typedef void (*cf_grad_ref_fn)(const cf_grad_case *c, const double *const *p, const double *w,
                               const float *y_dev, double *y, double *const *grad);

struct cf_grad_case {
    const char *name;
    int count;                      /* parameters */
    cf_param p[CF_MAX_PARAMS];
    cf_build_fn build;
    cf_grad_ref_fn ref;
    const void *row;                /* the op table's row (elementwise ops) */
    int axis;                       /* reductions */
    bool all;
    bool ta, tb;                    /* matmul */
    float f0;                       /* eps, smoothing, dropout p */
    cf_shape to;                    /* reshape target */
    /* Fixed values of a parameter (numel of its shape), used instead of
     * random ones where they matter (ties in a max pool). */
    const double *values[CF_MAX_PARAMS];
    /* The bound on y's and the gradients' normalised squared error; 0:
     * f32's (a case computing in f16 or bf16 sets its type's). */
    double tol;
};

/* Builds the case as a model whose parameters are p, loss = sum(y * w)
 * with w fixed, runs forward and backward once, and compares y and every
 * parameter's gradient with the case's reference. */
void cf_check_grad(ug_device *dev, const cf_grad_case *c);

/* The op definitions the rows' graphs launched: cf_check_grad notes each
 * (by its family) after compiling, and each table's runner notes that it
 * ran, so op_definitions_driven (test_conformance.c) can tell a definition
 * no row drives from a run that left tables out. */
enum { CF_ROWS_ELEMENTWISE = 1, CF_ROWS_GRAPH_OPS = 2, CF_ROWS_CONV = 4, CF_ROWS_UPSAMPLE = 8,
       CF_ROWS_LAYOUT = 16, CF_ROWS_ATTENTION = 32, CF_ROWS_ALL = 63 };
void cf_rows_ran(unsigned table);
unsigned cf_rows_run(void);
bool cf_family_driven(const char *family);

/* The unary and binary op tables (test_conformance.c) as gradient cases. */
void cf_elementwise_grad_cases(ug_device *dev);
/* Every other differentiable graph op (conformance_grad.c). */
void cf_graph_op_grad_cases(ug_device *dev);

/* The labels a cross-entropy case uses for row r of classes. */
static inline int32_t cf_label(int64_t r, int64_t classes) { return (int32_t)((r * 7 + 3) % classes); }

/* Tests (registered by test_conformance.c). */
/* The dtypes the tables run ops through, as masks over ug_dtype (1 << d):
 * float_dtypes (conformance_ops.c) and the convolutions' (conformance_conv.c). */
unsigned cf_dtype_mask(const ug_dtype *dtypes, int count);
unsigned cf_float_dtype_mask(void);
unsigned cf_window_dtype_mask(void);

void test_reduce_ops(ug_device *dev);
void test_reduce_special(ug_device *dev);
void test_reduce_wrappers(ug_device *dev);
void test_matmul_ops(ug_device *dev);
void test_softmax_ops(ug_device *dev);
void test_transpose_ops(ug_device *dev);
void test_cast_ops(ug_device *dev);
void test_fill_ops(ug_device *dev);
void test_clone_ops(ug_device *dev);
void test_random_ops(ug_device *dev);
/* conv.h, eager (conformance_conv.c) */
void test_conv2d_ops(ug_device *dev);
void test_pool_ops(ug_device *dev);
void test_global_avg_pool_ops(ug_device *dev);
void test_batch_norm_ops(ug_device *dev);
/* conv.h and nn.h in graphs (conformance_conv_grad.c) */
void test_conv_grads(ug_device *dev);
/* convolution and batch norm computing in f16 and bf16 (conformance_half_grads.c) */
void test_half_conv_grads(ug_device *dev);
/* conv.h's upsampling, eager and in graphs (conformance_upsample.c) */
void test_upsample_ops(ug_device *dev);
/* conv.h's adaptive average pooling (conformance_adaptive_pool.c) */
void test_adaptive_pool_ops(ug_device *dev);
/* fused attention against its double reference and the composed path (conformance_attention.c) */
void test_attention_ops(ug_device *dev);
/* take, permute, slice, split, concat, stack, broadcast_to (conformance_layout.c) */
void test_layout_ops(ug_device *dev);
/* per-token cross-entropy with an ignored label (conformance_xent.c) */
void test_xent_ops(ug_device *dev);
/* layer norm and RMSNorm in graphs, and their layers (conformance_norm.c) */
void test_norm_ops(ug_device *dev);
void test_batch_norm_running_stats(ug_device *dev);
void test_batch_norm_1d_momentum_rows(ug_device *dev);
void test_nn_conv2d_layer(ug_device *dev);

#endif
