/* SPDX-License-Identifier: MIT */
#pragma once

/* Loadable kernel modules: the /proc/modules table ("NAME SIZE REFS DEPS STATE ADDRESS [TAINT]"
 * per line) as address ranges [address, address + size), and GNU build IDs from sysfs
 * (/sys/module/NAME/notes/.note.gnu.build-id; vmlinux's in /sys/kernel/notes), both ELF note
 * streams.
 *
 * The range is approximate on purpose: ADDRESS is the base of the module's text and SIZE the
 * total of all its allocations, which since Linux 6.4 need not be contiguous. It is used only for
 * addresses that no kallsyms symbol of the module covers (see resolve-kernel.c), where "somewhere
 * in module X" is better than nothing. A table whose addresses are all zero (read without
 * CAP_SYSLOG) is refused with -EPERM, like kallsyms. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "macro.h"

#define EP_KMODULE_NAME_MAX 64       /* the kernel's MODULE_NAME_LEN is 56 */
#define EP_KMODULE_BUILD_ID_MAX 64   /* GNU build IDs are 20 bytes (SHA-1) in practice */

typedef struct EpKmodule {
        char name[EP_KMODULE_NAME_MAX];
        uint64_t start, size;
        uint8_t build_id[EP_KMODULE_BUILD_ID_MAX];
        size_t build_id_size; /* 0: unknown */
} EpKmodule;

typedef struct EpKmodules EpKmodules;

int ep_kmodules_parse_file(FILE *f, EpKmodules **ret);
int ep_kmodules_parse_fd(int fd, EpKmodules **ret); /* reads from the current position; fd stays open */
int ep_kmodules_parse_text(const char *text, size_t len, EpKmodules **ret);
/* An empty table (a kernel without modules, or none loaded). */
int ep_kmodules_new_empty(EpKmodules **ret);
EpKmodules *ep_kmodules_free(EpKmodules *m);
DEFINE_TRIVIAL_CLEANUP_FUNC(EpKmodules *, ep_kmodules_free);

/* Sorted by start address. */
size_t ep_kmodules_count(const EpKmodules *m);
const EpKmodule *ep_kmodules_get(const EpKmodules *m, size_t i);
/* The module whose range covers addr (the one starting closest below it when ranges overlap),
 * or NULL. */
const EpKmodule *ep_kmodules_find(const EpKmodules *m, uint64_t addr);
const EpKmodule *ep_kmodules_find_name(const EpKmodules *m, const char *name);
/* Same modules at the same places (reference counts and states are not compared: they change
 * all the time without moving any code). Either may be NULL. */
bool ep_kmodules_same_layout(const EpKmodules *a, const EpKmodules *b);

/* Fills in each module's build ID from SYSFS_ROOT/module/NAME/notes/.note.gnu.build-id
 * (sysfs_root NULL: "/sys"). Best effort: a module without the note keeps an empty ID. Returns
 * how many were found. */
size_t ep_kmodules_read_build_ids(EpKmodules *m, const char *sysfs_root);

/* vmlinux's GNU build ID from SYSFS_ROOT/kernel/notes. Returns its size, -ENOENT (no such
 * note), or the error of reading the file. */
int ep_kernel_read_build_id(const char *sysfs_root, uint8_t buf[static EP_KMODULE_BUILD_ID_MAX]);

/* The GNU build ID (NT_GNU_BUILD_ID note, owner "GNU") in a stream of ELF notes with 4-byte
 * alignment, as in SHT_NOTE sections and the sysfs note files. Returns its size or -ENOENT;
 * -EBADMSG when the stream is malformed before one is found. */
int ep_elf_notes_find_build_id(const void *data, size_t size, uint8_t buf[static EP_KMODULE_BUILD_ID_MAX]);
