/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "kmodules.h"
#include "line-reader.h"

#define MAX_LINE (64u << 10) /* the dependents column can be long, but not this long */
#define MAX_MODULES 65536u
#define MAX_NOTES_FILE (64u << 10)
#define NT_GNU_BUILD_ID_TYPE 3

struct EpKmodules {
        EpKmodule *mods;
        size_t n, cap;
        size_t hidden; /* lines whose address read as zero */
};

EpKmodules *ep_kmodules_free(EpKmodules *m) {
        if (!m)
                return NULL;
        free(m->mods);
        free(m);
        return NULL;
}

int ep_kmodules_new_empty(EpKmodules **ret) {
        EpKmodules *m = calloc(1, sizeof(EpKmodules));
        if (!m)
                return -ENOMEM;
        *ret = m;
        return 0;
}

size_t ep_kmodules_count(const EpKmodules *m) {
        return m ? m->n : 0;
}

const EpKmodule *ep_kmodules_get(const EpKmodules *m, size_t i) {
        return m && i < m->n ? &m->mods[i] : NULL;
}

/* ---- /proc/modules ---- */

static bool is_space(char c) {
        return c == ' ' || c == '\t';
}

/* The next space-separated field of [*p, end), or false at the end. */
static bool next_field(const char **p, const char *end, const char **ret, size_t *ret_len) {
        const char *s = *p;

        while (s < end && is_space(*s))
                s++;
        if (s >= end)
                return false;
        const char *e = s;
        while (e < end && !is_space(*e))
                e++;
        *ret = s;
        *ret_len = (size_t) (e - s);
        *p = e;
        return true;
}

static bool parse_dec(const char *s, size_t n, uint64_t *ret) {
        uint64_t v = 0;

        if (n == 0 || n > 20)
                return false;
        for (size_t i = 0; i < n; i++) {
                if (s[i] < '0' || s[i] > '9')
                        return false;
                uint64_t d = (uint64_t) (s[i] - '0');
                if (v > (UINT64_MAX - d) / 10)
                        return false;
                v = v * 10 + d;
        }
        *ret = v;
        return true;
}

static bool parse_hex_address(const char *s, size_t n, uint64_t *ret) {
        uint64_t v = 0;

        if (n < 3 || n > 18 || s[0] != '0' || (s[1] != 'x' && s[1] != 'X'))
                return false;
        for (size_t i = 2; i < n; i++) {
                char c = s[i];
                unsigned d;
                if (c >= '0' && c <= '9')
                        d = (unsigned) (c - '0');
                else if (c >= 'a' && c <= 'f')
                        d = (unsigned) (c - 'a' + 10);
                else if (c >= 'A' && c <= 'F')
                        d = (unsigned) (c - 'A' + 10);
                else
                        return false;
                v = v << 4 | d;
        }
        *ret = v;
        return true;
}

/* Module names become sysfs path components: only what the kernel allows in them. */
static bool valid_name(const char *s, size_t n) {
        if (n == 0 || n >= EP_KMODULE_NAME_MAX)
                return false;
        for (size_t i = 0; i < n; i++) {
                char c = s[i];
                if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                      c == '-'))
                        return false;
        }
        return true;
}

/* "nf_tables 348160 12 nft_chain_nat, Live 0xffffffffc0a00000 (E)". Lines that do not look
 * like this are skipped, as kallsyms.c does. */
static int add_line(void *userdata, const char *line, size_t len) {
        EpKmodules *m = userdata;
        const char *p = line, *end = line + len;
        const char *name, *size_s, *refs, *deps, *state, *addr_s;
        size_t name_len, size_len, refs_len, deps_len, state_len, addr_len;
        uint64_t size, addr, refcount;

        if (!next_field(&p, end, &name, &name_len) || !next_field(&p, end, &size_s, &size_len) ||
            !next_field(&p, end, &refs, &refs_len) || !next_field(&p, end, &deps, &deps_len) ||
            !next_field(&p, end, &state, &state_len) || !next_field(&p, end, &addr_s, &addr_len))
                return 0;
        if (!valid_name(name, name_len) || !parse_dec(size_s, size_len, &size) || size == 0 ||
            !parse_hex_address(addr_s, addr_len, &addr))
                return 0;
        /* The reference count is "-" for modules that cannot be unloaded. */
        if (!(refs_len == 1 && refs[0] == '-') && !parse_dec(refs, refs_len, &refcount))
                return 0;
        if (addr == 0) {
                m->hidden++;
                return 0;
        }
        if (size > UINT64_MAX - addr)
                return 0;

        if (m->n >= MAX_MODULES)
                return -E2BIG;
        if (m->n == m->cap) {
                size_t cap = m->cap ? m->cap * 2 : 64;
                EpKmodule *a = reallocarray(m->mods, cap, sizeof(EpKmodule));
                if (!a)
                        return -ENOMEM;
                m->mods = a;
                m->cap = cap;
        }
        EpKmodule *k = &m->mods[m->n++];
        *k = (EpKmodule) { .start = addr, .size = size };
        memcpy(k->name, name, name_len);
        k->name[name_len] = 0;
        return 0;
}

static int module_compare(const void *a, const void *b) {
        const EpKmodule *x = a, *y = b;

        if (x->start != y->start)
                return x->start < y->start ? -1 : 1;
        return strcmp(x->name, y->name);
}

int ep_kmodules_parse_file(FILE *f, EpKmodules **ret) {
        _cleanup_(ep_kmodules_freep) EpKmodules *m = NULL;
        int r;

        r = ep_kmodules_new_empty(&m);
        if (r < 0)
                return r;

        r = ep_for_each_line(f, MAX_LINE, add_line, m);
        if (r < 0)
                return r;
        if (m->n == 0 && m->hidden > 0)
                return -EPERM;

        if (m->n > 0)
                qsort(m->mods, m->n, sizeof(EpKmodule), module_compare);
        *ret = TAKE_PTR(m);
        return 0;
}

int ep_kmodules_parse_fd(int fd, EpKmodules **ret) {
        _cleanup_fclose_ FILE *f = NULL;
        int r = ep_fdopen_dup(fd, &f);

        return r < 0 ? r : ep_kmodules_parse_file(f, ret);
}

int ep_kmodules_parse_text(const char *text, size_t len, EpKmodules **ret) {
        if (len == 0)
                return ep_kmodules_new_empty(ret); /* no module loaded */

        _cleanup_fclose_ FILE *f = fmemopen((void *) text, len, "r");
        if (!f)
                return -errno;
        return ep_kmodules_parse_file(f, ret);
}

const EpKmodule *ep_kmodules_find(const EpKmodules *m, uint64_t addr) {
        size_t lo = 0, hi;

        if (!m)
                return NULL;
        hi = m->n;
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (m->mods[mid].start <= addr)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        if (lo == 0)
                return NULL;
        const EpKmodule *k = &m->mods[lo - 1];
        return addr - k->start < k->size ? k : NULL;
}

const EpKmodule *ep_kmodules_find_name(const EpKmodules *m, const char *name) {
        for (size_t i = 0; m && i < m->n; i++)
                if (streq(m->mods[i].name, name))
                        return &m->mods[i];
        return NULL;
}

bool ep_kmodules_same_layout(const EpKmodules *a, const EpKmodules *b) {
        if (ep_kmodules_count(a) != ep_kmodules_count(b))
                return false;
        for (size_t i = 0; i < ep_kmodules_count(a); i++)
                if (a->mods[i].start != b->mods[i].start || a->mods[i].size != b->mods[i].size ||
                    !streq(a->mods[i].name, b->mods[i].name))
                        return false;
        return true;
}

/* ---- build IDs ---- */

static uint32_t get_u32(const uint8_t *p) {
        uint32_t v;
        memcpy(&v, p, sizeof v); /* notes are in the kernel's (our) byte order */
        return v;
}

int ep_elf_notes_find_build_id(const void *data, size_t size, uint8_t buf[static EP_KMODULE_BUILD_ID_MAX]) {
        const uint8_t *p = data;
        size_t off = 0;

        while (size - off >= 12) {
                uint32_t namesz = get_u32(p + off), descsz = get_u32(p + off + 4), type = get_u32(p + off + 8);
                size_t name_off = off + 12;
                /* Sizes are padded to 4 bytes; compute in 64 bits so a huge size cannot wrap. */
                uint64_t desc_off = name_off + (((uint64_t) namesz + 3) & ~(uint64_t) 3);
                uint64_t next = desc_off + (((uint64_t) descsz + 3) & ~(uint64_t) 3);

                if (desc_off + descsz > size)
                        return -EBADMSG;
                if (type == NT_GNU_BUILD_ID_TYPE && namesz == 4 && memcmp(p + name_off, "GNU", 4) == 0) {
                        if (descsz == 0 || descsz > EP_KMODULE_BUILD_ID_MAX)
                                return -EBADMSG;
                        memcpy(buf, p + desc_off, descsz);
                        return (int) descsz;
                }
                if (next > size)
                        break; /* the last note's padding may be cut off */
                off = (size_t) next;
        }
        return -ENOENT;
}

static int read_small_file(const char *path, uint8_t *buf, size_t cap, size_t *ret_size) {
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        size_t n = 0;

        if (fd < 0)
                return -errno;
        while (n < cap) {
                ssize_t k = read(fd, buf + n, cap - n);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (k == 0)
                        break;
                n += (size_t) k;
        }
        *ret_size = n;
        return 0;
}

static int read_build_id_file(const char *path, uint8_t buf[static EP_KMODULE_BUILD_ID_MAX]) {
        _cleanup_free_ uint8_t *data = malloc(MAX_NOTES_FILE);
        size_t size = 0;
        int r;

        if (!data)
                return -ENOMEM;
        r = read_small_file(path, data, MAX_NOTES_FILE, &size);
        if (r < 0)
                return r;
        return ep_elf_notes_find_build_id(data, size, buf);
}

size_t ep_kmodules_read_build_ids(EpKmodules *m, const char *sysfs_root) {
        size_t found = 0;

        for (size_t i = 0; m && i < m->n; i++) {
                EpKmodule *k = &m->mods[i];
                char path[4096];
                int r;

                /* Names were checked in add_line(): no '/' or "..", so this stays under the root. */
                if (snprintf(path, sizeof path, "%s/module/%s/notes/.note.gnu.build-id", sysfs_root ?: "/sys",
                             k->name) >= (int) sizeof path)
                        continue;
                r = read_build_id_file(path, k->build_id);
                if (r > 0) {
                        k->build_id_size = (size_t) r;
                        found++;
                } else
                        k->build_id_size = 0;
        }
        return found;
}

int ep_kernel_read_build_id(const char *sysfs_root, uint8_t buf[static EP_KMODULE_BUILD_ID_MAX]) {
        char path[4096];

        if (snprintf(path, sizeof path, "%s/kernel/notes", sysfs_root ?: "/sys") >= (int) sizeof path)
                return -ENAMETOOLONG;
        return read_build_id_file(path, buf);
}
