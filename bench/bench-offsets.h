/* SPDX-License-Identifier: MIT */
#pragma once

/* Shared by the symbolization benchmarks: file offsets of random addresses inside random
 * functions of a file, as `nm -S` (binutils) lists them (.symtab, else .dynsym), mapped to
 * file offsets through PT_LOAD, as the loader reports native frames. */

#include <fcntl.h>
#include <gelf.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct Func {
        uint64_t addr, size;
} Func;

static inline size_t list_functions(const char *path, Func **ret) {
        char cmd[4096], line[8192];
        size_t n = 0, cap = 0;
        Func *f = NULL;

        /* .symtab when there is one, else .dynsym. */
        for (int dyn = 0; dyn < 2 && n == 0; dyn++) {
                snprintf(cmd, sizeof cmd, "nm -S --defined-only %s '%s' 2>/dev/null", dyn ? "-D" : "", path);
                FILE *p = popen(cmd, "r");
                if (!p)
                        break;
                while (fgets(line, sizeof line, p)) {
                        unsigned long long a, s;
                        char type;
                        if (sscanf(line, "%llx %llx %c", &a, &s, &type) != 3 || s == 0 ||
                            (type != 'T' && type != 't' && type != 'W' && type != 'i'))
                                continue;
                        if (n == cap) {
                                cap = cap ? cap * 2 : 1024;
                                f = realloc(f, cap * sizeof(Func));
                                if (!f)
                                        abort();
                        }
                        f[n++] = (Func) { a, s };
                }
                pclose(p);
        }
        *ret = f;
        return n;
}

typedef struct Load {
        uint64_t vaddr, offset, filesz;
} Load;

static inline size_t read_loads(const char *path, Load loads[16]) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        size_t n = 0, phnum;
        Elf *e;

        if (fd < 0)
                return 0;
        elf_version(EV_CURRENT);
        e = elf_begin(fd, ELF_C_READ, NULL);
        if (e && elf_getphdrnum(e, &phnum) == 0)
                for (size_t i = 0; i < phnum && n < 16; i++) {
                        GElf_Phdr ph;
                        if (gelf_getphdr(e, (int) i, &ph) && ph.p_type == PT_LOAD)
                                loads[n++] = (Load) { ph.p_vaddr, ph.p_offset, ph.p_filesz };
                }
        elf_end(e);
        close(fd);
        return n;
}

/* count file offsets of random addresses in random functions. */
static inline uint64_t *make_offsets(const char *path, size_t count, unsigned seed) {
        Func *funcs = NULL;
        Load loads[16];
        size_t n_funcs = list_functions(path, &funcs), n_loads = read_loads(path, loads);
        uint64_t *out = calloc(count, sizeof(uint64_t));

        if (!out || n_funcs == 0 || n_loads == 0) {
                free(funcs);
                free(out);
                return NULL;
        }
        srandom(seed);
        for (size_t i = 0; i < count;) {
                const Func *f = &funcs[(size_t) random() % n_funcs];
                uint64_t a = f->addr + (uint64_t) random() % f->size;
                for (size_t k = 0; k < n_loads; k++)
                        if (a >= loads[k].vaddr && a < loads[k].vaddr + loads[k].filesz) {
                                out[i++] = a - loads[k].vaddr + loads[k].offset;
                                break;
                        }
        }
        free(funcs);
        return out;
}
