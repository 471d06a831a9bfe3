/* libFuzzer harness for the OpenCL GEMM tuning cache's entries: the input
 * is an entry's text, written as a cache file whose checksum holds (as a
 * file from another version, or edited by hand, would be), read back with
 * the cache reader, parsed (backends/opencl/gemm_choice.h) and judged
 * against two devices' limits. Never a crash, a leak or undefined
 * behaviour (built with ASan/UBSan); a set judged legal meets CLBlast's
 * rules as restated here, independently, and a parsed choice formats and
 * parses back to itself. Internal: links the library's objects (the cache
 * reader) and gemm_choice.c, which needs no OpenCL. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_file.h"

#include "backends/opencl/gemm_choice.h"
#include "base/cache_file.h"

static char path[64];
static const char magic[8] = {'U', 'G', 'C', 'L', 'B', 'T', 'N', '1'};
static const char key[] = "CLBlast 1.5.3 Xgemm f32, tuner 1\nfuzz device\ndriver 1\nOpenCL 3.0";

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_file_name(path, sizeof path, "tuning", ".txt");
    return 0;
}

/* The cache file of data: header, key, data, with its checksum. */
static void write_entry(const uint8_t *data, size_t size)
{
    size_t key_len = strlen(key), total = 32 + key_len + size;
    uint8_t *file = malloc(total ? total : 1);
    if (!file)
        abort();
    uint64_t header[3] = {key_len, size,
                          ug_fnv1a(ug_fnv1a(UG_FNV1A_BASIS, key, key_len), data, size)};
    memcpy(file, magic, 8);
    memcpy(file + 8, header, sizeof header);
    memcpy(file + 32, key, key_len);
    if (size)
        memcpy(file + 32 + key_len, data, size);
    fuzz_write_file(path, file, total);
    free(file);
}

/* CLBlast's rules for a set judged legal, restated. */
static void check_legal(const gemm_params *p, const gemm_limits *limits)
{
    const size_t *x = p->xgemm;
    for (int i = 0; i < XGEMM_PARAMS; i++)
        if (x[i] > 1024)
            abort();
    if (!x[XG_KWI] || !x[XG_MDIMC] || !x[XG_NDIMC] || !x[XG_MDIMA] || !x[XG_NDIMB] || !x[XG_VWM] ||
        !x[XG_VWN] || !x[XG_KREG])
        abort();
    if (x[XG_KWG] % x[XG_KWI] || x[XG_MWG] % (x[XG_MDIMC] * x[XG_VWM]) ||
        x[XG_NWG] % (x[XG_NDIMC] * x[XG_VWN]) || x[XG_MWG] % (x[XG_MDIMA] * x[XG_VWM]) ||
        x[XG_NWG] % (x[XG_NDIMB] * x[XG_VWN]))
        abort();
    if (x[XG_GEMMK] == 1 && x[XG_KREG] % x[XG_VWN])
        abort();
    if (x[XG_GEMMK] == 0 && x[XG_SA] &&
        (x[XG_MDIMC] * x[XG_NDIMC] % x[XG_MDIMA] || x[XG_KWG] % (x[XG_MDIMC] * x[XG_NDIMC] / x[XG_MDIMA])))
        abort();
    if (x[XG_MDIMC] * x[XG_NDIMC] > limits->work_group ||
        4 * x[XG_KWG] * (x[XG_SA] * x[XG_MWG] + x[XG_SB] * x[XG_NWG]) > limits->local_bytes)
        abort();
    if (p->min_indirect < 1)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096)
        return 0; /* the tuning reads no larger entry */
    write_entry(data, size);
    unsigned char *text = NULL;
    size_t text_size = 0;
    char why[256] = "";
    ug_cache_result r = ug_cache_load(path, magic, key, strlen(key), 4096, &text, &text_size, why,
                                      sizeof why);
    if (r != UG_CACHE_HIT || text_size != size || (size && memcmp(text, data, size) != 0))
        abort(); /* a sound file always loads as written */
    gemm_choice choice;
    if (gemm_choice_parse((const char *)text, &choice)) {
        static const gemm_limits devices[] = {{4096, {4096, 4096}, 1310720}, /* POCL on a CPU */
                                              {256, {256, 256}, 32768}};     /* a small GPU */
        for (size_t d = 0; d < sizeof devices / sizeof devices[0]; d++) {
            char reason[200] = "";
            if (gemm_params_legal(&choice.params, &devices[d], reason, sizeof reason))
                check_legal(&choice.params, &devices[d]);
            else if (!reason[0])
                abort(); /* a refusal says why */
        }
        /* The choice as the tuning would save it parses back the same. */
        char again[512];
        gemm_choice back;
        gemm_choice_format(&choice, again, sizeof again);
        if (!gemm_choice_parse(again, &back) ||
            memcmp(&back.params, &choice.params, sizeof back.params) != 0 ||
            strcmp(back.label, choice.label) != 0 || !isfinite(back.seconds))
            abort();
    }
    free(text);
    return 0;
}
