/* Conformance of the layout and index ops (ops.h: ug_take, ug_permute,
 * ug_slice, ug_split, ug_concat, ug_stack, ug_broadcast_to, and their graph
 * forms) against references written here from their definitions: eager
 * values in every dtype on plain tensors and guarded views (the values
 * move exactly, so they must match exactly), gradients through graphs
 * (cf_check_grad), the take gradient's sums in index order bit for bit,
 * out-of-range indices, and what each op refuses. */
#include <math.h>
#include <string.h>

#include "conformance.h"
#include "train_support.h"

static const ug_dtype every_dtype[] = {UG_F32, UG_F16, UG_BF16, UG_I32, UG_U8, UG_I64};

/* Integers every dtype holds exactly (u8: not negative). */
static double *exact_values(ug_dtype dtype, int64_t n)
{
    double *v = th_alloc((size_t)(n ? n : 1) * sizeof *v);
    for (int64_t i = 0; i < n; i++)
        v[i] = (double)((i * 37 + 11) % 121) - (dtype == UG_U8 ? 0.0 : 60.0);
    return v;
}

static void contiguous_strides(const cf_shape *s, int64_t *st)
{
    int64_t k = 1;
    for (int d = s->ndim - 1; d >= 0; d--) {
        st[d] = k;
        k *= s->d[d];
    }
}

/* y's element i as coordinates of shape s. */
static void coords_of(const cf_shape *s, int64_t i, int64_t *at)
{
    for (int d = s->ndim - 1; d >= 0; d--) {
        at[d] = i % s->d[d];
        i /= s->d[d];
    }
}

/* ---- references, written from the definitions ---- */

/* take: y[a, j..., b] = x[a, index[j...], b] over axis. */
static void ref_take(const cf_shape *xs, int axis, const int64_t *index, int64_t count, const double *x,
                     double *y)
{
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++)
        outer *= xs->d[d];
    for (int d = axis + 1; d < xs->ndim; d++)
        inner *= xs->d[d];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < count; j++)
            for (int64_t c = 0; c < inner; c++)
                y[(o * count + j) * inner + c] = x[(o * xs->d[axis] + index[j]) * inner + c];
}

/* permute: y's axis i is x's axis order[i]. */
static void ref_permute(const cf_shape *xs, const int *order, const double *x, double *y, cf_shape *ys)
{
    ys->ndim = xs->ndim;
    for (int i = 0; i < xs->ndim; i++)
        ys->d[i] = xs->d[order[i]];
    int64_t st[UG_MAX_DIMS], at[UG_MAX_DIMS];
    contiguous_strides(xs, st);
    for (int64_t i = 0; i < cf_numel(ys); i++) {
        coords_of(ys, i, at);
        int64_t src = 0;
        for (int d = 0; d < ys->ndim; d++)
            src += at[d] * st[order[d]];
        y[i] = x[src];
    }
}

/* y = x's entries [start, start + len) along axis placed at y_start of
 * y's axis (a slice when y is the smaller, a concat's part when x is). */
static void ref_place(const cf_shape *xs, const double *x, int64_t x_start, const cf_shape *ys, double *y,
                      int64_t y_start, int axis, int64_t len)
{
    int64_t xst[UG_MAX_DIMS] = {0}, yst[UG_MAX_DIMS] = {0}, at[UG_MAX_DIMS] = {0};
    contiguous_strides(xs, xst);
    contiguous_strides(ys, yst);
    cf_shape part = *xs;
    part.d[axis] = len;
    for (int64_t i = 0; i < cf_numel(&part); i++) {
        coords_of(&part, i, at);
        int64_t src = 0, dst = 0;
        for (int d = 0; d < xs->ndim; d++) {
            src += (at[d] + (d == axis ? x_start : 0)) * xst[d];
            dst += (at[d] + (d == axis ? y_start : 0)) * yst[d];
        }
        y[dst] = x[src];
    }
}

/* ---- eager values ---- */

static bool check_take(ug_device *dev, ug_dtype dt, const cf_shape *xs, int axis, const cf_shape *is,
                       const int64_t *index, ug_dtype idt, bool guarded)
{
    char b1[64], b2[64];
    th_context("take %s x %s axis %d index %s %s%s", ug_dtype_name(dt), cf_shape_str(xs, b1, sizeof b1), axis,
               ug_dtype_name(idt), cf_shape_str(is, b2, sizeof b2), guarded ? ", guarded" : "");
    double *x = exact_values(dt, cf_numel(xs));
    const int64_t count = cf_numel(is);
    double *iv = th_alloc((size_t)(count ? count : 1) * sizeof *iv);
    for (int64_t j = 0; j < count; j++)
        iv[j] = (double)index[j];
    th_guard *g = NULL;
    ug_tensor *tx = cf_input(dev, dt, xs, x, guarded, &g);
    ug_tensor *ti = th_tensor(dev, idt, is->ndim, is->d, iv);
    if (!tx || !ti)
        return false;
    const int a = axis < 0 ? axis + xs->ndim : axis;
    cf_shape ys = {0};
    for (int d = 0; d < a; d++)
        ys.d[ys.ndim++] = xs->d[d];
    for (int d = 0; d < is->ndim; d++)
        ys.d[ys.ndim++] = is->d[d];
    for (int d = a + 1; d < xs->ndim; d++)
        ys.d[ys.ndim++] = xs->d[d];
    double *want = th_alloc((size_t)(cf_numel(&ys) + 1) * sizeof *want);
    ref_take(xs, a, index, count, x, want);
    ug_tensor *out = NULL;
    ug_status called = ug_take(tx, ti, axis, &out);
    const bool ok = cf_check_result(called, out, dt, &ys, want, 0.0, "take");
    th_guard_check(g);
    return ok;
}

static void take_values(ug_device *dev)
{
    static const int64_t idx6[] = {3, 0, 3, 1, 4, 3}, idx1[] = {2}, idx4[] = {1, 1, 0, 2};
    for (int k = 0; k < CF_COUNT(every_dtype); k++) {
        const ug_dtype dt = every_dtype[k];
        const cf_shape t2 = {2, {5, 3}}, t3 = {3, {2, 5, 7}}, i23 = {2, {2, 3}}, i1 = {1, {1}}, i4 = {1, {4}},
                       i0 = {1, {0}};
        if (!check_take(dev, dt, &t2, 0, &i23, idx6, UG_I32, false) ||
            !check_take(dev, dt, &t3, 1, &i23, idx6, UG_I64, true) ||
            !check_take(dev, dt, &t3, -1, &i1, idx1, UG_I32, false) ||
            !check_take(dev, dt, &t3, 0, &i4, (const int64_t[]){1, 0, 1, 1}, UG_I64, false) ||
            !check_take(dev, dt, &t2, 1, &i4, idx4, UG_I32, true) ||
            !check_take(dev, dt, &t2, 0, &i0, idx1, UG_I32, false))
            return;
    }
}

/* An index outside [0, len) gives all one bits, whatever its sign. */
static void take_out_of_range(ug_device *dev)
{
    for (int k = 0; k < CF_COUNT(every_dtype); k++) {
        const ug_dtype dt = every_dtype[k];
        th_context("take %s with indices outside the axis", ug_dtype_name(dt));
        const int64_t xs[2] = {3, 4}, is[1] = {4};
        double *x = exact_values(dt, 12), idx[4] = {1, 3, -1, 2};
        ug_tensor *tx = th_tensor(dev, dt, 2, xs, x), *ti = th_tensor(dev, UG_I64, 1, is, idx), *out = NULL;
        REQUIRE(tx && ti);
        REQUIRE_OK(ug_take(tx, ti, 0, &out));
        th_track(out);
        const unsigned char *got = th_download_raw(out);
        REQUIRE(got);
        const size_t es = ug_dtype_size(dt);
        for (int64_t j = 0; j < 4; j++)
            for (int64_t c = 0; c < 4; c++) {
                const unsigned char *e = got + (size_t)(j * 4 + c) * es;
                bool ones = true;
                for (size_t b = 0; b < es; b++)
                    ones &= e[b] == 0xff;
                CHECK_MSG(ones == (j == 1 || j == 2), "row %lld column %lld: all one bits %s", (long long)j,
                          (long long)c, ones ? "where the index is valid" : "missing");
            }
    }
}

static void layout_values(ug_device *dev)
{
    for (int k = 0; k < CF_COUNT(every_dtype); k++) {
        const ug_dtype dt = every_dtype[k];
        const bool guarded = k % 2 == 1;
        th_guard *g = NULL;
        /* permute */
        const cf_shape p4 = {4, {2, 3, 4, 5}};
        static const int order[] = {2, 0, 3, 1}, negative[] = {-1, 0, 1, 2};
        const int *orders[] = {order, negative};
        for (int o = 0; o < 2; o++) {
            th_context("permute %s order %d%s", ug_dtype_name(dt), o, guarded ? ", guarded" : "");
            double *x = exact_values(dt, cf_numel(&p4)), *want = th_alloc(120 * sizeof *want);
            int resolved[4];
            for (int i = 0; i < 4; i++)
                resolved[i] = orders[o][i] < 0 ? orders[o][i] + 4 : orders[o][i];
            cf_shape ys;
            ref_permute(&p4, resolved, x, want, &ys);
            ug_tensor *tx = cf_input(dev, dt, &p4, x, guarded, &g), *out = NULL;
            REQUIRE(tx);
            ug_status called = ug_permute(tx, 4, orders[o], &out);
            if (!cf_check_result(called, out, dt, &ys, want, 0.0, "permute"))
            return;
            th_guard_check(g);
        }
        /* slice, split, concat */
        const cf_shape s3 = {3, {4, 7, 3}};
        double *x = exact_values(dt, cf_numel(&s3));
        ug_tensor *tx = cf_input(dev, dt, &s3, x, guarded, &g);
        REQUIRE(tx);
        static const struct {
            int axis;
            int64_t start, len;
        } slices[] = {{1, 2, 3}, {-1, 1, 2}, {0, 3, 1}, {1, 7, 0}};
        for (int i = 0; i < CF_COUNT(slices); i++) {
            th_context("slice %s axis %d [%lld, +%lld)", ug_dtype_name(dt), slices[i].axis,
                       (long long)slices[i].start, (long long)slices[i].len);
            const int a = slices[i].axis < 0 ? slices[i].axis + 3 : slices[i].axis;
            cf_shape ys = s3;
            ys.d[a] = slices[i].len;
            double *want = th_alloc((size_t)(cf_numel(&ys) + 1) * sizeof *want);
            ref_place(&s3, x, slices[i].start, &ys, want, 0, a, slices[i].len);
            ug_tensor *out = NULL;
            ug_status called = ug_slice(tx, slices[i].axis, slices[i].start, slices[i].len, &out);
            if (!cf_check_result(called, out, dt,
                             &ys, want, 0.0, "slice"))
            return;
        }
        th_context("split %s into 2 + 4 + 1 along axis 1, concat back in another order", ug_dtype_name(dt));
        ug_tensor *parts[3] = {NULL};
        REQUIRE_OK(ug_split(tx, 1, 3, (const int64_t[]){2, 4, 1}, parts));
        for (int i = 0; i < 3; i++)
            th_track(parts[i]);
        const ug_tensor *reordered[3] = {parts[2], parts[0], parts[1]};
        ug_tensor *joined = NULL;
        double *want = th_alloc(84 * sizeof *want);
        cf_shape one = {3, {4, 1, 3}}, two = {3, {4, 2, 3}}, four = {3, {4, 4, 3}};
        double *p0 = th_alloc(84 * sizeof *p0), *p1 = th_alloc(84 * sizeof *p1), *p2 = th_alloc(84 * sizeof *p2);
        ref_place(&s3, x, 0, &two, p0, 0, 1, 2);
        ref_place(&s3, x, 2, &four, p1, 0, 1, 4);
        ref_place(&s3, x, 6, &one, p2, 0, 1, 1);
        ref_place(&one, p2, 0, &s3, want, 0, 1, 1);
        ref_place(&two, p0, 0, &s3, want, 1, 1, 2);
        ref_place(&four, p1, 0, &s3, want, 3, 1, 4);
        ug_status called = ug_concat(3, reordered, 1, &joined);
        if (!cf_check_result(called, joined, dt, &s3, want, 0.0, "concat"))
        return;
        th_guard_check(g);
    }
}

/* More inputs than one node takes (joined in groups), stack on a new axis,
 * equal parts, and broadcast_to, in f32. */
static void layout_compositions(ug_device *dev)
{
    th_context("concat of 9 inputs along axis 0");
    const int64_t row[2] = {1, 3};
    ug_tensor *rows[9];
    double want[27];
    for (int i = 0; i < 9; i++) {
        double v[3] = {i, i + 0.5, -i};
        memcpy(want + 3 * i, v, sizeof v);
        rows[i] = th_tensor(dev, UG_F32, 2, row, v);
        REQUIRE(rows[i]);
    }
    ug_tensor *out = NULL;
    cf_shape s93 = {2, {9, 3}};
    ug_status called = ug_concat(9, (const ug_tensor *const *)rows, 0, &out);
    cf_check_result(called, out, UG_F32, &s93, want, 0.0,
                "concat");
    th_context("stack of 3 [2,3] at axis -1 and at axis 0");
    const int64_t s23[2] = {2, 3};
    double a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {-1, -2, -3, -4, -5, -6}, c[6] = {7, 8, 9, 10, 11, 12};
    const ug_tensor *three[3] = {th_tensor(dev, UG_F32, 2, s23, a), th_tensor(dev, UG_F32, 2, s23, b),
                                 th_tensor(dev, UG_F32, 2, s23, c)};
    REQUIRE(three[0] && three[1] && three[2]);
    double last[18], first[18];
    for (int i = 0; i < 6; i++) {
        last[i * 3] = a[i];
        last[i * 3 + 1] = b[i];
        last[i * 3 + 2] = c[i];
        first[i] = a[i];
        first[6 + i] = b[i];
        first[12 + i] = c[i];
    }
    cf_shape s233 = {3, {2, 3, 3}}, s323 = {3, {3, 2, 3}};
    out = NULL;
    called = ug_stack(3, three, -1, &out);
    cf_check_result(called, out, UG_F32, &s233, last, 0.0, "stack");
    out = NULL;
    called = ug_stack(3, three, 0, &out);
    cf_check_result(called, out, UG_F32, &s323, first, 0.0, "stack");
    th_context("split into 3 equal parts along axis 1");
    ug_tensor *thirds[3] = {NULL};
    REQUIRE_OK(ug_split(three[0], 1, 3, NULL, thirds));
    for (int i = 0; i < 3; i++) {
        cf_shape s21 = {2, {2, 1}};
        double col[2] = {a[i], a[3 + i]};
        cf_check_result(UG_OK, thirds[i], UG_F32, &s21, col, 0.0, "split");
    }
    th_context("masked_fill [2,3] by [2,1] with -inf, in every float dtype");
    static const ug_dtype floats[] = {UG_F32, UG_F16, UG_BF16};
    for (int k = 0; k < CF_COUNT(floats); k++) {
        double filled[6], rowmask[2] = {1, 0};
        const int64_t s21[2] = {2, 1};
        for (int i = 0; i < 6; i++)
            filled[i] = i < 3 ? -INFINITY : a[i];
        ug_tensor *x = th_tensor(dev, floats[k], 2, s23, a);
        ug_tensor *m = th_tensor(dev, floats[k], 2, s21, rowmask);
        REQUIRE(x && m);
        cf_shape s2 = {2, {2, 3}};
        out = NULL;
        called = ug_masked_fill(x, m, -INFINITY, &out);
        cf_check_result(called, out, floats[k], &s2, filled, 0.0, "masked_fill");
    }
    th_context("broadcast_to [3,1] -> [2,3,4]");
    const int64_t s31[2] = {3, 1}, s234[3] = {2, 3, 4};
    double v[3] = {1.5, -2, 7};
    ug_tensor *col = th_tensor(dev, UG_F32, 2, s31, v);
    REQUIRE(col);
    double expanded[24];
    for (int i = 0; i < 24; i++)
        expanded[i] = v[i / 4 % 3];
    cf_shape sb = {3, {2, 3, 4}};
    out = NULL;
    called = ug_broadcast_to(col, 3, s234, &out);
    cf_check_result(called, out, UG_F32, &sb, expanded, 0.0, "broadcast_to");
}

/* index_copy in every dtype: rows 3 and 0 of axis 1 replaced, an index
 * past the axis skipped. */
static void index_copy_values(ug_device *dev)
{
    for (int k = 0; k < CF_COUNT(every_dtype); k++) {
        const ug_dtype dt = every_dtype[k];
        th_context("index_copy %s [2,4,3] axis 1", ug_dtype_name(dt));
        const cf_shape bs = {3, {2, 4, 3}}, ss = {3, {2, 3, 3}};
        double *base = exact_values(dt, 24), *src = exact_values(dt, 18), idx[3] = {3, 0, 9};
        for (int i = 0; i < 18; i++)
            src[i] = dt == UG_U8 ? 255 - src[i] : -src[i] - 1;
        th_guard *g = NULL;
        ug_tensor *tb = cf_input(dev, dt, &bs, base, true, &g), *ts = th_tensor(dev, dt, 3, ss.d, src);
        ug_tensor *ti = th_tensor(dev, k % 2 ? UG_I64 : UG_I32, 1, (const int64_t[1]){3}, idx), *out = NULL;
        REQUIRE(tb && ts && ti);
        double want[24];
        memcpy(want, base, sizeof want);
        for (int o = 0; o < 2; o++)
            for (int j = 0; j < 2; j++) /* the third index is past the axis */
                for (int c = 0; c < 3; c++)
                    want[(o * 4 + (int)idx[j]) * 3 + c] = src[(o * 3 + j) * 3 + c];
        ug_status called = ug_index_copy(tb, 1, ti, ts, &out);
        if (!cf_check_result(called, out, dt, &bs, want, 0.0, "index_copy"))
            return;
        th_guard_check(g);
    }
}

/* ---- gradients through graphs ---- */

/* The take case's index: i32 [2, 4] with repeats, bound as the graph's
 * labels input. */
static const int64_t take_index[8] = {2, 0, 2, 5, 1, 2, 0, 5};

static ug_status build_take(cf_graph *cg, const cf_grad_case *c, ug_value *const *p, ug_value **y)
{
    const int64_t shape[2] = {2, 4};
    double iv[8];
    for (int i = 0; i < 8; i++)
        iv[i] = (double)take_index[i];
    ug_device *dev = ug_model_device(ug_graph_model(cg->g));
    cg->labels_tensor = th_tensor(dev, UG_I32, 2, shape, iv);
    if (!cg->labels_tensor)
        return UG_ERR_INVALID_ARGUMENT;
    const ug_status st = ug_graph_input(cg->g, "index", UG_I32, 2, shape, &cg->labels);
    return st == UG_OK ? ug_g_take(cg->g, p[0], cg->labels, c->axis, y) : st;
}

static void ref_take_grad(const cf_grad_case *c, const double *const *p, const double *w, const float *y_dev,
                          double *y, double *const *grad)
{
    (void)y_dev;
    const cf_shape *xs = &c->p[0].shape;
    ref_take(xs, c->axis, take_index, 8, p[0], y);
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < c->axis; d++)
        outer *= xs->d[d];
    for (int d = c->axis + 1; d < xs->ndim; d++)
        inner *= xs->d[d];
    memset(grad[0], 0, (size_t)cf_numel(xs) * sizeof *grad[0]);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < 8; j++)
            for (int64_t k = 0; k < inner; k++)
                grad[0][(o * xs->d[c->axis] + take_index[j]) * inner + k] += w[(o * 8 + j) * inner + k];
}

static const int permute_order[3] = {2, 0, 1};

static ug_status build_permute(cf_graph *cg, const cf_grad_case *c, ug_value *const *p, ug_value **y)
{
    (void)c;
    return ug_g_permute(cg->g, p[0], 3, permute_order, y);
}

static void ref_permute_grad(const cf_grad_case *c, const double *const *p, const double *w, const float *y_dev,
                             double *y, double *const *grad)
{
    (void)y_dev;
    cf_shape ys;
    ref_permute(&c->p[0].shape, permute_order, p[0], y, &ys);
    static const int inverse[3] = {1, 2, 0};
    cf_shape back;
    ref_permute(&ys, inverse, w, grad[0], &back);
}

/* y = concat(split(p0, axis 1, {1, 3, 2}) reversed, p1) along axis 1: the
 * slices' and the concat's gradients at once. */
static ug_status build_split_concat(cf_graph *cg, const cf_grad_case *c, ug_value *const *p, ug_value **y)
{
    (void)c;
    ug_value *parts[3], *all[4];
    const ug_status st = ug_g_split(cg->g, p[0], 1, 3, (const int64_t[]){1, 3, 2}, parts);
    if (st != UG_OK)
        return st;
    all[0] = parts[2];
    all[1] = parts[1];
    all[2] = p[1];
    all[3] = parts[0];
    return ug_g_concat(cg->g, 4, all, -1, y);
}

static void ref_split_concat_grad(const cf_grad_case *c, const double *const *p, const double *w,
                                  const float *y_dev, double *y, double *const *grad)
{
    (void)y_dev;
    const cf_shape *a = &c->p[0].shape, *b = &c->p[1].shape; /* [3, 6], [3, 2] */
    const cf_shape ys = {2, {3, 8}};
    /* y's columns: a[4:6], a[1:4], b, a[0:1] */
    static const struct {
        int from; /* 0: a, 1: b */
        int64_t start, len, at;
    } runs[] = {{0, 4, 2, 0}, {0, 1, 3, 2}, {1, 0, 2, 5}, {0, 0, 1, 7}};
    for (int r = 0; r < 4; r++) {
        const cf_shape *src = runs[r].from ? b : a;
        cf_shape part = *src;
        part.d[1] = runs[r].len;
        double tmp[24];
        ref_place(src, p[runs[r].from], runs[r].start, &part, tmp, 0, 1, runs[r].len);
        ref_place(&part, tmp, 0, &ys, y, runs[r].at, 1, runs[r].len);
        ref_place(&ys, w, runs[r].at, &part, tmp, 0, 1, runs[r].len);
        ref_place(&part, tmp, 0, src, grad[runs[r].from], runs[r].start, 1, runs[r].len);
    }
}

/* y = stack(p0, p1) at axis 1 times broadcast_to(p2 [1, 1, 4]). */
static ug_status build_stack_broadcast(cf_graph *cg, const cf_grad_case *c, ug_value *const *p, ug_value **y)
{
    (void)c;
    ug_value *stacked = NULL, *wide = NULL;
    ug_status st = ug_g_stack(cg->g, 2, (ug_value *const[]){p[0], p[1]}, 1, &stacked);
    if (st == UG_OK)
        st = ug_g_broadcast_to(cg->g, p[2], 3, (const int64_t[]){3, 2, 4}, &wide);
    return st == UG_OK ? ug_g_mul(cg->g, stacked, wide, y) : st;
}

static void ref_stack_broadcast_grad(const cf_grad_case *c, const double *const *p, const double *w,
                                     const float *y_dev, double *y, double *const *grad)
{
    (void)c;
    (void)y_dev;
    memset(grad[2], 0, 4 * sizeof *grad[2]);
    for (int i = 0; i < 3; i++)
        for (int s = 0; s < 2; s++)
            for (int k = 0; k < 4; k++) {
                const int at = (i * 2 + s) * 4 + k;
                const double v = p[s][i * 4 + k];
                y[at] = v * p[2][k];
                grad[s][i * 4 + k] = w[at] * p[2][k];
                grad[2][k] += w[at] * v;
            }
}

/* y = masked_fill(p0 [3, 5], mask [1, 5], -2.5): the mask a bound input. */
static const double fill_mask[5] = {0, 1, 0, 0, 1};

static ug_status build_masked_fill(cf_graph *cg, const cf_grad_case *c, ug_value *const *p, ug_value **y)
{
    (void)c;
    const int64_t shape[2] = {1, 5};
    ug_device *dev = ug_model_device(ug_graph_model(cg->g));
    cg->labels_tensor = th_tensor(dev, UG_F32, 2, shape, fill_mask);
    if (!cg->labels_tensor)
        return UG_ERR_INVALID_ARGUMENT;
    const ug_status st = ug_graph_input(cg->g, "mask", UG_F32, 2, shape, &cg->labels);
    return st == UG_OK ? ug_g_masked_fill(cg->g, p[0], cg->labels, -2.5f, y) : st;
}

static void ref_masked_fill_grad(const cf_grad_case *c, const double *const *p, const double *w,
                                 const float *y_dev, double *y, double *const *grad)
{
    (void)c;
    (void)y_dev;
    for (int i = 0; i < 15; i++) {
        const bool filled = fill_mask[i % 5] != 0.0;
        y[i] = filled ? -2.5 : p[0][i];
        grad[0][i] = filled ? 0.0 : w[i];
    }
}

/* y = index_copy(p0 [2,5,3], axis 1, {4, 1}, p1 [2,2,3]). */
static ug_status build_index_copy(cf_graph *cg, const cf_grad_case *c, ug_value *const *p, ug_value **y)
{
    (void)c;
    const int64_t shape[1] = {2};
    static const double idx[2] = {4, 1};
    ug_device *dev = ug_model_device(ug_graph_model(cg->g));
    cg->labels_tensor = th_tensor(dev, UG_I64, 1, shape, idx);
    if (!cg->labels_tensor)
        return UG_ERR_INVALID_ARGUMENT;
    const ug_status st = ug_graph_input(cg->g, "index", UG_I64, 1, shape, &cg->labels);
    return st == UG_OK ? ug_g_index_copy(cg->g, p[0], 1, cg->labels, p[1], y) : st;
}

static void ref_index_copy_grad(const cf_grad_case *c, const double *const *p, const double *w,
                                const float *y_dev, double *y, double *const *grad)
{
    (void)c;
    (void)y_dev;
    static const int at[5] = {-1, 1, -1, -1, 0}; /* base row r: replaced by source row at[r] */
    for (int o = 0; o < 2; o++)
        for (int r = 0; r < 5; r++)
            for (int k = 0; k < 3; k++) {
                const int i = (o * 5 + r) * 3 + k;
                if (at[r] < 0) {
                    y[i] = p[0][i];
                    grad[0][i] = w[i];
                } else {
                    const int s = (o * 2 + at[r]) * 3 + k;
                    y[i] = p[1][s];
                    grad[0][i] = 0.0;
                    grad[1][s] = w[i];
                }
            }
}

static const cf_grad_case layout_cases[] = {
    {.name = "index_copy [2,5,3] axis 1", .count = 2, .p = {{{3, {2, 5, 3}}, -2, 2, 0}, {{3, {2, 2, 3}}, -2, 2, 0}},
     .build = build_index_copy, .ref = ref_index_copy_grad},
    {.name = "masked_fill [3,5] by [1,5]", .count = 1, .p = {{{2, {3, 5}}, -2, 2, 0}},
     .build = build_masked_fill, .ref = ref_masked_fill_grad},
    {.name = "take [7,3] axis 0 (an embedding)", .count = 1, .p = {{{2, {7, 3}}, -2, 2, 0}},
     .build = build_take, .ref = ref_take_grad, .axis = 0},
    {.name = "take [2,6,3] axis 1", .count = 1, .p = {{{3, {2, 6, 3}}, -2, 2, 0}}, .build = build_take,
     .ref = ref_take_grad, .axis = 1},
    {.name = "permute [2,3,4] (2,0,1)", .count = 1, .p = {{{3, {2, 3, 4}}, -2, 2, 0}},
     .build = build_permute, .ref = ref_permute_grad},
    {.name = "split [3,6] and concat with [3,2]", .count = 2,
     .p = {{{2, {3, 6}}, -2, 2, 0}, {{2, {3, 2}}, -2, 2, 0}}, .build = build_split_concat,
     .ref = ref_split_concat_grad},
    {.name = "stack two [3,4] times broadcast [1,1,4]", .count = 3,
     .p = {{{2, {3, 4}}, -2, 2, 0}, {{2, {3, 4}}, -2, 2, 0}, {{3, {1, 1, 4}}, 0.5, 2, 0}},
     .build = build_stack_broadcast, .ref = ref_stack_broadcast_grad},
};

/* The take gradient is the f32 sum in index order, bit for bit on every
 * device: many repeats of few rows, summed here in that order. */
static void take_gradient_order(ug_device *dev)
{
    th_context("take gradient: sums in index order, bit for bit");
    enum { V = 5, C = 37, N = 301 };
    ug_model *m = ts_model(dev, 7);
    ug_graph *g = m ? ts_graph(m) : NULL;
    REQUIRE(m && g);
    ug_tensor *table = NULL;
    REQUIRE_OK(ug_model_param(m, "table", 2, (const int64_t[]){V, C}, UG_INIT_UNIFORM, 1.0f, &table));
    double iv[N], wv[N * C];
    for (int j = 0; j < N; j++)
        iv[j] = (double)((j * j + 3 * j) % V);
    for (int i = 0; i < N * C; i++)
        wv[i] = ref_round_f32((double)((i * 7919) % 2001 - 1000) / 997.0);
    const int64_t is[1] = {N}, ws[2] = {N, C};
    ug_tensor *ti = th_tensor(dev, UG_I64, 1, is, iv), *tw = th_tensor(dev, UG_F32, 2, ws, wv);
    REQUIRE(ti && tw);
    ug_value *pt = NULL, *index = NULL, *w = NULL, *y = NULL, *prod = NULL, *loss = NULL, *grad = NULL;
    REQUIRE_OK(ug_graph_param(g, table, &pt));
    REQUIRE_OK(ug_graph_input(g, "index", UG_I64, 1, is, &index));
    REQUIRE_OK(ug_graph_input(g, "w", UG_F32, 2, ws, &w));
    REQUIRE_OK(ug_g_take(g, pt, index, 0, &y));
    REQUIRE_OK(ug_g_mul(g, y, w, &prod));
    REQUIRE_OK(ug_g_sum(g, prod, 0, true, &loss));
    REQUIRE_OK(ug_graph_backward(g, loss));
    REQUIRE_OK(ug_graph_grad(g, pt, &grad));
    REQUIRE_OK(ug_graph_compile(g));
    REQUIRE_OK(ug_graph_bind(g, index, ti));
    REQUIRE_OK(ug_graph_bind(g, w, tw));
    REQUIRE_OK(ug_graph_run(g));
    const float *got = ts_read(g, grad);
    REQUIRE(got);
    float want[V * C] = {0};
    for (int j = 0; j < N; j++)
        for (int c = 0; c < C; c++)
            want[(int)iv[j] * C + c] += (float)wv[j * C + c];
    th_compare_bits("gradient", got, want, V * C, sizeof(float));
    ts_cleanup();
}

/* A constant: the graph's own copy (the source freed before the run),
 * the same in every run, no gradient, not following the rows bound. */
static void graph_constants(ug_device *dev)
{
    th_context("constants in a graph");
    ug_model *m = ts_model(dev, 11);
    ug_graph *g = m ? ts_graph(m) : NULL;
    REQUIRE(m && g);
    ug_tensor *table = NULL, *index = NULL, *bias = NULL;
    REQUIRE_OK(ug_model_param(m, "table", 2, (const int64_t[]){5, 3}, UG_INIT_UNIFORM, 1.0f, &table));
    const int64_t four[1] = {4}, row[2] = {1, 3}, x_shape[2] = {4, 3};
    REQUIRE_OK(ug_tensor_from_host(dev, UG_I64, 1, four, (const int64_t[]){4, 0, 2, 4}, &index));
    REQUIRE_OK(ug_tensor_from_host(dev, UG_F32, 2, row, (const float[]){0.5f, -1.0f, 2.0f}, &bias));
    ug_value *pt = NULL, *ci = NULL, *cb = NULL, *x = NULL, *rows = NULL, *sum = NULL, *biased = NULL;
    ug_value *loss = NULL, *grad = NULL;
    REQUIRE_OK(ug_graph_param(g, table, &pt));
    REQUIRE_OK(ug_graph_constant(g, "positions", index, &ci));
    REQUIRE_OK(ug_graph_constant(g, "bias", bias, &cb));
    ug_tensor_free(index); /* the graph holds its own copies */
    ug_tensor_free(bias);
    REQUIRE_OK(ug_graph_input(g, "x", UG_F32, 2, x_shape, &x));
    REQUIRE_OK(ug_g_take(g, pt, ci, 0, &rows));
    REQUIRE_OK(ug_g_add(g, x, rows, &sum));
    REQUIRE_OK(ug_g_add(g, sum, cb, &biased));
    REQUIRE_OK(ug_g_sum(g, biased, 0, true, &loss));
    REQUIRE_OK(ug_graph_keep(g, biased));
    REQUIRE_OK(ug_graph_backward(g, loss));
    REQUIRE_OK(ug_graph_grad(g, pt, &grad));
    CHECK(ug_graph_grad(g, ci, &grad) != UG_OK);
    REQUIRE_OK(ug_graph_grad(g, pt, &grad));
    REQUIRE_OK(ug_graph_compile(g));
    float tv[15], xv[12];
    REQUIRE_OK(ug_model_read_param(m, "table", tv, sizeof tv));
    for (int i = 0; i < 12; i++)
        xv[i] = (float)i * 0.25f;
    ug_tensor *tx = ts_tensor_f32(dev, 2, x_shape, xv);
    REQUIRE(tx);
    static const int picked[4] = {4, 0, 2, 4};
    static const float b[3] = {0.5f, -1.0f, 2.0f};
    for (int run = 0; run < 2; run++) {
        REQUIRE_OK(ug_graph_bind(g, x, tx));
        REQUIRE_OK(ug_graph_run_forward(g));
        const float *y = ts_read(g, biased);
        REQUIRE(y);
        for (int i = 0; i < 12; i++)
            CHECK_MSG(y[i] == (xv[i] + tv[picked[i / 3] * 3 + i % 3]) + b[i % 3], "run %d element %d: %g", run, i,
                      (double)y[i]);
    }
    th_context("constants in a graph, the rows bound fewer than planned");
    ug_tensor *two = NULL;
    REQUIRE_OK(ug_tensor_slice(tx, 0, 2, &two));
    th_track(two);
    REQUIRE_OK(ug_graph_bind(g, x, two));
    /* the constant index keeps its 4 rows: [2,3] + [4,3] no longer broadcast */
    CHECK(ug_graph_run_forward(g) != UG_OK);
    ts_cleanup();
}

/* ---- what the ops refuse ---- */

static void layout_errors(ug_device *dev)
{
    th_context("layout errors");
    const int64_t s23[2] = {2, 3}, s2[1] = {2}, s33[2] = {3, 3};
    double v[9] = {0};
    ug_tensor *x = th_tensor(dev, UG_F32, 2, s23, v), *half = th_tensor(dev, UG_F16, 2, s23, v);
    ug_tensor *fidx = th_tensor(dev, UG_F32, 1, s2, v), *idx = th_tensor(dev, UG_I32, 1, s2, v);
    ug_tensor *square = th_tensor(dev, UG_F32, 2, s33, v), *out = NULL;
    REQUIRE(x && half && fidx && idx && square);
    if (CHECK_STATUS(ug_take(x, fidx, 0, &out), UG_ERR_DTYPE))
        CHECK_ERROR_HAS("take", "i32 or i64");
    if (CHECK_STATUS(ug_take(x, idx, 2, &out), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("axis 2");
    if (CHECK_STATUS(ug_permute(x, 2, (const int[]){1, 1}, &out), UG_ERR_INVALID_ARGUMENT))
        CHECK_ERROR_HAS("twice");
    if (CHECK_STATUS(ug_permute(x, 3, (const int[]){0, 1, 2}, &out), UG_ERR_SHAPE))
        CHECK_ERROR_HAS("3 axes");
    CHECK_STATUS(ug_permute(x, 2, NULL, &out), UG_ERR_INVALID_ARGUMENT);
    if (CHECK_STATUS(ug_slice(x, 1, 2, 2, &out), UG_ERR_SHAPE))
        CHECK_ERROR_HAS("[2, 2 + 2)");
    CHECK_STATUS(ug_slice(x, 0, -1, 1, &out), UG_ERR_SHAPE);
    CHECK_STATUS(ug_slice(x, -3, 0, 1, &out), UG_ERR_INVALID_ARGUMENT);
    if (CHECK_STATUS(ug_concat(2, (const ug_tensor *const[]){x, half}, 0, &out), UG_ERR_DTYPE))
        CHECK_ERROR_HAS("cast");
    if (CHECK_STATUS(ug_concat(2, (const ug_tensor *const[]){x, square}, 1, &out), UG_ERR_SHAPE))
        CHECK_ERROR_HAS("[3,3]");
    CHECK_STATUS(ug_concat(0, NULL, 0, &out), UG_ERR_INVALID_ARGUMENT);
    ug_tensor *parts[3] = {NULL};
    if (CHECK_STATUS(ug_split(x, 1, 2, (const int64_t[]){1, 1}, parts), UG_ERR_SHAPE))
        CHECK_ERROR_HAS("add up");
    if (CHECK_STATUS(ug_split(x, 1, 2, NULL, parts), UG_ERR_SHAPE))
        CHECK_ERROR_HAS("divides");
    CHECK(!parts[0] && !parts[1]);
    CHECK_STATUS(ug_stack(2, (const ug_tensor *const[]){x, square}, 0, &out), UG_ERR_SHAPE);
    CHECK_STATUS(ug_broadcast_to(x, 2, (const int64_t[]){2, 4}, &out), UG_ERR_SHAPE);
    CHECK(out == NULL);
}

void test_layout_ops(ug_device *dev)
{
    for (int i = 0; i < CF_COUNT(layout_cases); i++) {
        cf_check_grad(dev, &layout_cases[i]);
        ts_cleanup();
    }
    cf_rows_ran(CF_ROWS_LAYOUT);
    take_values(dev);
    take_out_of_range(dev);
    index_copy_values(dev);
    layout_values(dev);
    layout_compositions(dev);
    take_gradient_order(dev);
    graph_constants(dev);
    layout_errors(dev);
}
