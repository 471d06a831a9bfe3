/* A test double of ROCm SMI (librocm_smi64): one GPU that reports its
 * temperature and power (which the fake sysfs card in test_monitor.c
 * lacks) and fails its utilisation. Signatures as ROCm SMI declares them. */
#include <stdint.h>

typedef int rsmi_status_t;
enum { SUCCESS = 0, INVALID_ARGS = 1, NOT_SUPPORTED = 2 };

rsmi_status_t rsmi_init(uint64_t flags) { return flags == 0 ? SUCCESS : INVALID_ARGS; }
rsmi_status_t rsmi_dev_busy_percent_get(uint32_t dev, uint32_t *busy)
{
    (void)dev;
    (void)busy;
    return NOT_SUPPORTED;
}
rsmi_status_t rsmi_dev_memory_usage_get(uint32_t dev, int type, uint64_t *used)
{
    if (dev != 0 || type != 0)
        return INVALID_ARGS;
    *used = 3ull << 30;
    return SUCCESS;
}
rsmi_status_t rsmi_dev_memory_total_get(uint32_t dev, int type, uint64_t *total)
{
    if (dev != 0 || type != 0)
        return INVALID_ARGS;
    *total = 16ull << 30;
    return SUCCESS;
}
rsmi_status_t rsmi_dev_temp_metric_get(uint32_t dev, uint32_t sensor, int metric, int64_t *milli)
{
    if (dev != 0 || sensor != 0 || metric != 0)
        return INVALID_ARGS;
    *milli = 61000;
    return SUCCESS;
}
rsmi_status_t rsmi_dev_power_ave_get(uint32_t dev, uint32_t sensor, uint64_t *microwatts)
{
    if (dev != 0 || sensor != 0)
        return INVALID_ARGS;
    *microwatts = 95500000;
    return SUCCESS;
}
