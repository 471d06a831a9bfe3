/* Text for an 80-column terminal, for the tools' notes and legends. */
#ifndef UG_TOOLS_WRAP_H
#define UG_TOOLS_WRAP_H

#include <stdio.h>

/* Writes prefix, then text broken at spaces so that no line passes 80
 * columns, its later lines indented to prefix's width (a word longer than
 * a line stays whole), then a newline. */
void print_wrapped(FILE *out, const char *prefix, const char *text);

#endif
