/* SPDX-License-Identifier: MIT */
#include <elf.h>
#include <stdbool.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/procfs.h>
#include <sys/stat.h>

#include "core-file.h"

#define MAX_THREADS 4096
#define MAX_MAPPINGS 65536
#define MAX_SEGMENTS (1u << 20)
#define ALIGN4(x) (((size_t) (x) + 3) & ~(size_t) 3)

typedef struct Segment {
        uint64_t vaddr, memsz;
        uint64_t offset, filesz; /* bytes in the core file, filesz <= memsz */
} Segment;

struct EpCore {
        uint8_t *map;
        size_t size;

        Segment *segments;
        size_t n_segments;
        EpCoreThread *threads;
        size_t n_threads;
        EpCoreMapping *mappings;
        size_t n_mappings;
        int *mapping_fds; /* lazily opened, -1 = not yet, -2 = failed */
        uint64_t *auxv;   /* (type, value) pairs */
        size_t n_auxv;
};

EpCore *ep_core_free(EpCore *c) {
        if (!c)
                return NULL;
        for (size_t i = 0; i < c->n_mappings; i++) {
                free(c->mappings[i].path);
                if (c->mapping_fds && c->mapping_fds[i] >= 0)
                        close(c->mapping_fds[i]);
        }
        free(c->mappings);
        free(c->mapping_fds);
        free(c->segments);
        free(c->threads);
        free(c->auxv);
        if (c->map)
                munmap(c->map, c->size);
        free(c);
        return NULL;
}

/* [off, off+len) lies inside the core file. */
static bool in_file(const EpCore *c, uint64_t off, uint64_t len) {
        return off <= c->size && len <= c->size - off;
}

static int parse_prstatus(EpCore *c, const uint8_t *desc, size_t len) {
        struct elf_prstatus st;
        EpCoreThread *t;

        if (len < sizeof st)
                return -EBADMSG;
        if (c->n_threads >= MAX_THREADS)
                return -E2BIG;
        memcpy(&st, desc, sizeof st);
        _Static_assert(sizeof(st.pr_reg) == sizeof(t->regs), "pr_reg is not user_regs_struct");

        t = reallocarray(c->threads, c->n_threads + 1, sizeof *t);
        if (!t)
                return -ENOMEM;
        c->threads = t;
        t = &c->threads[c->n_threads++];
        t->tid = st.pr_pid;
        memcpy(t->regs, &st.pr_reg, sizeof t->regs);
        return 0;
}

/* NT_FILE: count, page size, count × (start, end, offset in pages), then count names. */
static int parse_file_note(EpCore *c, const uint8_t *desc, size_t len) {
        uint64_t count, page_size;
        const char *names, *end;

        if (c->mappings)
                return -EBADMSG; /* only one NT_FILE per core */
        if (len < 16)
                return -EBADMSG;
        memcpy(&count, desc, 8);
        memcpy(&page_size, desc + 8, 8);
        if (count > MAX_MAPPINGS || page_size == 0 || page_size > (1u << 30) ||
            (len - 16) / 24 < count)
                return -EBADMSG;

        c->mappings = calloc(count ?: 1, sizeof(EpCoreMapping));
        c->mapping_fds = calloc(count ?: 1, sizeof(int));
        if (!c->mappings || !c->mapping_fds)
                return -ENOMEM;

        names = (const char *) desc + 16 + count * 24;
        end = (const char *) desc + len;
        for (uint64_t i = 0; i < count; i++) {
                uint64_t v[3];
                const char *nul;

                memcpy(v, desc + 16 + i * 24, sizeof v);
                if (v[1] <= v[0] || v[2] > UINT64_MAX / page_size)
                        return -EBADMSG;
                nul = memchr(names, 0, (size_t) (end - names));
                if (!nul)
                        return -EBADMSG;

                EpCoreMapping *m = &c->mappings[c->n_mappings];
                m->path = strdup(names);
                if (!m->path)
                        return -ENOMEM;
                m->start = v[0];
                m->end = v[1];
                m->offset = v[2] * page_size;
                c->mapping_fds[c->n_mappings] = -1;
                c->n_mappings++;
                names = nul + 1;
        }
        return 0;
}

static int parse_auxv(EpCore *c, const uint8_t *desc, size_t len) {
        if (c->auxv)
                return -EBADMSG;
        c->n_auxv = len / 16;
        c->auxv = malloc((c->n_auxv ?: 1) * 16);
        if (!c->auxv)
                return -ENOMEM;
        memcpy(c->auxv, desc, c->n_auxv * 16);
        return 0;
}

static int parse_notes(EpCore *c, uint64_t off, uint64_t len) {
        const uint8_t *p = c->map + off, *end = c->map + off + len;

        while ((size_t) (end - p) >= sizeof(Elf64_Nhdr)) {
                Elf64_Nhdr nh;
                size_t name_len, desc_len;
                int r = 0;

                memcpy(&nh, p, sizeof nh);
                p += sizeof nh;
                name_len = ALIGN4(nh.n_namesz);
                desc_len = ALIGN4(nh.n_descsz);
                if (nh.n_namesz > (size_t) (end - p) || name_len > (size_t) (end - p))
                        return -EBADMSG;
                const char *name = (const char *) p;
                p += name_len;
                if (nh.n_descsz > (size_t) (end - p))
                        return -EBADMSG;
                const uint8_t *desc = p;
                p += MIN(desc_len, (size_t) (end - p));

                bool core = nh.n_namesz == 5 && memcmp(name, "CORE", 5) == 0;
                if (core && nh.n_type == NT_PRSTATUS)
                        r = parse_prstatus(c, desc, nh.n_descsz);
                else if (core && nh.n_type == NT_FILE)
                        r = parse_file_note(c, desc, nh.n_descsz);
                else if (core && nh.n_type == NT_AUXV)
                        r = parse_auxv(c, desc, nh.n_descsz);
                if (r < 0)
                        return r;
        }
        return 0;
}

int ep_core_open(const char *path, EpCore **ret) {
        _cleanup_(ep_core_freep) EpCore *c = NULL;
        _cleanup_close_ int fd = -EBADF;
        Elf64_Ehdr eh;
        struct stat st;
        uint64_t phnum;
        int r;

        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        if (fstat(fd, &st) < 0)
                return -errno;
        if (!S_ISREG(st.st_mode) || (uint64_t) st.st_size < sizeof eh)
                return -EBADMSG;

        c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        c->size = (size_t) st.st_size;
        c->map = mmap(NULL, c->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (c->map == MAP_FAILED) {
                c->map = NULL;
                return -errno;
        }

        memcpy(&eh, c->map, sizeof eh);
        if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
            eh.e_ident[EI_DATA] != ELFDATA2LSB || eh.e_type != ET_CORE ||
            eh.e_machine != EM_X86_64 || eh.e_phentsize != sizeof(Elf64_Phdr))
                return -EBADMSG;
        phnum = eh.e_phnum;
        if (phnum == PN_XNUM) {
                /* More segments than fit in e_phnum: the count is in section header 0. */
                Elf64_Shdr sh0;
                if (eh.e_shoff == 0 || !in_file(c, eh.e_shoff, sizeof sh0))
                        return -EBADMSG;
                memcpy(&sh0, c->map + eh.e_shoff, sizeof sh0);
                phnum = sh0.sh_info;
        }
        if (phnum > MAX_SEGMENTS || !in_file(c, eh.e_phoff, phnum * sizeof(Elf64_Phdr)))
                return -EBADMSG;

        c->segments = calloc(phnum ?: 1, sizeof(Segment));
        if (!c->segments)
                return -ENOMEM;

        for (size_t i = 0; i < phnum; i++) {
                Elf64_Phdr ph;

                memcpy(&ph, c->map + eh.e_phoff + i * sizeof ph, sizeof ph);
                if (ph.p_type == PT_NOTE) {
                        if (!in_file(c, ph.p_offset, ph.p_filesz))
                                return -EBADMSG;
                        r = parse_notes(c, ph.p_offset, ph.p_filesz);
                        if (r < 0)
                                return r;
                } else if (ph.p_type == PT_LOAD) {
                        if (ph.p_filesz > ph.p_memsz || !in_file(c, ph.p_offset, ph.p_filesz) ||
                            ph.p_vaddr + ph.p_memsz < ph.p_vaddr)
                                return -EBADMSG;
                        c->segments[c->n_segments++] = (Segment) {
                                .vaddr = ph.p_vaddr,
                                .memsz = ph.p_memsz,
                                .offset = ph.p_offset,
                                .filesz = ph.p_filesz,
                        };
                }
        }
        if (c->n_threads == 0)
                return -EBADMSG;

        *ret = TAKE_PTR(c);
        return 0;
}

size_t ep_core_n_threads(const EpCore *c) {
        return c->n_threads;
}

const EpCoreThread *ep_core_thread(const EpCore *c, size_t i) {
        return i < c->n_threads ? &c->threads[i] : NULL;
}

size_t ep_core_n_mappings(const EpCore *c) {
        return c->n_mappings;
}

const EpCoreMapping *ep_core_mapping(const EpCore *c, size_t i) {
        return i < c->n_mappings ? &c->mappings[i] : NULL;
}

const EpCoreMapping *ep_core_mapping_at(const EpCore *c, uint64_t addr) {
        for (size_t i = 0; i < c->n_mappings; i++)
                if (addr >= c->mappings[i].start && addr < c->mappings[i].end)
                        return &c->mappings[i];
        return NULL;
}

int ep_core_auxv(const EpCore *c, uint64_t type, uint64_t *ret) {
        for (size_t i = 0; i < c->n_auxv; i++)
                if (c->auxv[2 * i] == type) {
                        *ret = c->auxv[2 * i + 1];
                        return 0;
                }
        return -ENOENT;
}

int ep_core_segment_at(const EpCore *c, uint64_t addr, uint64_t *ret_start, uint64_t *ret_end) {
        for (size_t i = 0; i < c->n_segments; i++) {
                const Segment *s = &c->segments[i];
                if (addr >= s->vaddr && addr - s->vaddr < s->filesz) {
                        *ret_start = s->vaddr;
                        *ret_end = s->vaddr + s->filesz;
                        return 0;
                }
        }
        return -ENOENT;
}

/* Copies what one source holds of [addr, addr+n); returns the bytes copied (0: none here). */
static size_t read_segments(const EpCore *c, uint64_t addr, uint8_t *buf, size_t n) {
        for (size_t i = 0; i < c->n_segments; i++) {
                const Segment *s = &c->segments[i];
                if (addr >= s->vaddr && addr - s->vaddr < s->filesz) {
                        uint64_t k = MIN((uint64_t) n, s->filesz - (addr - s->vaddr));
                        memcpy(buf, c->map + s->offset + (addr - s->vaddr), k);
                        return k;
                }
        }
        return 0;
}

static size_t read_mapped_file(EpCore *c, uint64_t addr, uint8_t *buf, size_t n) {
        for (size_t i = 0; i < c->n_mappings; i++) {
                const EpCoreMapping *m = &c->mappings[i];
                if (addr < m->start || addr >= m->end)
                        continue;
                if (c->mapping_fds[i] == -1) {
                        int fd = open(m->path, O_RDONLY | O_CLOEXEC);
                        c->mapping_fds[i] = fd >= 0 ? fd : -2;
                }
                if (c->mapping_fds[i] < 0)
                        return 0;
                uint64_t k = MIN((uint64_t) n, m->end - addr);
                if (m->offset + (addr - m->start) > (uint64_t) INT64_MAX)
                        return 0;
                ssize_t got = pread(c->mapping_fds[i], buf, k, (off_t) (m->offset + (addr - m->start)));
                return got > 0 ? (size_t) got : 0;
        }
        return 0;
}

int ep_core_read(EpCore *c, uint64_t addr, void *buf, size_t n) {
        uint8_t *p = buf;

        while (n > 0) {
                size_t k;

                if (addr + n < addr)
                        return -EFAULT;
                k = read_segments(c, addr, p, n);
                if (k == 0)
                        k = read_mapped_file(c, addr, p, n);
                if (k == 0)
                        return -EFAULT;
                p += k;
                addr += k;
                n -= k;
        }
        return 0;
}
