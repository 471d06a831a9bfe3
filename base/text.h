/* A growing text in memory, for the JSON the library writes (safetensors
 * headers, Chrome traces). Appends after a failed allocation do nothing;
 * failed says the text is incomplete. Internal: not exported. */
#ifndef UG_BASE_TEXT_H
#define UG_BASE_TEXT_H

#include <stdbool.h>
#include <stddef.h>

typedef struct ug_text {
    char *data;               /* '\0'-terminated once anything is added */
    size_t len, cap;
    bool failed;              /* out of memory: data is incomplete */
} ug_text;

void ug_text_add(ug_text *t, const char *s, size_t n);
void ug_text_puts(ug_text *t, const char *s);
void ug_text_printf(ug_text *t, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* s as a JSON string: quotes, backslashes and control characters escaped,
 * other bytes as they are (the caller checks UTF-8 where it must). */
void ug_text_json_string(ug_text *t, const char *s);
void ug_text_free(ug_text *t);

/* The length of s's longest prefix of at most max bytes that ends at a
 * character boundary (never inside a UTF-8 sequence): where a name is cut
 * to fit a buffer. */
size_t ug_utf8_prefix(const char *s, size_t max);
/* s into dst of cap bytes (cap >= 1), cut by ug_utf8_prefix, '\0'-ended. */
void ug_utf8_copy(char *dst, size_t cap, const char *s);

#endif
