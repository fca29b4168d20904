/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "export-model.h"
#include "export.h"
#include "folded.h"
#include "otlp-encode.h"
#include "pprof.h"
#include "view-options.h"

static const struct {
        EpExportFormat format;
        const char *name;
        bool binary;
        const char *const *extensions;
} formats[] = {
        { EP_EXPORT_PPROF, "pprof", true, (const char *const[]) { ".pb.gz", ".pprof", NULL } },
        { EP_EXPORT_FOLDED, "folded", false, (const char *const[]) { ".folded", ".txt", NULL } },
        { EP_EXPORT_OTLP, "otlp", true, (const char *const[]) { ".otlp", ".binpb", NULL } },
};

int ep_export_format_from_name(const char *name, EpExportFormat *ret) {
        for (size_t i = 0; i < ELEMENTSOF(formats); i++)
                if (streq(name, formats[i].name)) {
                        *ret = formats[i].format;
                        return 0;
                }
        return -EINVAL;
}

int ep_export_format_from_path(const char *path, EpExportFormat *ret) {
        size_t len = strlen(path);
        for (size_t i = 0; i < ELEMENTSOF(formats); i++)
                for (const char *const *ext = formats[i].extensions; *ext; ext++) {
                        size_t n = strlen(*ext);
                        if (len > n && streq(path + len - n, *ext)) {
                                *ret = formats[i].format;
                                return 0;
                        }
                }
        return -EINVAL;
}

const char *ep_export_format_name(EpExportFormat f) {
        return formats[f].name;
}

static int write_otlp(const EpExportModel *m, FILE *out) {
        /* host.name is left out: the store does not say which host it was written on. */
        const OtlpEncodeOptions opts = { .no_cpu = true };
        _cleanup_free_ void *data = NULL;
        size_t size = 0;

        int r = otlp_encode_interval(m->iv, &opts, &data, &size, NULL);
        if (r < 0)
                return r;
        /* No samples: zero bytes, the empty request. */
        if (size > 0 && fwrite(data, 1, size, out) != size)
                return -EIO;
        return 0;
}

int ep_export_write(const EpExportModel *m, EpExportFormat format, EpFoldedFlags folded_flags, FILE *out,
                    EpProgress *progress) {
        int r;

        switch (format) {
        case EP_EXPORT_PPROF:
                r = ep_pprof_write(m, out, progress);
                break;
        case EP_EXPORT_FOLDED:
                r = ep_folded_write(m, folded_flags, out, progress);
                break;
        case EP_EXPORT_OTLP:
                r = write_otlp(m, out);
                break;
        default:
                return -EINVAL;
        }
        if (r < 0)
                return r;
        return fflush(out) == 0 ? 0 : -errno;
}

/* Where the export goes: stdout, or a temporary file next to path that replaces it once it is
 * complete (an interrupted export leaves no truncated profile behind), or path itself when it is
 * not a regular file. */
typedef struct Output {
        FILE *f;
        char *path, *tmp; /* NULL unless writing to a temporary file */
} Output;

static int output_open(const char *path, Output *ret) {
        *ret = (Output) {};
        if (!path || streq(path, "-")) {
                ret->f = stdout;
                return 0;
        }
        struct stat st;
        if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
                /* A FIFO, /dev/stdout, a terminal: written in place, never replaced. */
                ret->f = fopen(path, "we");
                return ret->f ? 0 : -errno;
        }
        if (asprintf(&ret->tmp, "%s.XXXXXX", path) < 0)
                return -ENOMEM;
        int fd = mkstemp(ret->tmp);
        if (fd < 0) {
                int r = -errno;
                free(ret->tmp);
                ret->tmp = NULL;
                return r;
        }
        /* mkstemp() makes the file 0600; a profile is an ordinary file (0666 & ~umask). */
        mode_t mask = umask(0);
        umask(mask);
        (void) fchmod(fd, 0666 & ~mask);
        ret->f = fdopen(fd, "w");
        ret->path = strdup(path);
        if (!ret->f || !ret->path) {
                if (ret->f)
                        fclose(ret->f);
                else
                        close(fd);
                unlink(ret->tmp);
                free(ret->tmp);
                free(ret->path);
                *ret = (Output) {};
                return -ENOMEM;
        }
        return 0;
}

/* Closes the output; on success (ok) the file takes its name. */
static int output_close(Output *o, bool ok) {
        int r = 0;

        if (o->f == stdout)
                return ok && fflush(stdout) != 0 ? -errno : 0;
        if (!o->tmp) {
                r = fclose(o->f) != 0 ? -errno : 0;
                *o = (Output) {};
                return r;
        }
        if (fclose(o->f) != 0)
                r = -errno;
        if (ok && r >= 0 && rename(o->tmp, o->path) < 0)
                r = -errno;
        if (!ok || r < 0)
                unlink(o->tmp);
        free(o->tmp);
        free(o->path);
        *o = (Output) {};
        return r;
}

static void help(void) {
        printf("Usage: ebpf-profiler export [OPTIONS] [-o FILE]\n"
               "\n"
               "Writes the samples of the profile store in a format other tools read:\n"
               "  pprof   gzipped profile.proto (go tool pprof, and tools that read its files)\n"
               "  folded  collapsed stacks, 'comm (pid);main;f;g 42' (flamegraph.pl, speedscope)\n"
               "  otlp    one OTLP ExportProfilesServiceRequest, protobuf bytes\n"
               "The format comes from --format, or from the file name: .pb.gz/.pprof, .folded/.txt,\n"
               ".otlp/.binpb.\n"
               "\n"
               "Options:\n"
               "  -f, --format FORMAT   pprof, folded or otlp\n"
               "  -o, --output FILE     write to FILE (default, or '-': standard output)\n"
               "      --no-process      folded: no leading 'comm (pid)' frame (the processes merge)\n"
               "  -q, --quiet           no progress and no summary on standard error\n"
               EP_VIEW_OPTIONS_HELP
               "  -h, --help            show this help\n");
}

enum {
        ARG_NO_PROCESS = _EP_VIEW_ARG_MAX + 1,
};

typedef struct Args {
        EpViewOptions view;
        const char *output;
        bool have_format, quiet, no_process;
        EpExportFormat format;
} Args;

/* Returns 1 to go on, 0 after --help, or the exit code for a bad command line (negated). */
static int parse_args(int argc, char **argv, Args *a) {
        static const struct option options[] = {
                EP_VIEW_LONG_OPTIONS,
                { "format", required_argument, NULL, 'f' },
                { "output", required_argument, NULL, 'o' },
                { "no-process", no_argument, NULL, ARG_NO_PROCESS },
                { "quiet", no_argument, NULL, 'q' },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        int c, r;

        opterr = 0;
        while ((c = getopt_long(argc, argv, ":f:o:qh", options, NULL)) >= 0) {
                r = ep_view_option(&a->view, "export", c, optarg);
                if (r < 0)
                        return -EXIT_USAGE;
                if (r > 0)
                        continue;
                switch (c) {
                case 'f':
                        if (ep_export_format_from_name(optarg, &a->format) < 0)
                                return -ep_usage_error("export", "unknown format '%s' (formats: pprof, folded, otlp)", optarg);
                        a->have_format = true;
                        break;
                case 'o':
                        if (!*optarg)
                                return -ep_usage_error("export", "-o needs a file name ('-' for standard output)");
                        a->output = optarg;
                        break;
                case ARG_NO_PROCESS:
                        a->no_process = true;
                        break;
                case 'q':
                        a->quiet = true;
                        break;
                case 'h':
                        help();
                        return 0;
                default:
                        return -ep_getopt_error("export", c, argv);
                }
        }
        if (optind < argc)
                return -ep_usage_error("export", "unexpected argument '%s'", argv[optind]);

        bool to_stdout = !a->output || streq(a->output, "-");
        if (!a->have_format && (to_stdout || ep_export_format_from_path(a->output, &a->format) < 0))
                return -ep_usage_error("export", "which format? Use --format pprof|folded|otlp%s",
                                       to_stdout ? "" : " (the file name does not say)");
        if (to_stdout && formats[a->format].binary && isatty(STDOUT_FILENO)) {
                fprintf(stderr,
                        "ebpf-profiler export: not writing a binary %s profile to a terminal.\n"
                        "Use -o FILE, or redirect standard output.\n",
                        ep_export_format_name(a->format));
                return -EXIT_FAILURE;
        }
        return 1;
}

static int export(const Args *a, EpProgress *progress) {
        _cleanup_sqlite_ sqlite3 *db = NULL;
        _cleanup_export_model_ EpExportModel *m = NULL;
        Output out;
        int r;

        r = ep_view_open_store(&a->view, "export", &db);
        if (r < 0)
                return EXIT_FAILURE;
        r = ep_export_model_load(db, &a->view.filter, progress, &m);
        if (r < 0) {
                ep_progress_done(progress);
                ep_view_read_error(&a->view, "export", db, r);
                return EXIT_FAILURE;
        }

        r = output_open(a->output, &out);
        if (r < 0) {
                ep_progress_done(progress);
                fprintf(stderr, "ebpf-profiler export: cannot create %s: %s\n", a->output, strerror(-r));
                return EXIT_FAILURE;
        }
        EpFoldedFlags folded = (a->no_process ? 0 : EP_FOLDED_PROCESS) | (a->view.lines ? EP_FOLDED_LINES : 0);
        r = ep_export_write(m, a->format, folded, out.f, progress);
        int k = output_close(&out, r >= 0);
        ep_progress_done(progress);
        if (r < 0 || k < 0) {
                fprintf(stderr, "ebpf-profiler export: writing %s failed: %s\n", a->output ?: "standard output",
                        strerror(-(r < 0 ? r : k)));
                return EXIT_FAILURE;
        }

        if (!a->quiet) {
                if (m->events == 0)
                        fprintf(stderr, "ebpf-profiler export: no samples in %s match; the %s profile is empty.\n",
                                a->view.store, ep_export_format_name(a->format));
                else
                        fprintf(stderr, "Wrote %" PRIu64 " samples (%zu stack%s, %zu process%s) as %s to %s.\n",
                                m->events, m->iv->n_stacks, m->iv->n_stacks == 1 ? "" : "s", m->iv->n_processes,
                                m->iv->n_processes == 1 ? "" : "es", ep_export_format_name(a->format),
                                a->output && !streq(a->output, "-") ? a->output : "standard output");
        }
        return EXIT_SUCCESS;
}

int verb_export(int argc, char **argv) {
        Args a = { .view = EP_VIEW_OPTIONS_INIT };
        EpProgress progress;

        int r = parse_args(argc, argv, &a);
        if (r <= 0)
                return -r;
        ep_progress_init(&progress, a.quiet);
        return export(&a, &progress);
}
