/* SPDX-License-Identifier: MIT */
#pragma once

/* The subcommands of `ebpf-profiler`. Each parses its own options (argv[0] is the command's
 * name) and returns the process exit code: 0 success, 1 failure, 2 bad usage, 3 not
 * everything is running (status, tables). */

#define EXIT_NOT_RUNNING 3

int verb_run(int argc, char **argv);
int verb_status(int argc, char **argv);
int verb_top(int argc, char **argv);
int verb_flamegraph(int argc, char **argv);
int verb_export(int argc, char **argv);
int verb_tables(int argc, char **argv);
