/* Text broken at spaces to fit an 80-column terminal (wrap.h). */
#include "wrap.h"

#include <string.h>

enum { WIDTH = 80 };

void print_wrapped(FILE *out, const char *prefix, const char *text)
{
    int column = fprintf(out, "%s", prefix), hang = column;
    while (*text) {
        while (*text == ' ')
            text++;
        int word = (int)strcspn(text, " ");
        if (!word)
            break;
        if (column > hang && column + 1 + word > WIDTH)
            column = fprintf(out, "\n%*s", hang, "") - 1;
        else if (column > hang)
            column += fprintf(out, " ");
        column += fprintf(out, "%.*s", word, text);
        text += word;
    }
    fprintf(out, "\n");
}
