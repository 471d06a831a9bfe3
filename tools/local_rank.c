/* "{local_rank}" in device names (local_rank.h). */
#include "local_rank.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void expand_local_rank(const char *name, char *out, size_t len)
{
    static const char token[] = "{local_rank}";
    const char *at = name ? strstr(name, token) : NULL;
    if (!at) {
        snprintf(out, len, "%s", name ? name : "auto");
        return;
    }
    const char *rank = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    if (!rank)
        rank = getenv("MPI_LOCALRANKID");
    snprintf(out, len, "%.*s%s%s", (int)(at - name), name, rank ? rank : "0", at + strlen(token));
}
