/* Status codes and the thread-local error message every fallible call sets. */
#ifndef UNIGRAD_STATUS_H
#define UNIGRAD_STATUS_H

#include "unigrad/export.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ug_status {
    UG_OK = 0,
    UG_ERR_INVALID_ARGUMENT, /* null handle, out-of-range value, bad flag */
    UG_ERR_SHAPE,            /* shapes do not agree or do not broadcast */
    UG_ERR_DTYPE,            /* element type not accepted by this call */
    UG_ERR_DEVICE,           /* tensors on different devices, unknown device name */
    UG_ERR_OUT_OF_MEMORY,    /* device or host allocation failed or passed the limit */
    UG_ERR_BACKEND,          /* the runtime (OpenCL, HIP, BLAS) reported an error */
    UG_ERR_UNSUPPORTED,      /* the device's backend does not implement this */
    UG_ERR_IO,               /* a file could not be opened, read or written */
    UG_ERR_FORMAT,           /* a file's contents are not what was expected */
    UG_ERR_COMPILE,          /* a kernel failed to build; the message holds the log */
    UG_ERR_STATE,            /* the call is not valid in the object's current state */
    UG_ERR_NUMERIC           /* a computation produced NaN or infinity (graph checks) */
} ug_status;

/* The message of the last failed call on this thread ("" if none). The
 * pointer stays valid until the next failing call on the same thread. */
UG_API const char *ug_last_error(void);

/* A constant name for a status, e.g. "UG_ERR_SHAPE". */
UG_API const char *ug_status_name(ug_status status);

/* Forget the last error on this thread. */
UG_API void ug_clear_error(void);

/* Warnings: what the library noticed and worked around, which a user may
 * still want to know (a damaged tuning cache ignored and measured again).
 * The library never prints: each goes to the handler set here (NULL, the
 * default: dropped). The handler may be called from any thread, one call
 * at a time; unigrad's tools print them to stderr. */
typedef void ug_warning_handler(const char *message, void *user);
UG_API void ug_set_warning_handler(ug_warning_handler *handler, void *user);

#ifdef __cplusplus
}
#endif
#endif
