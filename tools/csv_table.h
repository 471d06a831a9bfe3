/* A CSV file of the tools' own logs (no quoting, commas between fields)
 * read whole: ug-plot's logs and ug-bench report's tables. The cells are
 * the file's text: a caller that hands one to another program (gnuplot)
 * passes csv_number's parsed value, never the text. */
#ifndef UG_TOOLS_CSV_TABLE_H
#define UG_TOOLS_CSV_TABLE_H

#include <stdbool.h>
#include <stddef.h>

typedef struct csv_table {
    int columns, rows;
    char **header;            /* [columns] */
    char ***cells;            /* [rows][columns]; a short row's missing cells are "" */
    char *text;               /* the file, split in place */
} csv_table;

/* Reads path; false with why (a missing or unreadable file, no header, a
 * file over 64 MiB or of more than 2^24 cells). Blank lines are skipped; a
 * NUL byte ends its line's text (a crash can leave zeros in a log). */
bool csv_read(const char *path, csv_table *t, char *why, size_t len);
/* The column named name, or -1. */
int csv_column(const csv_table *t, const char *name);
/* The number cell holds (all of it, as strtod reads it): true with *value,
 * NaN for an empty cell or an infinite or NaN one; false when the cell
 * holds anything else. */
bool csv_number(const char *cell, double *value);
void csv_free(csv_table *t);

#endif
