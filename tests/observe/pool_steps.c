/* A process whose pool changes on command, for ug_smi.sh: opens DEVICE,
 * then at its first line on stdin allocates a tensor of each BYTES in turn,
 * at the second frees them in turn, and at the end of stdin exits. After
 * each step it prints its pool's figures ("in_use N cached N", from
 * ug_memory_get_stats) and then calls nothing of the library until the
 * next line: only the library's own publishing can bring the change to
 * ug-smi. The tensors of a step come in a burst, as a program's first
 * allocations do (a ResNet's, ug-train's), so a registry that writes at
 * most every half second and only when a later change comes shows the
 * first of them for ever.
 * Usage: pool_steps DEVICE BYTES... (each a multiple of 4; exit status 2 on
 * a library or usage error, with the message on stderr). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unigrad/unigrad.h"

enum { MAX_TENSORS = 16 };

static int report(ug_device *device)
{
    ug_memory_stats stats;
    if (ug_memory_get_stats(device, &stats) != UG_OK) {
        fprintf(stderr, "pool_steps: %s\n", ug_last_error());
        return 2;
    }
    printf("in_use %llu cached %llu\n", (unsigned long long)stats.bytes_in_use,
           (unsigned long long)stats.bytes_cached);
    fflush(stdout);
    return 0;
}

static int wait_for_line(void)
{
    char line[64];
    return fgets(line, sizeof line, stdin) != NULL;
}

int main(int argc, char **argv)
{
    int count = argc - 2;
    if (count < 1 || count > MAX_TENSORS) {
        fprintf(stderr, "usage: pool_steps DEVICE BYTES... (1 to %d sizes)\n", MAX_TENSORS);
        return 2;
    }
    int64_t elements[MAX_TENSORS];
    for (int i = 0; i < count; i++) {
        char *end = NULL;
        long long bytes = strtoll(argv[i + 2], &end, 10);
        if (*end || bytes <= 0 || bytes % 4) {
            fprintf(stderr, "pool_steps: '%s' is not a positive multiple of 4 bytes\n", argv[i + 2]);
            return 2;
        }
        elements[i] = bytes / 4;
    }
    ug_device *device = NULL;
    ug_tensor *tensors[MAX_TENSORS] = {0};
    int status = 2;
    if (ug_device_open(argv[1], &device) != UG_OK)
        goto failed;
    if (wait_for_line()) {
        for (int i = 0; i < count; i++)
            if (ug_tensor_create(device, UG_F32, 1, &elements[i], &tensors[i]) != UG_OK)
                goto failed;
        if (report(device))
            goto done;
        if (wait_for_line()) {
            for (int i = 0; i < count; i++) {
                ug_tensor_free(tensors[i]);
                tensors[i] = NULL;
            }
            if (report(device))
                goto done;
        }
    }
    while (wait_for_line())
        ;
    status = 0;
    goto done;
failed:
    fprintf(stderr, "pool_steps: %s\n", ug_last_error());
done:
    for (int i = 0; i < count; i++)
        ug_tensor_free(tensors[i]);
    ug_device_close(device);
    return status;
}
