/* Tuning choices kept on disk through the core's cache (the host's
 * cache_load and cache_store: one file per name and key, checksummed,
 * replaced atomically): a text of a header line, which names the format
 * and its version, and a line per choice. conv.cpp keeps the convolution
 * library's algorithms in one; gemm_choice.cpp the GEMM path of each shape
 * in another. The callers hold their own locks. */
#ifndef UG_HIP_CHOICES_H
#define UG_HIP_CHOICES_H

#include "backends/hip/internal.h"

enum { UG_HIP_CHOICES_TEXT_MAX = 64 << 10, UG_HIP_CHOICE_LINE_MAX = 200 };

typedef struct ug_hip_choice_file {
    const char *name;   /* the file's name prefix: "cudnn-conv" */
    const char *header; /* its first line, '\n' included */
    char what[64];      /* in warnings: "the cuDNN algorithm cache" */
    bool warned;        /* about a damaged file, once */
} ug_hip_choice_file;

/* Reads key's file into text (UG_HIP_CHOICES_TEXT_MAX bytes) and returns
 * its choices' lines, past the header; NULL for none, a damaged file
 * warned about once. */
const char *ug_hip_choices_read(ug_hip_choice_file *f, const char *key, char *text);

/* Copies the line at *at into line (without its '\n') and moves *at to the
 * next; false at the end, or for a line longer than len. */
bool ug_hip_choices_next(const char **at, char *line, size_t len);

/* What a caller's reader makes of a line: not the choice sought, the
 * choice sought (kept by the reader), or no choice at all. */
enum { UG_HIP_CHOICE_OTHER, UG_HIP_CHOICE_FOUND, UG_HIP_CHOICE_UNREADABLE };
typedef int ug_hip_choice_reader(const char *line, void *ctx);

/* Whether key's file holds the choice read finds, in text
 * (UG_HIP_CHOICES_TEXT_MAX bytes); a file with an unreadable or overlong
 * line counts as none, warned about once. */
bool ug_hip_choices_find(ug_hip_choice_file *f, const char *key, char *text, ug_hip_choice_reader *read,
                         void *ctx);

/* Appends line ('\n'-ended) to key's file, re-read first (in text) so that
 * what other processes stored meanwhile is kept; a damaged file starts
 * afresh. A failure costs a later process the timing only: warned. */
void ug_hip_choices_add(ug_hip_choice_file *f, const char *key, const char *line, char *text);

#endif
