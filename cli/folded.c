/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "folded.h"

typedef struct Line {
        char *stack; /* frames root first, joined by ';' */
        uint64_t count;
} Line;

void ep_folded_sanitize(char *name) {
        for (char *p = name; *p; p++)
                if (*p == ';')
                        *p = ':';
                else if ((unsigned char) *p < 0x20 || *p == 0x7f)
                        *p = ' ';
}

/* Appends ";name" (or name, first) to the stream, sanitized. */
static int put_frame(FILE *s, bool first, char *name) {
        ep_folded_sanitize(name);
        if (!first && fputc(';', s) == EOF)
                return -ENOMEM;
        return fputs(name, s) == EOF ? -ENOMEM : 0;
}

static int put_line(FILE *s, bool first, const ExpFrame *f, const ExpLine *ln, EpFoldedFlags flags) {
        _cleanup_free_ char *name = NULL, *located = NULL;
        EpStoredFrame stored = ep_export_stored_frame(f);
        const char *module;
        EpViewKind kind;
        const char *function = ln ? ln->function : NULL;

        int r = ep_store_frame_name(&stored, function, &name, &module, &kind);
        if (r < 0)
                return r;
        if ((flags & EP_FOLDED_LINES) && function && *function && ln->file && *ln->file && ln->line > 0) {
                const char *base = strrchr(ln->file, '/');
                if (asprintf(&located, "%s (%s:%" PRIu32 ")", name, base ? base + 1 : ln->file, ln->line) < 0)
                        return -ENOMEM;
        }
        return put_frame(s, first, located ?: name);
}

/* One sample's stack, root first, inline lines expanded outermost first. */
static int render(const EpExportModel *m, size_t sample, EpFoldedFlags flags, char **ret) {
        const ExpInterval *iv = m->iv;
        const ExpSample *smp = &iv->samples[sample];
        const ExpStack *st = &iv->stacks[smp->stack];
        _cleanup_free_ char *buf = NULL;
        size_t size = 0;
        bool first = true;
        int r = 0;

        FILE *s = open_memstream(&buf, &size);
        if (!s)
                return -ENOMEM;
        if (flags & EP_FOLDED_PROCESS) {
                const ExpProcess *p = &iv->processes[m->sample_process[sample]];
                _cleanup_free_ char *name = NULL;
                if (asprintf(&name, "%s (%" PRIu32 ")", p->comm && *p->comm ? p->comm : "?", p->pid) < 0)
                        r = -ENOMEM;
                else
                        r = put_frame(s, first, name);
                first = false;
        }
        for (size_t i = st->n_frames; r >= 0 && i-- > 0;) {
                const ExpFrame *f = &iv->frames[st->frames[i]];
                if (f->n_lines == 0)
                        r = put_line(s, first, f, NULL, flags);
                for (size_t j = f->n_lines; r >= 0 && j-- > 0;)
                        r = put_line(s, first && j == f->n_lines - 1, f, &f->lines[j], flags);
                first = false;
        }
        if (r >= 0 && st->n_frames == 0)
                /* As the views show a stack left without frames. */
                r = put_frame(s, first, (char[]) { "[no frames]" });
        if (fclose(s) != 0 && r >= 0)
                r = -ENOMEM;
        if (r < 0)
                return r;
        *ret = TAKE_PTR(buf);
        return 0;
}

static int compare_lines(const void *a, const void *b) {
        return strcmp(((const Line *) a)->stack, ((const Line *) b)->stack);
}

static void lines_free(Line *lines, size_t n) {
        for (size_t i = 0; i < n; i++)
                free(lines[i].stack);
        free(lines);
}

int ep_folded_write(const EpExportModel *m, EpFoldedFlags flags, FILE *out, EpProgress *progress) {
        const ExpInterval *iv = m->iv;
        Line *lines = calloc(MAX(iv->n_samples, (size_t) 1), sizeof(Line));
        size_t n = 0;
        int r = 0;

        if (!lines)
                return -ENOMEM;
        for (size_t i = 0; i < iv->n_samples; i++) {
                r = render(m, i, flags, &lines[n].stack);
                if (r < 0)
                        goto finish;
                lines[n++].count = iv->samples[i].count;
        }

        /* Threads of a process, and processes without the prefix, share lines: sorting puts
         * them next to each other. */
        qsort(lines, n, sizeof(Line), compare_lines);
        for (size_t i = 0; i < n;) {
                uint64_t count = 0;
                size_t j = i;
                for (; j < n && streq(lines[j].stack, lines[i].stack); j++)
                        count += lines[j].count;
                if (fprintf(out, "%s %" PRIu64 "\n", lines[i].stack, count) < 0) {
                        r = -errno;
                        goto finish;
                }
                ep_progress_add(progress, 0, 1);
                i = j;
        }
finish:
        lines_free(lines, n);
        return r;
}
