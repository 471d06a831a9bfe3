/* TensorBoard event files (tensorboard.h), written from the formats'
 * specifications: TFRecord framing (uint64 length, masked CRC-32C of the
 * length, data, masked CRC-32C of the data, all little-endian) around
 * Event protocol buffers:
 *
 *     Event   { double wall_time = 1; int64 step = 2; string file_version = 3;
 *               Summary summary = 5; }
 *     Summary { repeated Value value = 1; }
 *     Value   { string tag = 1; float simple_value = 2; }
 *
 * The first record names the format (file_version "brain.Event:2"). */
#define _POSIX_C_SOURCE 200809L /* gethostname, clock_gettime */
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "base/fault.h"
#include "core/io/crc32c.h"
#include "unigrad/tensorboard.h"

enum { MAX_TAG = 255, MAX_EVENT = 320 };

struct ug_tensorboard {
    FILE *file;
    char path[4096];
    bool failed;      /* a write failed: reported by flush and close */
    int error;        /* its errno */
};

/* ---- protocol buffers: the few encodings an Event needs ---- */

typedef struct message {
    unsigned char bytes[MAX_EVENT];
    size_t len;
} message;

static void put_byte(message *m, unsigned char b)
{
    if (m->len < sizeof m->bytes)
        m->bytes[m->len++] = b;
}

static void put_varint(message *m, uint64_t v)
{
    do {
        put_byte(m, (unsigned char)((v & 0x7F) | (v > 0x7F ? 0x80 : 0)));
        v >>= 7;
    } while (v);
}

/* A field's key: its number and wire type (0 varint, 1 64-bit, 2
 * length-delimited, 5 32-bit). */
static void put_key(message *m, unsigned field, unsigned wire) { put_varint(m, (uint64_t)field << 3 | wire); }

static void put_fixed(message *m, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        put_byte(m, (unsigned char)(v >> (8 * i)));
}

static void put_bytes(message *m, unsigned field, const void *data, size_t len)
{
    put_key(m, field, 2);
    put_varint(m, len);
    for (size_t i = 0; i < len; i++)
        put_byte(m, ((const unsigned char *)data)[i]);
}

static double wall_time(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* An Event's common fields; summary (a Summary message) when not NULL. */
static void event(message *m, int64_t step, const message *summary, const char *file_version)
{
    double t = wall_time();
    uint64_t bits;
    memcpy(&bits, &t, sizeof bits);
    put_key(m, 1, 1);
    put_fixed(m, bits, 8);
    if (step) {
        put_key(m, 2, 0);
        put_varint(m, (uint64_t)step); /* int64: two's complement in ten bytes when negative */
    }
    if (file_version)
        put_bytes(m, 3, file_version, strlen(file_version));
    if (summary)
        put_bytes(m, 5, summary->bytes, summary->len);
}

/* ---- records ---- */

static ug_status write_record(ug_tensorboard *tb, const message *m)
{
    unsigned char head[12], tail[4];
    uint64_t len = m->len;
    for (int i = 0; i < 8; i++)
        head[i] = (unsigned char)(len >> (8 * i));
    uint32_t crc = ug_crc32c_masked(head, 8);
    for (int i = 0; i < 4; i++)
        head[8 + i] = (unsigned char)(crc >> (8 * i));
    crc = ug_crc32c_masked(m->bytes, m->len);
    for (int i = 0; i < 4; i++)
        tail[i] = (unsigned char)(crc >> (8 * i));
    /* One buffer, one write: a record is whole in the file or not there. */
    unsigned char record[sizeof head + MAX_EVENT + sizeof tail];
    memcpy(record, head, sizeof head);
    memcpy(record + sizeof head, m->bytes, m->len);
    memcpy(record + sizeof head + m->len, tail, sizeof tail);
    size_t total = sizeof head + m->len + sizeof tail;
    if (!tb->failed && fwrite(record, 1, total, tb->file) != total) {
        tb->failed = true;
        tb->error = errno;
    }
    if (tb->failed)
        return ug_set_error(UG_ERR_IO, "TensorBoard log %s: writing failed: %s", tb->path, strerror(tb->error));
    return UG_OK;
}

/* dir and the folders above it, as SummaryWriter's os.makedirs: "runs/x"
 * works before runs/ exists. */
static ug_status make_dir(const char *dir)
{
    char path[4096];
    if (strlen(dir) >= sizeof path)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_tensorboard_open: the folder's name is too long");
    strcpy(path, dir);
    for (char *p = path + 1;; p++) {
        const bool end = *p == '\0';
        if (!end && *p != '/')
            continue;
        *p = '\0';
        struct stat st;
        if (mkdir(path, 0777) != 0 && errno != EEXIST)
            return ug_set_error(UG_ERR_IO, "ug_tensorboard_open: cannot create the folder %s: %s", path,
                                strerror(errno));
        if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
            return ug_set_error(UG_ERR_IO, "ug_tensorboard_open: %s exists and is not a folder", path);
        if (end)
            return UG_OK;
        *p = '/';
        while (p[1] == '/')
            p++;
    }
}

ug_status ug_tensorboard_open(const char *dir, ug_tensorboard **out)
{
    if (!out || !dir || !dir[0])
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_tensorboard_open: %s", out ? "dir is NULL or empty"
                                                                                  : "out is NULL");
    *out = NULL;
    UG_TRY(make_dir(dir));
    ug_tensorboard *tb = ug_calloc(1, sizeof *tb);
    if (!tb)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "ug_tensorboard_open: out of host memory");
    static atomic_int files;
    char host[256] = "localhost";
    if (gethostname(host, sizeof host - 1) != 0)
        snprintf(host, sizeof host, "localhost");
    int n = snprintf(tb->path, sizeof tb->path, "%s/events.out.tfevents.%010lld.%s.%ld.%d", dir,
                     (long long)time(NULL), host, (long)getpid(), atomic_fetch_add(&files, 1));
    if (n < 0 || (size_t)n >= sizeof tb->path) {
        free(tb);
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_tensorboard_open: the folder's name is too long");
    }
    /* "x": never another writer's file (two in one second, same process number). */
    tb->file = fopen(tb->path, "wbx");
    if (!tb->file) {
        ug_status st = ug_set_error(UG_ERR_IO, "ug_tensorboard_open: cannot create %s: %s", tb->path,
                                    strerror(errno));
        free(tb);
        return st;
    }
    message m = {0};
    event(&m, 0, NULL, "brain.Event:2");
    ug_status st = write_record(tb, &m);
    if (st == UG_OK)
        st = ug_tensorboard_flush(tb);
    if (st != UG_OK) {
        fclose(tb->file);
        remove(tb->path);
        free(tb);
        return st;
    }
    *out = tb;
    return UG_OK;
}

const char *ug_tensorboard_path(const ug_tensorboard *tb) { return tb ? tb->path : NULL; }

static bool valid_tag(const char *tag)
{
    size_t n = 0;
    for (; tag[n]; n++)
        if (n == MAX_TAG || tag[n] < 0x20 || tag[n] > 0x7E)
            return false;
    return n > 0;
}

ug_status ug_tensorboard_scalar(ug_tensorboard *tb, const char *tag, int64_t step, double value)
{
    if (!tb || !tag)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_tensorboard_scalar: %s is NULL", tb ? "tag" : "tensorboard");
    if (!valid_tag(tag))
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_tensorboard_scalar: a tag is 1 to %d printable ASCII "
                            "characters, such as \"train/loss\"", MAX_TAG);
    if (step < 0)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_tensorboard_scalar: step %lld is negative",
                            (long long)step);
    message value_msg = {0}, summary = {0}, m = {0};
    put_bytes(&value_msg, 1, tag, strlen(tag));
    float f = (float)value;
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    put_key(&value_msg, 2, 5);
    put_fixed(&value_msg, bits, 4);
    put_bytes(&summary, 1, value_msg.bytes, value_msg.len);
    event(&m, step, &summary, NULL);
    return write_record(tb, &m);
}

ug_status ug_tensorboard_flush(ug_tensorboard *tb)
{
    if (!tb)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_tensorboard_flush: tensorboard is NULL");
    if (!tb->failed && fflush(tb->file) != 0) {
        tb->failed = true;
        tb->error = errno;
    }
    if (tb->failed)
        return ug_set_error(UG_ERR_IO, "TensorBoard log %s: writing failed: %s", tb->path, strerror(tb->error));
    return UG_OK;
}

ug_status ug_tensorboard_close(ug_tensorboard *tb)
{
    if (!tb)
        return UG_OK;
    ug_status st = ug_tensorboard_flush(tb);
    if (fclose(tb->file) != 0 && st == UG_OK)
        st = ug_set_error(UG_ERR_IO, "TensorBoard log %s: closing failed: %s", tb->path, strerror(errno));
    free(tb);
    return st;
}

/* ---- the trainer's figures ---- */

ug_status ug_tensorboard_on_step(const ug_trainer_step *s, void *user)
{
    ug_tensorboard *tb = user;
    if (!s || !tb)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_tensorboard_on_step: %s is NULL", s ? "the writer" : "step");
    if (!isnan(s->loss))
        UG_TRY(ug_tensorboard_scalar(tb, "train/loss", s->global_batch, s->loss));
    UG_TRY(ug_tensorboard_scalar(tb, "train/lr", s->global_batch, s->lr));
    return ug_tensorboard_scalar(tb, "train/samples_per_s", s->global_batch, s->samples_per_second);
}

ug_status ug_tensorboard_on_epoch(const ug_trainer_epoch *e, void *user)
{
    ug_tensorboard *tb = user;
    if (!e || !tb)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_tensorboard_on_epoch: %s is NULL", e ? "the writer" : "epoch");
    const int64_t step = e->global_batch;
    /* Accuracies in percent, as ug-train's CSV log and lines give them. */
    UG_TRY(ug_tensorboard_scalar(tb, "epoch/train_loss", step, e->train.loss));
    if (!isnan(e->train.accuracy))
        UG_TRY(ug_tensorboard_scalar(tb, "epoch/train_accuracy", step, 100.0 * e->train.accuracy));
    if (e->validation.samples) {
        UG_TRY(ug_tensorboard_scalar(tb, "epoch/val_loss", step, e->validation.loss));
        if (!isnan(e->validation.accuracy))
            UG_TRY(ug_tensorboard_scalar(tb, "epoch/val_accuracy", step, 100.0 * e->validation.accuracy));
    }
    UG_TRY(ug_tensorboard_scalar(tb, "epoch/lr", step, e->lr));
    UG_TRY(ug_tensorboard_scalar(tb, "epoch/samples_per_s", step, e->samples_per_second));
    UG_TRY(ug_tensorboard_scalar(tb, "memory/pool_in_use_mib", step, (double)e->memory_in_use / 1048576.0));
    UG_TRY(ug_tensorboard_scalar(tb, "memory/pool_peak_mib", step, (double)e->memory_peak / 1048576.0));
    if (e->loss_scale > 0.0f) {
        UG_TRY(ug_tensorboard_scalar(tb, "amp/loss_scale", step, e->loss_scale));
        UG_TRY(ug_tensorboard_scalar(tb, "amp/skipped_steps", step, (double)e->skipped_steps));
    }
    return ug_tensorboard_flush(tb);
}
