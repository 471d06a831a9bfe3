/* Reading the tools' CSV files (see csv_table.h). */
#include "csv_table.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A log of a long run is a few MiB; the limits keep a hostile or damaged
 * file from taking gigabytes (a wide header pads every short row). */
enum { MAX_BYTES = 64 << 20, MAX_CELLS = 1 << 24 };

/* Splits line (ended by '\0') at commas into at most max fields. */
static int split(char *line, char **fields, int max)
{
    int n = 0;
    for (char *p = line; n < max;) {
        fields[n++] = p;
        p = strchr(p, ',');
        if (!p)
            break;
        *p++ = '\0';
    }
    return n;
}

/* The whole file into t->text (NUL-terminated), its length in *size. */
static bool read_text(const char *path, csv_table *t, size_t *size, char *why, size_t len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(why, len, "cannot read %s: %s", path, strerror(errno));
        return false;
    }
    size_t cap = 1 << 16;
    *size = 0;
    t->text = malloc(cap + 1);
    bool ok = t->text != NULL;
    for (size_t n; ok && (n = fread(t->text + *size, 1, cap - *size, f)) > 0;) {
        *size += n;
        if (*size > MAX_BYTES)
            break;
        if (*size == cap) {
            char *grown = realloc(t->text, cap * 2 + 1);
            ok = grown != NULL;
            if (grown) {
                t->text = grown;
                cap *= 2;
            }
        }
    }
    const int read_error = ferror(f) ? errno : 0;
    fclose(f);
    if (!ok)
        snprintf(why, len, "out of memory reading %s", path);
    else if (read_error)
        snprintf(why, len, "cannot read %s: %s", path, strerror(read_error));
    else if (*size > MAX_BYTES)
        snprintf(why, len, "%s is larger than %d MiB: not a log of these tools", path, MAX_BYTES >> 20);
    if (!ok || read_error || *size > MAX_BYTES) {
        free(t->text);
        t->text = NULL;
        return false;
    }
    t->text[*size] = '\0';
    return true;
}

bool csv_read(const char *path, csv_table *t, char *why, size_t len)
{
    *t = (csv_table){0};
    size_t size;
    if (!read_text(path, t, &size, why, len))
        return false;
    size_t lines = 1;
    for (size_t i = 0; i < size; i++)
        lines += t->text[i] == '\n';
    char **line = calloc(lines, sizeof *line);
    int count = 0;
    /* Lines by the file's length, not its first NUL, so the lines after a
     * NUL are read too; a line's text ends at its first NUL or '\r'. */
    char *const end = t->text + size;
    for (char *p = t->text, *next; line && p < end; p = next) {
        char *newline = memchr(p, '\n', (size_t)(end - p));
        next = newline ? newline + 1 : end;
        if (newline)
            *newline = '\0';
        p[strcspn(p, "\r")] = '\0';
        if (*p)
            line[count++] = p;
    }
    if (!line) {
        csv_free(t);
        snprintf(why, len, "out of memory reading %s", path);
        return false;
    }
    if (!count) {
        free(line);
        csv_free(t);
        snprintf(why, len, "%s is empty", path);
        return false;
    }
    size_t columns = 1;
    for (const char *c = line[0]; *c; c++)
        columns += *c == ',';
    if (columns > MAX_CELLS / (size_t)count) {
        free(line);
        csv_free(t);
        snprintf(why, len, "%s has %d lines of %zu columns: more cells than a log of these tools (%d)", path,
                 count, columns, MAX_CELLS);
        return false;
    }
    t->columns = (int)columns;
    t->header = calloc(columns, sizeof *t->header);
    t->cells = calloc((size_t)count, sizeof *t->cells);
    bool ok = t->header && t->cells;
    if (ok)
        split(line[0], t->header, t->columns);
    for (int r = 1; ok && r < count; r++) {
        char **cells = calloc(columns, sizeof *cells);
        ok = cells != NULL;
        if (!ok)
            break;
        int n = split(line[r], cells, t->columns);
        for (int c = n; c < t->columns; c++)
            cells[c] = "";
        t->cells[t->rows++] = cells;
    }
    free(line);
    if (!ok) {
        csv_free(t);
        snprintf(why, len, "out of memory reading %s", path);
    }
    return ok;
}

int csv_column(const csv_table *t, const char *name)
{
    for (int c = 0; c < t->columns; c++)
        if (!strcmp(t->header[c], name))
            return c;
    return -1;
}

bool csv_number(const char *cell, double *value)
{
    *value = NAN;
    if (!*cell)
        return true;
    char *end = NULL;
    double v = strtod(cell, &end);
    if (end == cell || *end)
        return false;
    /* An underflow is still the number written (a tiny loss); an overflow
     * is an infinity, shown as a gap like the others. */
    *value = isfinite(v) ? v : NAN;
    return true;
}

void csv_free(csv_table *t)
{
    for (int r = 0; r < t->rows; r++)
        free(t->cells[r]);
    free(t->cells);
    free(t->header);
    free(t->text);
    *t = (csv_table){0};
}
