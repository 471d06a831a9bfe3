/* A string written as JSON (quotes, backslashes and control characters
 * escaped), for the tools' --json and report files. */
#ifndef UG_TOOLS_JSON_STRING_H
#define UG_TOOLS_JSON_STRING_H

#include <stdio.h>

static inline void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++)
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            fprintf(f, "\\u%04x", *s);
        else
            fputc(*s, f);
    fputc('"', f);
}

#endif
