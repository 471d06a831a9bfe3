/* A growing text in memory (see text.h). Host allocations go through
 * ug_realloc, so fault injection reaches them. */
#include "base/text.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fault.h"

static bool reserve(ug_text *t, size_t more)
{
    if (t->failed)
        return false;
    if (t->len + more + 1 <= t->cap)
        return true;
    size_t cap = t->cap ? t->cap : 256;
    while (cap < t->len + more + 1)
        cap *= 2;
    char *grown = ug_realloc(t->data, cap);
    if (!grown) {
        t->failed = true;
        return false;
    }
    t->data = grown;
    t->cap = cap;
    return true;
}

void ug_text_add(ug_text *t, const char *s, size_t n)
{
    if (!reserve(t, n))
        return;
    memcpy(t->data + t->len, s, n);
    t->len += n;
    t->data[t->len] = '\0';
}

void ug_text_puts(ug_text *t, const char *s) { ug_text_add(t, s, strlen(s)); }

void ug_text_printf(ug_text *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        t->failed = true;
        return;
    }
    if (!reserve(t, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(t->data + t->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    t->len += (size_t)n;
}

void ug_text_json_string(ug_text *t, const char *s)
{
    ug_text_add(t, "\"", 1);
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '"' || c == '\\') {
            char escaped[2] = {'\\', (char)c};
            ug_text_add(t, escaped, 2);
        } else if (c < 0x20) {
            ug_text_printf(t, "\\u%04x", c);
        } else {
            ug_text_add(t, p, 1);
        }
    }
    ug_text_add(t, "\"", 1);
}

void ug_text_free(ug_text *t)
{
    free(t->data);
    *t = (ug_text){0};
}

size_t ug_utf8_prefix(const char *s, size_t max)
{
    size_t n = strnlen(s, max + 1);
    if (n <= max)
        return n;
    n = max;
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80) /* s[n] continues a character */
        n--;
    return n;
}

void ug_utf8_copy(char *dst, size_t cap, const char *s)
{
    const size_t n = ug_utf8_prefix(s, cap - 1);
    memcpy(dst, s, n);
    dst[n] = '\0';
}
