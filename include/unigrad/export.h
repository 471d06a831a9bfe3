/* UG_API marks the library's public functions: the only symbols the shared
 * library exports (everything else is built hidden). */
#ifndef UNIGRAD_EXPORT_H
#define UNIGRAD_EXPORT_H

#if defined(__GNUC__) || defined(__clang__)
#define UG_API __attribute__((visibility("default")))
#else
#define UG_API
#endif

#endif
