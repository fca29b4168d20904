/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "kallsyms.h"
#include "line-reader.h"

#define MAX_LINE 4096
#define MAX_SYMBOLS (16u << 20)
#define MAX_MODULES UINT16_MAX
#define MAX_POOL (512u << 20)

typedef struct KSym {
        uint64_t addr;
        uint32_t name;   /* offset in the name pool */
        uint16_t module; /* index in modules; 0 = vmlinux ("") */
        uint8_t rank;    /* preference among symbols at one address */
        uint8_t pad;
} KSym;

struct EpKallsyms {
        KSym *syms;
        size_t n_syms, cap_syms;
        char *pool;
        size_t pool_size, pool_cap;
        char **modules;
        size_t n_modules;
        uint16_t last_module; /* consecutive lines share the module: cheap reuse */
        uint64_t stext, etext;  /* vmlinux's _stext and _etext, 0 until seen */
};

EpKallsyms *ep_kallsyms_free(EpKallsyms *k) {
        if (!k)
                return NULL;
        for (size_t i = 0; i < k->n_modules; i++)
                free(k->modules[i]);
        free(k->modules);
        free(k->syms);
        free(k->pool);
        free(k);
        return NULL;
}

size_t ep_kallsyms_count(const EpKallsyms *k) {
        return k->n_syms;
}

size_t ep_kallsyms_modules(const EpKallsyms *k) {
        return k->n_modules > 0 ? k->n_modules - 1 : 0;
}

int ep_kallsyms_text_range(const EpKallsyms *k, uint64_t *ret_start, uint64_t *ret_end) {
        uint64_t lo = UINT64_MAX, hi = 0;

        if (k->stext != 0 && k->etext > k->stext) {
                *ret_start = k->stext;
                *ret_end = k->etext;
                return 0;
        }
        /* No markers (a filtered or unusual table): the span of vmlinux's own symbols. */
        for (size_t i = 0; i < k->n_syms; i++)
                if (k->syms[i].module == 0) {
                        lo = MIN(lo, k->syms[i].addr);
                        hi = MAX(hi, k->syms[i].addr);
                }
        if (lo > hi)
                return -ENOENT;
        *ret_start = lo;
        *ret_end = hi + 1;
        return 0;
}

bool ep_kallsyms_same(const EpKallsyms *a, const EpKallsyms *b) {
        if (!a || !b)
                return a == b;
        if (a->n_syms != b->n_syms)
                return false;
        for (size_t i = 0; i < a->n_syms; i++) {
                const KSym *x = &a->syms[i], *y = &b->syms[i];
                if (x->addr != y->addr || !streq(a->pool + x->name, b->pool + y->name) ||
                    !streq(a->modules[x->module], b->modules[y->module]))
                        return false;
        }
        return true;
}

static int pool_add(EpKallsyms *k, const char *s, size_t n, uint32_t *ret) {
        if (k->pool_size + n + 1 > MAX_POOL)
                return -E2BIG;
        if (k->pool_size + n + 1 > k->pool_cap) {
                size_t cap = MAX(k->pool_cap * 2, (size_t) 1 << 16);
                while (cap < k->pool_size + n + 1)
                        cap *= 2;
                char *p = realloc(k->pool, cap);
                if (!p)
                        return -ENOMEM;
                k->pool = p;
                k->pool_cap = cap;
        }
        memcpy(k->pool + k->pool_size, s, n);
        k->pool[k->pool_size + n] = 0;
        *ret = (uint32_t) k->pool_size;
        k->pool_size += n + 1;
        return 0;
}

static int module_index(EpKallsyms *k, const char *s, size_t n, uint16_t *ret) {
        if (n == 0) {
                *ret = 0;
                return 0;
        }
        if (k->last_module > 0 && strlen(k->modules[k->last_module]) == n &&
            memcmp(k->modules[k->last_module], s, n) == 0) {
                *ret = k->last_module;
                return 0;
        }
        for (size_t i = 1; i < k->n_modules; i++)
                if (strlen(k->modules[i]) == n && memcmp(k->modules[i], s, n) == 0) {
                        *ret = k->last_module = (uint16_t) i;
                        return 0;
                }
        if (k->n_modules >= MAX_MODULES)
                return -E2BIG;

        char **m = reallocarray(k->modules, k->n_modules + 1, sizeof(char *));
        if (!m)
                return -ENOMEM;
        k->modules = m;
        m[k->n_modules] = strndup(s, n);
        if (!m[k->n_modules])
                return -ENOMEM;
        *ret = k->last_module = (uint16_t) k->n_modules++;
        return 0;
}

static bool is_space(char c) {
        return c == ' ' || c == '\t';
}

/* "ffffffff81000000 T _stext" or "ffffffffc0a01000 t foo\t[mod]". Lines that do not look like
 * this are skipped: the format is the kernel's, but we stay tolerant. */
static int add_line(void *userdata, const char *line, size_t len) {
        EpKallsyms *k = userdata;
        const char *p = line, *end = line + len;
        uint64_t addr = 0;
        size_t digits = 0;
        int r;

        while (p < end && digits < 17) {
                char c = *p;
                unsigned v;
                if (c >= '0' && c <= '9')
                        v = (unsigned) (c - '0');
                else if (c >= 'a' && c <= 'f')
                        v = (unsigned) (c - 'a' + 10);
                else if (c >= 'A' && c <= 'F')
                        v = (unsigned) (c - 'A' + 10);
                else
                        break;
                addr = addr << 4 | v;
                digits++;
                p++;
        }
        if (digits == 0 || digits > 16 || p >= end || !is_space(*p))
                return 0;
        while (p < end && is_space(*p))
                p++;
        if (p >= end)
                return 0;
        char type = *p++;
        if (p >= end || !is_space(*p))
                return 0;
        while (p < end && is_space(*p))
                p++;

        const char *name = p;
        while (p < end && !is_space(*p))
                p++;
        size_t name_len = (size_t) (p - name);
        if (name_len == 0)
                return 0;

        const char *mod = NULL;
        size_t mod_len = 0;
        while (p < end && is_space(*p))
                p++;
        if (p < end && *p == '[') {
                const char *close = memchr(p, ']', (size_t) (end - p));
                if (close) {
                        mod = p + 1;
                        mod_len = (size_t) (close - mod);
                }
        }

        /* The bounds of vmlinux's text: where its symbols are final, and past which code comes
         * and goes (modules, BPF programs). */
        if (mod_len == 0 && name_len == 6 && memcmp(name, "_stext", 6) == 0)
                k->stext = addr;
        else if (mod_len == 0 && name_len == 6 && memcmp(name, "_etext", 6) == 0)
                k->etext = addr;

        uint8_t rank;
        switch (type) {
        case 'T': rank = 3; break;
        case 'W': rank = 2; break;
        case 't': rank = 1; break;
        case 'w': rank = 0; break;
        default: return 0; /* data, absolute, ... */
        }

        if (k->n_syms >= MAX_SYMBOLS)
                return -E2BIG;
        if (k->n_syms == k->cap_syms) {
                size_t cap = k->cap_syms ? k->cap_syms * 2 : 4096;
                KSym *s = reallocarray(k->syms, cap, sizeof(KSym));
                if (!s)
                        return -ENOMEM;
                k->syms = s;
                k->cap_syms = cap;
        }

        KSym *s = &k->syms[k->n_syms];
        *s = (KSym) { .addr = addr, .rank = rank };
        r = pool_add(k, name, name_len, &s->name);
        if (r < 0)
                return r;
        r = module_index(k, mod, mod_len, &s->module);
        if (r < 0)
                return r;
        k->n_syms++;
        return 0;
}

static int ksym_compare(const void *a, const void *b) {
        const KSym *x = a, *y = b;

        if (x->addr != y->addr)
                return x->addr < y->addr ? -1 : 1;
        if (x->rank != y->rank)
                return x->rank > y->rank ? -1 : 1;
        return x->name < y->name ? -1 : x->name > y->name; /* input order */
}

static int finish(EpKallsyms *k) {
        size_t j = 0;
        bool nonzero = false;

        for (size_t i = 0; i < k->n_syms; i++)
                if (k->syms[i].addr != 0) {
                        nonzero = true;
                        break;
                }
        if (!nonzero)
                return k->n_syms > 0 ? -EPERM : -ENODATA;

        qsort(k->syms, k->n_syms, sizeof(KSym), ksym_compare);
        for (size_t i = 0; i < k->n_syms; i++) {
                if (k->syms[i].addr == 0)
                        continue;
                if (j > 0 && k->syms[j - 1].addr == k->syms[i].addr)
                        continue; /* aliases: keep the best ranked */
                k->syms[j++] = k->syms[i];
        }
        k->n_syms = j;

        KSym *s = reallocarray(k->syms, MAX(j, (size_t) 1), sizeof(KSym));
        if (s)
                k->syms = s;
        return 0;
}

static int new_table(EpKallsyms **ret) {
        EpKallsyms *k = calloc(1, sizeof(EpKallsyms));
        if (!k)
                return -ENOMEM;
        /* Module 0 is vmlinux. */
        k->modules = calloc(1, sizeof(char *));
        if (!k->modules || !(k->modules[0] = strdup(""))) {
                ep_kallsyms_free(k);
                return -ENOMEM;
        }
        k->n_modules = 1;
        *ret = k;
        return 0;
}

int ep_kallsyms_parse_file(FILE *f, EpKallsyms **ret) {
        _cleanup_(ep_kallsyms_freep) EpKallsyms *k = NULL;
        int r;

        r = new_table(&k);
        if (r < 0)
                return r;

        r = ep_for_each_line(f, MAX_LINE, add_line, k);
        if (r < 0)
                return r;

        r = finish(k);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(k);
        return 0;
}

int ep_kallsyms_parse_fd(int fd, EpKallsyms **ret) {
        _cleanup_fclose_ FILE *f = NULL;
        int r = ep_fdopen_dup(fd, &f);

        return r < 0 ? r : ep_kallsyms_parse_file(f, ret);
}

int ep_kallsyms_parse_text(const char *text, size_t len, EpKallsyms **ret) {
        if (len == 0)
                return -ENODATA;

        _cleanup_fclose_ FILE *f = fmemopen((void *) text, len, "r");
        if (!f)
                return -errno;
        return ep_kallsyms_parse_file(f, ret);
}

int ep_kallsyms_lookup(const EpKallsyms *k, uint64_t addr, const char **ret_name,
                       const char **ret_module, uint64_t *ret_sym_addr) {
        size_t lo = 0, hi = k->n_syms;

        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (k->syms[mid].addr <= addr)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        if (lo == 0)
                return -ENOENT;

        const KSym *s = &k->syms[lo - 1];
        if (addr - s->addr >= EP_KALLSYMS_MAX_FUNCTION)
                return -ENOENT;
        /* The last symbol of a module is followed by a gap (other memory, another module):
         * do not stretch it over a different module's range. */
        if (lo < k->n_syms && k->syms[lo].module != s->module && addr - s->addr >= (64u << 10))
                return -ENOENT;

        if (ret_name)
                *ret_name = k->pool + s->name;
        if (ret_module)
                *ret_module = k->modules[s->module];
        if (ret_sym_addr)
                *ret_sym_addr = s->addr;
        return 0;
}
