/* Tuning choices on disk (choices.h). */
#include <stdio.h>
#include <string.h>

#include "backends/hip/choices.h"

static const char *body(const ug_hip_choice_file *f, const char *text)
{
    const size_t n = strlen(f->header);
    return strncmp(text, f->header, n) == 0 ? text + n : NULL;
}

const char *ug_hip_choices_read(ug_hip_choice_file *f, const char *key, char *text)
{
    char why[512];
    if (!ug_hip_host->cache_load(f->name, key, text, UG_HIP_CHOICES_TEXT_MAX, why, sizeof why)) {
        if (why[0] && !f->warned)
            ug_hip_host->warn("%s %s; measuring again", f->what, why);
        f->warned = f->warned || why[0];
        return NULL;
    }
    const char *lines = body(f, text);
    if (!lines && !f->warned)
        ug_hip_host->warn("%s for %s has another format; measuring again", f->what, key);
    f->warned = f->warned || !lines;
    return lines;
}

bool ug_hip_choices_next(const char **at, char *line, size_t len)
{
    if (!**at)
        return false;
    const char *end = strchr(*at, '\n');
    const size_t n = end ? (size_t)(end - *at) : strlen(*at);
    if (n >= len)
        return false;
    memcpy(line, *at, n);
    line[n] = '\0';
    *at += n + (end ? 1 : 0);
    return true;
}

bool ug_hip_choices_find(ug_hip_choice_file *f, const char *key, char *text, ug_hip_choice_reader *read,
                         void *ctx)
{
    char line[UG_HIP_CHOICE_LINE_MAX];
    const char *at = ug_hip_choices_read(f, key, text);
    bool sound = at != NULL, found = false;
    while (sound && ug_hip_choices_next(&at, line, sizeof line)) {
        const int what = read(line, ctx);
        sound = what != UG_HIP_CHOICE_UNREADABLE;
        found = found || what == UG_HIP_CHOICE_FOUND;
    }
    const bool damaged = at && (!sound || *at); /* an unreadable or overlong line */
    if (damaged && !f->warned)
        ug_hip_host->warn("%s for %s holds a line it cannot read; measuring again", f->what, key);
    f->warned = f->warned || damaged;
    return found && !damaged;
}

void ug_hip_choices_add(ug_hip_choice_file *f, const char *key, const char *line, char *text)
{
    char why[512];
    if (!ug_hip_host->cache_load(f->name, key, text, UG_HIP_CHOICES_TEXT_MAX, why, sizeof why) ||
        !body(f, text))
        snprintf(text, UG_HIP_CHOICES_TEXT_MAX, "%s", f->header);
    const size_t used = strlen(text), n = strlen(line);
    if (used + n >= UG_HIP_CHOICES_TEXT_MAX)
        return; /* a full file keeps the choices it has */
    memcpy(text + used, line, n + 1);
    if (ug_hip_host->cache_store(f->name, key, text) != UG_OK)
        ug_hip_host->warn("%s: a choice was not cached in %s (%s); a later process times it again",
                          UG_HIP_BACKEND, f->name, ug_hip_host->last_error());
}
