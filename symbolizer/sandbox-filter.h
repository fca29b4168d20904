/* SPDX-License-Identifier: MIT */
#pragma once

/* The system calls a sandbox child (sandbox.h) may not make: it parses a file any user may have
 * crafted, so a child taken over must gain nothing the symbolizer's user has. Denied (EPERM,
 * so that a library that merely tries one degrades instead of dying): anything that reaches
 * another process or the bus (sockets, ptrace, process_vm_*, pidfds, signals to any process but
 * itself), runs a program, changes a file system (opens for writing, creating, renaming,
 * unlinking, permissions), or escapes the filter or the limits (io_uring, bpf, perf events,
 * userfaultfd, namespaces, keys). Reading files by path stays: the extraction opens separate
 * debug files under the debug directories, which the symbolizer's user may read anyway. */

#include <sys/types.h>

/* Installs the filter on the calling process (sets no_new_privs first). */
int ep_sandbox_filter_install(pid_t self);
