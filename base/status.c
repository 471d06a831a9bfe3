/* Thread-local error messages, and warnings. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"

enum { UG_ERROR_CAPACITY = 16384 };

static _Thread_local char error_message[UG_ERROR_CAPACITY];

const char *ug_last_error(void) { return error_message; }

void ug_clear_error(void) { error_message[0] = '\0'; }

ug_status ug_set_error(ug_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error_message, sizeof error_message, fmt, ap);
    va_end(ap);
    return status;
}

ug_status ug_prefix_error(ug_status status, const char *fmt, ...)
{
    char prefix[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    size_t head = strlen(prefix) + 2; /* "prefix: " */
    size_t tail = strnlen(error_message, sizeof error_message - 1);
    if (head >= sizeof error_message)
        head = sizeof error_message - 1;
    if (head + tail >= sizeof error_message)
        tail = sizeof error_message - 1 - head;
    memmove(error_message + head, error_message, tail);
    error_message[head + tail] = '\0';
    memcpy(error_message, prefix, head - 2);
    memcpy(error_message + head - 2, ": ", 2);
    return status;
}

/* One lock for the handler and its calls: handlers need not be
 * thread-safe, and a replaced one is never called after the call that
 * replaced it returns. */
static pthread_mutex_t warning_lock = PTHREAD_MUTEX_INITIALIZER;
static ug_warning_handler *warning_handler;
static void *warning_user;

void ug_set_warning_handler(ug_warning_handler *handler, void *user)
{
    pthread_mutex_lock(&warning_lock);
    warning_handler = handler;
    warning_user = user;
    pthread_mutex_unlock(&warning_lock);
}

void ug_warn(const char *fmt, ...)
{
    char message[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&warning_lock);
    if (warning_handler)
        warning_handler(message, warning_user);
    pthread_mutex_unlock(&warning_lock);
}

const char *ug_status_name(ug_status status)
{
    switch (status) {
    case UG_OK: return "UG_OK";
    case UG_ERR_INVALID_ARGUMENT: return "UG_ERR_INVALID_ARGUMENT";
    case UG_ERR_SHAPE: return "UG_ERR_SHAPE";
    case UG_ERR_DTYPE: return "UG_ERR_DTYPE";
    case UG_ERR_DEVICE: return "UG_ERR_DEVICE";
    case UG_ERR_OUT_OF_MEMORY: return "UG_ERR_OUT_OF_MEMORY";
    case UG_ERR_BACKEND: return "UG_ERR_BACKEND";
    case UG_ERR_UNSUPPORTED: return "UG_ERR_UNSUPPORTED";
    case UG_ERR_IO: return "UG_ERR_IO";
    case UG_ERR_FORMAT: return "UG_ERR_FORMAT";
    case UG_ERR_COMPILE: return "UG_ERR_COMPILE";
    case UG_ERR_STATE: return "UG_ERR_STATE";
    case UG_ERR_NUMERIC: return "UG_ERR_NUMERIC";
    }
    return "UG_ERR_UNKNOWN";
}
