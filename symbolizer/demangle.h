/* SPDX-License-Identifier: MIT */
#pragma once

/* Function names as people read them: C++ (Itanium "_Z…"), Rust legacy ("_ZN…17h<hash>E",
 * the hash dropped: users expect crate::module::func) and Rust v0 ("_R…") through libiberty,
 * the demangler binutils and gdb use. Anything else (C names, names the demangler rejects) is
 * returned unchanged. */

#include <stdbool.h>
#include <stddef.h>

/* Longer mangled names are not demangled (returned as they are): the demangler's time and
 * output grow with the input, and real names stay far below this. */
#define EP_DEMANGLE_INPUT_MAX 8192
/* Demangled output is cut to this many bytes. */
#define EP_DEMANGLE_OUTPUT_MAX 16384

/* *ret is a new string. Returns 1 when the name was demangled, 0 when copied, -ENOMEM. */
int ep_demangle(const char *name, char **ret);

/* Replaces *name (owned, may be NULL) with its demangled form. 0 or -ENOMEM (*name kept). */
int ep_demangle_in_place(char **name);
