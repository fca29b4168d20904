/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon.h"
#include "debug-file.h"
#include "elf-symbols.h"
#include "file-id.h"
#include "frame-kind.h"
#include "log.h"
#include "lru.h"
#include "native-file.h"
#include "resolver-internal.h"
#include "symbol-cache.h"

uint64_t ep_resolver_now_ns(void) {
        return ep_now_ns(CLOCK_MONOTONIC);
}

uint8_t ep_resolver_missing_status(int error) {
        return ep_error_passing(error) ? EP_SYM_RETRY : EP_SYM_NO_FILE;
}

static void close_elf(EpResolver *r, FileEntry *e) {
        if (!e->elf)
                return;
        r->file_bytes -= e->bytes;
        r->files_open--;
        e->elf = ep_elf_free(e->elf);
}

static void file_entry_done(EpResolver *r, FileEntry *e) {
        close_elf(r, e);
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
        r->persisted_files = ep_hashmap_new(EP_FILE_ID_SIZE, sizeof(PersistedFile));
        if (!r->persisted_files)
                return -ENOMEM;
        k = ep_resolver_debug_watch_init(r);
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
        ep_symbol_file_record_done(&r->native_record);
        free(r->file_slots);
        free(r->result_slots);
        ep_lru_free(r->files);
        ep_lru_free(r->results);
        ep_hashmap_free(r->persisted_files);
        ep_resolver_debug_watch_free(r);
        for (size_t k = 0; k < ELEMENTSOF(ep_resolvers); k++)
                if (ep_resolvers[k].free)
                        ep_resolvers[k].free(r);
        free(r);
        return NULL;
}

void ep_resolver_set_symbol_cache(EpResolver *r, EpSymbolCache *cache) {
        r->symbol_cache = cache;
        ep_hashmap_clear(r->persisted_files); /* a new session */
}

uint32_t ep_resolver_cache_entries(const EpResolver *r) {
        return ep_lru_size(r->results);
}

uint32_t ep_resolver_files_open(const EpResolver *r) {
        return r->native_parser.answer ? r->native_parser.files_open(r->native_parser.userdata) : r->files_open;
}

void ep_resolver_set_native_parser(EpResolver *r, const EpNativeParser *p) {
        r->native_parser = p ? *p : (EpNativeParser) {};
}

void ep_resolver_source_changed(EpResolver *r) {
        if (r->native_parser.answer)
                r->native_parser.source_changed(r->native_parser.userdata);
        for (uint32_t i = 0; i < r->config.max_files; i++) {
                const void *key = ep_lru_slot_key(r->files, i);

                if (key && r->file_slots[i].state == FILE_MISSING) {
                        file_entry_done(r, &r->file_slots[i]);
                        (void) ep_lru_remove(r->files, key);
                }
        }
        for (size_t k = 0; k < ELEMENTSOF(ep_resolvers); k++)
                if (ep_resolvers[k].source_changed)
                        ep_resolvers[k].source_changed(r);
}

/* ---- files ---- */

/* Closes the least recently used open files (but keep) while what they keep resident for their
 * symbols adds up to more than max_file_bytes (ep_elf_kept_bytes(): not their sizes, since a
 * 100 MB program keeps ~12 MB of symbols resident, and a budget of sizes closed and reopened
 * such a file for nearly every frame of a stack that also runs in libc). A closed file's
 * answers stay in the result LRU and the symbol cache, so only new addresses in it open it
 * again. */
static void enforce_file_budget(EpResolver *r, uint32_t keep) {
        int slot = ep_lru_oldest(r->files);

        while (slot >= 0 && r->file_bytes > r->config.max_file_bytes) {
                int newer = ep_lru_newer(r->files, (uint32_t) slot);
                FileEntry *e = &r->file_slots[slot];

                if ((uint32_t) slot != keep && e->elf) {
                        uint8_t id[EP_FILE_ID_SIZE];

                        memcpy(id, ep_lru_slot_key(r->files, (uint32_t) slot), sizeof id);
                        file_entry_done(r, e);
                        (void) ep_lru_remove(r->files, id);
                }
                slot = newer;
        }
}

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
        r->file_slots[slot] = (FileEntry) { .state = state, .elf = elf, .since_ns = ep_resolver_now_ns() };
        if (elf) {
                r->file_slots[slot].bytes = ep_elf_kept_bytes(elf);
                r->files_open++;
                r->file_bytes += r->file_slots[slot].bytes;
                enforce_file_budget(r, (uint32_t) slot);
        }
        return 0;
}

static void mark_bad(EpResolver *r, const uint8_t id[EP_FILE_ID_SIZE], FileEntry *e, int error) {
        char hex[2 * EP_FILE_ID_SIZE + 1];

        ep_file_id_to_hex(id, hex);
        log_warning_errno(error, "File %s is not usable, answering BAD_FILE for it: %m", hex);
        ep_sym_stats_error(r->stats, "file %s: %s", hex, strerror(-error));

        close_elf(r, e);
        e->state = FILE_BAD;
}

/* Returns the opened file, or -ENOEXEC/-EIO (bad file), -ENOENT/-ENXIO/... (no file). */
int ep_resolver_get_file(EpResolver *r, const uint8_t id[EP_FILE_ID_SIZE], EpElfFile **ret) {
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
                        if (ep_resolver_now_ns() - e->since_ns < r->config.missing_retry_ns)
                                return -ENOENT;
                        file_entry_done(r, e);
                        (void) ep_lru_remove(r->files, id);
                        break;
                }
        }

        if (r->open_timed_out_ns != 0 && ep_resolver_now_ns() - r->open_timed_out_ns < r->config.timeout_hold_ns)
                return -ETIMEDOUT; /* the source is not answering: not asked again just yet */
        fd = r->source.open_file(r->source.userdata, id);
        r->open_timed_out_ns = fd == -ETIMEDOUT ? ep_resolver_now_ns() : 0;
        if (fd < 0 && ep_error_passing(fd))
                return fd; /* nobody to ask right now, or no answer: do not remember */
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

void ep_resolver_bad_file_seen(EpResolver *r, const uint8_t id[EP_FILE_ID_SIZE], int error) {
        int slot = ep_lru_get(r->files, id);

        if (slot >= 0 && r->file_slots[slot].state == FILE_OPEN)
                mark_bad(r, id, &r->file_slots[slot], error);
}

/* ---- results ---- */

int ep_resolver_result_set(EpSymResult *res, uint8_t status, uint64_t elf_addr, const char *module,
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

/* Forgets the cached results of kind, of one file only when file_id is not NULL. */
static void drop_results_where(EpResolver *r, uint8_t kind, const uint8_t *file_id) {
        for (uint32_t i = 0; i < r->config.max_results; i++) {
                const ResultKey *key = ep_lru_slot_key(r->results, i);

                if (key && key->kind == kind && (!file_id || memcmp(key->file_id, file_id, EP_FILE_ID_SIZE) == 0)) {
                        ResultKey copy = *key;
                        ep_sym_result_done(&r->result_slots[i]);
                        (void) ep_lru_remove(r->results, &copy);
                }
        }
}

void ep_resolver_drop_results(EpResolver *r, uint8_t kind) {
        drop_results_where(r, kind, NULL);
}

void ep_resolver_forget_file(EpResolver *r, const uint8_t id[EP_FILE_ID_SIZE]) {
        int slot, k;

        drop_results_where(r, EP_FRAME_NATIVE, id);
        if (r->native_parser.answer)
                r->native_parser.forget_file(r->native_parser.userdata, id);
        slot = ep_lru_remove(r->files, id);
        if (slot >= 0)
                file_entry_done(r, &r->file_slots[slot]); /* its debug search with it (native-file.c) */
        (void) ep_hashmap_remove(r->persisted_files, id, NULL);
        if (!r->symbol_cache)
                return;
        /* Rows still queued were computed the old way: written first, then dropped with the rest. */
        k = ep_symbol_cache_flush(r->symbol_cache);
        if (k >= 0)
                k = ep_symbol_cache_drop_file(r->symbol_cache, id);
        if (k < 0)
                log_debug_errno(k, "Cannot drop the persisted symbols of a file whose debug file appeared: %m");
}

static void count(EpResolver *r, uint8_t status) {
        if (r->stats)
                ep_sym_stats_count(r->stats, status);
}

static void result_key(const EpSymRequest *req, ResultKey *ret) {
        const EpFrameKind *k = ep_frame_kind(req->kind);

        *ret = (ResultKey) {
                .kind = req->kind,
                .flags = req->flags & EP_FRAME_FLAG_RETURN_ADDRESS,
                .addr = req->addr,
        };
        switch (k ? k->identity : EP_FRAME_ID_NONE) {
        case EP_FRAME_ID_FILE_OFFSET:
                memcpy(ret->file_id, req->file_id, EP_FILE_ID_SIZE);
                break;
        case EP_FRAME_ID_PROCESS_ADDR:
                memcpy(ret->file_id, &req->pid, sizeof req->pid);
                memcpy(ret->file_id + sizeof req->pid, &req->start_time_ns, sizeof req->start_time_ns);
                break;
        default:
                break;
        }
}

/* Only kinds whose identity names the content outlive the process (frame-kind.c: a file ID
 * does; kernel addresses move at every boot, JIT and runtime addresses belong to one process).
 * Only final answers: a file that could not be opened may open next time. */
static bool kind_persists(uint8_t kind) {
        const EpFrameKind *k = ep_frame_kind(kind);
        return k && k->symbols_persist;
}

static bool persistable(const ResultKey *key, const EpSymResult *res) {
        return kind_persists(key->kind) && (res->status == EP_SYM_OK || res->status == EP_SYM_NOT_FOUND);
}

/* ---- the persisted cache ---- */

static const char *debug_outcome_name(const EpNativeDebugInfo *info) {
        switch (info->outcome) {
        case EP_NATIVE_DEBUG_NOT_NEEDED:
                return EP_SYMBOL_CACHE_DEBUG_NOT_NEEDED;
        case EP_NATIVE_DEBUG_FOUND:
                return info->debug_path;
        default:
                return EP_SYMBOL_CACHE_DEBUG_NONE;
        }
}

/* Tells records apart that differ in what was searched or found. */
static uint8_t record_mark(const EpSymbolFileRecord *rec) {
        EpNativeDebug outcome = streq(rec->debug, EP_SYMBOL_CACHE_DEBUG_NOT_NEEDED) ? EP_NATIVE_DEBUG_NOT_NEEDED :
                                streq(rec->debug, EP_SYMBOL_CACHE_DEBUG_NONE)       ? EP_NATIVE_DEBUG_NONE :
                                                                                     EP_NATIVE_DEBUG_FOUND;
        return (uint8_t) (1 + 2 * outcome + !!rec->path);
}

/* Would the debug search come out as recorded with the current roots? The lookup is redone
 * from the record (a few stat() calls), never by opening the file. 1 yes, 0 no and *ret_now
 * what it finds now (NULL: none), -ENOMEM. */
static int record_still_holds(const EpSymbolFileRecord *rec, char **ret_now) {
        _cleanup_free_ char *now = NULL;
        int k;

        *ret_now = NULL;
        if (streq(rec->debug, EP_SYMBOL_CACHE_DEBUG_NOT_NEEDED))
                return 1;
        k = ep_debug_file_locate(rec->build_id, rec->build_id_len, rec->debuglink, rec->path, &now);
        if (k == -ENOMEM)
                return k;
        if (k < 0 ? streq(rec->debug, EP_SYMBOL_CACHE_DEBUG_NONE) : streq(rec->debug, now))
                return 1;
        *ret_now = TAKE_PTR(now);
        return 0;
}

/* The first hit of a file in a session: are its rows computed with the debug file it would
 * get now? If not (a debug file appeared, vanished, or the roots changed) they are all
 * deleted. 1 valid, 0 dropped (the answer is computed again), -ENOMEM. */
static int check_file(EpResolver *r, const uint8_t id[EP_FILE_ID_SIZE], PersistedFile *pf) {
        _cleanup_(ep_symbol_file_record_done) EpSymbolFileRecord rec = {};
        _cleanup_free_ char *now = NULL;
        char hex[2 * EP_FILE_ID_SIZE + 1];
        int k;

        k = ep_symbol_cache_get_file(r->symbol_cache, id, &rec);
        if (k == -ENOMEM)
                return k;
        if (k < 0 && k != -ENOENT)
                return 0; /* the cache cannot answer: a miss, checked at the next hit */
        pf->checked = true;
        if (k >= 0) {
                k = record_still_holds(&rec, &now);
                if (k > 0 && streq(rec.debug, EP_SYMBOL_CACHE_DEBUG_NONE))
                        /* Answered from rows without a debug file: watched like computed ones. */
                        k = ep_resolver_debug_watch(r, id, &rec) < 0 ? -ENOMEM : 1;
                if (k != 0)
                        return k;
        }

        ep_file_id_to_hex(id, hex);
        log_info("Persisted symbols of file %s (%s) are out of date, dropping them: debug file then: %s, now: %s.",
                 hex, rec.path ?: "path unknown", rec.debug ?: "not recorded", now ?: EP_SYMBOL_CACHE_DEBUG_NONE);
        k = ep_symbol_cache_drop_file(r->symbol_cache, id);
        if (k < 0)
                log_debug_errno(k, "Cannot drop the persisted symbols of file %s: %m", hex);
        pf->recorded = 0; /* a record queued before is gone if it was written */
        return 0;
}

/* 1 with the answer in r->scratch when the persisted cache has it, 0 when not, -ENOMEM. */
static int persisted_lookup(EpResolver *r, const ResultKey *key) {
        EpSymbolCache *cache = r->symbol_cache;
        PersistedFile *pf;
        int k;

        if (!cache || !kind_persists(key->kind))
                return 0;
        k = ep_symbol_cache_get(cache, key->file_id, key->addr, key->flags, &r->scratch);
        if (k == -ENOMEM)
                return k;
        if (k < 0)
                return 0; /* a miss, or the cache cannot answer: compute it */

        k = ep_hashmap_put(r->persisted_files, key->file_id, (void **) &pf);
        if (k >= 0)
                k = pf->checked ? 1 : check_file(r, key->file_id, pf);
        if (k <= 0) {
                ep_sym_result_done(&r->scratch);
                return k;
        }
        if (r->stats)
                r->stats->persisted_hits++;
        return 1;
}

int ep_resolver_file_record(EpElfFile *elf, const EpNativeDebugInfo *info, EpSymbolFileRecord *ret) {
        _cleanup_(ep_symbol_file_record_done) EpSymbolFileRecord rec = {};
        EpBuildIds ids;
        uint32_t crc;
        int k;

        k = ep_elf_build_ids(elf, &ids);
        if (k == -ENOMEM)
                return k;
        if (k >= 0) {
                rec.build_id_len = ids.gnu_len;
                memcpy(rec.build_id, ids.gnu, ids.gnu_len);
        }
        k = ep_elf_debuglink(elf, &rec.debuglink, &crc);
        if (k == -ENOMEM)
                return k;
        rec.path = info->search_path ? strdup(info->search_path) : NULL;
        rec.debug = strdup(debug_outcome_name(info));
        if ((info->search_path && !rec.path) || !rec.debug)
                return -ENOMEM;
        *ret = rec;
        rec = (EpSymbolFileRecord) {};
        return 0;
}

/* Queues the record of the native answer just computed (symbol-cache.h) when this session has
 * not yet, or when what the file's answers are computed with changed since: before the answer,
 * so that rows computed with an earlier outcome are dropped and this one is kept. */
static int record_file(EpResolver *r, const uint8_t id[EP_FILE_ID_SIZE]) {
        PersistedFile *pf;
        int k;

        if (!r->has_native_record)
                return 0;
        k = ep_hashmap_put(r->persisted_files, id, (void **) &pf);
        if (k < 0)
                return k;
        uint8_t mark = record_mark(&r->native_record);
        if (pf->recorded == mark)
                return 0;
        k = ep_symbol_cache_put_file(r->symbol_cache, id, &r->native_record);
        if (k < 0)
                return k;
        /* Not `checked`: until the queue is written, the table still holds the old record, and
         * rows of another session computed with it may be hit before that. */
        pf->recorded = mark;
        return 0;
}

int ep_resolver_native_record_take(EpResolver *r, const uint8_t id[EP_FILE_ID_SIZE], EpSymbolFileRecord *rec) {
        int k;

        k = ep_resolver_debug_watch_record(r, id, rec);
        if (k < 0)
                return k;
        ep_symbol_file_record_done(&r->native_record);
        r->native_record = *rec;
        *rec = (EpSymbolFileRecord) {};
        r->has_native_record = true;
        return 0;
}

static void persist(EpResolver *r, const EpSymRequest *req, const ResultKey *key) {
        EpSymbolCache *cache = r->symbol_cache;
        int k;

        if (!cache || !persistable(key, &r->scratch))
                return;
        k = record_file(r, key->file_id);
        if (k < 0 && k != -ENOENT)
                log_once_errno(LOG_WARNING, k, "Cannot queue a file record for the persisted cache: %m");
        k = ep_symbol_cache_put(cache, key->file_id, key->addr, key->flags, &r->scratch);
        if (k < 0 && k != -ENOENT)
                log_once_errno(LOG_WARNING, k, "Cannot queue a symbol for the persisted cache: %m");
}

int ep_resolver_symbolize(EpResolver *r, const EpSymRequest *req, const EpSymResult **ret) {
        bool cacheable = false;
        ResultKey key;
        int slot, k;

        result_key(req, &key);
        slot = ep_lru_get(r->results, &key);
        if (slot >= 0) {
                if (r->stats)
                        r->stats->cache_hits++;
                count(r, r->result_slots[slot].status);
                *ret = &r->result_slots[slot];
                return 0;
        }

        ep_sym_result_done(&r->scratch);
        r->has_native_record = false;
        k = persisted_lookup(r, &key);
        if (k < 0)
                return k;
        if (k > 0) {
                count(r, r->scratch.status);
                *ret = cache_result(r, &key);
                return 0;
        }

        if (req->kind < ELEMENTSOF(ep_resolvers) && ep_resolvers[req->kind].resolve)
                k = ep_resolvers[req->kind].resolve(r, req, &r->scratch, &cacheable);
        else
                /* Nothing to look up for other kinds. */
                k = ep_resolver_result_set(&r->scratch, EP_SYM_NOT_FOUND, 0, "", NULL);
        if (k < 0) {
                ep_sym_result_done(&r->scratch);
                return k;
        }

        count(r, r->scratch.status);
        if (cacheable)
                persist(r, req, &key);
        *ret = cacheable ? cache_result(r, &key) : &r->scratch;
        return 0;
}

/* ep_resolver_file_info() from a file parsed here. */
static int file_info_here(EpResolver *r, const uint8_t file_id[EP_FILE_ID_SIZE], EpFileInfo *ret) {
        EpElfFile *elf;
        int k;

        k = ep_resolver_get_file(r, file_id, &elf);
        if (k == -ENOMEM)
                return k;
        if (k == -ENOEXEC || k == -EIO)
                ret->status = EP_SYM_BAD_FILE;
        else if (k < 0)
                ret->status = ep_resolver_missing_status(k);
        else {
                k = ep_elf_build_ids(elf, &ret->ids);
                if (k == -ENOMEM)
                        return k;
                if (k < 0) {
                        ep_resolver_bad_file_seen(r, file_id, k);
                        ret->status = EP_SYM_BAD_FILE;
                } else
                        ret->status = EP_SYM_OK;
        }
        return 0;
}

int ep_resolver_file_info(EpResolver *r, const uint8_t file_id[EP_FILE_ID_SIZE], EpFileInfo *ret) {
        int k;

        *ret = (EpFileInfo) {};
        k = r->native_parser.answer ? r->native_parser.file_info(r->native_parser.userdata, file_id, ret)
                                    : file_info_here(r, file_id, ret);
        if (k < 0)
                return k;
        if (ret->status != EP_SYM_OK && r->stats)
                ep_sym_stats_count(r->stats, ret->status);
        return 0;
}
