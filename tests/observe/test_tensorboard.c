/* TensorBoard event files: CRC-32C against the check value of its
 * specification, one scalar's record byte by byte as worked out by hand
 * from the TFRecord and protocol buffer encodings, and the refusals. The
 * whole file against ug-train's CSV: tensorboard_log.sh. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/io/crc32c.h"
#include "harness.h"
#include "unigrad/tensorboard.h"

static void test_crc32c(ug_device *dev)
{
    (void)dev;
    /* The CRC-32C check value (RFC 3720, B.4: "123456789"). */
    CHECK_EQ_I64(ug_crc32c("123456789", 9), 0xE3069283u);
    CHECK_EQ_I64(ug_crc32c("", 0), 0);
    uint32_t c = 0xE3069283u;
    CHECK_EQ_I64(ug_crc32c_masked("123456789", 9), (uint32_t)(((c >> 15) | (c << 17)) + 0xA282EAD8u));
}

static uint64_t le(const unsigned char *p, int bytes)
{
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void test_scalar_record(ug_device *dev)
{
    (void)dev;
    char dir[] = "/tmp/ug-tensorboard-XXXXXX";
    REQUIRE(mkdtemp(dir));
    char logdir[64];
    snprintf(logdir, sizeof logdir, "%s/run", dir);
    ug_tensorboard *tb = NULL;
    REQUIRE_OK(ug_tensorboard_open(logdir, &tb));
    CHECK(strncmp(ug_tensorboard_path(tb), logdir, strlen(logdir)) == 0);
    CHECK(strstr(ug_tensorboard_path(tb), "/events.out.tfevents.") != NULL);
    char path[4096];
    snprintf(path, sizeof path, "%s", ug_tensorboard_path(tb));
    CHECK_OK(ug_tensorboard_scalar(tb, "a", 2, 1.0));
    CHECK_OK(ug_tensorboard_close(tb));
    FILE *f = fopen(path, "rb");
    REQUIRE(f);
    unsigned char blob[256];
    size_t n = fread(blob, 1, sizeof blob, f);
    fclose(f);
    /* The first record: the file_version event. */
    REQUIRE(n > 16);
    size_t first = (size_t)le(blob, 8);
    CHECK_EQ_I64(le(blob + 8, 4), ug_crc32c_masked(blob, 8));
    CHECK_EQ_I64(le(blob + 12 + first, 4), ug_crc32c_masked(blob + 12, first));
    const char version[] = "brain.Event:2";
    CHECK(first == 9 + 2 + strlen(version) && blob[12 + 9] == 0x1A && memcmp(blob + 12 + 11, version, 13) == 0);
    /* The scalar: Event{wall_time (field 1, 64-bit), step 2 (field 2,
     * varint), summary (field 5) {value (1) {tag "a" (1), simple_value
     * 1.0f (field 2, 32-bit: 00 00 80 3f)}}}: 9 + 2 + 12 bytes. */
    const unsigned char *r = blob + 16 + first;
    REQUIRE(n == 16 + first + 16 + 23);
    CHECK_EQ_I64(le(r, 8), 23);
    CHECK_EQ_I64(le(r + 8, 4), ug_crc32c_masked(r, 8));
    const unsigned char *e = r + 12;
    CHECK(e[0] == 0x09);
    static const unsigned char after_time[] = {0x10, 0x02, 0x2A, 0x0A, 0x0A, 0x08, 0x0A, 0x01, 'a',
                                               0x15, 0x00, 0x00, 0x80, 0x3F};
    CHECK(memcmp(e + 9, after_time, sizeof after_time) == 0);
    CHECK_EQ_I64(le(e + 23, 4), ug_crc32c_masked(e, 23));
    remove(path);
    rmdir(logdir);
    rmdir(dir);
}

static void test_refusals(ug_device *dev)
{
    (void)dev;
    ug_tensorboard *tb = NULL;
    CHECK_STATUS(ug_tensorboard_open(NULL, &tb), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_tensorboard_open("", &tb), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_tensorboard_open("/tmp", NULL), UG_ERR_INVALID_ARGUMENT);
    if (CHECK_STATUS(ug_tensorboard_open("/etc/hostname", &tb), UG_ERR_IO))
        CHECK_ERROR_HAS("is not a folder");
    /* A parent that is a file: nothing to create under it. */
    if (CHECK_STATUS(ug_tensorboard_open("/etc/hostname/runs/x", &tb), UG_ERR_IO))
        CHECK_ERROR_HAS("/etc/hostname exists and is not a folder");
    CHECK(tb == NULL);
    char dir[] = "/tmp/ug-tensorboard-XXXXXX";
    REQUIRE(mkdtemp(dir));
    /* Missing parents are made, as SummaryWriter makes them. */
    char nested[64];
    snprintf(nested, sizeof nested, "%s/runs//mlp/", dir);
    if (CHECK_STATUS(ug_tensorboard_open(nested, &tb), UG_OK)) {
        char made[4096];
        snprintf(made, sizeof made, "%s", ug_tensorboard_path(tb));
        CHECK_OK(ug_tensorboard_close(tb));
        CHECK(remove(made) == 0);
        snprintf(made, sizeof made, "%s/runs/mlp", dir);
        CHECK(rmdir(made) == 0);
        snprintf(made, sizeof made, "%s/runs", dir);
        CHECK(rmdir(made) == 0);
    }
    REQUIRE_OK(ug_tensorboard_open(dir, &tb));
    char long_tag[300];
    memset(long_tag, 'x', sizeof long_tag - 1);
    long_tag[sizeof long_tag - 1] = '\0';
    CHECK_STATUS(ug_tensorboard_scalar(tb, "", 1, 0.0), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_tensorboard_scalar(tb, "a\nb", 1, 0.0), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_tensorboard_scalar(tb, long_tag, 1, 0.0), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_tensorboard_scalar(tb, NULL, 1, 0.0), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_tensorboard_scalar(tb, "loss", -1, 0.0), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_tensorboard_on_step(NULL, tb), UG_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(ug_tensorboard_on_epoch(NULL, tb), UG_ERR_INVALID_ARGUMENT);
    char path[4096];
    snprintf(path, sizeof path, "%s", ug_tensorboard_path(tb));
    CHECK_OK(ug_tensorboard_close(tb));
    CHECK_OK(ug_tensorboard_close(NULL));
    remove(path);
    rmdir(dir);
}

int main(int argc, char **argv)
{
    static const th_test tests[] = {
        TH_HOST_TEST(crc32c),
        TH_HOST_TEST(scalar_record),
        TH_HOST_TEST(refusals),
    };
    return th_main(argc, argv, tests, (int)(sizeof tests / sizeof tests[0]));
}
