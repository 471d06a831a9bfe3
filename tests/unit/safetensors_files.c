/* Files for the checkpoint file layer's tests (safetensors_files.h). */
#define _GNU_SOURCE /* mkdtemp */
#include "safetensors_files.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/half.h"
#include "core/io/safetensors.h"
#include "harness.h"

bool make_dir(char *dir) { return mkdtemp(dir) != NULL; }

void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    char path[512];
    for (struct dirent *e; (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

/* Files in dir whose name holds ".tmp.": temporaries left behind. */
int temp_files(const char *dir)
{
    int n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    for (struct dirent *e; (e = readdir(d));)
        n += strstr(e->d_name, ".tmp.") != NULL;
    closedir(d);
    return n;
}

/* The whole file (tracked), or NULL when it cannot be read. */
unsigned char *slurp(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = th_alloc((size_t)n + 1);
    size_t got = fread(p, 1, (size_t)n, f);
    fclose(f);
    if (got != (size_t)n)
        return NULL;
    *size = (size_t)n;
    return p;
}

bool file_is(const char *path, const unsigned char *want, size_t n)
{
    size_t size = 0;
    unsigned char *p = slurp(path, &size);
    return p && size == n && memcmp(p, want, n) == 0;
}

bool exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* A file of the 8-byte length of json, json itself, then buffer bytes. */
bool write_raw(const char *path, const char *json, size_t len, uint64_t buffer)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return false;
    unsigned char n[8];
    for (int i = 0; i < 8; i++)
        n[i] = (unsigned char)((uint64_t)len >> (8 * i));
    bool ok = fwrite(n, 1, 8, f) == 8 && fwrite(json, 1, len, f) == len;
    for (uint64_t i = 0; i < buffer && ok; i++)
        ok = fputc((int)(i * 7 % 251), f) != EOF;
    return fclose(f) == 0 && ok;
}

uint64_t le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* ---- the sample (shared with tests/unit/read_safetensors.py) ---- */

/* Values from formulas the Python reader recomputes by itself. f16 and
 * bf16 values are exact in their types, so no rounding rule is shared. */
enum { S_W = 12, S_H = 5, S_B = 6, S_I = 4, S_U = 7, S_V = 24 };
static float s_w[S_W], s_v[S_V], s_scalar = 3.25f;
static uint16_t s_h[S_H], s_b[S_B];
static int32_t s_i[S_I];
static uint8_t s_u[S_U];
static const int64_t s_w_shape[] = {3, 4}, s_h_shape[] = {S_H}, s_b_shape[] = {2, 3},
                     s_i_shape[] = {S_I}, s_u_shape[] = {S_U}, s_v_shape[] = {2, 3, 4},
                     s_e_shape[] = {0, 3};
#define S_NAME_B "emb.\xce\xb2/gr\xc3\xb6\xc3\x9f" "e" /* emb.β/größe */
#define S_NAME_I "labels \"quoted\""
static const char *const s_keys[] = {"format", "step", "note"};
static const char *const s_values[] = {"unigrad-sample", "42",
                                       "\xc3\xbcn\xc3\xaf \"quoted\" \\ back\nslash"};

static void sample_values(void)
{
    for (int i = 0; i < S_W; i++)
        s_w[i] = (float)sin(i * 0.37);
    for (int i = 0; i < S_V; i++)
        s_v[i] = (float)sin(i * 0.37);
    for (int i = 0; i < S_H; i++)
        s_h[i] = ug_f32_to_f16((float)((i - 2) * 0.375));
    for (int i = 0; i < S_B; i++)
        s_b[i] = ug_f32_to_bf16((float)((i - 3) * 0.25));
    for (int i = 0; i < S_I; i++)
        s_i[i] = (i - 2) * 123456789;
    for (int i = 0; i < S_U; i++)
        s_u[i] = (uint8_t)((i * 37 + 11) % 256);
}

ug_status write_sample(const char *path)
{
    sample_values();
    const ug_st_entry e[] = {
        {"fc1.weight", UG_F32, 2, s_w_shape, s_w},
        {"fc1.bias", UG_F16, 1, s_h_shape, s_h},
        {S_NAME_B, UG_BF16, 2, s_b_shape, s_b},
        {S_NAME_I, UG_I32, 1, s_i_shape, s_i},
        {"pixels", UG_U8, 1, s_u_shape, s_u},
        {"scale", UG_F32, 0, NULL, &s_scalar},
        {"volume", UG_F32, 3, s_v_shape, s_v},
        {"empty", UG_F32, 2, s_e_shape, NULL},
    };
    return ug_st_save(path, e, (int)(sizeof e / sizeof e[0]), s_keys, s_values, 3, 1);
}
