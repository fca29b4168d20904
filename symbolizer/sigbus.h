/* SPDX-License-Identifier: MIT */
#pragma once

/* Reading a mapped file raises SIGBUS when the file was truncated after it was mapped (the
 * profiled program's files are not ours; anyone may shrink them). Registered mappings are
 * protected: a fault inside one replaces the faulting page with a zero page, so the read
 * completes (with zeros), and the fault is recorded for the owner to notice and treat the
 * file as unusable. A SIGBUS anywhere else keeps its default action. Single-threaded use. */

#include <stdbool.h>
#include <stddef.h>

int ep_sigbus_install(void);
/* Returns a slot number (>= 0) for the range, or -ENOSPC when all slots are taken. */
int ep_sigbus_register(void *base, size_t size);
void ep_sigbus_unregister(int slot);
/* True if a fault hit the slot's range since the last call. */
bool ep_sigbus_faulted(int slot);
