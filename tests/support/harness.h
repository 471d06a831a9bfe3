/* The test harness: checks that record a failure (file:line) and keep going,
 * a registry of tests, and a loop that runs every device test on every
 * device present (UG_TEST_DEVICES=cpu,opencl:0 restricts it).
 *
 * Every tensor and host buffer a test makes through th_* helpers is tracked
 * and freed when the test ends, so a REQUIRE that returns early leaks
 * nothing; after each test the harness checks that the device pool's
 * bytes_in_use is back where it started (a leak check on the library). */
#ifndef UG_TESTS_HARNESS_H
#define UG_TESTS_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "unigrad/unigrad.h"

typedef void (*th_fn)(ug_device *device);

typedef struct th_test {
    const char *name;
    th_fn fn;
    bool per_device; /* false: runs once, device is NULL */
} th_test;

#define TH_DEVICE_TEST(name) { #name, test_##name, true }
#define TH_HOST_TEST(name) { #name, test_##name, false }

/* Runs the tests (a substring in argv[1] selects by name); prints one line
 * per test and device and the summary "N passed, M failed[, K skipped]".
 * Returns the process exit status: TH_SKIP_EXIT when the only device named
 * by UG_TEST_DEVICES is absent from this machine (ctest: skipped). */
#define TH_SKIP_EXIT 77
int th_main(int argc, char **argv, const th_test *tests, int count);

/* Devices under test, opened by the harness for the whole run. */
int th_device_count(void);
ug_device *th_device(int index);

/* ---- recording ---- */
#define TH_LOC __FILE__, __LINE__
void th_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Marks the current run skipped (only for missing hardware); say why. */
void th_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Failures recorded so far in the current run. */
int th_failures(void);
/* Extra context printed with later failures of this run ("size 17, f16"). */
void th_context(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define CHECK(cond)                                                          \
    do {                                                                     \
        if (!(cond))                                                         \
            th_fail(TH_LOC, "CHECK(%s)", #cond);                             \
    } while (0)
#define CHECK_MSG(cond, ...)                                                 \
    do {                                                                     \
        if (!(cond))                                                         \
            th_fail(TH_LOC, __VA_ARGS__);                                    \
    } while (0)
#define REQUIRE(cond)                                                        \
    do {                                                                     \
        if (!(cond)) {                                                       \
            th_fail(TH_LOC, "REQUIRE(%s)", #cond);                           \
            return;                                                          \
        }                                                                    \
    } while (0)
#define CHECK_OK(expr)                                                       \
    do {                                                                     \
        ug_status th_s_ = (expr);                                            \
        if (th_s_ != UG_OK)                                                  \
            th_fail(TH_LOC, "%s returned %s: %s", #expr,                     \
                    ug_status_name(th_s_), ug_last_error());                 \
    } while (0)
#define REQUIRE_OK(expr)                                                     \
    do {                                                                     \
        ug_status th_s_ = (expr);                                            \
        if (th_s_ != UG_OK) {                                                \
            th_fail(TH_LOC, "%s returned %s: %s", #expr,                     \
                    ug_status_name(th_s_), ug_last_error());                 \
            return;                                                          \
        }                                                                    \
    } while (0)
/* Expects exactly status want; evaluates to true when it matched. */
/* Returns a failed call's status from the calling function (its message
 * stays in ug_last_error): for helpers a test checks the result of. */
#define TRY(call)                \
    do {                         \
        ug_status try_ = (call); \
        if (try_ != UG_OK)       \
            return try_;         \
    } while (0)
#define CHECK_STATUS(expr, want) th_check_status(TH_LOC, #expr, (expr), (want))
bool th_check_status(const char *file, int line, const char *text, ug_status got,
                     ug_status want);
/* ug_last_error() must contain every given substring (NULL-terminated). */
#define CHECK_ERROR_HAS(...) th_check_error_has(TH_LOC, __VA_ARGS__, (const char *)NULL)
bool th_check_error_has(const char *file, int line, ...);
#define CHECK_EQ_I64(got, want)                                              \
    do {                                                                     \
        long long th_g_ = (long long)(got), th_w_ = (long long)(want);       \
        if (th_g_ != th_w_)                                                  \
            th_fail(TH_LOC, "%s is %lld, expected %lld", #got, th_g_, th_w_); \
    } while (0)

/* ---- host memory and tensors (tracked, freed at the end of the test) ---- */
void *th_alloc(size_t bytes);
ug_tensor *th_track(ug_tensor *tensor);
/* Frees a tracked tensor now (e.g. to test pool statistics). */
void th_release(ug_tensor *tensor);

/* A tensor holding values (converted to dtype: f16 rounds to nearest even
 * with the reference converter). NULL with a failure recorded on error. */
#define th_tensor(dev, dtype, ndim, shape, values)                           \
    th_tensor_at(TH_LOC, dev, dtype, ndim, shape, values)
ug_tensor *th_tensor_at(const char *file, int line, ug_device *dev, ug_dtype dtype,
                        int ndim, const int64_t *shape, const double *values);

/* The same, as a view at an odd element offset inside a larger tensor whose
 * other elements hold a sentinel (reshape of a slice). th_guard_check then
 * verifies the whole parent is bitwise unchanged: no op may write into its
 * inputs, and a kernel that ignores the view's offset reads sentinels. */
typedef struct th_guard th_guard;
#define th_guarded(dev, dtype, ndim, shape, values, guard)                   \
    th_guarded_at(TH_LOC, dev, dtype, ndim, shape, values, guard)
ug_tensor *th_guarded_at(const char *file, int line, ug_device *dev, ug_dtype dtype,
                         int ndim, const int64_t *shape, const double *values,
                         th_guard **guard);
/* Uses this sentinel for the next guarded tensors of this test (default: a
 * NaN with a payload, which poisons any result that reads it). */
void th_guard_sentinel(double value);
/* An uninitialised-looking output region: sentinel everywhere. After an
 * in-place op on the view, th_guard_check_outside checks the sentinels only. */
#define th_guarded_output(dev, dtype, ndim, shape, guard)                    \
    th_guarded_at(TH_LOC, dev, dtype, ndim, shape, NULL, guard)
#define th_guard_check(guard) th_guard_check_at(TH_LOC, guard, true)
#define th_guard_check_outside(guard) th_guard_check_at(TH_LOC, guard, false)
bool th_guard_check_at(const char *file, int line, th_guard *guard, bool inside_too);

/* Downloads any dtype as doubles (f16 decoded by the reference). */
#define th_download(t) th_download_at(TH_LOC, t)
double *th_download_at(const char *file, int line, const ug_tensor *t);
/* Raw bytes of the tensor. */
#define th_download_raw(t) th_download_raw_at(TH_LOC, t)
void *th_download_raw_at(const char *file, int line, const ug_tensor *t);

/* Checks dtype and shape; false (failure recorded) if t is NULL or differs. */
#define th_check_tensor(t, dtype, ndim, shape) th_check_tensor_at(TH_LOC, t, dtype, ndim, shape)
bool th_check_tensor_at(const char *file, int line, const ug_tensor *t, ug_dtype dtype,
                        int ndim, const int64_t *shape);

/* NMSE = sum((x-ref)^2) / sum(ref^2) over finite positions (the plain sum
 * of squares when ref is all zero); NaN and +-inf must sit at the same
 * positions with the same sign of infinity. Records a failure with the worst
 * element when it does not hold. */
#define th_compare(what, got, ref, n, tol) th_compare_at(TH_LOC, what, got, ref, n, tol)
bool th_compare_at(const char *file, int line, const char *what, const double *got,
                   const double *ref, int64_t n, double tol);
double th_nmse(const double *got, const double *ref, int64_t n);

/* Bitwise comparison of n elements of size bytes each. */
#define th_compare_bits(what, got, ref, n, size) th_compare_bits_at(TH_LOC, what, got, ref, n, size)
bool th_compare_bits_at(const char *file, int line, const char *what, const void *got,
                        const void *ref, int64_t n, size_t size);

/* Tolerances (NMSE). f32 elementwise results are within an ulp or two, so
 * the error energy is ~1e-14 relative; 1e-7 leaves room for fast-math
 * transcendental functions but catches a wrong formula. Matmul sums K
 * products in any order, possibly through a vendor BLAS: 5e-4. f16 holds 11
 * significant bits, so rounding the output alone gives a relative error up
 * to 2^-11 per element, an NMSE up to 2^-22 = 2.4e-7; 1e-6 allows that plus
 * an f32 computation and double rounding, while a wrong formula is far off.
 * bf16 holds 8: 2^-16 = 1.5e-5 from the output's rounding, hence 1e-4. */
#define TH_TOL_F32 1e-7
#define TH_TOL_F16 1e-6
#define TH_TOL_BF16 1e-4
#define TH_TOL_MATMUL 5e-4
static inline double th_tol(ug_dtype dtype)
{
    return dtype == UG_F16 ? TH_TOL_F16 : dtype == UG_BF16 ? TH_TOL_BF16 : TH_TOL_F32;
}

/* ---- deterministic host data ---- */
void th_seed(uint64_t seed);
double th_uniform(double low, double high);
/* n values in [low, high), tracked. */
double *th_random_values(int64_t n, double low, double high);
/* Rounds values in place to what dtype stores (f16: nearest even). */
void th_round_to(ug_dtype dtype, double *values, int64_t n);
/* A tracked copy of values[0..n) rounded to what dtype stores. */
double *th_rounded_copy(ug_dtype dtype, const double *values, int64_t n);

/* Pool statistics of a device (zeroed with a failure recorded on error). */
ug_memory_stats th_stats(ug_device *dev);
/* True if haystack contains needle. */
bool th_contains(const char *haystack, const char *needle);
/* "[2,3]" for a shape. */
const char *th_shape_str(int ndim, const int64_t *shape, char *buf, size_t len);

#endif
