/* A stopped profiler's summary: launches of one name on one device summed
 * into a row, sorted three ways, and printed as key_averages().table()
 * prints PyTorch's. */
#include <stdlib.h>
#include <string.h>

#include "base/fault.h"
#include "core/profile/recording.h"

static int compare_records(const void *a, const void *b)
{
    const profile_record *x = *(profile_record *const *)a, *y = *(profile_record *const *)b;
    bool xr = x->kind == RECORD_RANGE, yr = y->kind == RECORD_RANGE;
    if (xr != yr)
        return xr - yr;
    if (x->device != y->device)
        return x->device - y->device;
    return strcmp(x->name, y->name);
}

static bool summed(const profile_record *r)
{
    return r->kind == RECORD_KERNEL || r->kind == RECORD_TRANSFER || r->kind == RECORD_RANGE;
}

static const ug_profiler *sorting; /* qsort has no context; summaries are made under a lock */
static ug_profile_order sort_order;

static int64_t key(const profile_row *r)
{
    switch (sort_order) {
    case UG_PROFILE_BY_HOST_TIME: return r->host_ns;
    case UG_PROFILE_BY_CALLS: return r->calls;
    case UG_PROFILE_BY_DEVICE_TIME: break;
    }
    return r->device_ns;
}

static int compare_rows(const void *a, const void *b)
{
    const profile_row *x = &sorting->rows[*(const int *)a], *y = &sorting->rows[*(const int *)b];
    if (x->range != y->range)
        return x->range - y->range;
    int64_t kx = key(x), ky = key(y);
    if (kx != ky)
        return kx < ky ? 1 : -1;
    return strcmp(x->name, y->name);
}

static pthread_mutex_t sort_lock = PTHREAD_MUTEX_INITIALIZER;

ug_status ug_profile_summarize(ug_profiler *p)
{
    profile_record **order = ug_calloc(p->count ? p->count : 1, sizeof *order);
    profile_row *rows = ug_calloc(p->count ? p->count : 1, sizeof *rows);
    if (!order || !rows) {
        free(order);
        free(rows);
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "ug_profiler_stop: out of host memory for the summary");
    }
    size_t n = 0;
    for (size_t i = 0; i < p->count; i++)
        if (summed(&p->records[i]))
            order[n++] = &p->records[i];
    qsort(order, n, sizeof *order, compare_records);
    int count = 0, ops = 0;
    for (size_t i = 0; i < n; i++) {
        const profile_record *r = order[i];
        if (!i || compare_records(&order[i - 1], &order[i]) != 0) {
            profile_row *row = &rows[count++];
            memcpy(row->name, r->name, sizeof row->name);
            row->family = r->family;
            row->device = r->device;
            row->range = r->kind == RECORD_RANGE;
            ops += !row->range;
        }
        profile_row *row = &rows[count - 1];
        if (strcmp(row->family, r->family) != 0)
            row->family = "several"; /* one node launching kernels of several families (im2col and gemm) */
        row->calls++;
        if (r->device_start >= 0)
            row->device_ns += r->device_end - r->device_start;
        if (!row->range)
            row->host_ns += r->host_end - r->host_start;
        else if (r->host_end >= r->host_start)
            row->host_ns += r->host_end - r->host_start;
        row->flops += r->flops;
        row->bytes += r->bytes;
    }
    free(order);
    p->rows = rows;
    p->row_count = count;
    p->op_rows = ops;
    pthread_mutex_lock(&sort_lock);
    sorting = p;
    for (int o = 0; o < 3; o++) {
        p->sorted[o] = ug_calloc(count ? (size_t)count : 1, sizeof(int));
        if (!p->sorted[o])
            continue;
        for (int i = 0; i < count; i++)
            p->sorted[o][i] = i;
        sort_order = (ug_profile_order)o;
        qsort(p->sorted[o], (size_t)count, sizeof(int), compare_rows);
    }
    pthread_mutex_unlock(&sort_lock);
    for (int o = 0; o < 3; o++)
        if (!p->sorted[o])
            return ug_set_error(UG_ERR_OUT_OF_MEMORY, "ug_profiler_stop: out of host memory for the summary");
    return UG_OK;
}

static ug_status check_stopped(const ug_profiler *p, const char *op)
{
    if (!p)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "%s: profiler is NULL", op);
    if (!p->stopped || !p->sorted[0] || !p->sorted[1] || !p->sorted[2])
        return ug_set_error(UG_ERR_STATE, "%s: stop the profiler first (ug_profiler_stop)", op);
    return UG_OK;
}

static bool valid_order(ug_profile_order order)
{
    return order == UG_PROFILE_BY_DEVICE_TIME || order == UG_PROFILE_BY_HOST_TIME ||
           order == UG_PROFILE_BY_CALLS;
}

int ug_profiler_op_count(const ug_profiler *p)
{
    return p && p->stopped ? p->row_count : 0;
}

ug_status ug_profiler_op_at(const ug_profiler *p, ug_profile_order order, int index, ug_profile_op *op)
{
    UG_TRY(check_stopped(p, "ug_profiler_op_at"));
    if (!op)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_profiler_op_at: op is NULL");
    if (!valid_order(order))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_profiler_op_at: %d is not a ug_profile_order", (int)order);
    if (index < 0 || index >= p->row_count)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_profiler_op_at: index %d is outside 0..%d", index,
                            p->row_count - 1);
    const profile_row *r = &p->rows[p->sorted[order][index]];
    *op = (ug_profile_op){.name = r->name, .family = r->family,
                          .device = r->device >= 0 ? p->devices[r->device].id : "host",
                          .calls = r->calls, .device_ns = r->device_ns, .host_ns = r->host_ns,
                          .flops = r->flops, .bytes = r->bytes};
    return UG_OK;
}

/* Characters (code points) in the n bytes at s: UTF-8 continuation bytes
 * start none. */
static int characters(const char *s, size_t n)
{
    int count = 0;
    for (size_t i = 0; i < n; i++)
        count += ((unsigned char)s[i] & 0xC0) != 0x80;
    return count;
}

/* The byte length of s's first count characters. */
static size_t first_characters(const char *s, int count)
{
    size_t i = 0;
    for (; s[i]; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80 && count-- == 0)
            break;
    return i;
}

/* prefix and name in a column of width characters, padded with spaces.
 * A longer name is cut in the middle: its start says the layer
 * ("conv3/"), its end the op ("conv2d input gradient"), and both stay, as
 * "conv3/ba…2d input gradient". The end keeps its last part (after the
 * last '/') whole where that leaves a third of the column to the start;
 * cuts fall between characters, never inside one. */
static void fit(char *out, size_t len, const char *prefix, const char *name, int width)
{
    char whole[192];
    snprintf(whole, sizeof whole, "%s%s", prefix, name);
    const size_t n = strlen(whole);
    int chars = characters(whole, n);
    if (chars > width) {
        const int room = width - 1; /* beside the ellipsis */
        const char *slash = strrchr(whole, '/');
        const int last = slash ? characters(slash + 1, strlen(slash + 1)) : chars;
        int tail = room / 2;
        if (last > tail)
            tail = last < room - room / 3 ? last : room - room / 3;
        const size_t head_bytes = first_characters(whole, room - tail);
        const size_t tail_at = first_characters(whole, chars - tail);
        snprintf(out, len, "%.*s\xe2\x80\xa6%s" /* U+2026, one column */, (int)head_bytes, whole, whole + tail_at);
        chars = width;
    } else {
        snprintf(out, len, "%s", whole);
    }
    size_t used = strlen(out);
    for (; chars < width && used + 1 < len; chars++)
        out[used++] = ' ';
    out[used] = '\0';
}

static void rate(char *out, size_t len, double amount, int64_t ns)
{
    if (amount > 0.0 && ns > 0)
        snprintf(out, len, "%.1f", amount / (double)ns);
    else
        snprintf(out, len, "-");
}

ug_status ug_profiler_print_table(const ug_profiler *p, ug_profile_order order, int rows, FILE *out)
{
    UG_TRY(check_stopped(p, "ug_profiler_print_table"));
    if (!out)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_profiler_print_table: out is NULL");
    if (!valid_order(order))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_profiler_print_table: %d is not a ug_profile_order",
                            (int)order);
    int64_t device_total = 0, host_total = 0;
    for (int i = 0; i < p->op_rows; i++) {
        device_total += p->rows[i].device_ns;
        host_total += p->rows[i].host_ns;
    }
    bool several = p->device_count > 1;
    fprintf(out, "%-36s %5s %7s %4s %7s %7s %6s\n", "Name", "Calls", "Dev ms", "Dev%", "Host ms",
            "GFLOP/s", "GB/s");
    int shown = rows > 0 && rows < p->op_rows ? rows : p->op_rows;
    for (int i = 0; i < p->row_count; i++) {
        const profile_row *r = &p->rows[p->sorted[order][i]];
        if (!r->range && i >= shown)
            continue;
        if (r->range && (i == p->op_rows))
            fprintf(out, "ranges:\n");
        char name[256], flops[16], bytes[16], share[16];
        char prefix[40] = "";
        if (several)
            snprintf(prefix, sizeof prefix, "%s ", r->device >= 0 ? p->devices[r->device].id : "host");
        fit(name, sizeof name, prefix, r->name, 36);
        rate(flops, sizeof flops, r->flops, r->device_ns);
        rate(bytes, sizeof bytes, r->bytes, r->device_ns);
        if (r->range || !device_total)
            snprintf(share, sizeof share, "-");
        else
            snprintf(share, sizeof share, "%.0f", 100.0 * (double)r->device_ns / (double)device_total);
        fprintf(out, "%s %5lld %7.3f %4s %7.3f %7s %6s\n", name, (long long)r->calls,
                (double)r->device_ns * 1e-6, share, (double)r->host_ns * 1e-6, flops, bytes);
    }
    fprintf(out, "Device time %.3f ms, host time issuing %.3f ms, over %.3f ms recorded",
            (double)device_total * 1e-6, (double)host_total * 1e-6, (double)p->stop_ns * 1e-6);
    if (p->dropped)
        fprintf(out, " (%llu records past the cap not kept)", (unsigned long long)p->dropped);
    fprintf(out, "\n");
    /* A transfer's time queued behind other work is no device time of its
     * own (the trace shows each wait). */
    int64_t waited = 0;
    for (size_t i = 0; i < p->count; i++)
        if (p->records[i].wait_start >= 0 && p->records[i].device_start >= 0)
            waited += p->records[i].device_start - p->records[i].wait_start;
    if (waited)
        fprintf(out, "Transfers waited %.3f ms in the devices' queues, not counted above\n", (double)waited * 1e-6);
    return UG_OK;
}
