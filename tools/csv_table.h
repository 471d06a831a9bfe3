/* A CSV file of the tools' own logs (no quoting, commas between fields)
 * read whole: ug-plot's logs and ug-bench report's tables. */
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

/* Reads path; false with why (a missing file, no header). */
bool csv_read(const char *path, csv_table *t, char *why, size_t len);
/* The column named name, or -1. */
int csv_column(const csv_table *t, const char *name);
void csv_free(csv_table *t);

#endif
