/* Device names for a process mpirun starts (ug-train --device, ug-bench
 * data-parallel --device): "{local_rank}" stands for the process's rank on
 * its machine, so that "cuda:{local_rank}" gives each rank its own GPU. */
#ifndef UG_TOOLS_LOCAL_RANK_H
#define UG_TOOLS_LOCAL_RANK_H

#include <stddef.h>

/* name with its first "{local_rank}" replaced by the local rank mpirun
 * gives this process (Open MPI's OMPI_COMM_WORLD_LOCAL_RANK, else MPICH's
 * MPI_LOCALRANKID; "0" outside mpirun), into out; name NULL gives "auto". */
void expand_local_rank(const char *name, char *out, size_t len);

#endif
