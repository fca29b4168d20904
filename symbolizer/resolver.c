/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "elf-symbols.h"
#include "file-id.h"
#include "kallsyms.h"
#include "log.h"
#include "lru.h"
#include "resolver.h"

#define KALLSYMS_RETRY_NS (5 * NSEC_PER_SEC) /* after a failed read of kallsyms */

typedef enum FileState {
        FILE_OPEN,
        FILE_BAD,     /* not a usable ELF: answered BAD_FILE until evicted */
        FILE_MISSING, /* the source could not open it: answered NO_FILE for a while */
} FileState;

typedef struct FileEntry {
        FileState state;
        EpElfFile *elf;
        uint64_t since_ns;
} FileEntry;

typedef struct ResultKey {
        uint8_t kind, flags;
        uint8_t pad[6];
        uint8_t file_id[EP_FILE_ID_SIZE];
        uint64_t addr;
} ResultKey;

struct EpResolver {
        EpFileSource source;
        EpResolverConfig config;
        EpSymStats *stats;

        EpLru *files;
        FileEntry *file_slots;
        uint32_t files_open;

        EpLru *results;
        EpSymResult *result_slots;
        EpSymResult scratch; /* results that are not cached */

        EpKallsyms *kallsyms;
        uint64_t kallsyms_loaded_ns, kallsyms_failed_ns;
};

static uint64_t now_ns(void) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * NSEC_PER_SEC + (uint64_t) ts.tv_nsec;
}

void ep_sym_result_done(EpSymResult *res) {
        if (!res)
                return;
        for (uint16_t i = 0; i < res->n_lines; i++) {
                free(res->lines[i].function);
                free(res->lines[i].file);
        }
        free(res->lines);
        free(res->module);
        *res = (EpSymResult) {};
}

static void file_entry_done(EpResolver *r, FileEntry *e) {
        if (e->elf) {
                ep_elf_free(e->elf);
                r->files_open--;
        }
        *e = (FileEntry) {};
}

int ep_resolver_new(const EpFileSource *source, const EpResolverConfig *config, EpSymStats *stats,
                    EpResolver **ret) {
        _cleanup_(ep_resolver_freep) EpResolver *r = NULL;
        int k;

        r = calloc(1, sizeof(EpResolver));
        if (!r)
                return -ENOMEM;
        r->source = *source;
        r->config = config ? *config : EP_RESOLVER_CONFIG_DEFAULT;
        r->stats = stats;
        if (r->config.max_files == 0 || r->config.max_results == 0)
                return -EINVAL;

        k = ep_lru_new(EP_FILE_ID_SIZE, r->config.max_files, &r->files);
        if (k < 0)
                return k;
        k = ep_lru_new(sizeof(ResultKey), r->config.max_results, &r->results);
        if (k < 0)
                return k;
        r->file_slots = calloc(r->config.max_files, sizeof(FileEntry));
        r->result_slots = calloc(r->config.max_results, sizeof(EpSymResult));
        if (!r->file_slots || !r->result_slots)
                return -ENOMEM;

        *ret = TAKE_PTR(r);
        return 0;
}

EpResolver *ep_resolver_free(EpResolver *r) {
        if (!r)
                return NULL;
        if (r->file_slots)
                for (uint32_t i = 0; i < r->config.max_files; i++)
                        file_entry_done(r, &r->file_slots[i]);
        if (r->result_slots)
                for (uint32_t i = 0; i < r->config.max_results; i++)
                        ep_sym_result_done(&r->result_slots[i]);
        ep_sym_result_done(&r->scratch);
        free(r->file_slots);
        free(r->result_slots);
        ep_lru_free(r->files);
        ep_lru_free(r->results);
        ep_kallsyms_free(r->kallsyms);
        free(r);
        return NULL;
}

uint32_t ep_resolver_cache_entries(const EpResolver *r) {
        return ep_lru_size(r->results);
}

uint32_t ep_resolver_files_open(const EpResolver *r) {
        return r->files_open;
}

void ep_resolver_source_changed(EpResolver *r) {
        for (uint32_t i = 0; i < r->config.max_files; i++) {
                const void *key = ep_lru_slot_key(r->files, i);

                if (key && r->file_slots[i].state == FILE_MISSING) {
                        file_entry_done(r, &r->file_slots[i]);
                        (void) ep_lru_remove(r->files, key);
                }
        }
        r->kallsyms_failed_ns = 0;
}

/* ---- files ---- */

static int cache_file(EpResolver *r, const uint8_t id[EP_FILE_ID_SIZE], FileState state, EpElfFile *elf) {
        bool evicted;
        int slot;

        slot = ep_lru_insert(r->files, id, &evicted);
        if (slot < 0) {
                ep_elf_free(elf);
                return slot;
        }
        if (evicted)
                file_entry_done(r, &r->file_slots[slot]);
        r->file_slots[slot] = (FileEntry) { .state = state, .elf = elf, .since_ns = now_ns() };
        if (elf)
                r->files_open++;
        return 0;
}

static void mark_bad(EpResolver *r, const uint8_t id[EP_FILE_ID_SIZE], FileEntry *e, int error) {
        char hex[2 * EP_FILE_ID_SIZE + 1];

        ep_file_id_to_hex(id, hex);
        log_warning_errno(error, "File %s is not usable, answering BAD_FILE for it: %m", hex);
        ep_sym_stats_error(r->stats, "file %s: %s", hex, strerror(-error));

        if (e->elf) {
                ep_elf_free(e->elf);
                e->elf = NULL;
                r->files_open--;
        }
        e->state = FILE_BAD;
}

/* Returns the opened file, or -ENOEXEC/-EIO (bad file), -ENOENT/-ENXIO/... (no file). */
static int get_file(EpResolver *r, const uint8_t id[EP_FILE_ID_SIZE], EpElfFile **ret) {
        int slot, fd, k;

        slot = ep_lru_get(r->files, id);
        if (slot >= 0) {
                FileEntry *e = &r->file_slots[slot];

                switch (e->state) {
                case FILE_OPEN:
                        k = ep_elf_check(e->elf);
                        if (k < 0) {
                                mark_bad(r, id, e, k);
                                return k;
                        }
                        *ret = e->elf;
                        return 0;
                case FILE_BAD:
                        return -ENOEXEC;
                case FILE_MISSING:
                        if (now_ns() - e->since_ns < r->config.missing_retry_ns)
                                return -ENOENT;
                        file_entry_done(r, e);
                        (void) ep_lru_remove(r->files, id);
                        break;
                }
        }

        fd = r->source.open_file(r->source.userdata, id);
        if (fd == -ENXIO)
                return fd; /* nobody to ask right now: do not remember */
        if (fd < 0) {
                if (fd != -ENOENT) {
                        char hex[2 * EP_FILE_ID_SIZE + 1];
                        ep_file_id_to_hex(id, hex);
                        ep_sym_stats_error(r->stats, "opening file %s: %s", hex, strerror(-fd));
                }
                (void) cache_file(r, id, FILE_MISSING, NULL);
                return fd;
        }

        EpElfFile *elf = NULL;
        k = ep_elf_open(fd, &elf);
        if (k == -ENOEXEC || k == -EIO || k == -EFBIG) {
                FileEntry e = {};
                mark_bad(r, id, &e, k);
                (void) cache_file(r, id, FILE_BAD, NULL);
                return k == -EFBIG ? -ENOEXEC : k;
        }
        if (k < 0)
                return k;

        k = cache_file(r, id, FILE_OPEN, elf);
        if (k < 0)
                return k;
        *ret = elf;
        return 0;
}

static void bad_file_seen(EpResolver *r, const uint8_t id[EP_FILE_ID_SIZE], int error) {
        int slot = ep_lru_get(r->files, id);

        if (slot >= 0 && r->file_slots[slot].state == FILE_OPEN)
                mark_bad(r, id, &r->file_slots[slot], error);
}

/* ---- results ---- */

static int result_set(EpSymResult *res, uint8_t status, uint64_t elf_addr, const char *module,
                      char *function_owned) {
        _cleanup_free_ char *function = function_owned;

        ep_sym_result_done(res);
        res->status = status;
        res->elf_addr = elf_addr;
        res->module = strdup(module ?: "");
        if (!res->module)
                return -ENOMEM;
        if (!function)
                return 0;

        res->lines = calloc(1, sizeof(EpSymLine));
        if (!res->lines)
                return -ENOMEM;
        res->n_lines = 1;
        res->lines[0].function = TAKE_PTR(function);
        res->lines[0].file = strdup("");
        if (!res->lines[0].file)
                return -ENOMEM;
        return 0;
}

/* Moves the scratch result into the cache under key; returns the cached copy. */
static const EpSymResult *cache_result(EpResolver *r, const ResultKey *key) {
        bool evicted;
        int slot;

        slot = ep_lru_insert(r->results, key, &evicted);
        if (slot < 0)
                return &r->scratch; /* not cached, still answered */
        ep_sym_result_done(&r->result_slots[slot]);
        r->result_slots[slot] = r->scratch;
        r->scratch = (EpSymResult) {};
        return &r->result_slots[slot];
}

static void drop_kernel_results(EpResolver *r) {
        for (uint32_t i = 0; i < r->config.max_results; i++) {
                const ResultKey *key = ep_lru_slot_key(r->results, i);

                if (key && key->kind == EP_FRAME_KERNEL) {
                        ResultKey copy = *key;
                        ep_sym_result_done(&r->result_slots[i]);
                        (void) ep_lru_remove(r->results, &copy);
                }
        }
}

static int symbolize_native(EpResolver *r, const ResultKey *key, bool *ret_cacheable) {
        EpElfFile *elf;
        uint64_t vaddr;
        char *name = NULL;
        int k;

        *ret_cacheable = false;

        k = get_file(r, key->file_id, &elf);
        if (k == -ENOMEM)
                return k;
        if (k == -ENOEXEC || k == -EIO)
                return result_set(&r->scratch, EP_SYM_BAD_FILE, 0, "", NULL);
        if (k < 0)
                return result_set(&r->scratch, EP_SYM_NO_FILE, 0, "", NULL);

        k = ep_elf_offset_to_vaddr(elf, key->addr, &vaddr);
        if (k == -EIO) {
                bad_file_seen(r, key->file_id, k);
                return result_set(&r->scratch, EP_SYM_BAD_FILE, 0, "", NULL);
        }
        if (k < 0) {
                *ret_cacheable = true;
                return result_set(&r->scratch, EP_SYM_NOT_FOUND, 0, "", NULL);
        }

        /* A return address points after the call; the call itself is the byte before. */
        uint64_t lookup = (key->flags & EP_FRAME_FLAG_RETURN_ADDRESS) && vaddr > 0 ? vaddr - 1 : vaddr;

        k = ep_elf_lookup(elf, lookup, &name, NULL);
        if (k == -ENOMEM)
                return k;
        if (k == -ENOEXEC || k == -EIO) {
                bad_file_seen(r, key->file_id, k);
                return result_set(&r->scratch, EP_SYM_BAD_FILE, vaddr, "", NULL);
        }
        *ret_cacheable = true;
        if (k < 0)
                return result_set(&r->scratch, EP_SYM_NOT_FOUND, vaddr, "", NULL);
        return result_set(&r->scratch, EP_SYM_OK, vaddr, "", name);
}

static int load_kallsyms(EpResolver *r) {
        _cleanup_close_ int fd = -EBADF;
        EpKallsyms *k = NULL;
        uint64_t now = now_ns();
        int e;

        fd = r->source.open_kallsyms(r->source.userdata);
        if (fd < 0) {
                if (fd != -ENXIO)
                        r->kallsyms_failed_ns = now;
                return fd;
        }

        e = ep_kallsyms_parse_fd(fd, &k);
        if (e < 0) {
                r->kallsyms_failed_ns = now;
                if (e == -EPERM)
                        ep_sym_stats_error(r->stats, "kallsyms addresses are hidden (kptr_restrict)");
                else
                        ep_sym_stats_error(r->stats, "kallsyms: %s", strerror(-e));
                return log_warning_errno(e, "Failed to read kallsyms: %m");
        }

        bool reload = r->kallsyms != NULL;
        ep_kallsyms_free(r->kallsyms);
        r->kallsyms = k;
        r->kallsyms_loaded_ns = now;
        r->kallsyms_failed_ns = 0;
        if (reload)
                drop_kernel_results(r); /* modules may have moved */
        log_debug("Read %zu kernel text symbols, %zu modules.", ep_kallsyms_count(k), ep_kallsyms_modules(k));
        return 0;
}

static int symbolize_kernel(EpResolver *r, const ResultKey *key, bool *ret_cacheable) {
        const char *name, *module;
        uint64_t now = now_ns();
        int k;

        *ret_cacheable = false;

        if (!r->kallsyms && (r->kallsyms_failed_ns == 0 || now - r->kallsyms_failed_ns >= KALLSYMS_RETRY_NS))
                (void) load_kallsyms(r);
        if (!r->kallsyms)
                return result_set(&r->scratch, EP_SYM_NO_FILE, key->addr, "", NULL);

        uint64_t lookup = (key->flags & EP_FRAME_FLAG_RETURN_ADDRESS) && key->addr > 0 ? key->addr - 1 : key->addr;

        k = ep_kallsyms_lookup(r->kallsyms, lookup, &name, &module, NULL);
        if (k < 0 && now - r->kallsyms_loaded_ns >= r->config.kallsyms_refresh_ns &&
            (r->kallsyms_failed_ns == 0 || now - r->kallsyms_failed_ns >= KALLSYMS_RETRY_NS) &&
            load_kallsyms(r) >= 0)
                k = ep_kallsyms_lookup(r->kallsyms, lookup, &name, &module, NULL);
        if (k < 0)
                /* Not cached: a module loaded later may cover it after the next refresh. */
                return result_set(&r->scratch, EP_SYM_NOT_FOUND, key->addr, "", NULL);

        char *copy = strdup(name);
        if (!copy)
                return -ENOMEM;
        *ret_cacheable = true;
        return result_set(&r->scratch, EP_SYM_OK, key->addr, module, copy);
}

static void count(EpResolver *r, uint8_t status) {
        if (!r->stats)
                return;
        switch (status) {
        case EP_SYM_OK: r->stats->resolved++; break;
        case EP_SYM_NOT_FOUND: r->stats->not_found++; break;
        default: r->stats->file_errors++; break;
        }
}

int ep_resolver_symbolize(EpResolver *r, uint8_t kind, const uint8_t file_id[EP_FILE_ID_SIZE],
                          uint64_t addr, uint8_t flags, const EpSymResult **ret) {
        ResultKey key = {
                .kind = kind,
                .flags = flags & EP_FRAME_FLAG_RETURN_ADDRESS,
                .addr = addr,
        };
        bool cacheable = false;
        int slot, k;

        if (kind == EP_FRAME_NATIVE)
                memcpy(key.file_id, file_id, EP_FILE_ID_SIZE);

        slot = ep_lru_get(r->results, &key);
        if (slot >= 0) {
                if (r->stats)
                        r->stats->cache_hits++;
                count(r, r->result_slots[slot].status);
                *ret = &r->result_slots[slot];
                return 0;
        }

        switch (kind) {
        case EP_FRAME_NATIVE:
                k = symbolize_native(r, &key, &cacheable);
                break;
        case EP_FRAME_KERNEL:
                k = symbolize_kernel(r, &key, &cacheable);
                break;
        default:
                /* Nothing to look up for other kinds. */
                k = result_set(&r->scratch, EP_SYM_NOT_FOUND, 0, "", NULL);
                break;
        }
        if (k < 0) {
                ep_sym_result_done(&r->scratch);
                return k;
        }

        count(r, r->scratch.status);
        *ret = cacheable ? cache_result(r, &key) : &r->scratch;
        return 0;
}

int ep_resolver_file_info(EpResolver *r, const uint8_t file_id[EP_FILE_ID_SIZE], EpFileInfo *ret) {
        EpElfFile *elf;
        int k;

        *ret = (EpFileInfo) {};

        k = get_file(r, file_id, &elf);
        if (k == -ENOMEM)
                return k;
        if (k == -ENOEXEC || k == -EIO)
                ret->status = EP_SYM_BAD_FILE;
        else if (k < 0)
                ret->status = EP_SYM_NO_FILE;
        else {
                k = ep_elf_build_ids(elf, &ret->ids);
                if (k == -ENOMEM)
                        return k;
                if (k < 0) {
                        bad_file_seen(r, file_id, k);
                        ret->status = EP_SYM_BAD_FILE;
                } else
                        ret->status = EP_SYM_OK;
        }

        if (ret->status != EP_SYM_OK && r->stats)
                r->stats->file_errors++;
        return 0;
}
