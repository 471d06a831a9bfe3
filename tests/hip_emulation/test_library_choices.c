/* The HIP/CUDA module's tuned choices, process by process as users meet
 * them: the convolution library (backends/hip/conv.cpp, conv_cudnn.cpp)
 * through the stand-in cuDNN (fake_cudnn.c), and the GEMM path per shape
 * (gemm_choice.cpp) through the stand-in cuBLAS (fake_cublas.c). Each step
 * runs a child process (this program with --conv or --gemm) on the
 * emulated cuda:0 and checks its results against a double-precision
 * reference; the child then reports the fakes' counters and
 * ug_device_autotune's report, which the parent checks.
 *
 * Convolutions: the child trains one step of a grouped, strided, padded
 * and dilated convolution with bias (output and the three gradients
 * against reference_conv.c).
 * - the first process searches once per pass and takes, per pass, the
 *   fastest algorithm that ran within the workspace limit (not the faster
 *   one needing 1 GiB, nor the failed one), with the workspace it needs,
 *   and caches the choices in one file, with nothing else left in the
 *   cache folder (written atomically);
 * - a second process takes the cached choices without searching, even
 *   where a search would now choose otherwise (UG_FAKE_CUDNN_PREFER);
 * - a damaged cache file is ignored with a warning naming it, searched
 *   again, and replaced;
 * - deterministic mode (UG_DETERMINISTIC=1) searches nothing, runs the
 *   deterministic algorithms and leaves the cache alone;
 * - UG_CONV=im2col keeps every pass off the library;
 * - a cache folder that cannot be written costs a warning, not the step;
 * - in every child, no call the fake refused for its arguments, and after
 *   the device closes no handle or descriptor left.
 *
 * GEMM: the child multiplies the same [48, 40] x [40, 24] product three
 * times (against ref_matmul each time).
 * - with the stand-in cuBLAS slowed down (UG_FAKE_CUBLAS_DELAY_US), the
 *   first process times the four paths once (a warm-up and three timed
 *   runs of each: four cuBLAS calls), takes one of the own kernels,
 *   and caches the choice;
 * - a second process, with cuBLAS fast again, takes the cached choice
 *   without timing: no cuBLAS call at all;
 * - a damaged cache is ignored with a warning, timed again and replaced;
 * - UG_AUTOTUNE=0 and deterministic mode time nothing, cache nothing and
 *   run every product through cuBLAS;
 * - with UG_GEMM=own the own kernels alone are timed, cuBLAS never called;
 * - a graph's product is timed at its launched first run, and the runs
 *   captured and replayed after it give the same bits.
 *
 * Attention (attention_choice.cpp, attention_cudnn.cpp through the stand-in
 * cuDNN's graph API, fake_cudnn_graph.c): the child runs causal attention
 * on [2, 2, 32, 16] (against a double reference).
 * - in f16 the first process times the own kernels against the library's
 *   graph (made once: a warm-up and three timed runs of each), runs the
 *   faster, and caches the choice; a second process takes it untimed;
 * - deterministic mode and UG_ATTENTION=own keep it off the library,
 *   untimed and uncached; UG_ATTENTION=cudnn runs it there, untimed;
 * - f32, which cuDNN's fused attention lacks, never reaches the library;
 * - nothing refused, no descriptor left after the device closes. */
#define _GNU_SOURCE /* RTLD_NOLOAD, setenv, mkdtemp */
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "children.h"
#include "harness.h"
#include "reference.h"

/* x [2, 4, 7, 6], weight [6, 2, 3, 3] in 2 groups, stride 2x1, padding
 * 1x2, dilation 1x2: y [2, 6, 4, 6]. */
static const ref_conv_geom GEOM = {2, 4, 7, 6, 6, 3, 3, {2, 1}, {1, 2}, {1, 2}, 2};
enum { XN = 2 * 4 * 7 * 6, WN = 6 * 2 * 3 * 3, BN = 6, YN = 2 * 6 * 4 * 6 };

/* ---- the child ---- */

static void print_warning(const char *message, void *user)
{
    (void)user;
    fprintf(stderr, "warning: %s\n", message);
}

static bool close_to(const float *got, const double *want, int n, const char *what)
{
    double scale = 0;
    for (int i = 0; i < n; i++)
        scale = fmax(scale, fabs(want[i]));
    for (int i = 0; i < n; i++)
        if (!(fabs(got[i] - want[i]) <= 1e-5 * scale + 1e-6)) {
            fprintf(stderr, "child: %s[%d] is %.9g, expected %.9g\n", what, i, (double)got[i], want[i]);
            return false;
        }
    return true;
}

/* One step on cuda:0, checked; 0 when every value is right. */
static int train_step(ug_device *dev)
{
    ug_model *m = NULL;
    ug_graph *g = NULL;
    ug_tensor *px = NULL, *pw = NULL, *pb = NULL, *pt = NULL;
    ug_value *x, *w, *b, *t, *y, *p, *loss, *gx, *gw, *gb;
    const int64_t xs[4] = {2, 4, 7, 6}, ws[4] = {6, 2, 3, 3}, bs[1] = {6}, ys[4] = {2, 6, 4, 6};
    const ug_conv2d_params params = {{2, 1}, {1, 2}, {1, 2}, 2};
    static float fx[XN], fw[WN], fb[BN], ft[YN], out[4][XN];
    int rc = 3;
    if (ug_model_create(dev, 7, &m) == UG_OK && ug_model_param(m, "x", 4, xs, UG_INIT_UNIFORM, 1, &px) == UG_OK &&
        ug_model_param(m, "w", 4, ws, UG_INIT_UNIFORM, 1, &pw) == UG_OK &&
        ug_model_param(m, "b", 1, bs, UG_INIT_UNIFORM, 1, &pb) == UG_OK &&
        ug_model_param(m, "t", 4, ys, UG_INIT_UNIFORM, 1, &pt) == UG_OK && ug_graph_create(m, &g) == UG_OK &&
        ug_graph_param(g, px, &x) == UG_OK && ug_graph_param(g, pw, &w) == UG_OK &&
        ug_graph_param(g, pb, &b) == UG_OK && ug_graph_param(g, pt, &t) == UG_OK &&
        ug_g_conv2d(g, x, w, b, &params, &y) == UG_OK && ug_g_mul(g, y, t, &p) == UG_OK &&
        ug_g_sum(g, p, 0, true, &loss) == UG_OK && ug_graph_backward(g, loss) == UG_OK &&
        ug_graph_keep(g, y) == UG_OK && ug_graph_grad(g, x, &gx) == UG_OK &&
        ug_graph_grad(g, w, &gw) == UG_OK && ug_graph_grad(g, b, &gb) == UG_OK &&
        ug_graph_compile(g) == UG_OK && ug_graph_run(g) == UG_OK &&
        ug_graph_read(g, y, out[0], YN * sizeof(float)) == UG_OK &&
        ug_graph_read(g, gx, out[1], XN * sizeof(float)) == UG_OK &&
        ug_graph_read(g, gw, out[2], WN * sizeof(float)) == UG_OK &&
        ug_graph_read(g, gb, out[3], BN * sizeof(float)) == UG_OK &&
        ug_model_read_param(m, "x", fx, sizeof fx) == UG_OK && ug_model_read_param(m, "w", fw, sizeof fw) == UG_OK &&
        ug_model_read_param(m, "b", fb, sizeof fb) == UG_OK && ug_model_read_param(m, "t", ft, sizeof ft) == UG_OK)
        rc = 0;
    else
        fprintf(stderr, "child: %s\n", ug_last_error());
    ug_graph_free(g);
    ug_model_free(m);
    if (rc)
        return rc;
    static double dx[XN], dw[WN], db[BN], dt[YN], ry[YN], rdx[XN], rdw[WN], rdb[BN];
    for (int i = 0; i < XN; i++)
        dx[i] = fx[i];
    for (int i = 0; i < WN; i++)
        dw[i] = fw[i];
    for (int i = 0; i < BN; i++)
        db[i] = fb[i];
    for (int i = 0; i < YN; i++)
        dt[i] = ft[i];
    ref_conv2d(&GEOM, dx, dw, db, ry);
    ref_conv2d_backward(&GEOM, dx, dw, dt, rdx, rdw, rdb);
    bool right = close_to(out[0], ry, YN, "y") & close_to(out[1], rdx, XN, "dx") &
                 close_to(out[2], rdw, WN, "dweight") & close_to(out[3], rdb, BN, "dbias");
    return right ? 0 : 4;
}

/* A stand-in library's function, in the process (the module loaded it). */
static void *fake_symbol(const char *library, const char *name)
{
    void *lib = dlopen(library, RTLD_NOW | RTLD_NOLOAD);
    void *f = lib ? dlsym(lib, name) : NULL;
    if (lib)
        dlclose(lib); /* the module keeps it loaded */
    return f;
}

/* The stand-in cuDNN's counters. */
static int fake(const char *name, int arg)
{
    void *f = fake_symbol("libcudnn.so.9", name);
    int (*fn)(int);
    memcpy(&fn, &f, sizeof fn);
    return f ? fn(arg) : -100;
}

static int fake_cublas_calls(void)
{
    void *f = fake_symbol("libcublas.so.13", "ug_fake_cublas_calls");
    int (*fn)(void);
    memcpy(&fn, &f, sizeof fn);
    return f ? fn() : -100;
}

static int conv_child(void)
{
    ug_set_warning_handler(print_warning, NULL);
    ug_device *dev = NULL;
    if (ug_device_open("cuda:0", &dev) != UG_OK) {
        fprintf(stderr, "child: %s\n", ug_last_error());
        return 3;
    }
    int rc = train_step(dev);
    static char report[4096];
    if (ug_device_autotune(dev, report, sizeof report) != UG_OK)
        rc = 5;
    ug_device_close(dev);
    printf("%s", report);
    printf("cudnn finds=%d queries=%d refused=%d live=%d runs=%d,%d,%d algos=%d,%d,%d\n",
           fake("ug_fake_cudnn_finds", 0), fake("ug_fake_cudnn_workspace_queries", 0),
           fake("ug_fake_cudnn_refused", 0), fake("ug_fake_cudnn_live", 0),
           fake("ug_fake_cudnn_runs", 0), fake("ug_fake_cudnn_runs", 1), fake("ug_fake_cudnn_runs", 2),
           fake("ug_fake_cudnn_last_algo", 0), fake("ug_fake_cudnn_last_algo", 1),
           fake("ug_fake_cudnn_last_algo", 2));
    return rc;
}

/* The same product three times, each against the reference; then the
 * report and the stand-in cuBLAS's calls. */
static int gemm_child(void)
{
    ug_set_warning_handler(print_warning, NULL);
    enum { M = 48, K = 40, N = 24 };
    static float a[M * K], b[K * N], c[M * N];
    static double da[M * K], db[K * N], want[M * N];
    for (int i = 0; i < M * K; i++)
        da[i] = a[i] = (float)((i * 37 % 101) - 50) / 64.0f;
    for (int i = 0; i < K * N; i++)
        db[i] = b[i] = (float)((i * 53 % 97) - 48) / 32.0f;
    int nout = 0;
    int64_t sout[2];
    const int64_t sa[2] = {M, K}, sb[2] = {K, N};
    if (!ref_matmul(2, sa, da, 2, sb, db, false, false, want, &nout, sout))
        return 6;
    ug_device *dev = NULL;
    if (ug_device_open("cuda:0", &dev) != UG_OK) {
        fprintf(stderr, "child: %s\n", ug_last_error());
        return 3;
    }
    const int before = fake_cublas_calls();
    int rc = 0;
    for (int round = 0; round < 3 && rc == 0; round++) {
        ug_tensor *ta = NULL, *tb = NULL, *tc = NULL;
        if (ug_tensor_from_host(dev, UG_F32, 2, sa, a, &ta) != UG_OK ||
            ug_tensor_from_host(dev, UG_F32, 2, sb, b, &tb) != UG_OK || ug_matmul(ta, tb, false, false, &tc) != UG_OK ||
            ug_tensor_download(tc, c, sizeof c) != UG_OK) {
            fprintf(stderr, "child: %s\n", ug_last_error());
            rc = 3;
        } else if (!close_to(c, want, M * N, "c")) {
            rc = 4;
        }
        ug_tensor_free(tc);
        ug_tensor_free(tb);
        ug_tensor_free(ta);
    }
    const int calls = fake_cublas_calls() - before;
    static char report[4096];
    if (ug_device_autotune(dev, report, sizeof report) != UG_OK)
        rc = 5;
    ug_device_close(dev);
    printf("%s", report);
    printf("cublas calls=%d\n", calls);
    return rc;
}

/* q, k, v [2, 2, 32, 16] of dtype dt, causal: o against the double
 * reference; then the report and the stand-in cuDNN graph API's counters. */
static int attention_child(ug_dtype dt)
{
    ug_set_warning_handler(print_warning, NULL);
    enum { B = 2, H = 2, T = 32, D = 16, N = B * H * T * D };
    static float in[3][N], o[N];
    static double want[N];
    for (int m = 0; m < 3; m++)
        for (int i = 0; i < N; i++) /* values exact in f16 */
            in[m][i] = (float)(((i * (29 + 8 * m) + 7 * m) % 61) - 30) / 32.0f;
    for (int bh = 0; bh < B * H; bh++)
        for (int i = 0; i < T; i++) {
            double s[T], top = -INFINITY, sum = 0.0;
            for (int j = 0; j <= i; j++) {
                s[j] = 0.0;
                for (int d = 0; d < D; d++)
                    s[j] += (double)in[0][(bh * T + i) * D + d] * in[1][(bh * T + j) * D + d];
                s[j] *= 0.25; /* 1 / sqrt(16) */
                top = fmax(top, s[j]);
            }
            for (int j = 0; j <= i; j++)
                sum += s[j] = exp(s[j] - top);
            for (int d = 0; d < D; d++) {
                double acc = 0.0;
                for (int j = 0; j <= i; j++)
                    acc += s[j] / sum * in[2][(bh * T + j) * D + d];
                want[(bh * T + i) * D + d] = acc;
            }
        }
    ug_device *dev = NULL;
    if (ug_device_open("cuda:0", &dev) != UG_OK) {
        fprintf(stderr, "child: %s\n", ug_last_error());
        return 3;
    }
    const int64_t shape[4] = {B, H, T, D};
    ug_tensor *t[3] = {NULL}, *h[3] = {NULL}, *out = NULL, *out32 = NULL;
    const ug_attention_options opts = {.causal = true};
    int rc = 0;
    for (int m = 0; m < 3 && rc == 0; m++)
        if (ug_tensor_from_host(dev, UG_F32, 4, shape, in[m], &t[m]) != UG_OK || ug_cast(t[m], dt, &h[m]) != UG_OK)
            rc = 3;
    if (rc == 0 && (ug_attention(h[0], h[1], h[2], NULL, &opts, &out) != UG_OK || ug_cast(out, UG_F32, &out32) != UG_OK ||
                    ug_tensor_download(out32, o, sizeof o) != UG_OK))
        rc = 3;
    if (rc)
        fprintf(stderr, "child: %s\n", ug_last_error());
    for (int i = 0; rc == 0 && i < N; i++)
        if (!(fabs(o[i] - want[i]) <= 4e-3)) {
            fprintf(stderr, "child: o[%d] is %.6g, expected %.6g\n", i, (double)o[i], want[i]);
            rc = 4;
        }
    for (int m = 0; m < 3; m++) {
        ug_tensor_free(t[m]);
        ug_tensor_free(h[m]);
    }
    ug_tensor_free(out);
    ug_tensor_free(out32);
    static char report[4096];
    if (ug_device_autotune(dev, report, sizeof report) != UG_OK)
        rc = 5;
    ug_device_close(dev);
    printf("%s", report);
    printf("cudnn graphs=%d executed=%d refused=%d live=%d\n", fake("ug_fake_cudnn_graph_graphs", 0),
           fake("ug_fake_cudnn_graph_executed", 0), fake("ug_fake_cudnn_graph_refused", 0),
           fake("ug_fake_cudnn_graph_live", 0));
    return rc;
}

/* A graph's product run three times: launched (the shape timed then),
 * recorded (captured: no timing may happen inside) and replayed; each
 * run's product against the reference, the replay bitwise the first. */
static int gemm_graph_child(void)
{
    ug_set_warning_handler(print_warning, NULL);
    enum { M = 48, K = 40, N = 24 };
    const int64_t sa[2] = {M, K}, sb[2] = {K, N};
    static float a[M * K], b[K * N], c[3][M * N];
    static double da[M * K], db[K * N], want[M * N];
    ug_device *dev = NULL;
    ug_model *m = NULL;
    ug_graph *g = NULL;
    ug_tensor *pa = NULL, *pb = NULL;
    ug_value *va, *vb, *vc;
    int rc = 3;
    bool replayed = false;
    if (ug_device_open("cuda:0", &dev) == UG_OK && ug_model_create(dev, 5, &m) == UG_OK &&
        ug_model_param(m, "a", 2, sa, UG_INIT_UNIFORM, 1, &pa) == UG_OK &&
        ug_model_param(m, "b", 2, sb, UG_INIT_UNIFORM, 1, &pb) == UG_OK && ug_graph_create(m, &g) == UG_OK &&
        ug_graph_param(g, pa, &va) == UG_OK && ug_graph_param(g, pb, &vb) == UG_OK &&
        ug_g_matmul(g, va, vb, false, false, &vc) == UG_OK && ug_graph_keep(g, vc) == UG_OK &&
        ug_graph_compile(g) == UG_OK && ug_model_read_param(m, "a", a, sizeof a) == UG_OK &&
        ug_model_read_param(m, "b", b, sizeof b) == UG_OK) {
        rc = 0;
        for (int run = 0; run < 3 && rc == 0; run++)
            if (ug_graph_run(g) != UG_OK || ug_graph_read(g, vc, c[run], sizeof c[run]) != UG_OK)
                rc = 3;
        replayed = rc == 0 && ug_graph_replaying(g, NULL, 0);
    }
    if (rc)
        fprintf(stderr, "child: %s\n", ug_last_error());
    for (int i = 0; i < M * K; i++)
        da[i] = a[i];
    for (int i = 0; i < K * N; i++)
        db[i] = b[i];
    int nout = 0;
    int64_t sout[2];
    if (rc == 0 && (!ref_matmul(2, sa, da, 2, sb, db, false, false, want, &nout, sout) ||
                    !close_to(c[0], want, M * N, "launched") || !close_to(c[2], want, M * N, "replayed") ||
                    memcmp(c[0], c[2], sizeof c[0]) != 0))
        rc = 4;
    if (rc == 0 && !replayed) {
        fprintf(stderr, "child: the third run was not a replay\n");
        rc = 4;
    }
    static char report[4096];
    if (dev && ug_device_autotune(dev, report, sizeof report) != UG_OK)
        rc = 5;
    ug_graph_free(g);
    ug_model_free(m);
    ug_device_close(dev);
    printf("%s", report);
    return rc;
}

/* ---- the parent ---- */

typedef struct outcome {
    int status;
    int finds, queries, refused, live, runs[3], algos[3];
    int graphs, executed, graph_refused, graph_live; /* the graph API's */
    int cublas_calls;
    char out[4096], err[4096];
} outcome;

static void read_file(const char *path, char *buf, size_t len)
{
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    size_t n = fread(buf, 1, len - 1, f);
    buf[n] = '\0';
    fclose(f);
}

/* Runs the child with XDG_CACHE_HOME=cache and the NULL-ended pairs of
 * env (name, value; value NULL unsets). */
static outcome run_child(const char *mode, const char *cache, const char *scratch, const char *const *env)
{
    static outcome r;
    memset(&r, 0, sizeof r);
    char out[512], err[512];
    snprintf(out, sizeof out, "%s/stdout", scratch);
    snprintf(err, sizeof err, "%s/stderr", scratch);
    /* The convolutions' children leave GEMMs to cuBLAS, untimed. */
    const char *const fixed[] = {"XDG_CACHE_HOME", cache, "UG_DETERMINISTIC", NULL, "UG_CONV", NULL,
                                 "UG_FAKE_CUDNN_PREFER", NULL, "UG_FAKE_CUBLAS_DELAY_US", NULL, "UG_ATTENTION", NULL,
                                 "UG_AUTOTUNE", strcmp(mode, "--conv") == 0 ? "0" : NULL};
    enum { FIXED = sizeof fixed / sizeof *fixed, MOST = FIXED + 2 * 13 }; /* room for 13 pairs of env */
    const char *settings[MOST + 1];
    memcpy(settings, fixed, sizeof fixed);
    int used = FIXED;
    for (int i = 0; env && env[i] && used + 2 <= MOST; i += 2) {
        settings[used++] = env[i];
        settings[used++] = env[i + 1];
    }
    settings[used] = NULL;
    const char *const args[] = {"test_library_choices", mode, NULL};
    fflush(NULL);
    r.status = th_wait_child(th_spawn_self(args, settings, out, err), 0);
    if (r.status > 128)
        r.status = -1; /* ended by a signal: no exit status */
    read_file(out, r.out, sizeof r.out);
    read_file(err, r.err, sizeof r.err);
    const char *calls = strstr(r.out, "cublas calls=");
    if (!calls || sscanf(calls, "cublas calls=%d", &r.cublas_calls) != 1)
        r.cublas_calls = -1;
    const char *line = strstr(r.out, "cudnn finds=");
    if (!line || sscanf(line, "cudnn finds=%d queries=%d refused=%d live=%d runs=%d,%d,%d algos=%d,%d,%d",
                        &r.finds, &r.queries, &r.refused, &r.live, &r.runs[0], &r.runs[1], &r.runs[2],
                        &r.algos[0], &r.algos[1], &r.algos[2]) != 10)
        r.finds = -1;
    line = strstr(r.out, "cudnn graphs=");
    if (!line || sscanf(line, "cudnn graphs=%d executed=%d refused=%d live=%d", &r.graphs, &r.executed,
                        &r.graph_refused, &r.graph_live) != 4)
        r.graphs = -1;
    return r;
}

static void check_child(const outcome *r, const int algos[3])
{
    CHECK_MSG(r->status == 0, "child exit %d; stderr: %s", r->status, r->err);
    CHECK_MSG(r->finds >= 0, "no counters in the child's output: %s", r->out);
    CHECK_MSG(r->refused == 0, "the fake refused %d calls for their arguments", r->refused);
    CHECK_MSG(r->live == 0, "%d cuDNN handles or descriptors left after close", r->live);
    for (int pass = 0; pass < 3; pass++) {
        CHECK_MSG(r->runs[pass] == (algos ? 1 : 0), "pass %d ran %d times through cuDNN", pass, r->runs[pass]);
        if (algos)
            CHECK_MSG(r->algos[pass] == algos[pass], "pass %d ran algorithm %d, expected %d", pass,
                      r->algos[pass], algos[pass]);
    }
}

/* The folder's file named prefix* (path) and its inode, 0 if none;
 * *others counts every other entry. */
static ino_t cache_file(const char *cache, const char *prefix, char *path, size_t len, int *others)
{
    char dir[600], entry[1200];
    snprintf(dir, sizeof dir, "%s/unigrad", cache);
    DIR *d = opendir(dir);
    ino_t inode = 0;
    *others = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        struct stat st;
        snprintf(entry, sizeof entry, "%s/%s", dir, e->d_name);
        if (e->d_name[0] == '.')
            continue;
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0 && stat(entry, &st) == 0) {
            inode = st.st_ino;
            snprintf(path, len, "%s", entry);
        } else {
            ++*others;
        }
    }
    if (d)
        closedir(d);
    return inode;
}

static void flip_byte(const char *path, long offset)
{
    FILE *f = fopen(path, "r+b");
    REQUIRE(f);
    REQUIRE(fseek(f, offset, SEEK_END) == 0);
    int c = fgetc(f);
    REQUIRE(c != EOF);
    REQUIRE(fseek(f, -1, SEEK_CUR) == 0);
    fputc(c ^ 0x21, f);
    fclose(f);
}

/* A scratch folder from root (a mkdtemp template), its cache folder in
 * cache; removed by remove_folders. */
static bool make_folders(char *root, char *cache, size_t len)
{
    if (!mkdtemp(root))
        return false;
    snprintf(cache, len, "%s/cache", root);
    return true;
}

static void remove_folders(const char *root)
{
    char rm[128];
    snprintf(rm, sizeof rm, "rm -rf %s", root);
    CHECK(system(rm) == 0);
}

static void test_conv_choices(ug_device *unused)
{
    (void)unused;
    char root[] = "/tmp/ug-test-conv-XXXXXX", cache[600], path[1200] = "";
    REQUIRE(make_folders(root, cache, sizeof cache));
    int others = 0;
    static const int chosen[3] = {2, 0, 3}, deterministic[3] = {1, 1, 1};
    static const char *const prefer[] = {"UG_FAKE_CUDNN_PREFER", "deterministic", NULL};

    th_context("the first process searches and caches");
    outcome r = run_child("--conv", cache, root, NULL);
    check_child(&r, chosen);
    CHECK_EQ_I64(r.finds, 3);
    CHECK_MSG(strstr(r.out, "cuDNN 9.19.0") && strstr(r.out, "forward pass of x 2x4x7x6, weight 6x2x3x3") &&
                  strstr(r.out, "IMPLICIT_PRECOMP_GEMM") == NULL && strstr(r.out, "(timed now)"),
              "report: %s", r.out);
    ino_t first = cache_file(cache, "cudnn-conv-", path, sizeof path, &others);
    CHECK_MSG(first != 0, "no cudnn-conv cache file");
    CHECK_MSG(others == 0, "%d other files in the cache folder (a temporary left behind?)", others);
    CHECK_MSG(strstr(r.err, "warning") == NULL, "warnings: %s", r.err);

    th_context("a second process takes the cached choices");
    r = run_child("--conv", cache, root, prefer);
    check_child(&r, chosen);
    CHECK_EQ_I64(r.finds, 0);
    CHECK_MSG(strstr(r.out, "(from the cache)") &&
                  strstr(r.out, "cached for this device and driver:\n  forward pass of x 2x4x7x6"),
              "report: %s", r.out);
    CHECK_MSG(cache_file(cache, "cudnn-conv-", path, sizeof path, &others) == first, "the cache file was rewritten");

    th_context("a damaged cache is ignored with a warning and replaced");
    flip_byte(path, -4);
    r = run_child("--conv", cache, root, prefer);
    check_child(&r, deterministic);
    CHECK_EQ_I64(r.finds, 3);
    CHECK_MSG(strstr(r.err, "warning: the cuDNN algorithm cache") && strstr(r.err, "measuring again"),
              "stderr: %s", r.err);
    ino_t replaced = cache_file(cache, "cudnn-conv-", path, sizeof path, &others);
    CHECK_MSG(replaced != 0 && replaced != first && others == 0, "the damaged file was not replaced");
    r = run_child("--conv", cache, root, NULL);
    check_child(&r, deterministic); /* the replacement's choices, now cached */
    CHECK_EQ_I64(r.finds, 0);

    th_context("deterministic mode");
    static const char *const determined[] = {"UG_DETERMINISTIC", "1", NULL};
    r = run_child("--conv", cache, root, determined);
    check_child(&r, deterministic);
    CHECK_EQ_I64(r.finds, 0);
    CHECK_MSG(r.queries >= 3, "%d workspace queries", r.queries);
    CHECK_MSG(strstr(r.out, "(deterministic, untimed)"), "report: %s", r.out);
    CHECK_MSG(cache_file(cache, "cudnn-conv-", path, sizeof path, &others) == replaced, "deterministic mode wrote the cache");

    th_context("UG_CONV=im2col");
    static const char *const im2col[] = {"UG_CONV", "im2col", NULL};
    r = run_child("--conv", cache, root, im2col);
    check_child(&r, NULL);
    CHECK_EQ_I64(r.finds, 0);

    th_context("a cache folder that cannot be written");
    char blocked[700];
    snprintf(blocked, sizeof blocked, "%s/file", root);
    FILE *f = fopen(blocked, "w"); /* a file where the folder would go */
    REQUIRE(f);
    fclose(f);
    static const char *const no_home[] = {"HOME", "/nonexistent", NULL};
    r = run_child("--conv", blocked, root, no_home);
    check_child(&r, chosen);
    CHECK_EQ_I64(r.finds, 3);
    CHECK_MSG(strstr(r.err, "was not cached"), "stderr: %s", r.err);

    remove_folders(root);
}

/* A small product's timing: a warm-up, then three rounds of eight runs back
 * to back (gemm_choice.cpp). */
enum { TIMED_CALLS = 1 + 3 * 8 };

static void check_gemm_child(const outcome *r, int cublas_calls)
{
    CHECK_MSG(r->status == 0, "child exit %d; stderr: %s", r->status, r->err);
    CHECK_MSG(r->cublas_calls == cublas_calls, "%d cuBLAS calls, expected %d; report: %s", r->cublas_calls,
              cublas_calls, r->out);
}

static void test_gemm_choices(ug_device *unused)
{
    (void)unused;
    char root[] = "/tmp/ug-test-gemm-XXXXXX", cache[600], path[1200] = "";
    REQUIRE(make_folders(root, cache, sizeof cache));
    int others = 0;
    static const char *const slow[] = {"UG_FAKE_CUBLAS_DELAY_US", "20000", NULL};
    const char *shape = "f32 NN 48x24x40: own"; /* own64, own128 or own-dot */

    th_context("the first process times both paths and caches the faster");
    outcome r = run_child("--gemm", cache, root, slow);
    check_gemm_child(&r, TIMED_CALLS); /* the products after it on the own kernel */
    const char *vendor_time = strstr(r.out, "vendor ");
    CHECK_MSG(strstr(r.out, shape) && vendor_time && strtod(vendor_time + 7, NULL) >= 20.0 &&
                  strstr(r.out, "timed now)"),
              "report (the vendor path timed at 20 ms or more): %s", r.out);
    ino_t first = cache_file(cache, "cuda-gemm-", path, sizeof path, &others);
    CHECK_MSG(first != 0 && others == 0, "no cuda-gemm cache file alone in the folder (%d others)", others);
    CHECK_MSG(strstr(r.err, "warning") == NULL, "warnings: %s", r.err);

    th_context("a second process takes the cached choice");
    r = run_child("--gemm", cache, root, NULL);
    check_gemm_child(&r, 0);
    CHECK_MSG(strstr(r.out, shape) && strstr(r.out, "from the cache)"), "report: %s", r.out);
    CHECK_MSG(cache_file(cache, "cuda-gemm-", path, sizeof path, &others) == first, "the cache file was rewritten");

    th_context("a damaged cache is ignored with a warning and replaced");
    flip_byte(path, -4);
    r = run_child("--gemm", cache, root, slow);
    check_gemm_child(&r, TIMED_CALLS);
    CHECK_MSG(strstr(r.err, "warning: the GEMM choices' cache") && strstr(r.err, "measuring again"),
              "stderr: %s", r.err);
    ino_t replaced = cache_file(cache, "cuda-gemm-", path, sizeof path, &others);
    CHECK_MSG(replaced != 0 && replaced != first && others == 0, "the damaged file was not replaced");

    th_context("UG_AUTOTUNE=0 and deterministic mode time nothing");
    static const char *const vendor[] = {"UG_AUTOTUNE", "0", NULL};
    static const char *const determined[] = {"UG_DETERMINISTIC", "1", NULL};
    char fresh[700];
    snprintf(fresh, sizeof fresh, "%s/fresh", root);
    r = run_child("--gemm", fresh, root, vendor);
    check_gemm_child(&r, 3);
    r = run_child("--gemm", fresh, root, determined);
    check_gemm_child(&r, 3);
    CHECK_MSG(cache_file(fresh, "cuda-gemm-", path, sizeof path, &others) == 0, "an untimed choice was cached");

    th_context("UG_GEMM=own: the own kernels alone are timed");
    static const char *const own[] = {"UG_GEMM", "own", NULL};
    r = run_child("--gemm", fresh, root, own);
    check_gemm_child(&r, 0);
    CHECK_MSG(strstr(r.out, shape) && strstr(r.out, "against own") && strstr(r.out, "timed now)"), "report: %s", r.out);

    th_context("UG_GEMM=own128: that kernel runs every product, untimed");
    static const char *const own128[] = {"UG_GEMM", "own128", NULL};
    r = run_child("--gemm", fresh, root, own128);
    check_gemm_child(&r, 0);
    CHECK_MSG(strstr(r.out, "GEMM: own (UG_GEMM=own128)") && strstr(r.out, "chosen in this process: 0"),
              "report: %s", r.out);

    th_context("a replayed graph: timed while launched, then captured and replayed");
    char graph_cache[700];
    snprintf(graph_cache, sizeof graph_cache, "%s/graph", root);
    r = run_child("--gemm-graph", graph_cache, root, slow);
    CHECK_MSG(r.status == 0, "child exit %d; stderr: %s", r.status, r.err);
    CHECK_MSG(strstr(r.out, shape) && strstr(r.out, "timed now)"), "report: %s", r.out);

    remove_folders(root);
}

/* The child ran right, left nothing, refused nothing, and ran the
 * library's graph `executed` times (made `graphs` times). */
static void check_attention_child(const outcome *r, int graphs, int executed)
{
    CHECK_MSG(r->status == 0, "child exit %d; stderr: %s", r->status, r->err);
    CHECK_MSG(r->graphs >= 0, "no counters in the child's output: %s", r->out);
    CHECK_MSG(r->graph_refused == 0, "the fake refused %d graph API calls", r->graph_refused);
    CHECK_MSG(r->graph_live == 0, "%d cuDNN descriptors left after close", r->graph_live);
    CHECK_MSG(r->graphs == graphs && r->executed == executed, "%d graphs made, %d runs; expected %d and %d",
              r->graphs, r->executed, graphs, executed);
}

static void test_attention_choices(ug_device *unused)
{
    (void)unused;
    char root[] = "/tmp/ug-test-attention-XXXXXX", cache[600], path[1200] = "", fresh[700];
    REQUIRE(make_folders(root, cache, sizeof cache));
    snprintf(fresh, sizeof fresh, "%s/fresh", root);
    int others = 0;
    const char *shape = "forward f16 2x2 heads, 32x32 rows, d 16, causal: ";

    th_context("the first process times both paths and caches the faster");
    outcome r = run_child("--attention-f16", cache, root, NULL);
    const char *line = strstr(r.out, shape);
    const bool library = line && strncmp(line + strlen(shape), "library", 7) == 0;
    check_attention_child(&r, 1, 4 + library); /* warm-up, three timed, then the run if chosen */
    CHECK_MSG(line && strstr(r.out, "(timed now) against") && strstr(r.out, "cuDNN 9.19.0's where faster"),
              "report: %s", r.out);
    CHECK_MSG(cache_file(cache, "cuda-attention-", path, sizeof path, &others) != 0, "no attention cache file");

    th_context("a second process takes the cached choice untimed");
    r = run_child("--attention-f16", cache, root, NULL);
    check_attention_child(&r, library, library);
    CHECK_MSG(strstr(r.out, shape) && strstr(r.out, "(from the cache)"), "report: %s", r.out);

    th_context("deterministic mode and UG_ATTENTION=own: the own kernels, untimed");
    static const char *const determined[] = {"UG_DETERMINISTIC", "1", NULL};
    static const char *const own[] = {"UG_ATTENTION", "own", NULL};
    r = run_child("--attention-f16", fresh, root, determined);
    check_attention_child(&r, 0, 0);
    r = run_child("--attention-f16", fresh, root, own);
    check_attention_child(&r, 0, 0);
    CHECK_MSG(cache_file(fresh, "cuda-attention-", path, sizeof path, &others) == 0, "an untimed choice was cached");

    th_context("UG_ATTENTION=cudnn: the library, untimed; f32 stays off it");
    static const char *const forced[] = {"UG_ATTENTION", "cudnn", NULL};
    r = run_child("--attention-f16", fresh, root, forced);
    check_attention_child(&r, 1, 1);
    r = run_child("--attention-f32", fresh, root, forced);
    check_attention_child(&r, 0, 0);
    CHECK_MSG(cache_file(fresh, "cuda-attention-", path, sizeof path, &others) == 0, "an untimed choice was cached");

    remove_folders(root);
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--attention-f16") == 0)
        return attention_child(UG_F16);
    if (argc == 2 && strcmp(argv[1], "--attention-f32") == 0)
        return attention_child(UG_F32);
    if (argc == 2 && strcmp(argv[1], "--conv") == 0)
        return conv_child();
    if (argc == 2 && strcmp(argv[1], "--gemm") == 0)
        return gemm_child();
    if (argc == 2 && strcmp(argv[1], "--gemm-graph") == 0)
        return gemm_graph_child();
    static const th_test tests[] = {TH_HOST_TEST(conv_choices), TH_HOST_TEST(gemm_choices),
                                    TH_HOST_TEST(attention_choices)};
    return th_main(argc, argv, tests, 3);
}
