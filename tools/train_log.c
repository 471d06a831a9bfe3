/* ug-train's CSV log as a file (train_log.h). */
#define _POSIX_C_SOURCE 200809L
#include "train_log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gnuplot.h"
#include "plot_curves.h"

/* Whether path, which a resumed run would add to, starts with the log's
 * header: another file is never appended to. */
static bool csv_is_log(const char *path)
{
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return true; /* a stream the user named (/dev/stdout, a pipe): nothing to read back */
    char first[sizeof TRAIN_CSV_COLUMNS + 1] = "";
    FILE *f = fopen(path, "r");
    const bool read = f && fgets(first, sizeof first, f);
    if (f)
        fclose(f);
    first[strcspn(first, "\r\n")] = '\0';
    if (read && !strcmp(first, TRAIN_CSV_COLUMNS))
        return true;
    fprintf(stderr, "ug-train: --csv %s: %s; a resumed run adds rows only to a ug-train --csv log of this "
                    "version: give another file name\n",
            path, read ? "its first line is not the log's header" : f ? "empty" : strerror(errno));
    return false;
}

int train_log_open(const train_options *o, train_log *log)
{
    *log = (train_log){0};
    if (!o->csv && !o->plot)
        return 0;
    char why[512];
    if (o->plot && !gnuplot_available(why, sizeof why)) {
        fprintf(stderr, "ug-train: --plot: %s\n", why);
        return 1;
    }
    const bool append = o->csv && o->resume && access(o->csv, F_OK) == 0;
    if (append && !csv_is_log(o->csv))
        return 1;
    if (o->csv) {
        snprintf(log->path, sizeof log->path, "%s", o->csv);
        log->file = fopen(o->csv, append ? "a" : "w");
    } else {
        snprintf(log->path, sizeof log->path, "%s/ug-train-plot.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
        int fd = mkstemp(log->path);
        log->temporary = fd >= 0;
        log->file = fd >= 0 ? fdopen(fd, "w") : NULL;
    }
    if (!log->file) {
        fprintf(stderr, "ug-train: cannot write %s: %s\n", log->path, strerror(errno));
        return 1;
    }
    if (!append)
        fprintf(log->file, TRAIN_CSV_COLUMNS "\n");
    return 0;
}

void train_log_plot(train_log *log, const char *png, const char *device_name)
{
    char why[512], title[256];
    snprintf(title, sizeof title, "ug-train on %s", device_name);
    const bool flushed = fflush(log->file) == 0;
    if (!flushed)
        snprintf(why, sizeof why, "writing the log: %s", strerror(errno));
    if (!flushed || !plot_curves(log->path, png, title, why, sizeof why))
        fprintf(stderr, "ug-train: warning: --plot %s: %s\n", png, why);
}

int train_log_close(train_log *log)
{
    int rc = 0;
    if (log->file && fclose(log->file) != 0) {
        fprintf(stderr, "ug-train: writing %s failed: %s\n", log->path, strerror(errno));
        rc = 1;
    }
    if (log->temporary)
        remove(log->path);
    *log = (train_log){0};
    return rc;
}
