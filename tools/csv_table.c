/* Reading the tools' CSV files (see csv_table.h). */
#include "csv_table.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_BYTES = 64 << 20 };

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

bool csv_read(const char *path, csv_table *t, char *why, size_t len)
{
    *t = (csv_table){0};
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(why, len, "cannot read %s: %s", path, strerror(errno));
        return false;
    }
    size_t cap = 1 << 16, size = 0;
    t->text = malloc(cap + 1);
    for (size_t n; t->text && (n = fread(t->text + size, 1, cap - size, f)) > 0;) {
        size += n;
        if (size == cap && cap < MAX_BYTES) {
            char *grown = realloc(t->text, cap * 2 + 1);
            if (!grown) {
                free(t->text);
                t->text = NULL;
            }
            t->text = grown;
            cap *= 2;
        } else if (size == cap) {
            break;
        }
    }
    fclose(f);
    if (!t->text) {
        snprintf(why, len, "out of memory reading %s", path);
        return false;
    }
    t->text[size] = '\0';
    int lines = 0;
    for (size_t i = 0; i < size; i++)
        lines += t->text[i] == '\n';
    char **line = calloc((size_t)lines + 2, sizeof *line);
    int count = 0;
    for (char *p = t->text, *next; line && p && *p; p = next) {
        next = strchr(p, '\n');
        if (next)
            *next++ = '\0';
        p[strcspn(p, "\r")] = '\0';
        if (*p)
            line[count++] = p;
    }
    if (!line || !count) {
        free(line);
        csv_free(t);
        snprintf(why, len, "%s is empty", path);
        return false;
    }
    t->columns = 1;
    for (const char *c = line[0]; *c; c++)
        t->columns += *c == ',';
    t->header = calloc((size_t)t->columns, sizeof *t->header);
    t->cells = calloc((size_t)count, sizeof *t->cells);
    bool ok = t->header && t->cells;
    if (ok)
        split(line[0], t->header, t->columns);
    for (int r = 1; ok && r < count; r++) {
        char **cells = calloc((size_t)t->columns, sizeof *cells);
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

void csv_free(csv_table *t)
{
    for (int r = 0; r < t->rows; r++)
        free(t->cells[r]);
    free(t->cells);
    free(t->header);
    free(t->text);
    *t = (csv_table){0};
}
