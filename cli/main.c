/* SPDX-License-Identifier: MIT */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "config.h"
#include "log.h"
#include "macro.h"
#include "view-options.h"

static const struct {
        const char *name;
        int (*run)(int argc, char **argv);
        const char *summary;
} verbs[] = {
        { "run", verb_run, "run the profiler's daemons in the foreground (without systemd)" },
        { "status", verb_status, "show whether the daemons run, with their counters" },
        { "top", verb_top, "list the hottest functions in the profile store" },
        { "flamegraph", verb_flamegraph, "write an interactive HTML (or SVG) flame graph of the profile store" },
        { "export", verb_export, "write the profile store as pprof, folded stacks or OTLP" },
        { "tables", verb_tables, "show each file's unwind table: loaded, on its way, or why not" },
};

static void help(void) {
        printf("Usage: ebpf-profiler [--help] [--version] COMMAND [OPTIONS]\n"
               "\n"
               "Whole-system CPU profiler.\n"
               "\n"
               "Commands:\n");
        for (size_t i = 0; i < ELEMENTSOF(verbs); i++)
                printf("  %-12s %s\n", verbs[i].name, verbs[i].summary);
        printf("\n'ebpf-profiler COMMAND --help' describes a command's options.\n");
}

int main(int argc, char **argv) {
        log_setup("ebpf-profiler");

        if (argc < 2) {
                help();
                return EXIT_USAGE;
        }
        const char *verb = argv[1];
        if (streq(verb, "-h") || streq(verb, "--help") || streq(verb, "help")) {
                help();
                return 0;
        }
        if (streq(verb, "--version")) {
                printf("ebpf-profiler %s\n", EP_VERSION);
                return 0;
        }
        for (size_t i = 0; i < ELEMENTSOF(verbs); i++)
                if (streq(verb, verbs[i].name))
                        return verbs[i].run(argc - 1, argv + 1);

        if (verb[0] == '-')
                return ep_usage_error(NULL, "unrecognized option '%s'", verb);
        return ep_usage_error(NULL, "unknown command '%s' (commands: run, status, top, flamegraph, export, tables)", verb);
}
