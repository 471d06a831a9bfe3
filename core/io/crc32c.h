/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as TFRecord
 * frames need it. */
#ifndef UG_CORE_CRC32C_H
#define UG_CORE_CRC32C_H

#include <stddef.h>
#include <stdint.h>

uint32_t ug_crc32c(const void *data, size_t bytes);
/* TFRecord's mask: rotated right by 15 bits, plus 0xa282ead8. */
uint32_t ug_crc32c_masked(const void *data, size_t bytes);

#endif
