/* rma_mpi_notify.h: notified access in librma-mpi (issue #28), for programs written
 * against the MPI Forum's RMA notification draft (mpi-forum/mpi-issues#59) or Intel
 * MPI's MPIX_ extension, built with any MPI's mpicc and linked with -lrma_mpi before
 * libmpi.
 *
 * A window carries notification counters of each process, set collectively (the
 * draft's MPI_Win_notify_set_num, Intel's MPIX_Win_create_notify; 0 or
 * MPIX_Win_free_notify removes them). A notified put or get names one counter of its
 * target, which grows by one once the op's data is in the target's memory (for a get:
 * once it is read from it); a process that reads a count with the get_value call sees
 * the data of the ops it counts. Valid in every epoch the op itself is valid in. The
 * target datatype must be contiguous; a count of 0 is a notification alone. An index
 * past the target's counters is MPI_ERR_ARG at the origin, and the target refuses it
 * whatever the origin claimed.
 *
 * The two spellings differ in the order of the last two arguments: the draft's counter
 * comes before the window, Intel's after it. */
#ifndef RMA_MPI_NOTIFY_H
#define RMA_MPI_NOTIFY_H

#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The MPI Forum's draft. */
int MPI_Put_notify(const void *origin_addr, int origin_count, MPI_Datatype origin_datatype,
                   int target_rank, MPI_Aint target_disp, int target_count,
                   MPI_Datatype target_datatype, int notification_idx, MPI_Win win);
int MPI_Get_notify(void *origin_addr, int origin_count, MPI_Datatype origin_datatype,
                   int target_rank, MPI_Aint target_disp, int target_count,
                   MPI_Datatype target_datatype, int notification_idx, MPI_Win win);
int MPI_Win_notify_set_num(MPI_Win win, MPI_Info info, int num_notifications);
int MPI_Win_notify_get_value(MPI_Win win, int notification_idx, MPI_Count *value);
int MPI_Win_notify_set_value(MPI_Win win, int notification_idx, MPI_Count value);

/* Intel MPI's extension. */
int MPIX_Put_notify(const void *origin_addr, int origin_count, MPI_Datatype origin_datatype,
                    int target_rank, MPI_Aint target_disp, int target_count,
                    MPI_Datatype target_datatype, MPI_Win win, int notification_idx);
int MPIX_Get_notify(void *origin_addr, int origin_count, MPI_Datatype origin_datatype,
                    int target_rank, MPI_Aint target_disp, int target_count,
                    MPI_Datatype target_datatype, MPI_Win win, int notification_idx);
int MPIX_Win_create_notify(MPI_Win win, int notify_num);
int MPIX_Win_free_notify(MPI_Win win);
int MPIX_Win_get_notify(MPI_Win win, int notify_idx, MPI_Count *value);
int MPIX_Win_set_notify(MPI_Win win, int notify_idx, MPI_Count value);

#ifdef __cplusplus
}
#endif

#endif /* RMA_MPI_NOTIFY_H */
