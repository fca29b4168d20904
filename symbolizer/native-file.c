/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "debug-file.h"
#include "demangle.h"
#include "dwarf-lines.h"
#include "elf-plt.h"
#include "log.h"
#include "native-file.h"

typedef struct NativeFile {
        EpElfFile *debug;     /* separate debug file, or NULL */
        char *debug_path;     /* its path */
        char *search_path;    /* the path hint the last search used, NULL: none */
        bool debug_searched;  /* looked for it (with a path, when debug_had_path) */
        bool debug_had_path;
        bool debug_needed;    /* valid once debug_searched */
        EpDwarf *dwarf;       /* of the file, else of the debug file; NULL: neither has DWARF */
        bool dwarf_chosen;
        EpPltTable *plt;      /* its PLT stubs, once read */
} NativeFile;

static void native_file_free(void *p) {
        NativeFile *n = p;

        if (!n)
                return;
        /* The DWARF may read the debug file: it goes first. */
        ep_dwarf_free(n->dwarf);
        ep_plt_table_free(n->plt);
        ep_elf_free(n->debug);
        free(n->debug_path);
        free(n->search_path);
        free(n);
}

static int native_file_get(EpElfFile *elf, NativeFile **ret) {
        NativeFile *n = ep_elf_userdata(elf);

        if (!n) {
                n = calloc(1, sizeof(NativeFile));
                if (!n)
                        return -ENOMEM;
                ep_elf_set_userdata(elf, n, native_file_free);
        }
        *ret = n;
        return 0;
}

static bool needs_debug_file(EpElfFile *elf) {
        size_t count = 0;
        const char *table = "";

        if (!ep_dwarf_present(elf))
                return true;
        return ep_elf_symbol_count(elf, &count, &table) >= 0 && !streq(table, ".symtab");
}

/* Looks for the debug file once; again once a path shows up when the first search had none
 * (a .gnu_debuglink is found next to the binary only). */
static int find_debug_file(NativeFile *n, EpElfFile *elf, const char *path_hint) {
        bool have_path = path_hint && path_hint[0] == '/';
        int r;

        if (n->debug || (n->debug_searched && (n->debug_had_path || !have_path)))
                return 0;
        if (!needs_debug_file(elf)) {
                n->debug_searched = n->debug_had_path = true;
                return 0;
        }
        if (have_path) {
                char *p = strdup(path_hint);
                if (!p)
                        return -ENOMEM;
                free(n->search_path);
                n->search_path = p;
        }
        n->debug_searched = n->debug_needed = true;
        n->debug_had_path = have_path;

        r = ep_debug_file_find(elf, n->search_path, &n->debug, &n->debug_path);
        if (r == -ENOMEM)
                return r;
        if (r >= 0 && n->dwarf_chosen && !n->dwarf)
                n->dwarf_chosen = false; /* the debug file may bring DWARF */
        return 0;
}

/* The file's state with its debug file looked for (with path_hint when it brings one). */
static int native_file_searched(EpElfFile *elf, const char *path_hint, NativeFile **ret) {
        NativeFile *n;
        int r;

        r = native_file_get(elf, &n);
        if (r < 0)
                return r;
        r = find_debug_file(n, elf, path_hint);
        if (r < 0)
                return r;
        *ret = n;
        return 0;
}

int ep_native_debug_info(EpElfFile *elf, const char *path_hint, EpNativeDebugInfo *ret) {
        NativeFile *n;
        int r;

        r = native_file_searched(elf, path_hint, &n);
        if (r < 0)
                return r;
        *ret = (EpNativeDebugInfo) {
                .outcome = !n->debug_needed ? EP_NATIVE_DEBUG_NOT_NEEDED
                           : n->debug       ? EP_NATIVE_DEBUG_FOUND
                                            : EP_NATIVE_DEBUG_NONE,
                .search_path = n->search_path,
                .debug_path = n->debug_path,
        };
        return 0;
}

static int dwarf_get(NativeFile *n, EpElfFile *elf, EpDwarf **ret) {
        int r;

        if (!n->dwarf_chosen) {
                EpElfFile *src = ep_dwarf_present(elf) ? elf : n->debug && ep_dwarf_present(n->debug) ? n->debug : NULL;

                if (src) {
                        r = ep_dwarf_new(src, &n->dwarf);
                        if (r < 0)
                                return r;
                }
                n->dwarf_chosen = true;
        }
        *ret = n->dwarf;
        return n->dwarf ? 0 : -ENOENT;
}

static int table_lookup(EpElfFile *elf, uint64_t vaddr, bool public_only, char **ret) {
        return public_only ? ep_elf_lookup_public(elf, vaddr, ret, NULL) : ep_elf_lookup(elf, vaddr, ret, NULL);
}

/* The function from the symbol tables: the file's .symtab, the debug file's .symtab, else the
 * file's .dynsym; with public_only, only a global or weak symbol. Returns the demangled name. */
static int symbol_name(NativeFile *n, EpElfFile *elf, uint64_t vaddr, bool public_only, char **ret) {
        const char *table = "";
        size_t count = 0;
        int r;

        r = ep_elf_symbol_count(elf, &count, &table);
        if (r < 0)
                return r;
        if (!streq(table, ".symtab") && n->debug) {
                const char *dtable = "";
                if (ep_elf_symbol_count(n->debug, &count, &dtable) >= 0 && streq(dtable, ".symtab")) {
                        r = table_lookup(n->debug, vaddr, public_only, ret);
                        if (r == -ENOMEM)
                                return r;
                        if (r >= 0)
                                return ep_demangle_in_place(ret);
                        /* A debug file that went bad is not the file's fault: .dynsym next. */
                }
        }
        r = table_lookup(elf, vaddr, public_only, ret);
        if (r < 0)
                return r;
        return ep_demangle_in_place(ret);
}

/* The PLT stub at vaddr, named after the function it calls (elf-plt.h). */
static int plt_name(NativeFile *n, EpElfFile *elf, uint64_t vaddr, char **ret) {
        int r;

        if (!n->plt) {
                r = ep_plt_table_read(elf, &n->plt);
                if (r < 0)
                        return r;
        }
        return ep_plt_table_lookup(n->plt, vaddr, ret);
}

static int single_line(char *function, EpSymLine **ret_lines, size_t *ret_n) {
        EpSymLine *l = calloc(1, sizeof(EpSymLine));

        if (!l) {
                free(function);
                return -ENOMEM;
        }
        l->function = function;
        l->file = strdup("");
        if (!l->file) {
                ep_sym_lines_free(l, 1);
                return -ENOMEM;
        }
        *ret_lines = l;
        *ret_n = 1;
        return 0;
}

int ep_native_symbolize(EpElfFile *elf, const char *path_hint, uint64_t vaddr, EpSymLine **ret_lines, size_t *ret_n) {
        EpSymLine *lines = NULL;
        size_t n_lines = 0;
        char *name = NULL;
        NativeFile *n;
        EpDwarf *dwarf;
        int r;

        r = native_file_searched(elf, path_hint, &n);
        if (r < 0)
                return r;

        /* No symbol table or DWARF covers a PLT stub: named first, from the relocations. */
        r = plt_name(n, elf, vaddr, &name);
        if (r >= 0)
                return single_line(name, ret_lines, ret_n);
        if (r != -ENOENT)
                return r;

        r = dwarf_get(n, elf, &dwarf);
        if (r == -ENOMEM)
                return r;
        if (r >= 0) {
                r = ep_dwarf_lines(dwarf, vaddr, &lines, &n_lines);
                if (r == -ENOMEM)
                        return r;
                if (r == -EIO && ep_elf_check(elf) < 0)
                        return -EIO;
                if (r < 0 && r != -ENOENT)
                        log_debug_errno(r, "No DWARF lines at 0x%" PRIx64 ": %m", vaddr);
        }

        /* The outermost function, when DWARF did not name it, and everything when it had
         * nothing: from the symbol tables. When DWARF did name it, an exported alias still
         * wins: DWARF names glibc's read() after its internal assembler label
         * (__GI___libc_read), while people know it, and perf shows it, as `read`. */
        if (n_lines > 0 && lines[n_lines - 1].function) {
                r = symbol_name(n, elf, vaddr, true, &name);
                if (r == -ENOMEM) {
                        ep_sym_lines_free(lines, n_lines);
                        return r;
                }
                if (r >= 0) {
                        free(lines[n_lines - 1].function);
                        lines[n_lines - 1].function = TAKE_PTR(name);
                }
        }
        if (n_lines == 0 || !lines[n_lines - 1].function) {
                r = symbol_name(n, elf, vaddr, false, &name);
                if (r == -ENOMEM || r == -ENOEXEC || r == -EIO) {
                        ep_sym_lines_free(lines, n_lines);
                        return r;
                }
                if (n_lines == 0)
                        return r < 0 ? r : single_line(name, ret_lines, ret_n);
                lines[n_lines - 1].function = name;
        }

        /* Unnamed inlined functions (rare): shown as addr2line does. */
        for (size_t i = 0; i < n_lines; i++)
                if (!lines[i].function) {
                        lines[i].function = strdup("??");
                        if (!lines[i].function) {
                                ep_sym_lines_free(lines, n_lines);
                                return -ENOMEM;
                        }
                }
        *ret_lines = lines;
        *ret_n = n_lines;
        return 0;
}
