/* CRC-32C, bytewise from a table made on first use (see crc32c.h). A log
 * of scalars checksums a few hundred bytes per record: no need for the
 * SSE 4.2 instruction. */
#include "core/io/crc32c.h"

#include <pthread.h>

static uint32_t table[256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void make_table(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        table[i] = c;
    }
}

uint32_t ug_crc32c(const void *data, size_t bytes)
{
    pthread_once(&table_once, make_table);
    const unsigned char *p = data;
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < bytes; i++)
        c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

uint32_t ug_crc32c_masked(const void *data, size_t bytes)
{
    uint32_t c = ug_crc32c(data, bytes);
    return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}
