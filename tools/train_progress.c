/* ug-train's progress display: a line redrawn in place on a terminal,
 * fitted to its width; plain lines elsewhere (train_progress.h). */
#define _POSIX_C_SOURCE 200809L
#include "train_progress.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

enum { BAR_MAX = 30, BAR_MIN = 6 };

double progress_clock(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The terminal's columns now (it may have been resized): 80 where it does
 * not say. */
static int terminal_width(void)
{
    struct winsize ws;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        return ws.ws_col;
    return 80;
}

/* Whether stdout is a terminal a person watches: not under mpirun, whose
 * ranks write to pseudo-terminals of its own whatever its output is. */
static bool on_terminal(void)
{
    /* Open MPI's and MPICH's (Hydra's) launchers say so to each rank. */
    static const char *const launched[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"};
    for (size_t i = 0; i < sizeof launched / sizeof launched[0]; i++)
        if (getenv(launched[i]))
            return false;
    return isatty(STDOUT_FILENO);
}

void progress_init(train_progress *p, bool quiet)
{
    *p = (train_progress){.mode = quiet ? PROGRESS_OFF : on_terminal() ? PROGRESS_LIVE : PROGRESS_LINES};
}

void progress_set_global(train_progress *p, int64_t batch, int64_t epoch_samples)
{
    p->batch = batch > 0 && epoch_samples > 0 ? batch : 0;
    p->epoch_samples = epoch_samples;
}

void progress_start_epoch(train_progress *p, int epoch, int epochs, int64_t steps)
{
    p->epoch = epoch;
    p->epochs = epochs;
    p->steps = steps;
    p->start = p->last_draw = p->last_line = progress_clock();
}

static bool line_due(const train_progress *p) { return progress_clock() - p->last_line >= PROGRESS_LINE_SECONDS; }

bool progress_due(const train_progress *p, int64_t step)
{
    if (step >= p->steps)
        return false;
    switch (p->mode) {
    case PROGRESS_LINES: return line_due(p);
    case PROGRESS_LIVE: return progress_clock() - p->last_draw > 0.25;
    default: return false;
    }
}

/* "12s", "3m05s", "2h10m". */
static void format_seconds(char *buf, size_t len, double s)
{
    long t = s > 0 ? (long)(s + 0.5) : 0;
    if (t < 60)
        snprintf(buf, len, "%lds", t);
    else if (t < 3600)
        snprintf(buf, len, "%ldm%02lds", t / 60, t % 60);
    else
        snprintf(buf, len, "%ldh%02ldm", t / 3600, t % 3600 / 60);
}

size_t progress_compose(char *buf, size_t len, int width, int epoch, int epochs, int64_t step, int64_t steps,
                        float loss, double rate, double seconds, bool final)
{
    char head[48], count[48], loss_text[32], rate_text[40], time_text[40], when[24];
    int digits = snprintf(count, sizeof count, "%lld", (long long)steps);
    snprintf(head, sizeof head, "epoch %d/%d", epoch, epochs);
    snprintf(count, sizeof count, "%*lld/%lld", digits, (long long)step, (long long)steps);
    snprintf(loss_text, sizeof loss_text, "loss %.4f", (double)loss);
    snprintf(rate_text, sizeof rate_text, "%.0f samples/s", rate);
    format_seconds(when, sizeof when, seconds);
    snprintf(time_text, sizeof time_text, final ? "took %s" : "%s left", when);

    /* In order of importance; the fields from the end go first when the
     * line is too long, after the bar. */
    const char *fields[] = {head, loss_text, count, time_text, rate_text};
    enum { HEAD, LOSS, COUNT, TIME, RATE, FIELDS };
    bool keep[FIELDS] = {true, true, true, true, true};
    int avail = width - 1, used = 0;
    for (int i = 0; i < FIELDS; i++)
        used += (i ? 1 : 0) + (int)strlen(fields[i]);
    for (int drop = FIELDS - 1; used > avail && drop > LOSS; drop--) {
        keep[drop] = false;
        used -= 1 + (int)strlen(fields[drop]);
    }
    int bar = avail - used - 3; /* " [" and "]" */
    if (bar > BAR_MAX)
        bar = BAR_MAX;
    if (bar < BAR_MIN)
        bar = 0;

    /* Laid out as: epoch [bar] count loss rate time. */
    char line[256];
    int n = snprintf(line, sizeof line, "%s", head);
    if (bar) {
        int filled = (int)(bar * step / (steps ? steps : 1));
        line[n++] = ' ';
        line[n++] = '[';
        for (int i = 0; i < bar; i++)
            line[n++] = i < filled ? '=' : i == filled ? '>' : ' ';
        line[n++] = ']';
        line[n] = '\0';
    }
    static const int order[] = {COUNT, LOSS, RATE, TIME};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
        if (keep[order[i]])
            n += snprintf(line + n, sizeof line - (size_t)n, " %s", fields[order[i]]);
    if (n > avail) /* even epoch and loss do not fit */
        n = avail > 0 ? avail : 0;
    line[n] = '\0';
    snprintf(buf, len, "%s", line);
    return strlen(buf);
}

static void measure(const train_progress *p, int64_t step, int64_t samples, double *elapsed, double *rate,
                    double *left)
{
    if (p->batch) /* every replica's, not this one's part */
        samples = step * p->batch < p->epoch_samples ? step * p->batch : p->epoch_samples;
    *elapsed = progress_clock() - p->start;
    *rate = *elapsed > 0 ? (double)samples / *elapsed : 0.0;
    *left = step > 0 ? *elapsed * (double)(p->steps - step) / (double)step : 0.0;
}

/* Before drawing over the open live line on a terminal now width wide:
 * back to its start, where it still fits a row. Where the terminal was
 * made narrower than the line, it may have re-wrapped it over two rows
 * (tmux, VTE, kitty do), whose first a carriage return does not reach;
 * moving up would erase a line of earlier output on terminals that cut
 * lines instead, so the old line stays and the new one starts below. */
static void leave_line(train_progress *p, int width)
{
    if (p->open && p->open_length >= width)
        fputs("\n", stdout);
    else if (p->open)
        fputs("\r\033[K", stdout);
    p->open = false;
}

static void plain_line(train_progress *p, int64_t step, int64_t samples, float loss, int width)
{
    double elapsed, rate, left;
    measure(p, step, samples, &elapsed, &rate, &left);
    leave_line(p, width); /* the terminal got too narrow for the live line */
    printf("epoch %d/%d step %lld/%lld loss %.4f %.0f samples/s %.0fs left\n", p->epoch, p->epochs,
           (long long)step, (long long)p->steps, (double)loss, rate, left);
    p->last_line = progress_clock();
}

static void live_line(train_progress *p, int64_t step, int64_t samples, float loss, int width, bool final)
{
    double elapsed, rate, left;
    measure(p, step, samples, &elapsed, &rate, &left);
    char line[256];
    progress_compose(line, sizeof line, width, p->epoch, p->epochs, step, p->steps, loss, rate,
                     final ? elapsed : left, final);
    /* Back to the line's start, the new text, and the rest of the old
     * (longer) one cleared. */
    if (p->open && p->open_length >= width)
        leave_line(p, width);
    printf("\r%s\033[K%s", line, final ? "\n" : "");
    p->open = !final;
    p->open_length = (int)strlen(line);
}

void progress_show(train_progress *p, int64_t step, int64_t samples, float loss)
{
    if (p->mode == PROGRESS_OFF)
        return;
    int width = p->mode == PROGRESS_LIVE ? terminal_width() : 0;
    if (width >= PROGRESS_MIN_WIDTH)
        live_line(p, step, samples, loss, width, false);
    else if (line_due(p))
        plain_line(p, step, samples, loss, width);
    p->last_draw = progress_clock();
    fflush(stdout);
}

void progress_end_epoch(train_progress *p, int64_t step, int64_t samples, float loss)
{
    if (p->mode == PROGRESS_OFF)
        return;
    int width = p->mode == PROGRESS_LIVE ? terminal_width() : 0;
    if (width >= PROGRESS_MIN_WIDTH)
        live_line(p, step, samples, loss, width, true);
    else
        plain_line(p, step, samples, loss, width);
    fflush(stdout);
}

void progress_break(train_progress *p)
{
    if (!p || !p->open)
        return;
    fputs("\n", stdout);
    fflush(stdout);
    p->open = false;
}
