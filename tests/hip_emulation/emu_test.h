/* Shared by the files of the hip_kernels_emulated test (see
 * hip_emulation_test.c): the module's table and device under test, failure
 * recording, device buffers with guards, host data and comparisons. */
#ifndef UG_EMU_TEST_H
#define UG_EMU_TEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/backend.h"
#include "harness.h"   /* the suite's tolerances (TH_TOL_*) only: nothing of harness.c is linked */
#include "reference.h" /* the suite's double-precision references */

/* The module under test (its "cuda" table) and its emulated device. */
extern const ug_backend *emu_backend;
extern ug_bdev *emu_dev;
/* The message of the module's last error (host->set_error). */
const char *emu_last_error(void);

/* ---- recording ---- */
void emu_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Context printed with later failures of this test ("f16, 3x5"). */
void emu_context(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int emu_failures(void);

#define EMU_CHECK(cond, ...)                                                 \
    do {                                                                     \
        if (!(cond))                                                         \
            emu_fail(__FILE__, __LINE__, __VA_ARGS__);                       \
    } while (0)
/* A backend call that must return UG_OK; evaluates to true when it did. */
#define EMU_OK(expr) emu_ok(__FILE__, __LINE__, #expr, (expr))
bool emu_ok(const char *file, int line, const char *text, ug_status st);

/* ---- device buffers ----
 * A view of n elements at offset EMU_LEAD inside a buffer with EMU_LEAD
 * sentinels before and EMU_TAIL after it (a signalling NaN for floats):
 * a kernel that ignores the offset reads sentinels, and one that writes
 * outside the view breaks them (emu_guards_intact). values NULL: the view
 * holds sentinels too (an output). Freed when the test ends. */
#define EMU_LEAD 3
#define EMU_TAIL 5
ug_kview emu_upload(ug_dtype dtype, const double *values, int64_t n);
/* The same with every element given as raw bytes (n elements of the dtype). */
ug_kview emu_upload_raw(ug_dtype dtype, const void *raw, int64_t n);
/* Elements as doubles (f16 decoded by the reference converter); tracked. */
double *emu_download(ug_kview v, int64_t n);
void *emu_download_raw(ug_kview v, int64_t n);
bool emu_guards_intact(ug_kview v, int64_t n);
size_t emu_dtype_size(ug_dtype dtype);

/* ---- host data (freed when the test ends) ---- */
void *emu_alloc(size_t bytes);
void emu_seed(uint64_t seed);
double emu_uniform(double low, double high);
double *emu_random_values(int64_t n, double low, double high);
/* Rounds to what dtype stores (f16: nearest even, f32: nearest). */
void emu_round_to(ug_dtype dtype, double *values, int64_t n);

/* ---- comparisons, as the suite's th_compare and th_compare_bits ----
 * NMSE = sum (got-ref)^2 / sum ref^2 over finite positions (the plain sum
 * when ref is all zero); NaN and inf must sit at the same positions with the
 * same sign of infinity. */
bool emu_compare(const char *file, int line, const char *what, const double *got,
                 const double *ref, int64_t n, double tol);
#define EMU_COMPARE(what, got, ref, n, tol) emu_compare(__FILE__, __LINE__, what, got, ref, n, tol)
bool emu_compare_bits(const char *file, int line, const char *what, const void *got,
                      const void *ref, int64_t n, size_t size);
#define EMU_COMPARE_BITS(what, got, ref, n, size)                            \
    emu_compare_bits(__FILE__, __LINE__, what, got, ref, n, size)

/* ---- the tests (one file per kernel family) ---- */
void test_f16_conversion(void);
void test_unary_ops(void);
void test_unary_special_values(void);
void test_unary_strided(void);
void test_unary_casts(void);
void test_binary_broadcast(void);
void test_binary_grads_and_fused(void);
void test_binary_nan_and_alias(void);
void test_reduce(void);
void test_reduce_nan(void);
void test_reduce_long(void);
void test_gemm_own(void);
void test_gemm_vendor_mapping(void);
void test_softmax(void);
void test_cross_entropy(void);
void test_layernorm(void);
void test_random_uniform(void);
void test_random_normal(void);
void test_optimizers(void);
void test_memory(void);

/* Set by main: whether the fake cuBLAS was found and loaded by the module. */
extern bool emu_fake_cublas_loaded;
int emu_fake_cublas_calls(void);

#endif
