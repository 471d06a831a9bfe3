/* Files for the tests of the checkpoint file layer (test_safetensors.c,
 * test_safetensors_save.c): scratch folders, whole-file reads, raw files of
 * a header and buffer bytes, and the sample file that the independent
 * reader tests/unit/read_safetensors.py checks. */
#ifndef UG_TEST_SAFETENSORS_FILES_H
#define UG_TEST_SAFETENSORS_FILES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "unigrad/status.h"

/* A scratch folder from a mkdtemp template; removed with the files in it. */
bool make_dir(char *dir);
void remove_dir(const char *dir);
/* Files in dir whose name holds ".tmp.": temporaries left behind. */
int temp_files(const char *dir);
/* The whole file (tracked), or NULL when it cannot be read. */
unsigned char *slurp(const char *path, size_t *size);
bool file_is(const char *path, const unsigned char *want, size_t n);
bool exists(const char *path);
/* A file of the 8-byte length of json, json itself, then buffer bytes. */
bool write_raw(const char *path, const char *json, size_t len, uint64_t buffer);
uint64_t le64(const unsigned char *p);
/* The sample: values from formulas the Python reader recomputes by itself. */
ug_status write_sample(const char *path);

#endif
