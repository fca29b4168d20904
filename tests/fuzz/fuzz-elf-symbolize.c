/* SPDX-License-Identifier: MIT */
/* libFuzzer target: arbitrary bytes as an ELF file (through a memfd, as the symbolizer gets
 * descriptors) into native symbolization — PT_LOAD mapping, symbol tables, DWARF lines and
 * inline chains, separate-debug-file lookup (under roots that do not exist, so nothing of the
 * machine is read) and demangling. A few addresses per input: the entry point, the first two
 * stubs of each PLT section and the start, middle and end of each loadable segment. Any crash, sanitizer report or leak is a bug;
 * every answer must be well formed. Inputs that look like mangled names also go to the
 * demangler directly. Built with clang by tests/fuzz/meson.build; seeds in
 * corpus-elf-symbolize/ (small programs from tests/workloads/, DWARF 4, 5, zlib-compressed,
 * -g1 C++, a stripped copy with a .gnu_debuglink). */

#include <gelf.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz-util.h"
#include "debug-file.h"
#include "demangle.h"
#include "dwarf-lines.h"
#include "elf-symbols.h"
#include "native-file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_ADDRS 16

static void check_lines(const EpSymLine *lines, size_t n) {
        if (n == 0 || n > EP_DWARF_MAX_CHAIN)
                abort();
        for (size_t i = 0; i < n; i++)
                if (!lines[i].function || !lines[i].file || strlen(lines[i].function) > 4 * EP_DEMANGLE_OUTPUT_MAX)
                        abort();
}

static size_t pick_addresses(EpElfFile *f, uint64_t addrs[MAX_ADDRS]) {
        Elf *elf = ep_elf_handle(f);
        GElf_Ehdr eh;
        size_t n = 0, phnum;

        if (!gelf_getehdr(elf, &eh))
                return 0;
        addrs[n++] = eh.e_entry;
        /* PLT stubs (elf-plt.c): the resolver's entry and the one after it. */
        static const char *const plts[] = { ".plt", ".plt.sec", ".plt.got" };
        for (size_t i = 0; i < ELEMENTSOF(plts) && n + 2 <= MAX_ADDRS; i++) {
                GElf_Shdr sh;
                if (ep_elf_section(f, plts[i], &sh)) {
                        addrs[n++] = sh.sh_addr;
                        addrs[n++] = sh.sh_addr + 16;
                }
        }
        if (elf_getphdrnum(elf, &phnum) < 0)
                return n;
        for (size_t i = 0; i < phnum && n + 3 <= MAX_ADDRS; i++) {
                GElf_Phdr ph;
                if (!gelf_getphdr(elf, (int) i, &ph) || ph.p_type != PT_LOAD || ph.p_memsz == 0)
                        continue;
                addrs[n++] = ph.p_vaddr;
                addrs[n++] = ph.p_vaddr + ph.p_memsz / 2;
                addrs[n++] = ph.p_vaddr + ph.p_memsz - 1;
        }
        return n;
}

static void fuzz_demangle(const uint8_t *data, size_t size) {
        char *name, *out = NULL;

        if (size < 2 || size > EP_DEMANGLE_INPUT_MAX || data[0] != '_')
                return;
        name = strndup((const char *) data, size);
        if (!name)
                return;
        if (ep_demangle(name, &out) >= 0) {
                if (!out || strlen(out) > EP_DEMANGLE_OUTPUT_MAX)
                        abort();
                free(out);
        }
        free(name);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static int fd = -1;
        EpElfFile *f = NULL;
        uint64_t addrs[MAX_ADDRS];

        if (fd < 0) {
                EpDwarfLimits l = EP_DWARF_LIMITS_DEFAULT;
                /* Smaller bounds than the daemon's keep each input fast. */
                l.max_unit_bytes = 4u << 20;
                l.max_inflated = 64u << 20;
                ep_dwarf_set_limits(&l);
                if (ep_debug_roots_set("/nonexistent/fuzz-debug-root") < 0)
                        abort();
        }
        fuzz_demangle(data, size);
        fuzz_memfd_fill(&fd, "fuzz-elf", data, size);

        int copy = dup(fd);
        if (copy < 0)
                abort();
        if (ep_elf_open(copy, &f) < 0)
                return 0;

        size_t n = pick_addresses(f, addrs);
        for (size_t i = 0; i < n; i++) {
                EpSymLine *lines = NULL;
                size_t n_lines = 0;
                uint64_t v;

                /* The offset → address path too, as the resolver takes it. */
                (void) ep_elf_offset_to_vaddr(f, addrs[i] & 0xffffff, &v);
                if (ep_native_symbolize(f, "/nonexistent/dir/file.so", addrs[i], &lines, &n_lines) >= 0) {
                        check_lines(lines, n_lines);
                        ep_sym_lines_free(lines, n_lines);
                }
        }
        ep_elf_free(f);
        return 0;
}
