/* Internal error helpers shared by the core and the built-in backends. */
#ifndef UG_CORE_ERROR_H
#define UG_CORE_ERROR_H

#include "unigrad/status.h"

/* Sets this thread's message and returns status, so callers can write
 * `return ug_set_error(UG_ERR_SHAPE, "...")`. */
ug_status ug_set_error(ug_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prefixes the current message with "context: " and returns status. */
ug_status ug_prefix_error(ug_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Passes a warning to the handler ug_set_warning_handler set, if any. */
void ug_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define UG_TRY(expr)                     \
    do {                                 \
        ug_status ug_try_ = (expr);      \
        if (ug_try_ != UG_OK)            \
            return ug_try_;              \
    } while (0)

#endif
