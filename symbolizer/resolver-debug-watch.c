/* SPDX-License-Identifier: MIT */
/* Files answered without the separate debug file they need (none was found): looked for again
 * now and then, so that installing libc6-dbg, or a debug file under a --debug-dir root, names
 * their frames while the symbolizer runs. The search is redone from the file's record
 * (symbol-cache.h: build ID, .gnu_debuglink, the path it was searched next to) with
 * ep_debug_file_locate(): a few stat() calls, never an open of the file.
 *
 * ep_debug_file_locate() names the first candidate that exists, whether or not it is the
 * file's debug file (checking that means opening it). So what it named when the file was
 * watched is kept, with the candidate's identity: a candidate that was refused then (another
 * build ID, a wrong CRC) is news only once another file takes its place. */

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "debug-file.h"
#include "file-id.h"
#include "log.h"
#include "resolver-internal.h"

typedef struct Candidate {
        char *path; /* NULL: none */
        dev_t dev;
        ino_t ino;
        struct timespec mtime;
} Candidate;

struct DebugWatch {
        EpSymbolFileRecord rec;
        Candidate seen; /* what the search named when the file was watched */
};

static void candidate_done(Candidate *c) {
        free(c->path);
        *c = (Candidate) {};
}

static void watch_done(DebugWatch *w) {
        ep_symbol_file_record_done(&w->rec);
        candidate_done(&w->seen);
}

/* What the record's search names now: 0 and *ret (path NULL: nothing), or -ENOMEM. */
static int candidate_now(const EpSymbolFileRecord *rec, Candidate *ret) {
        _cleanup_free_ char *path = NULL;
        struct stat st;
        int k;

        k = ep_debug_file_locate(rec->build_id, rec->build_id_len, rec->debuglink, rec->path, &path);
        if (k == -ENOMEM)
                return k;
        if (k < 0 || stat(path, &st) < 0) {
                *ret = (Candidate) {};
                return 0;
        }
        *ret = (Candidate) { .path = TAKE_PTR(path), .dev = st.st_dev, .ino = st.st_ino, .mtime = st.st_mtim };
        return 0;
}

static bool candidate_same(const Candidate *a, const Candidate *b) {
        if (!a->path || !b->path)
                return !a->path && !b->path;
        return streq(a->path, b->path) && a->dev == b->dev && a->ino == b->ino &&
               a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec;
}

int ep_resolver_debug_watch_init(EpResolver *r) {
        int k;

        k = ep_lru_new(EP_FILE_ID_SIZE, EP_RESOLVER_DEBUG_WATCH_MAX, &r->debug_watch);
        if (k < 0)
                return k;
        r->debug_watch_slots = calloc(EP_RESOLVER_DEBUG_WATCH_MAX, sizeof(DebugWatch));
        return r->debug_watch_slots ? 0 : -ENOMEM;
}

void ep_resolver_debug_watch_free(EpResolver *r) {
        if (r->debug_watch_slots)
                for (uint32_t i = 0; i < EP_RESOLVER_DEBUG_WATCH_MAX; i++)
                        watch_done(&r->debug_watch_slots[i]);
        free(r->debug_watch_slots);
        ep_lru_free(r->debug_watch);
}

uint32_t ep_resolver_debug_watched(const EpResolver *r) {
        return ep_lru_size(r->debug_watch);
}

/* The watch slot of id, or -ENOENT; *ret_enough: nothing to gain from a new record, one that has
 * a path when new_has_path (a search next to a path finds .gnu_debuglink files too). */
static int watch_slot(EpResolver *r, const uint8_t id[EP_FILE_ID_SIZE], bool new_has_path, bool *ret_enough) {
        int slot = ep_lru_get(r->debug_watch, id);

        *ret_enough = slot >= 0 && (r->debug_watch_slots[slot].rec.path || !new_has_path);
        return slot;
}

int ep_resolver_debug_watch(EpResolver *r, const uint8_t id[EP_FILE_ID_SIZE], EpSymbolFileRecord *rec) {
        Candidate seen;
        bool evicted, enough;
        int slot, k;

        slot = watch_slot(r, id, rec->path, &enough);
        if (enough)
                return 0;
        k = candidate_now(rec, &seen);
        if (k < 0)
                return k;
        if (slot < 0) {
                /* When full, the least recently answered file is no longer watched: its answers
                 * stay as they are until the symbolizer restarts (symbol-cache.h checks then). */
                slot = ep_lru_insert(r->debug_watch, id, &evicted);
                if (slot < 0) {
                        candidate_done(&seen);
                        return slot;
                }
        }
        DebugWatch *w = &r->debug_watch_slots[slot];
        watch_done(w);
        *w = (DebugWatch) { .rec = *rec, .seen = seen };
        *rec = (EpSymbolFileRecord) {};
        return 0;
}

int ep_resolver_debug_watch_record(EpResolver *r, const uint8_t id[EP_FILE_ID_SIZE], const EpSymbolFileRecord *rec) {
        _cleanup_(ep_symbol_file_record_done) EpSymbolFileRecord copy = {};
        bool enough;
        int k;

        if (!rec->debug || !streq(rec->debug, EP_SYMBOL_CACHE_DEBUG_NONE))
                return 0;
        (void) watch_slot(r, id, rec->path, &enough);
        if (enough)
                return 0; /* watched as well as it can be (a hot path) */
        k = ep_symbol_file_record_copy(rec, &copy);
        if (k < 0)
                return k;
        return ep_resolver_debug_watch(r, id, &copy);
}

/* 1 when w's search names another file than when it was watched, 0 when not (or out of
 * memory: looked at again next time). */
static int watch_changed(const DebugWatch *w, char **ret_found) {
        _cleanup_(candidate_done) Candidate now = {};

        if (candidate_now(&w->rec, &now) < 0 || candidate_same(&now, &w->seen) || !now.path)
                return 0;
        *ret_found = TAKE_PTR(now.path);
        return 1;
}

int ep_resolver_recheck_debug_files(EpResolver *r, EpFileChangedFn changed, void *userdata) {
        int n = 0;

        for (int slot = ep_lru_oldest(r->debug_watch); slot >= 0;) {
                int newer = ep_lru_newer(r->debug_watch, (uint32_t) slot);
                DebugWatch *w = &r->debug_watch_slots[slot];
                _cleanup_free_ char *found = NULL;
                uint8_t id[EP_FILE_ID_SIZE];
                char hex[2 * EP_FILE_ID_SIZE + 1];

                if (watch_changed(w, &found)) {
                        memcpy(id, ep_lru_slot_key(r->debug_watch, (uint32_t) slot), sizeof id);
                        ep_file_id_to_hex(id, hex);
                        log_info("Debug file %s appeared for %s (file %s): naming its frames again.", found,
                                 w->rec.path ?: "a file without a known path", hex);
                        watch_done(w);
                        (void) ep_lru_remove(r->debug_watch, id);
                        ep_resolver_forget_file(r, id);
                        if (r->stats)
                                r->stats->debug_files_appeared++;
                        if (changed)
                                changed(id, userdata);
                        n++;
                }
                slot = newer;
        }
        return n;
}
