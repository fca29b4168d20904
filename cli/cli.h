/* SPDX-License-Identifier: MIT */
#pragma once

/* The subcommands of `ebpf-profiler`. Each parses its own options (argv[0] is the command's
 * name) and returns the process exit code: 0 success, 1 failure, 2 bad usage, 3 (status) not
 * everything is running. */

int verb_run(int argc, char **argv);
int verb_status(int argc, char **argv);
int verb_top(int argc, char **argv);
int verb_flamegraph(int argc, char **argv);
int verb_export(int argc, char **argv);
