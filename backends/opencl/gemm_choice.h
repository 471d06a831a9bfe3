/* The GEMM tuning's choice of CLBlast parameters (gemm_tune.c): its text
 * in the cache file, and the rules a set must meet before CLBlast is asked
 * to build it. A cache file is outside the library's control (another
 * version, a damaged disk, a hand edit), and CLBlast builds whatever it is
 * given: a set off its rules computes wrong products without an error, or
 * fails to build. No OpenCL here, so the fuzzer runs these anywhere.
 * Internal. */
#ifndef UG_OPENCL_GEMM_CHOICE_H
#define UG_OPENCL_GEMM_CHOICE_H

#include <stdbool.h>
#include <stddef.h>

/* CLBlast's Xgemm kernel parameters, in the order of its database. */
enum {
    XG_GEMMK, XG_KREG, XG_KWG, XG_KWI, XG_MDIMA, XG_MDIMC, XG_MWG, XG_NDIMB,
    XG_NDIMC, XG_NWG, XG_SA, XG_SB, XG_STRM, XG_STRN, XG_VWM, XG_VWN, XGEMM_PARAMS
};
extern const char *const ug_opencl_xgemm_names[XGEMM_PARAMS];

typedef struct gemm_params {
    size_t xgemm[XGEMM_PARAMS];  /* indexed by XG_* */
    size_t min_indirect;         /* XGEMM_MIN_INDIRECT_SIZE; 0: CLBlast's */
} gemm_params;

/* What the tuning chose, as cached. */
typedef struct gemm_choice {
    gemm_params params;
    double seconds; /* the products' time with params */
    char label[96];
} gemm_choice;

/* What the device allows a kernel; 0: not known, not checked. */
typedef struct gemm_limits {
    size_t work_group;   /* CL_DEVICE_MAX_WORK_GROUP_SIZE */
    size_t work_item[2]; /* CL_DEVICE_MAX_WORK_ITEM_SIZES' first two */
    size_t local_bytes;  /* CL_DEVICE_LOCAL_MEM_SIZE */
} gemm_limits;

/* The cache file's text: "Xgemm v0 ... v15\nXGEMM_MIN_INDIRECT_SIZE n\n
 * microseconds t\n<label>\n". */
void gemm_choice_format(const gemm_choice *c, char *out, size_t len);
/* Strict: every value present and a number, nothing else but the label;
 * false for anything else. Says nothing of whether the set is legal. */
bool gemm_choice_parse(const char *text, gemm_choice *c);

/* Whether CLBlast's Xgemm kernel computes correct products with p on a
 * device with these limits: each value in the range the kernel accepts,
 * the divisibility rules of CLBlast's tuner (src/tuning/kernels/xgemm.hpp,
 * SetConstraints), the work-group and local memory within the device's.
 * false with the first rule broken in why ("MWG 64 is not a multiple of
 * MDIMC*VWM = 128"). */
bool gemm_params_legal(const gemm_params *p, const gemm_limits *limits, char *why, size_t why_len);

#endif
