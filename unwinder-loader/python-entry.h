/* SPDX-License-Identifier: MIT */
#pragma once

/* A process's py_procs entry (struct ep_bpf_py_proc, bpf/cpython.h) from the facts the
 * symbolizer's DetectRuntime gave about a CPython file it maps (common/runtime-facts.h,
 * validated) and the layout of that version (common/python-layout.c): what the loader writes to
 * BPF (runtime-cpython.c) and the replay tests rebuild from a core dump
 * (tests/replay/replay-python.c). Nothing here keeps state or reads a file. */

#include <stdbool.h>
#include <stdint.h>

#include "profiler.h" /* and bpf/cpython.h, after the sizes it uses */
#include "python-layout.h"
#include "runtime-facts.h"

/* Only files whose name contains "python" are asked about (an interpreter linked statically
 * into a program of another name is not recognised). */
bool ep_py_name_says_python(const char *path);

/* ELF virtual address → process address for the file mapped at [start, …) from file offset
 * pgoff (bytes): the load bias, the same for all segments, found from the segment mapped there. */
bool ep_py_facts_load_bias(const EpCPythonFacts *f, uint64_t start, uint64_t pgoff, uint64_t *ret);

/* pc (a process address) is in the file's eval loop, mapped at start from file offset pgoff. */
bool ep_py_facts_in_eval_loop(const EpCPythonFacts *f, uint64_t start, uint64_t pgoff, uint64_t pc);

/* The py_procs entry of a process that maps the file at start from file offset pgoff: false
 * when the mapping is not one of the file's segments or an offset the walk reads is unknown. */
bool ep_py_facts_entry(const EpCPythonFacts *f, const EpPyLayout *layout, uint64_t start, uint64_t pgoff,
                       struct ep_bpf_py_proc *ret);
