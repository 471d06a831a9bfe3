/* The GEMM tuning's choice: its text and its rules (gemm_choice.h). */
#include "backends/opencl/gemm_choice.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *const ug_opencl_xgemm_names[XGEMM_PARAMS] = {"GEMMK", "KREG",  "KWG",   "KWI", "MDIMA", "MDIMC",
                                                         "MWG",   "NDIMB", "NDIMC", "NWG", "SA",    "SB",
                                                         "STRM",  "STRN",  "VWM",   "VWN"};

/* Parsing caps every value here, so the products in the rules below
 * cannot overflow. */
enum { MAX_VALUE = 1024, MAX_MIN_INDIRECT = 65536 };
/* A day: no measured time of three products comes near, and the text of
 * any time below it fits the entry. */
static const double MAX_MICROSECONDS = 86400e6;

void gemm_choice_format(const gemm_choice *c, char *out, size_t len)
{
    int n = snprintf(out, len, "Xgemm");
    for (int i = 0; i < XGEMM_PARAMS && n > 0 && (size_t)n < len; ++i)
        n += snprintf(out + n, len - (size_t)n, " %zu", c->params.xgemm[i]);
    if (n > 0 && (size_t)n < len)
        snprintf(out + n, len - (size_t)n,
                 "\nXGEMM_MIN_INDIRECT_SIZE %zu\nmicroseconds %.1f\n%s\n", c->params.min_indirect,
                 1e6 * c->seconds, c->label);
}

bool gemm_choice_parse(const char *text, gemm_choice *c)
{
    gemm_params *p = &c->params;
    const char *at = text;
    int used = 0;
    if (sscanf(at, "Xgemm%n", &used) != 0 || used != 5)
        return false;
    at += used;
    for (int i = 0; i < XGEMM_PARAMS; ++i) {
        unsigned long v;
        if (sscanf(at, " %lu%n", &v, &used) != 1 || v > MAX_VALUE)
            return false;
        p->xgemm[i] = v;
        at += used;
    }
    unsigned long indirect;
    used = 0;
    if (sscanf(at, "\nXGEMM_MIN_INDIRECT_SIZE %lu\nmicroseconds %lf\n%n", &indirect,
               &c->seconds, &used) != 2 ||
        used == 0 || indirect == 0 || indirect > MAX_MIN_INDIRECT || !isfinite(c->seconds) ||
        c->seconds < 0 || c->seconds > MAX_MICROSECONDS)
        return false;
    at += used;
    p->min_indirect = indirect;
    c->seconds *= 1e-6;
    const char *end = strchr(at, '\n');
    if (!end || end[1] != '\0' || (size_t)(end - at) >= sizeof c->label)
        return false;
    memcpy(c->label, at, (size_t)(end - at));
    c->label[end - at] = '\0';
    return true;
}

static bool broken(char *why, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool broken(char *why, size_t len, const char *fmt, ...)
{
    if (why && len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, len, fmt, ap);
        va_end(ap);
    }
    return false;
}

static bool power_of_two_to(size_t v, size_t most) { return v >= 1 && v <= most && (v & (v - 1)) == 0; }

/* "a is a multiple of b*c" for the rules written that way in CLBlast's tuner. */
static bool multiple(const size_t *x, int a, int b, int c, char *why, size_t len)
{
    size_t d = x[b] * x[c];
    if (x[a] % d == 0)
        return true;
    return broken(why, len, "%s %zu is not a multiple of %s*%s = %zu", ug_opencl_xgemm_names[a], x[a],
                  ug_opencl_xgemm_names[b], ug_opencl_xgemm_names[c], d);
}

/* With the tile of A (B) cached in local memory (SA, SB), the work-group's
 * MDIMC*NDIMC threads load it reshaped as MDIMA x KDIMA (NDIMB x KDIMB):
 * the threads must fill that shape exactly and KWG hold whole KDIMA rows. */
static bool reshaped(const size_t *x, int dim, char *why, size_t len)
{
    size_t threads = x[XG_MDIMC] * x[XG_NDIMC], kdim = threads / x[dim];
    if (threads % x[dim] != 0)
        return broken(why, len, "MDIMC*NDIMC = %zu is not a multiple of %s %zu", threads,
                      ug_opencl_xgemm_names[dim], x[dim]);
    if (x[XG_KWG] % kdim != 0)
        return broken(why, len, "KWG %zu is not a multiple of MDIMC*NDIMC/%s = %zu", x[XG_KWG],
                      ug_opencl_xgemm_names[dim], kdim);
    return true;
}

bool gemm_params_legal(const gemm_params *p, const gemm_limits *limits, char *why, size_t why_len)
{
    const size_t *x = p->xgemm;
    /* Ranges. The kernel has code for vector widths 1 to 16 only; CLBlast's
     * tuners try tiles up to 256 and thread counts up to 32 a side. */
    static const int flags[] = {XG_GEMMK, XG_SA, XG_SB, XG_STRM, XG_STRN};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; ++i)
        if (x[flags[i]] > 1)
            return broken(why, why_len, "%s is %zu, not 0 or 1", ug_opencl_xgemm_names[flags[i]],
                          x[flags[i]]);
    static const int widths[] = {XG_VWM, XG_VWN, XG_KREG};
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; ++i)
        if (!power_of_two_to(x[widths[i]], 16))
            return broken(why, why_len, "%s is %zu, not 1, 2, 4, 8 or 16", ug_opencl_xgemm_names[widths[i]],
                          x[widths[i]]);
    static const int sizes[] = {XG_KWG, XG_KWI, XG_MWG, XG_NWG, XG_MDIMA, XG_MDIMC, XG_NDIMB, XG_NDIMC};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i)
        if (x[sizes[i]] < 1 || x[sizes[i]] > 256)
            return broken(why, why_len, "%s is %zu, not within 1 to 256", ug_opencl_xgemm_names[sizes[i]],
                          x[sizes[i]]);
    if (p->min_indirect < 1 || p->min_indirect > MAX_MIN_INDIRECT)
        return broken(why, why_len, "XGEMM_MIN_INDIRECT_SIZE is %zu, not within 1 to %d",
                      p->min_indirect, MAX_MIN_INDIRECT);

    /* CLBlast's tuner's constraints: whole loop unrolls, whole vectors per
     * thread, whole loads per thread. */
    if (x[XG_KWG] % x[XG_KWI] != 0)
        return broken(why, why_len, "KWG %zu is not a multiple of KWI %zu", x[XG_KWG], x[XG_KWI]);
    if (!multiple(x, XG_MWG, XG_MDIMC, XG_VWM, why, why_len) ||
        !multiple(x, XG_NWG, XG_NDIMC, XG_VWN, why, why_len) ||
        !multiple(x, XG_MWG, XG_MDIMA, XG_VWM, why, why_len) ||
        !multiple(x, XG_NWG, XG_NDIMB, XG_VWN, why, why_len))
        return false;
    if (x[XG_GEMMK] == 0) {
        if (x[XG_KREG] != 1)
            return broken(why, why_len, "KREG is %zu; kernel 0 (GEMMK 0) takes 1", x[XG_KREG]);
        if ((x[XG_SA] && !reshaped(x, XG_MDIMA, why, why_len)) ||
            (x[XG_SB] && !reshaped(x, XG_NDIMB, why, why_len)))
            return false;
    } else {
        /* Kernel 1 tiles in registers in two dimensions: the parameters of
         * kernel 0's local-memory tiles must keep the values its tuner
         * fixes. */
        if (x[XG_KREG] % x[XG_VWN] != 0)
            return broken(why, why_len, "KREG %zu is not a multiple of VWN %zu", x[XG_KREG], x[XG_VWN]);
        if (x[XG_KWG] != 1 || x[XG_KWI] != 1 || x[XG_SA] || x[XG_SB] || x[XG_STRM] || x[XG_STRN] ||
            x[XG_MDIMA] != x[XG_MDIMC] || x[XG_NDIMB] != x[XG_NDIMC])
            return broken(why, why_len, "kernel 1 (GEMMK 1) takes KWG = KWI = 1, SA = SB = STRM = STRN "
                          "= 0, MDIMA = MDIMC and NDIMB = NDIMC");
    }
    /* Each thread keeps an MWI x NWI tile of C in registers; the largest in
     * CLBlast's database is 2048 values. Far more only makes the compiler
     * take minutes, or fail. */
    size_t per_thread = (x[XG_MWG] / x[XG_MDIMC]) * (x[XG_NWG] / x[XG_NDIMC]);
    if (per_thread > 4096)
        return broken(why, why_len, "each thread's tile of C, (MWG/MDIMC)*(NWG/NDIMC) = %zu, is over 4096",
                      per_thread);

    /* The device's limits: a work-group of MDIMC x NDIMC threads; the A and
     * B tiles in local memory, in f32. */
    size_t threads = x[XG_MDIMC] * x[XG_NDIMC];
    if (limits->work_group && threads > limits->work_group)
        return broken(why, why_len, "a work-group of MDIMC*NDIMC = %zu threads; the device takes %zu",
                      threads, limits->work_group);
    if ((limits->work_item[0] && x[XG_MDIMC] > limits->work_item[0]) ||
        (limits->work_item[1] && x[XG_NDIMC] > limits->work_item[1]))
        return broken(why, why_len, "MDIMC x NDIMC = %zu x %zu threads; the device takes %zu x %zu",
                      x[XG_MDIMC], x[XG_NDIMC], limits->work_item[0], limits->work_item[1]);
    size_t local = sizeof(float) * x[XG_KWG] * (x[XG_SA] * x[XG_MWG] + x[XG_SB] * x[XG_NWG]);
    if (limits->local_bytes && local > limits->local_bytes)
        return broken(why, why_len, "its tiles take %zu bytes of local memory; the device has %zu",
                      local, limits->local_bytes);
    return true;
}
