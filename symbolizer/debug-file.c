/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "debug-file.h"
#include "log.h"
#include "macro.h"
#include "unwind-debugfile.h"

static char *roots[EP_DEBUG_ROOTS_MAX + 1];
static bool roots_customized;

static void roots_clear(void) {
        for (size_t i = 0; roots[i]; i++) {
                free(roots[i]);
                roots[i] = NULL;
        }
}

static size_t roots_count(void) {
        size_t n = 0;
        while (roots[n])
                n++;
        return n;
}

void ep_debug_roots_reset(void) {
        roots_clear();
        roots_customized = false;
}

const char *const *ep_debug_roots(void) {
        static const char *const def[] = { EP_DEBUG_ROOT, NULL };

        return roots[0] ? (const char *const *) roots : def;
}

int ep_debug_roots_add(const char *list) {
        _cleanup_free_ char *copy = strdup(list);
        char *saveptr = NULL;
        size_t n;

        if (!copy)
                return -ENOMEM;
        if (!roots_customized) {
                roots_clear();
                roots_customized = true;
        }
        n = roots_count();
        for (char *t = strtok_r(copy, ":", &saveptr); t; t = strtok_r(NULL, ":", &saveptr)) {
                if (n >= EP_DEBUG_ROOTS_MAX)
                        return -EINVAL;
                /* Without trailing slashes, so candidate paths stay canonical. */
                size_t len = strlen(t);
                while (len > 1 && t[len - 1] == '/')
                        t[--len] = 0;
                roots[n] = strdup(t);
                if (!roots[n])
                        return -ENOMEM;
                roots[++n] = NULL;
        }
        return n > 0 ? 0 : -EINVAL;
}

int ep_debug_roots_set(const char *list) {
        ep_debug_roots_reset();
        return ep_debug_roots_add(list);
}

/* ---- finding the file ---- */

typedef struct Wanted {
        EpBuildIds ids;
        char *debuglink;
        uint32_t crc;
        GElf_Half machine;
} Wanted;

static bool same_build_id(EpElfFile *dbg, const Wanted *w) {
        EpBuildIds ids;

        return ep_elf_build_ids(dbg, &ids) >= 0 && ids.gnu_len == w->ids.gnu_len &&
               memcmp(ids.gnu, w->ids.gnu, ids.gnu_len) == 0;
}

/* Opens one candidate; 0 and *ret when it is f's debug file, -ENOENT when not, -ENOMEM. */
static int try_candidate(const char *path, const Wanted *w, EpElfFile **ret) {
        _cleanup_(ep_elf_freep) EpElfFile *dbg = NULL;
        _cleanup_close_ int fd = -EBADF;
        struct stat st;
        uint32_t crc = 0;
        GElf_Ehdr eh;
        int r;

        /* O_NONBLOCK: a FIFO planted under a debuglink name must not hang us; it is refused
         * below as not a regular file before any read. */
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        if (fd < 0) {
                log_debug_errno(errno, "Debug file candidate %s: %m", path);
                return -ENOENT;
        }
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
                return -ENOENT;

        if (w->ids.gnu_len == 0) {
                /* No build ID to compare: the debuglink CRC is the only proof. */
                r = ep_unwind_debug_crc32(fd, &crc);
                if (r < 0 || crc != w->crc) {
                        log_debug("%s: CRC mismatch, not the debug file we look for.", path);
                        return -ENOENT;
                }
        }

        r = ep_elf_open(TAKE_FD(fd), &dbg);
        if (r == -ENOMEM)
                return r;
        if (r < 0)
                return -ENOENT;
        if (!gelf_getehdr(ep_elf_handle(dbg), &eh) || eh.e_machine != w->machine)
                return -ENOENT;
        if (w->ids.gnu_len > 0 && !same_build_id(dbg, w)) {
                log_debug("%s: build ID mismatch, not the debug file we look for.", path);
                return -ENOENT;
        }

        *ret = TAKE_PTR(dbg);
        return 0;
}

static int candidates_for_root(const char *root, const uint8_t *build_id, size_t build_id_len, const char *debuglink,
                               const char *path_hint, char **list, size_t *n, size_t max) {
        char *c[EP_DEBUG_MAX_CANDIDATES] = {};
        int k;

        k = ep_unwind_debug_candidates(root, build_id_len > 0 ? build_id : NULL, build_id_len, debuglink, path_hint,
                                       c);
        if (k < 0)
                return k;
        for (int i = 0; i < k; i++) {
                bool dup = false;
                for (size_t j = 0; j < *n && !dup; j++)
                        dup = streq(list[j], c[i]);
                if (dup || *n >= max)
                        free(c[i]);
                else
                        list[(*n)++] = c[i];
        }
        return 0;
}

enum { MAX_CANDIDATES = EP_DEBUG_ROOTS_MAX * EP_DEBUG_MAX_CANDIDATES };

/* Every candidate path under the current roots, in the order they are tried, without
 * duplicates: 0 and list[0..*ret_n) (the caller frees them), or -ENOMEM. */
static int collect_candidates(const uint8_t *build_id, size_t build_id_len, const char *debuglink,
                              const char *path_hint, char *list[MAX_CANDIDATES], size_t *ret_n) {
        const char *const *roots_now = ep_debug_roots();
        size_t n = 0;
        int k = 0;

        if (path_hint && strnlen(path_hint, EP_DEBUG_PATH_MAX) >= EP_DEBUG_PATH_MAX)
                path_hint = NULL;
        for (size_t i = 0; roots_now[i] && k >= 0; i++)
                k = candidates_for_root(roots_now[i], build_id, build_id_len, debuglink, path_hint, list, &n,
                                        MAX_CANDIDATES);
        if (k < 0) {
                while (n > 0)
                        free(list[--n]);
                return k;
        }
        *ret_n = n;
        return 0;
}

static void free_candidates(char **list, size_t n) {
        for (size_t i = 0; i < n; i++)
                free(list[i]);
}

int ep_debug_file_find(EpElfFile *f, const char *path_hint, EpElfFile **ret, char **ret_path) {
        char *list[MAX_CANDIDATES] = {};
        Wanted w = {};
        GElf_Ehdr eh;
        size_t n = 0;
        int k;

        if (!gelf_getehdr(ep_elf_handle(f), &eh))
                return -ENOENT;
        w.machine = eh.e_machine;
        k = ep_elf_build_ids(f, &w.ids);
        if (k < 0)
                return k == -ENOMEM ? k : -ENOENT;
        k = ep_elf_debuglink(f, &w.debuglink, &w.crc);
        if (k == -ENOMEM)
                return k;
        /* No debuglink: build ID only. */
        if (w.ids.gnu_len == 0 && !w.debuglink)
                return -ENOENT;

        k = collect_candidates(w.ids.gnu, w.ids.gnu_len, w.debuglink, path_hint, list, &n);
        int result = k < 0 ? k : -ENOENT;
        for (size_t i = 0; i < n && result == -ENOENT; i++) {
                result = try_candidate(list[i], &w, ret);
                if (result == 0) {
                        log_debug("Using separate debug file %s.", list[i]);
                        if (ret_path)
                                *ret_path = TAKE_PTR(list[i]);
                }
        }

        free_candidates(list, n);
        free(w.debuglink);
        return result;
}

int ep_debug_file_locate(const uint8_t *build_id, size_t build_id_len, const char *debuglink, const char *path_hint,
                         char **ret_path) {
        char *list[MAX_CANDIDATES] = {};
        size_t n = 0;
        int k;

        if (build_id_len == 0 && !debuglink)
                return -ENOENT;
        k = collect_candidates(build_id, build_id_len, debuglink, path_hint, list, &n);
        if (k < 0)
                return k;

        k = -ENOENT;
        for (size_t i = 0; i < n && k == -ENOENT; i++) {
                struct stat st;

                if (stat(list[i], &st) < 0 || !S_ISREG(st.st_mode) ||
                    faccessat(AT_FDCWD, list[i], R_OK, AT_EACCESS) < 0)
                        continue;
                *ret_path = TAKE_PTR(list[i]);
                k = 0;
        }
        free_candidates(list, n);
        return k;
}
