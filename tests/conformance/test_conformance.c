/* Backend conformance, in the manner of ggml's test-backend-ops: every
 * public eager op of ops.h, in every dtype it takes, on every device, over
 * one set of shapes (contiguous, broadcast scalar/row/column operands,
 * guarded views at odd offsets, odd sizes 1, 7, 257 and 1000+, empty
 * tensors, NaN and inf where the op defines the result), against the
 * double-precision references of reference.c; and the gradient of every
 * differentiable graph op through graph.h against its analytic derivative.
 *
 * The elementwise ops are the rows of op_table.c (name, eager and graph
 * calls, the op and its derivative in double, input range, dtypes); the
 * runners here drive each row through every dtype, shape and special
 * value, and through a graph for the gradient. The other ops are tables in
 * conformance_ops.c (eager) and conformance_grad.c (gradients).
 *
 * Tolerances are the suite's (harness.h): NMSE TH_TOL_F32 / TH_TOL_F16
 * against the reference rounded to the output's dtype, exact where the
 * result is exact (max, argmax, transposes, casts, random uniform), and
 * CF_TOL_GRAD for gradients (a few f32 operations each). */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "conformance.h"
#include "op_definitions.h" /* generated: the library's op definitions */
#include "op_table.h"
#include "train_support.h"

static const ug_dtype float_dtypes[] = {UG_F32, UG_F16, UG_BF16};

/* ---- shared helpers (conformance.h) ---- */

int64_t cf_numel(const cf_shape *s) { return ref_numel(s->ndim, s->d); }

const char *cf_shape_str(const cf_shape *s, char *buf, size_t len)
{
    return th_shape_str(s->ndim, s->d, buf, len);
}

double *cf_values(int64_t n, double lo, double hi, double away)
{
    double *v = th_random_values(n, lo, hi);
    for (int64_t i = 0; away > 0 && i < n; i++)
        if (fabs(v[i]) < away)
            v[i] = copysign(away + fabs(v[i]), v[i]);
    return v;
}

ug_tensor *cf_input(ug_device *dev, ug_dtype dtype, const cf_shape *s, double *v, bool guarded,
                    th_guard **guard)
{
    th_round_to(dtype, v, cf_numel(s));
    *guard = NULL;
    if (guarded)
        return th_guarded(dev, dtype, s->ndim, s->d, v, guard);
    return th_tensor(dev, dtype, s->ndim, s->d, v);
}

bool cf_check_result(ug_status status, ug_tensor *out, ug_dtype dtype, const cf_shape *s,
                     const double *want, double tol, const char *what)
{
    th_track(out);
    if (!CHECK_STATUS(status, UG_OK))
        return false;
    if (!th_check_tensor(out, dtype, s->ndim, s->d))
        return false;
    return th_compare(what, th_download(out), want, cf_numel(s), tol);
}

/* ---- elementwise ops, eager ---- */

/* Shapes every unary op runs on; guarded: the input is a view at an odd
 * offset inside sentinels. */
static const struct {
    cf_shape s;
    bool guarded;
} unary_shapes[] = {
    {{1, {1}}, false},    {{1, {7}}, true},        {{1, {257}}, false},
    {{1, {1031}}, true},  {{0, {0}}, false},       {{1, {0}}, false},
    {{2, {3, 0}}, false}, {{2, {7, 33}}, true},    {{3, {2, 3, 5}}, false},
};

/* Inputs whose results IEEE arithmetic fixes: NaN in gives NaN out, and
 * infinities, zeros, overflow and tiny values give what the double
 * formula gives. An infinite input whose formula is NaN (gelu(-inf) is
 * -inf * 0) is a convention, not a fact, and is left out. */
static const double unary_specials[] = {NAN, INFINITY, -INFINITY, 0.0, -0.0, 50.0, -50.0,
                                        12.0, 100.0, -1.0, 1e-30, -1e-30};

static bool check_unary(ug_device *dev, const op_unary *op, ug_dtype dt, const cf_shape *s,
                        double *x, bool guarded)
{
    char buf[64];
    th_context("%s %s %s%s", op->name, ug_dtype_name(dt), cf_shape_str(s, buf, sizeof buf),
               guarded ? ", guarded view" : "");
    const int before = th_failures();
    const int64_t n = cf_numel(s);
    th_guard *g = NULL;
    ug_tensor *tx = cf_input(dev, dt, s, x, guarded, &g);
    if (!tx)
        return false;
    double *want = th_alloc((size_t)(n ? n : 1) * sizeof *want);
    for (int64_t i = 0; i < n; i++)
        want[i] = op->f(x[i]);
    th_round_to(dt, want, n);
    ug_tensor *out = NULL;
    ug_status st = op->eager(tx, &out);
    cf_check_result(st, out, dt, s, want, th_tol(dt), op->name);
    th_guard_check(g);
    return th_failures() == before;
}

static void test_unary_ops(ug_device *dev)
{
    for (int o = 0; o < op_unary_count; o++) {
        const op_unary *op = &op_unaries[o];
        for (int k = 0; k < CF_COUNT(float_dtypes); k++) {
            if (!(op->dtypes & OP_DTYPE(float_dtypes[k])))
                continue;
            for (int c = 0; c < CF_COUNT(unary_shapes); c++) {
                const cf_shape *s = &unary_shapes[c].s;
                double *x = cf_values(cf_numel(s), op->lo, op->hi, 0);
                if (!check_unary(dev, op, float_dtypes[k], s, x, unary_shapes[c].guarded))
                    return;
            }
            cf_shape s = {1, {0}};
            double x[CF_COUNT(unary_specials)];
            for (int i = 0; i < CF_COUNT(unary_specials); i++)
                if (!isinf(unary_specials[i]) || !isnan(op->f(unary_specials[i])))
                    x[s.d[0]++] = unary_specials[i];
            if (!check_unary(dev, op, float_dtypes[k], &s, x, false))
                return;
        }
    }
}

/* Operand shapes of the binary ops: equal, broadcast rows, columns and
 * scalars (ndim 0 and size 1), both sides broadcast, empty. */
static const struct {
    cf_shape a, b;
    bool guarded;
} binary_shapes[] = {
    {{1, {1}}, {1, {1}}, false},
    {{1, {7}}, {1, {7}}, true},
    {{1, {257}}, {1, {257}}, false},
    {{1, {1031}}, {1, {1031}}, true},
    {{2, {7, 33}}, {1, {33}}, false},       /* row */
    {{2, {7, 33}}, {2, {7, 1}}, true},      /* column */
    {{1, {33}}, {2, {7, 33}}, false},
    {{0, {0}}, {2, {7, 33}}, false},        /* scalar a */
    {{2, {7, 33}}, {0, {0}}, true},         /* scalar b */
    {{1, {1}}, {1, {257}}, false},
    {{3, {2, 1, 5}}, {2, {3, 1}}, true},    /* both broadcast */
    {{2, {33, 1}}, {2, {1, 31}}, false},    /* outer product */
    {{1, {0}}, {1, {0}}, false},
    {{2, {3, 0}}, {1, {0}}, false},
    {{2, {0, 4}}, {1, {4}}, false},
};

/* Pairs whose results IEEE arithmetic fixes (overflow included: 3e38 is
 * inf in f16 already, 6e4 + 6e4 overflows f16 only). */
static const double binary_specials[][2] = {
    {NAN, 1}, {1, NAN}, {NAN, NAN}, {INFINITY, 1}, {INFINITY, -INFINITY}, {-INFINITY, 2},
    {1, INFINITY}, {-INFINITY, -INFINITY}, {1, 0}, {-1, 0}, {1, -0.0}, {0, 0}, {INFINITY, 0},
    {3e38, 3e38}, {-3e38, 3e38}, {6e4, 6e4}, {-0.0, 0}, {5, -2},
};

static bool check_binary(ug_device *dev, const op_binary *op, ug_dtype dt, const cf_shape *sa,
                         double *a, const cf_shape *sb, double *b, bool guarded)
{
    char b1[64], b2[64];
    th_context("%s %s %s x %s%s", op->name, ug_dtype_name(dt), cf_shape_str(sa, b1, sizeof b1),
               cf_shape_str(sb, b2, sizeof b2), guarded ? ", guarded views" : "");
    const int before = th_failures();
    th_guard *ga = NULL, *gb = NULL;
    ug_tensor *ta = cf_input(dev, dt, sa, a, guarded, &ga);
    ug_tensor *tb = cf_input(dev, dt, sb, b, guarded, &gb);
    if (!ta || !tb)
        return false;
    cf_shape so;
    if (!ref_broadcast_shape(sa->ndim, sa->d, sb->ndim, sb->d, &so.ndim, so.d)) {
        th_fail(TH_LOC, "test bug: the shapes do not broadcast");
        return false;
    }
    const int64_t n = cf_numel(&so);
    double *want = th_alloc((size_t)(n ? n : 1) * sizeof *want);
    for (int64_t i = 0; i < n; i++)
        want[i] = op->f(a[ref_broadcast_offset(so.ndim, so.d, i, sa->ndim, sa->d)],
                        b[ref_broadcast_offset(so.ndim, so.d, i, sb->ndim, sb->d)]);
    th_round_to(dt, want, n);
    ug_tensor *out = NULL;
    ug_status st = op->eager(ta, tb, &out);
    cf_check_result(st, out, dt, &so, want, th_tol(dt), op->name);
    th_guard_check(ga);
    th_guard_check(gb);
    return th_failures() == before;
}

static void test_binary_ops(ug_device *dev)
{
    for (int o = 0; o < op_binary_count; o++) {
        const op_binary *op = &op_binaries[o];
        for (int k = 0; k < CF_COUNT(float_dtypes); k++) {
            if (!(op->dtypes & OP_DTYPE(float_dtypes[k])))
                continue;
            for (int c = 0; c < CF_COUNT(binary_shapes); c++) {
                const cf_shape *sa = &binary_shapes[c].a, *sb = &binary_shapes[c].b;
                double *a = cf_values(cf_numel(sa), op->alo, op->ahi, 0);
                double *b = cf_values(cf_numel(sb), op->blo, op->bhi, op->baway);
                if (!check_binary(dev, op, float_dtypes[k], sa, a, sb, b, binary_shapes[c].guarded))
                    return;
            }
            cf_shape s = {1, {CF_COUNT(binary_specials)}};
            double a[CF_COUNT(binary_specials)], b[CF_COUNT(binary_specials)];
            for (int i = 0; i < CF_COUNT(binary_specials); i++) {
                a[i] = binary_specials[i][0];
                b[i] = binary_specials[i][1];
            }
            if (!check_binary(dev, op, float_dtypes[k], &s, a, &s, b, false))
                return;
        }
    }
}

/* ---- elementwise ops, gradients ---- */

static ug_status build_unary(cf_graph *cg, const cf_grad_case *c, ug_value *const *p, ug_value **y)
{
    return ((const op_unary *)c->row)->graph(cg->g, p[0], y);
}

static void ref_unary_grad(const cf_grad_case *c, const double *const *p, const double *w,
                           const float *y_dev, double *y, double *const *grad)
{
    (void)y_dev;
    const op_unary *op = c->row;
    for (int64_t i = 0; i < cf_numel(&c->p[0].shape); i++) {
        y[i] = op->f(p[0][i]);
        grad[0][i] = w[i] * op->df(p[0][i]);
    }
}

static ug_status build_binary(cf_graph *cg, const cf_grad_case *c, ug_value *const *p, ug_value **y)
{
    return ((const op_binary *)c->row)->graph(cg->g, p[0], p[1], y);
}

/* A broadcast operand's gradient sums the contributions of every output
 * element that read it. */
static void ref_binary_grad(const cf_grad_case *c, const double *const *p, const double *w,
                            const float *y_dev, double *y, double *const *grad)
{
    (void)y_dev;
    const op_binary *op = c->row;
    const cf_shape *sa = &c->p[0].shape, *sb = &c->p[1].shape;
    cf_shape so;
    ref_broadcast_shape(sa->ndim, sa->d, sb->ndim, sb->d, &so.ndim, so.d);
    memset(grad[0], 0, (size_t)cf_numel(sa) * sizeof(double));
    memset(grad[1], 0, (size_t)cf_numel(sb) * sizeof(double));
    for (int64_t i = 0; i < cf_numel(&so); i++) {
        const int64_t ia = ref_broadcast_offset(so.ndim, so.d, i, sa->ndim, sa->d);
        const int64_t ib = ref_broadcast_offset(so.ndim, so.d, i, sb->ndim, sb->d);
        y[i] = op->f(p[0][ia], p[1][ib]);
        grad[0][ia] += w[i] * op->dfa(p[0][ia], p[1][ib]);
        grad[1][ib] += w[i] * op->dfb(p[0][ia], p[1][ib]);
    }
}

void cf_elementwise_grad_cases(ug_device *dev)
{
    static const cf_shape x_shape = {2, {7, 33}};
    for (int o = 0; o < op_unary_count; o++) {
        const op_unary *op = &op_unaries[o];
        const cf_grad_case c = {.name = op->name, .count = 1,
                                .p = {{x_shape, op->lo, op->hi, 0}},
                                .build = build_unary, .ref = ref_unary_grad, .row = op};
        cf_check_grad(dev, &c);
        ts_cleanup();
    }
    /* Equal shapes, then either operand broadcast (a row, a column, a single
     * element): its gradient sums over the axes it was repeated along. */
    static const cf_shape pairs[][2] = {
        {{2, {7, 33}}, {2, {7, 33}}}, {{2, {7, 33}}, {1, {33}}}, {{2, {7, 33}}, {2, {7, 1}}},
        {{2, {7, 33}}, {1, {1}}},     {{1, {33}}, {2, {7, 33}}}, {{2, {7, 1}}, {2, {1, 33}}},
    };
    for (int o = 0; o < op_binary_count; o++) {
        const op_binary *op = &op_binaries[o];
        if (!op->differentiable)
            continue;
        for (int s = 0; s < CF_COUNT(pairs); s++) {
            char name[64], b1[32], b2[32];
            snprintf(name, sizeof name, "%s %s x %s", op->name,
                     cf_shape_str(&pairs[s][0], b1, sizeof b1), cf_shape_str(&pairs[s][1], b2, sizeof b2));
            const cf_grad_case c = {.name = name, .count = 2,
                                    .p = {{pairs[s][0], op->alo, op->ahi, 0},
                                          {pairs[s][1], op->blo, op->bhi, op->baway}},
                                    .build = build_binary, .ref = ref_binary_grad, .row = op};
            cf_check_grad(dev, &c);
            ts_cleanup();
        }
    }
    cf_rows_ran(CF_ROWS_ELEMENTWISE);
}

/* Every op definition of the library (op_definitions.h, generated from
 * core/) is launched by the graph of some row above, or is a building block
 * that op_table.c names with the test covering it. Runs after the rows, in
 * a run of the whole file. */
static void test_op_definitions_driven(ug_device *dev)
{
    (void)dev;
    if (cf_rows_run() != CF_ROWS_ALL) {
        th_skip("the row tables did not all run (a filtered run)");
        return;
    }
    int definitions = 0, launched = 0;
#define CHECK_DRIVEN(family, file)                                                               \
    definitions++;                                                                               \
    launched += cf_family_driven(family);                                                        \
    CHECK_MSG(cf_family_driven(family) || op_definition_block(family),                           \
              "op definition '%s' (%s) is launched by no row of the op table: give it a row "     \
              "(a gradient case whose graph runs it) or a building-block entry in "               \
              "tests/support/op_table.c", family, file);
    UG_OP_DEFINITIONS(CHECK_DRIVEN)
#undef CHECK_DRIVEN
    /* A building block names a definition that exists. */
    for (int i = 0; i < op_definition_block_count; i++) {
        bool exists = false;
#define MATCHES(family, file) exists |= !strcmp(family, op_definition_blocks[i].kind);
        UG_OP_DEFINITIONS(MATCHES)
#undef MATCHES
        CHECK_MSG(exists, "op_table.c names '%s' among the building blocks, which is no op definition",
                  op_definition_blocks[i].kind);
    }
    printf("    %d op definitions, %d of them launched by the rows' graphs\n", definitions, launched);
}

/* ---- the headers' dtype notes against the tables ---- */

/* The dtypes every elementwise row runs through; 0 (with a failure) when
 * the rows differ, which one note for them all could not say. */
static unsigned elementwise_dtype_mask(void)
{
    const unsigned mask = op_unary_count ? op_unaries[0].dtypes : 0;
    for (int i = 0; i < op_unary_count; i++)
        CHECK_MSG(op_unaries[i].dtypes == mask, "the rows of %s and %s take other dtypes", op_unaries[i].name,
                  op_unaries[0].name);
    for (int i = 0; i < op_binary_count; i++)
        CHECK_MSG(op_binaries[i].dtypes == mask, "the rows of %s and %s take other dtypes", op_binaries[i].name,
                  op_unaries[0].name);
    return mask;
}

typedef struct dtype_note {
    const char *header, *function; /* the declaration a note comes before */
    unsigned driven;               /* the dtypes the tables run it through */
    bool seen;
} dtype_note;

/* "f32, f16, bf16)" or "...; ..." (across comment lines) as a mask;
 * false at a name that is no dtype. */
static bool parse_dtypes(const char *p, unsigned *mask)
{
    static const ug_dtype known[] = {UG_F32, UG_F16, UG_BF16, UG_I32, UG_U8};
    *mask = 0;
    while (*p && *p != ')' && *p != ';') {
        size_t n = strcspn(p, ",;) \n");
        bool found = false;
        for (size_t k = 0; k < sizeof known / sizeof known[0]; k++)
            if (strlen(ug_dtype_name(known[k])) == n && !strncmp(p, ug_dtype_name(known[k]), n)) {
                *mask |= 1u << (unsigned)known[k];
                found = true;
            }
        if (!found)
            return false;
        p += n;
        p += strspn(p, ", \n*");
    }
    return *mask != 0;
}

/* "f32, f16, bf16" of a mask. */
static const char *mask_names(unsigned mask, char *buf, size_t len)
{
    buf[0] = '\0';
    for (unsigned d = 0; d < 32; d++)
        if (mask & (1u << d))
            snprintf(buf + strlen(buf), len - strlen(buf), "%s%s", buf[0] ? ", " : "", ug_dtype_name((ug_dtype)d));
    return buf;
}

/* The name of the function declared at decl ("UG_API ug_status ug_add(").
 * "" when there is none. */
static void declared_function(const char *decl, char *name, size_t len)
{
    const char *paren = decl ? strchr(decl, '(') : NULL, *start = paren;
    while (start && start > decl && (isalnum((unsigned char)start[-1]) || start[-1] == '_'))
        start--;
    snprintf(name, len, "%.*s", paren ? (int)(paren - start) : 0, start ? start : "");
}

/* Checks the notes of one header against notes[]. */
static void check_header_notes(const char *header, dtype_note *notes, int count)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", UG_PUBLIC_HEADERS, header);
    FILE *f = fopen(path, "rb");
    REQUIRE(f != NULL);
    static char text[1 << 18];
    const size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    for (const char *at = strstr(text, "(dtypes: "); at; at = strstr(at + 1, "(dtypes: ")) {
        int line = 1;
        for (const char *c = text; c < at; c++)
            line += *c == '\n';
        unsigned claimed = 0;
        char function[64];
        declared_function(strstr(at, "UG_API"), function, sizeof function);
        if (!parse_dtypes(at + 9, &claimed) || !function[0]) {
            CHECK_MSG(false, "%s:%d: the note \"%.40s\" names no dtypes or comes before no declaration", header,
                      line, at);
            continue;
        }
        dtype_note *note = NULL;
        for (int i = 0; i < count; i++)
            if (!strcmp(notes[i].header, header) && !strcmp(notes[i].function, function))
                note = &notes[i];
        if (!note) {
            CHECK_MSG(false, "%s:%d: %s has a dtype note that no table of this suite backs: add it to the "
                      "notes in test_header_dtype_notes with the dtypes the tables run it through", header, line,
                      function);
            continue;
        }
        note->seen = true;
        char said[64], run[64];
        CHECK_MSG(claimed == note->driven, "%s:%d says %s takes %s, and the conformance tables run it through %s: "
                  "correct the note or the table", header, line, function, mask_names(claimed, said, sizeof said),
                  mask_names(note->driven, run, sizeof run));
    }
}

/* Every "(dtypes: ...)" note in the public headers names the dtypes the
 * conformance tables run its op through, no more and no fewer, and every
 * op below keeps its note. */
static void test_header_dtype_notes(ug_device *dev)
{
    (void)dev;
    const unsigned floats = cf_float_dtype_mask();
    dtype_note notes[] = {
        {"ops.h", "ug_add", elementwise_dtype_mask(), false}, /* the elementwise ops' one note */
        {"ops.h", "ug_fill", floats, false},
        {"ops.h", "ug_random_uniform", floats, false},
        {"ops.h", "ug_reduce", floats, false},
        {"ops.h", "ug_matmul", floats, false},
        {"ops.h", "ug_softmax", floats, false},
        {"ops.h", "ug_cast", floats, false},    /* the targets; the sources are every dtype */
        {"graph.h", "ug_g_cast", floats, false}, /* ug_cast's definition */
        {"conv.h", "ug_conv2d", cf_window_dtype_mask(), false},
    };
    const int count = (int)(sizeof notes / sizeof notes[0]);
    check_header_notes("ops.h", notes, count);
    check_header_notes("graph.h", notes, count);
    check_header_notes("conv.h", notes, count);
    for (int i = 0; i < count; i++)
        CHECK_MSG(notes[i].seen, "%s no longer says which dtypes %s takes: give it a (dtypes: ...) note",
                  notes[i].header, notes[i].function);
}

TS_TEST(elementwise_grads) { cf_elementwise_grad_cases(dev); }
TS_TEST(graph_op_grads) { cf_graph_op_grad_cases(dev); }

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_DEVICE_TEST(unary_ops),
        TH_DEVICE_TEST(binary_ops),
        TH_DEVICE_TEST(reduce_ops),
        TH_DEVICE_TEST(reduce_special),
        TH_DEVICE_TEST(reduce_wrappers),
        TH_DEVICE_TEST(matmul_ops),
        TH_DEVICE_TEST(softmax_ops),
        TH_DEVICE_TEST(transpose_ops),
        TH_DEVICE_TEST(cast_ops),
        TH_DEVICE_TEST(fill_ops),
        TH_DEVICE_TEST(clone_ops),
        TH_DEVICE_TEST(random_ops),
        TH_DEVICE_TEST(elementwise_grads),
        TH_DEVICE_TEST(graph_op_grads),
        TH_DEVICE_TEST(conv2d_ops),
        TH_DEVICE_TEST(pool_ops),
        TH_DEVICE_TEST(global_avg_pool_ops),
        TH_DEVICE_TEST(batch_norm_ops),
        TH_DEVICE_TEST(conv_grads),
        TH_DEVICE_TEST(half_conv_grads),
        TH_DEVICE_TEST(upsample_ops),
        TH_DEVICE_TEST(adaptive_pool_ops),
        TH_DEVICE_TEST(layout_ops),
        TH_DEVICE_TEST(attention_ops),
        TH_DEVICE_TEST(xent_ops),
        TH_DEVICE_TEST(norm_ops),
        TH_DEVICE_TEST(batch_norm_running_stats),
        TH_DEVICE_TEST(batch_norm_1d_momentum_rows),
        TH_DEVICE_TEST(nn_conv2d_layer),
        TH_HOST_TEST(op_definitions_driven),
        TH_HOST_TEST(header_dtype_notes),
    };
    return th_main(argc, argv, tests, CF_COUNT(tests));
}
