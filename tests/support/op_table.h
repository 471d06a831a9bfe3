/* The elementwise ops, one row each: the tests' only list of them.
 *
 * A row gives the op's name, its eager and graph calls, y = f(x) in double
 * (written from the op's definition, independent of the library), its
 * derivative, the input range (the op's domain, wide enough to saturate),
 * the dtypes it takes and the library's kind (kernels/common/elementwise.h).
 * Conformance on every device (test_conformance), the finite-difference
 * check of each derivative (test_reference), gradients through graphs,
 * sizes and broadcasting (test_elementwise, test_autograd) and the error
 * tests (test_errors) all walk these rows, and test_reference fails when a
 * kind of the library has neither a row nor a place among the building
 * blocks below. Adding an elementwise op to the tests is one row in
 * op_table.c. The other ops' rows are the gradient cases of the
 * conformance suite (conformance.h); test_conformance fails when an op
 * definition of the library is launched by none of them and is not among
 * op_definition_blocks below. */
#ifndef UG_TESTS_OP_TABLE_H
#define UG_TESTS_OP_TABLE_H

#include <stdbool.h>
#include <stddef.h>

#include "unigrad/unigrad.h"

/* Dtype sets, as bit masks over ug_dtype. */
#define OP_DTYPE(d) (1u << (unsigned)(d))
#define OP_FLOATS (OP_DTYPE(UG_F32) | OP_DTYPE(UG_F16) | OP_DTYPE(UG_BF16))

typedef struct op_unary {
    const char *name;
    int kind; /* ug_unary_kind */
    ug_status (*eager)(const ug_tensor *x, ug_tensor **out);
    ug_status (*graph)(ug_graph *g, ug_value *x, ug_value **out);
    double (*f)(double x);
    double (*df)(double x);
    double lo, hi;
    unsigned dtypes;
} op_unary;

typedef struct op_binary {
    const char *name;
    int kind; /* ug_binary_kind */
    ug_status (*eager)(const ug_tensor *a, const ug_tensor *b, ug_tensor **out);
    ug_status (*graph)(ug_graph *g, ug_value *a, ug_value *b, ug_value **out);
    double (*f)(double a, double b);
    double (*dfa)(double a, double b);
    double (*dfb)(double a, double b);
    bool differentiable; /* equal is not */
    double alo, ahi, blo, bhi;
    double baway; /* how far b keeps from zero */
    unsigned dtypes;
} op_binary;

extern const op_unary op_unaries[];
extern const int op_unary_count;
extern const op_binary op_binaries[];
extern const int op_binary_count;

/* The row of that name; NULL (and a test failure's message from the
 * caller) when there is none. */
const op_unary *op_unary_named(const char *name);
const op_binary *op_binary_named(const char *name);

/* The library's kinds with no public call of their own, each with the
 * test that covers it: the gradient kernels, casts and fills, the pieces of
 * losses, clipping, accumulation and dropout. */
typedef struct op_building_block {
    const char *kind; /* its name in elementwise.h: "RELU_GRAD" */
    const char *covered_by;
} op_building_block;
extern const op_building_block op_unary_blocks[], op_binary_blocks[];
extern const int op_unary_block_count, op_binary_block_count;

/* The op definitions (ug_op_def, by family) that no row's graph launches,
 * each with the test that covers it: the optimizer's update, the loss
 * scaler, casts and fills. test_conformance fails when a definition of the
 * library is neither launched by a row nor listed here. */
extern const op_building_block op_definition_blocks[];
extern const int op_definition_block_count;
bool op_definition_block(const char *family);

#endif
