/* SPDX-License-Identifier: MIT */
#include <bpf/bpf.h>
#include <inttypes.h>
#include <time.h>

#include "daemon.h"
#include "hashmap.h"
#include "log.h"
#include "native-unwind.h"
#include "table-pages.h"
#include "tables.h"
#include "unwind-table.h"

#define RETRY_BASE_NS (1 * NSEC_PER_SEC)
#define RETRY_MAX_NS (60 * NSEC_PER_SEC)
#define RETRY_MAX_ATTEMPTS 10
/* What one file's table may take of what all files share. The largest files seen carry ~600
 * distinct rules (libLLVM) and text of a few hundred MiB; a table beyond either cap is refused
 * (its file takes frame-pointer steps), so one program cannot fill the rule array or the page
 * map for every other. */
#define MAX_RULES_PER_FILE 4096u
#define MAX_PAGES_PER_FILE 16384u /* 1 GiB of text */
/* File slots one user other than root may hold (a slot is charged to the user whose process
 * took it), so one user's programs cannot take them all from the others'. */
#define SLOTS_PER_USER_DIVISOR 8u
#define PAGE_ENTRY_BYTES 96 /* a hash element with its 8-byte key and 40-byte value, as allocated */
#define MAP_OVERHEAD_BYTES 512

typedef enum TableState {
        T_IDLE,    /* nothing asked yet (or given up on an unused file) */
        T_QUEUED,  /* waiting in a queue */
        T_ASKING,  /* the symbolizer is being asked */
        T_PUBLISHING, /* rules, pages and delta array in BPF; the outer array entry comes next */
        T_LOADED,  /* in BPF */
        T_FP_ONLY, /* no CFI (or unreadable): file_state says frame pointers */
        T_FAILED,  /* unusable answer or load failure: no table, frame-pointer steps */
        T_RETRY,   /* transient failure: asked again at retry_at_ns */
        T_UNAVAILABLE, /* the file could not be opened: asked again on the next reference */
        T_NO_ROOM, /* the rule array or the page map was full: asked again when a table leaves */
        T_TOO_BIG, /* over the per-file caps: frame-pointer steps */
} TableState;

typedef struct TableFile {
        uint32_t key;
        uint32_t slot; /* BPF file number; 0 = none */
        uid_t charged; /* the user the slot counts against; 0 (root): none */
        uint32_t refs;
        TableState state;
        uint64_t state_since_ns; /* CLOCK_MONOTONIC of the last state change, for ListTables */
        bool hot;
        unsigned attempts;
        uint64_t unused_since_ns; /* CLOCK_MONOTONIC when refs reached 0; 0 while used */
        uint64_t retry_at_ns;
        uint16_t *rules; /* global rules this table holds */
        uint32_t n_rules;
        uint32_t *pages; /* its page numbers in unwind_pages */
        uint32_t n_pages;
        uint64_t bytes;
        /* The table's delta array: put in unwind_tables by ep_tables_publish() (T_PUBLISHING),
         * then kept while it is loaded, for ep_tables_find_rule(): from user space the outer
         * map gives only its ID, and BPF_MAP_GET_FD_BY_ID needs CAP_SYS_ADMIN, which the loader
         * does not have. One descriptor per loaded table. */
        int map_fd;
} TableFile;

typedef struct KeyQueue {
        uint32_t *v;
        size_t head, tail, cap;
} KeyQueue;

struct EpTables {
        EpUnwindMaps maps;
        EpRuleSet *rules;
        EpHashmap *files; /* file_key → TableFile * */
        EpHashmap *user_slots; /* uid_t → uint32_t slots charged to that user */
        uint32_t *free_slots;
        uint32_t n_free, next_slot, max_files;
        KeyQueue hot, normal;
        uint64_t unload_delay_ns;
        void (*kick)(void *userdata);
        void *kick_userdata;
        void (*loaded)(uint32_t file_key, void *userdata);
        void *loaded_userdata;
        void (*publish_soon)(void *userdata);
        void *publish_userdata;
        uint32_t *to_publish; /* file keys in T_PUBLISHING */
        size_t n_to_publish, cap_to_publish;
        uint32_t n_loaded, n_fp_only, n_pending;
        uint64_t bytes, requests, errors, no_slot, too_big, user_full;
        uint64_t slot_epoch; /* bumped whenever a slot is released */
        bool room_freed;     /* a table left since the last sweep: T_NO_ROOM files go again */
};

/* ---- queues ---- */

static int queue_push(KeyQueue *q, uint32_t key) {
        if (q->tail == q->cap) {
                if (q->head > 0) {
                        memmove(q->v, q->v + q->head, (q->tail - q->head) * sizeof *q->v);
                        q->tail -= q->head;
                        q->head = 0;
                }
                if (q->tail == q->cap) {
                        size_t cap = q->cap ? q->cap * 2 : 64;
                        uint32_t *nv = realloc(q->v, cap * sizeof *nv);
                        if (!nv)
                                return -ENOMEM;
                        q->v = nv;
                        q->cap = cap;
                }
        }
        q->v[q->tail++] = key;
        return 0;
}

static bool queue_pop(KeyQueue *q, uint32_t *ret) {
        if (q->head == q->tail)
                return false;
        *ret = q->v[q->head++];
        if (q->head == q->tail)
                q->head = q->tail = 0;
        return true;
}

/* ---- files ---- */

static TableFile *file_get(EpTables *t, uint32_t key) {
        const void *v = ep_hashmap_get(t->files, &key);
        TableFile *f;

        if (!v)
                return NULL;
        memcpy(&f, v, sizeof f);
        return f;
}

static TableFile *file_get_or_add(EpTables *t, uint32_t key) {
        TableFile *f = file_get(t, key);
        void *slot;

        if (f)
                return f;
        f = calloc(1, sizeof *f);
        if (!f)
                return NULL;
        f->key = key;
        f->map_fd = -EBADF;
        if (ep_hashmap_put(t->files, &key, &slot) < 0) {
                free(f);
                return NULL;
        }
        memcpy(slot, &f, sizeof f);
        return f;
}

static void set_state(EpTables *t, TableFile *f, TableState s) {
        bool was_pending = f->state == T_QUEUED || f->state == T_ASKING || f->state == T_PUBLISHING;
        bool pending = s == T_QUEUED || s == T_ASKING || s == T_PUBLISHING;

        t->n_pending += (uint32_t) pending - (uint32_t) was_pending;
        t->n_loaded += (uint32_t) (s == T_LOADED) - (uint32_t) (f->state == T_LOADED);
        t->n_fp_only += (uint32_t) (s == T_FP_ONLY) - (uint32_t) (f->state == T_FP_ONLY);
        if (s != f->state || f->state_since_ns == 0)
                f->state_since_ns = ep_now_ns(CLOCK_MONOTONIC);
        f->state = s;
}

static void enqueue(EpTables *t, TableFile *f) {
        KeyQueue *q = f->hot ? &t->hot : &t->normal;

        if (queue_push(q, f->key) < 0) {
                log_once(LOG_WARNING, "Out of memory queueing unwind table requests.");
                return;
        }
        set_state(t, f, T_QUEUED);
        if (t->kick)
                t->kick(t->kick_userdata);
}

static uint32_t slot_alloc(EpTables *t) {
        if (t->n_free > 0)
                return t->free_slots[--t->n_free];
        if (t->next_slot < t->max_files)
                return t->next_slot++;
        return 0;
}

static void slot_release(EpTables *t, uint32_t slot) {
        if (slot == 0)
                return;
        t->free_slots[t->n_free++] = slot;
        t->slot_epoch++;
}

static void set_file_state(EpTables *t, uint32_t slot, uint32_t state) {
        if (bpf_map_update_elem(t->maps.file_state, &slot, &state, BPF_ANY) < 0)
                log_once_errno(LOG_WARNING, errno, "Cannot update the BPF file state: %m");
}

/* Removes a table from BPF: the table first (BPF then stops looking at pages; done already
 * when outer_removed), then its pages; then its rules are released. */
static void table_unload(EpTables *t, TableFile *f, bool outer_removed) {
        (void) close_nointr(f->map_fd);
        f->map_fd = -EBADF;
        if (f->state == T_LOADED || f->state == T_PUBLISHING) {
                if (f->state == T_LOADED && !outer_removed &&
                    bpf_map_delete_elem(t->maps.unwind_tables, &f->slot) < 0 && errno != ENOENT)
                        log_once_errno(LOG_WARNING, errno, "Cannot remove an unwind table from BPF: %m");
                for (uint32_t i = 0; i < f->n_pages; i++) {
                        struct ep_bpf_page_key k = { .file_num = f->slot, .page = f->pages[i] };
                        (void) bpf_map_delete_elem(t->maps.unwind_pages, &k);
                }
        }
        if (f->state == T_FP_ONLY)
                set_file_state(t, f->slot, EP_BPF_FILE_NO_TABLE);
        /* BPF's cached rules of this file number are stale from now on. */
        if (t->maps.tables_gen)
                __atomic_add_fetch(t->maps.tables_gen, 1, __ATOMIC_SEQ_CST);
        for (uint32_t i = 0; i < f->n_rules; i++)
                ep_rule_set_unref(t->rules, f->rules[i]);
        t->bytes -= f->bytes;
        f->bytes = 0;
        free(f->rules);
        free(f->pages);
        f->rules = NULL;
        f->pages = NULL;
        f->n_rules = f->n_pages = 0;
}

static void file_drop(EpTables *t, TableFile *f, bool outer_removed) {
        if (f->n_rules > 0 || f->n_pages > 0)
                t->room_freed = true;
        table_unload(t, f, outer_removed);
        set_state(t, f, T_IDLE);
        if (f->slot != 0 && f->charged != 0)
                (void) ep_hashmap_count_add(t->user_slots, &f->charged, -1);
        slot_release(t, f->slot);
        (void) ep_hashmap_remove(t->files, &f->key, NULL);
        free(f);
}

EpTables *ep_tables_free(EpTables *t) {
        size_t state = 0;
        const void *k;
        void *v;

        if (!t)
                return NULL;
        /* BPF maps go away with the loader; only our memory is freed here. */
        while (t->files && ep_hashmap_iterate(t->files, &state, &k, &v)) {
                TableFile *f;
                memcpy(&f, v, sizeof f);
                (void) close_nointr(f->map_fd);
                free(f->rules);
                free(f->pages);
                free(f);
        }
        ep_hashmap_free(t->files);
        ep_hashmap_free(t->user_slots);
        free(t->to_publish);
        ep_rule_set_free(t->rules);
        free(t->free_slots);
        free(t->hot.v);
        free(t->normal.v);
        free(t);
        return NULL;
}

int ep_tables_new(const EpUnwindMaps *maps, uint32_t max_files, uint64_t unload_delay_ns, EpTables **ret) {
        _cleanup_(ep_tables_freep) EpTables *t = NULL;
        struct ep_unwind_rule invalid = {};
        uint32_t zero = EP_BPF_RULE_INVALID;
        int r;

        if (max_files < 2)
                return -EINVAL;
        t = calloc(1, sizeof *t);
        if (!t)
                return -ENOMEM;
        t->maps = *maps;
        t->max_files = max_files;
        t->next_slot = 1;
        t->unload_delay_ns = unload_delay_ns;
        t->files = ep_hashmap_new(sizeof(uint32_t), sizeof(TableFile *));
        t->user_slots = ep_hashmap_new(sizeof(uid_t), sizeof(uint32_t));
        t->free_slots = calloc(max_files, sizeof *t->free_slots);
        if (!t->files || !t->user_slots || !t->free_slots)
                return -ENOMEM;
        r = ep_rule_set_new(EP_BPF_MAX_RULES, &t->rules);
        if (r < 0)
                return r;
        if (bpf_map_update_elem(maps->unwind_rules, &zero, &invalid, BPF_ANY) < 0)
                return -errno;
        t->bytes = (uint64_t) EP_BPF_MAX_RULES * sizeof(struct ep_unwind_rule) + MAP_OVERHEAD_BYTES;
        *ret = TAKE_PTR(t);
        return 0;
}

void ep_tables_set_loaded_cb(EpTables *t, void (*loaded)(uint32_t file_key, void *userdata), void *userdata) {
        t->loaded = loaded;
        t->loaded_userdata = userdata;
}

/* ---- lookups for the loader's own unwinding (rare: samples that carry a stack copy) ---- */

#define EP_PAGES_CTX int
static int ep_page_delta(int fd, uint32_t index, struct ep_bpf_delta *ret) {
        struct ep_bpf_delta_pair pair;
        uint32_t elem = index >> 1;

        if (bpf_map_lookup_elem(fd, &elem, &pair) < 0)
                return -1;
        *ret = pair.d[index & 1];
        return 0;
}
#include "unwind-pages.h"

static bool table_pending(const TableFile *f) {
        switch (f->state) {
        case T_IDLE:
                return f->slot != 0 && f->refs > 0;
        case T_QUEUED:
        case T_ASKING:
        case T_PUBLISHING:
                return true;
        case T_RETRY:
                return f->retry_at_ns != UINT64_MAX;
        default:
                return false;
        }
}

int ep_tables_find_rule(EpTables *t, uint32_t file_key, uint32_t file_offset, struct ep_unwind_rule *ret_rule,
                        bool *ret_pending) {
        TableFile *f = file_get(t, file_key);
        struct ep_bpf_page_key key;
        struct ep_bpf_page pg;
        int r;

        *ret_pending = false;
        if (!f || f->slot == 0)
                return EP_LOOKUP_NO_TABLE;
        if (f->state == T_FP_ONLY) {
                *ret_rule = (struct ep_unwind_rule) { .cfa_kind = EP_CFA_FP_FALLBACK };
                return EP_LOOKUP_FOUND;
        }
        if (f->state != T_LOADED) {
                *ret_pending = table_pending(f);
                return EP_LOOKUP_NO_TABLE;
        }
        key = (struct ep_bpf_page_key) { .file_num = f->slot, .page = file_offset >> EP_BPF_PAGE_SHIFT };
        if (bpf_map_lookup_elem(t->maps.unwind_pages, &key, &pg) < 0) {
                *ret_rule = (struct ep_unwind_rule) { .cfa_kind = EP_CFA_INVALID };
                return EP_LOOKUP_FOUND;
        }
        r = ep_page_search(f->map_fd, &pg, file_offset & ((1u << EP_BPF_PAGE_SHIFT) - 1));
        if (r < 0)
                return EP_LOOKUP_ERROR;
        *ret_rule = ep_rule_set_get(t->rules, (uint16_t) r);
        return EP_LOOKUP_FOUND;
}

void ep_tables_set_kick(EpTables *t, void (*kick)(void *userdata), void *userdata) {
        t->kick = kick;
        t->kick_userdata = userdata;
}

uint64_t ep_tables_slot_epoch(const EpTables *t) {
        return t->slot_epoch;
}

uint32_t ep_tables_ref(EpTables *t, uint32_t file_key, uid_t uid) {
        TableFile *f;

        if (file_key == 0)
                return 0;
        f = file_get_or_add(t, file_key);
        if (!f)
                return 0;
        f->refs++;
        f->unused_since_ns = 0;
        if (f->slot == 0 && uid != 0 && ep_hashmap_count(t->user_slots, &uid) >= t->max_files / SLOTS_PER_USER_DIVISOR) {
                if (t->user_full++ == 0)
                        log_warning("User %u holds %u BPF file slots, its share: frames in further files of "
                                    "its processes take frame-pointer steps.", (unsigned) uid,
                                    t->max_files / SLOTS_PER_USER_DIVISOR);
                return 0;
        }
        if (f->slot == 0) {
                f->slot = slot_alloc(t);
                f->charged = f->slot != 0 ? uid : 0;
                if (f->charged != 0)
                        (void) ep_hashmap_count_add(t->user_slots, &uid, 1);
                if (f->slot == 0) {
                        if (t->no_slot++ == 0)
                                log_warning("All %u BPF file slots are in use: frames in further files take "
                                            "frame-pointer steps.", t->max_files - 1);
                        return 0;
                }
        }
        if (f->state == T_IDLE || f->state == T_UNAVAILABLE)
                enqueue(t, f);
        return f->slot;
}

void ep_tables_unref(EpTables *t, uint32_t file_key) {
        TableFile *f = file_get(t, file_key);

        if (!f || f->refs == 0)
                return;
        if (--f->refs == 0)
                f->unused_since_ns = ep_now_ns(CLOCK_MONOTONIC);
}

void ep_tables_hint_needed(EpTables *t, uint32_t file_key) {
        TableFile *f = file_get(t, file_key);

        if (!f || f->hot || f->state != T_QUEUED)
                return;
        f->hot = true;
        if (queue_push(&t->hot, f->key) >= 0 && t->kick)
                t->kick(t->kick_userdata);
}

bool ep_tables_next_request(EpTables *t, uint32_t *ret_key) {
        uint32_t key;

        while (queue_pop(&t->hot, &key) || queue_pop(&t->normal, &key)) {
                TableFile *f = file_get(t, key);

                /* Stale queue entries: promoted twice, answered meanwhile, or no longer used. */
                if (!f || f->state != T_QUEUED || f->slot == 0)
                        continue;
                if (f->refs == 0) {
                        set_state(t, f, T_IDLE);
                        continue;
                }
                set_state(t, f, T_ASKING);
                t->requests++;
                *ret_key = key;
                return true;
        }
        return false;
}

/* Validates, pages and loads a table. Returns 0 or a negative errno (nothing is left in BPF). */
static int table_load(EpTables *t, TableFile *f, const uint8_t id[EP_FILE_ID_SIZE], const void *blob, size_t size) {
        _cleanup_free_ uint16_t *global = NULL;
        _cleanup_free_ uint32_t *keys = NULL, *page_nums = NULL;
        _cleanup_free_ struct ep_bpf_delta_pair *pairs = NULL;
        _cleanup_free_ struct ep_bpf_page_key *page_keys = NULL;
        _cleanup_free_ struct ep_bpf_page *page_vals = NULL;
        _cleanup_close_ int inner = -EBADF;
        const EpUnwindTableHeader *h = blob;
        const struct ep_unwind_rule *rules;
        EpPagedTable pt = {};
        uint32_t n_refs = 0, n_elems, count;
        uint64_t t0 = ep_now_ns(CLOCK_MONOTONIC);
        int r;

        if (ep_unwind_table_validate(blob, size) < 0) {
                log_warning("The symbolizer sent a malformed unwind table for file %u; ignored.", f->key);
                return -EBADMSG;
        }
        if (memcmp(h->file_id, id, EP_FILE_ID_SIZE) != 0) {
                log_warning("The symbolizer sent the unwind table of another file for file %u; ignored.", f->key);
                return -EBADMSG;
        }
        if (h->n_rules > MAX_RULES_PER_FILE)
                return -EDQUOT;

        global = calloc(h->n_rules, sizeof *global);
        if (!global)
                return -ENOMEM;
        rules = ep_unwind_table_rules(blob);
        for (uint32_t i = 0; i < h->n_rules; i++) {
                bool created;
                r = ep_rule_set_ref(t->rules, &rules[i], &global[i], &created);
                if (r < 0)
                        goto fail_rules;
                n_refs++;
                if (created) {
                        uint32_t k = global[i];
                        struct ep_unwind_rule v = rules[i];
                        if (v.cfa_kind == EP_CFA_INVALID)
                                v = (struct ep_unwind_rule) {};
                        if (bpf_map_update_elem(t->maps.unwind_rules, &k, &v, BPF_ANY) < 0) {
                                r = -errno;
                                goto fail_rules;
                        }
                }
        }

        r = ep_table_page(blob, global, &pt);
        if (r < 0)
                goto fail_rules;
        if (pt.n_pages > MAX_PAGES_PER_FILE) {
                r = -EDQUOT;
                goto fail_paged;
        }

        /* The file's delta array, two deltas per element. */
        n_elems = MAX((pt.n_deltas + 1) / 2, 1u);
        pairs = calloc(n_elems, sizeof *pairs);
        keys = calloc(n_elems, sizeof *keys);
        page_keys = calloc(MAX(pt.n_pages, 1u), sizeof *page_keys);
        page_vals = calloc(MAX(pt.n_pages, 1u), sizeof *page_vals);
        page_nums = calloc(MAX(pt.n_pages, 1u), sizeof *page_nums);
        if (!pairs || !keys || !page_keys || !page_vals || !page_nums) {
                r = -ENOMEM;
                goto fail_paged;
        }
        for (uint32_t i = 0; i < pt.n_deltas; i++)
                pairs[i / 2].d[i % 2] = pt.deltas[i];
        for (uint32_t i = 0; i < n_elems; i++)
                keys[i] = i;
        for (uint32_t i = 0; i < pt.n_pages; i++) {
                page_keys[i] = (struct ep_bpf_page_key) { .file_num = f->slot, .page = pt.pages[i].page };
                page_vals[i] = pt.pages[i].v;
                page_nums[i] = pt.pages[i].page;
        }

        {
                LIBBPF_OPTS(bpf_map_create_opts, opts, .map_flags = BPF_F_INNER_MAP);
                inner = bpf_map_create(BPF_MAP_TYPE_ARRAY, "ep_deltas", sizeof(uint32_t),
                                       sizeof(struct ep_bpf_delta_pair), n_elems, &opts);
        }
        if (inner < 0) {
                r = -errno;
                goto fail_paged;
        }
        count = n_elems;
        if (bpf_map_update_batch(inner, keys, pairs, &count, NULL) < 0) {
                r = -errno;
                goto fail_paged;
        }

        /* Pages before the table: BPF takes a present table to mean its pages are there. */
        count = pt.n_pages;
        if (count > 0 && bpf_map_update_batch(t->maps.unwind_pages, page_keys, page_vals, &count, NULL) < 0) {
                r = -errno;
                goto fail_pages;
        }
        f->map_fd = TAKE_FD(inner); /* into unwind_tables by ep_tables_publish() */
        f->rules = TAKE_PTR(global);
        f->n_rules = h->n_rules;
        f->pages = TAKE_PTR(page_nums);
        f->n_pages = pt.n_pages;
        f->bytes = (uint64_t) n_elems * sizeof(struct ep_bpf_delta_pair) +
                   (uint64_t) pt.n_pages * PAGE_ENTRY_BYTES + MAP_OVERHEAD_BYTES;
        t->bytes += f->bytes;
        log_debug("Loaded the unwind table of file %u (slot %u): %u rules, %u deltas in %u pages, in %" PRIu64
                  " ms.", f->key, f->slot, h->n_rules, pt.n_deltas, pt.n_pages,
                  (uint64_t) ((ep_now_ns(CLOCK_MONOTONIC) - t0) / NSEC_PER_MSEC));
        ep_paged_table_done(&pt);
        return 0;

fail_pages:
        for (uint32_t i = 0; i < pt.n_pages; i++)
                (void) bpf_map_delete_elem(t->maps.unwind_pages, &page_keys[i]);
fail_paged:
        ep_paged_table_done(&pt);
fail_rules:
        for (uint32_t i = 0; i < n_refs; i++)
                ep_rule_set_unref(t->rules, global[i]);
        if (r == -ENOSPC)
                log_once(LOG_WARNING, "The %u slots of the shared unwind rule array are full; files with new "
                                      "rules take frame-pointer steps until other tables leave.", EP_BPF_MAX_RULES);
        else if (r == -E2BIG || r == -ENOMEM)
                log_once_errno(LOG_WARNING, r, "The BPF unwind pages map is full or out of memory: %m");
        return r;
}

/* Putting a table into the outer array makes the kernel wait for running BPF programs
 * (synchronize_rcu, ~10-30 ms): tables loaded close together are published in one batch. */
static int publish_later(EpTables *t, TableFile *f) {
        set_state(t, f, T_PUBLISHING);
        if (t->n_to_publish == t->cap_to_publish) {
                size_t cap = t->cap_to_publish ? t->cap_to_publish * 2 : 16;
                uint32_t *nv = realloc(t->to_publish, cap * sizeof *nv);
                if (!nv) {
                        table_unload(t, f, true); /* its pages and rules */
                        set_state(t, f, T_ASKING);
                        return -ENOMEM;
                }
                t->to_publish = nv;
                t->cap_to_publish = cap;
        }
        t->to_publish[t->n_to_publish++] = f->key;
        if (t->publish_soon)
                t->publish_soon(t->publish_userdata);
        else
                ep_tables_publish(t);
        return 0;
}

void ep_tables_set_publish_cb(EpTables *t, void (*publish_soon)(void *userdata), void *userdata) {
        t->publish_soon = publish_soon;
        t->publish_userdata = userdata;
}

void ep_tables_publish(EpTables *t) {
        _cleanup_free_ uint32_t *slots = NULL;
        _cleanup_free_ int *fds = NULL;
        _cleanup_free_ TableFile **files = NULL;
        uint32_t n = 0, count;
        bool batch_ok;

        if (t->n_to_publish == 0)
                return;
        slots = calloc(t->n_to_publish, sizeof *slots);
        fds = calloc(t->n_to_publish, sizeof *fds);
        files = calloc(t->n_to_publish, sizeof *files);
        if (!slots || !fds || !files)
                return; /* try again next time */
        for (size_t i = 0; i < t->n_to_publish; i++) {
                TableFile *f = file_get(t, t->to_publish[i]);
                if (!f || f->state != T_PUBLISHING || f->map_fd < 0)
                        continue; /* dropped meanwhile */
                files[n] = f;
                slots[n] = f->slot;
                fds[n] = f->map_fd;
                n++;
        }
        t->n_to_publish = 0;

        count = n;
        batch_ok = n == 0 || bpf_map_update_batch(t->maps.unwind_tables, slots, fds, &count, NULL) >= 0;
        for (uint32_t i = 0; i < n; i++) {
                TableFile *f = files[i];
                if (!batch_ok && bpf_map_update_elem(t->maps.unwind_tables, &f->slot, &f->map_fd, BPF_ANY) < 0) {
                        log_once_errno(LOG_WARNING, errno, "Cannot publish an unwind table in BPF: %m");
                        table_unload(t, f, true);
                        t->errors++;
                        set_state(t, f, T_FAILED);
                        continue;
                }
                set_state(t, f, T_LOADED); /* map_fd kept: ep_tables_find_rule() */
        }
        for (uint32_t i = 0; i < n && t->loaded; i++)
                t->loaded(files[i]->key, t->loaded_userdata); /* failed ones too: nothing to wait for */
}

static void schedule_retry(EpTables *t, TableFile *f, uint64_t delay_ns) {
        f->retry_at_ns = delay_ns == UINT64_MAX ? UINT64_MAX : ep_now_ns(CLOCK_MONOTONIC) + delay_ns;
        set_state(t, f, T_RETRY);
}

void ep_tables_request_done(EpTables *t, uint32_t file_key, const uint8_t id[EP_FILE_ID_SIZE], int result,
                            const void *blob, size_t size) {
        TableFile *f = file_get(t, file_key);
        int r;

        if (!f || f->state != T_ASKING)
                return;
        f->hot = false;
        /* A file without CFI comes back as a one-rule frame-pointer table. Loaded as a table,
         * its pages would span only the neighbourhood of that one entry; the whole file takes
         * frame-pointer steps instead. */
        if (result == EP_TABLE_OK && size >= sizeof(EpUnwindTableHeader) &&
            (((const EpUnwindTableHeader *) blob)->flags & EP_UNWIND_FP_FALLBACK))
                result = EP_TABLE_NO_CFI;
        switch (result) {
        case EP_TABLE_OK:
                r = table_load(t, f, id, blob, size);
                if (r >= 0 && publish_later(t, f) >= 0) {
                        f->attempts = 0;
                        return;
                }
                t->errors++;
                if (r == -ENOMEM) {
                        schedule_retry(t, f, RETRY_MAX_NS);
                        return;
                }
                if (r == -ENOSPC || r == -E2BIG || r == -EDQUOT) {
                        /* Full maps are asked again when a table leaves them; an oversized
                         * table never fits. Samples need not wait for either. */
                        if (r == -EDQUOT && t->too_big++ == 0)
                                log_warning("The unwind table of file %u takes more than %u rules or %u pages of "
                                            "what all files share; refused (its frames take frame-pointer "
                                            "steps).", f->key, MAX_RULES_PER_FILE, MAX_PAGES_PER_FILE);
                        set_state(t, f, r == -EDQUOT ? T_TOO_BIG : T_NO_ROOM);
                        if (t->loaded)
                                t->loaded(f->key, t->loaded_userdata);
                        return;
                }
                log_debug_errno(r, "Cannot load the unwind table of file %u: %m", f->key);
                set_state(t, f, T_FAILED);
                if (t->loaded)
                        t->loaded(f->key, t->loaded_userdata); /* nobody needs to wait for it any more */
                return;
        case EP_TABLE_BAD_FILE:
                t->errors++;
                __attribute__((fallthrough));
        case EP_TABLE_NO_CFI:
                set_file_state(t, f->slot, EP_BPF_FILE_FP_ONLY);
                set_state(t, f, T_FP_ONLY);
                if (t->loaded)
                        t->loaded(f->key, t->loaded_userdata);
                return;
        case EP_TABLE_UNSUPPORTED:
                schedule_retry(t, f, UINT64_MAX); /* until the symbolizer is replaced */
                return;
        case EP_TABLE_UNAVAILABLE:
                set_state(t, f, T_UNAVAILABLE);
                if (t->loaded)
                        t->loaded(f->key, t->loaded_userdata); /* nobody needs to wait for it any more */
                return;
        default:
                if (++f->attempts > RETRY_MAX_ATTEMPTS) {
                        t->errors++;
                        set_state(t, f, T_FAILED);
                        return;
                }
                schedule_retry(t, f, MIN(RETRY_BASE_NS << (f->attempts - 1), RETRY_MAX_NS));
                return;
        }
}

void ep_tables_retry_now(EpTables *t) {
        size_t state = 0;
        const void *k;
        void *v;

        while (ep_hashmap_iterate(t->files, &state, &k, &v)) {
                TableFile *f;
                memcpy(&f, v, sizeof f);
                if (f->state == T_RETRY)
                        f->retry_at_ns = 0;
        }
        ep_tables_sweep(t);
}

void ep_tables_sweep(EpTables *t) {
        uint64_t now = ep_now_ns(CLOCK_MONOTONIC);
        _cleanup_free_ TableFile **drop = NULL;
        size_t n_drop = 0, cap = 0, state = 0;
        const void *k;
        void *v;

        while (ep_hashmap_iterate(t->files, &state, &k, &v)) {
                TableFile *f;
                memcpy(&f, v, sizeof f);
                if (f->refs == 0) {
                        if (f->state != T_ASKING && now - f->unused_since_ns >= t->unload_delay_ns) {
                                if (n_drop == cap) {
                                        size_t nc = cap ? cap * 2 : 16;
                                        TableFile **nd = realloc(drop, nc * sizeof *nd);
                                        if (!nd)
                                                break;
                                        drop = nd;
                                        cap = nc;
                                }
                                drop[n_drop++] = f;
                        }
                        continue;
                }
                if ((f->state == T_RETRY && f->retry_at_ns <= now) || (f->state == T_NO_ROOM && t->room_freed))
                        enqueue(t, f);
        }
        t->room_freed = false;
        /* The walk is over: now the map may change. The tables leave the outer array in one
         * batch (one wait for running BPF programs), then each file's pages and rules go. */
        {
                _cleanup_free_ uint32_t *slots = n_drop ? calloc(n_drop, sizeof *slots) : NULL;
                uint32_t n_slots = 0, count;
                bool removed = false;

                for (size_t i = 0; slots && i < n_drop; i++)
                        if (drop[i]->state == T_LOADED)
                                slots[n_slots++] = drop[i]->slot;
                count = n_slots;
                if (n_slots > 0 && bpf_map_delete_batch(t->maps.unwind_tables, slots, &count, NULL) >= 0)
                        removed = true;
                for (size_t i = 0; i < n_drop; i++) {
                        log_debug("Unloading the unwind table of file %u (unused for %" PRIu64 " s).",
                                  drop[i]->key, (uint64_t) (t->unload_delay_ns / NSEC_PER_SEC));
                        file_drop(t, drop[i], removed);
                }
        }
}

static const char *const state_names[] = {
        [T_IDLE] = "idle",
        [T_QUEUED] = "queued",
        [T_ASKING] = "asking",
        [T_PUBLISHING] = "publishing",
        [T_LOADED] = "loaded",
        [T_FP_ONLY] = "frame-pointers",
        [T_FAILED] = "failed",
        [T_RETRY] = "retry",
        [T_UNAVAILABLE] = "unavailable",
        [T_NO_ROOM] = "no-room",
        [T_TOO_BIG] = "too-big",
};

bool ep_tables_iterate(EpTables *t, size_t *state, uint32_t *ret_key) {
        const void *k;
        void *v;

        if (!ep_hashmap_iterate(t->files, state, &k, &v))
                return false;
        memcpy(ret_key, k, sizeof *ret_key);
        return true;
}

int ep_tables_file_info(EpTables *t, uint32_t file_key, EpTableInfo *ret) {
        const TableFile *f = file_get(t, file_key);
        uint64_t now = ep_now_ns(CLOCK_MONOTONIC);

        if (!f)
                return -ENOENT;
        *ret = (EpTableInfo) {
                .state = state_names[f->state],
                .state_ns = f->state_since_ns && now > f->state_since_ns ? now - f->state_since_ns : 0,
                .bytes = f->bytes,
                .attempts = f->attempts,
                .waited_for = table_pending(f),
        };
        return 0;
}

void ep_tables_stats(const EpTables *t, EpTablesStats *ret) {
        *ret = (EpTablesStats) {
                .files = t->next_slot - 1 - t->n_free,
                .loaded = t->n_loaded,
                .fp_only = t->n_fp_only,
                .pending = t->n_pending,
                .rules = ep_rule_set_used(t->rules),
                .bytes = t->bytes,
                .requests = t->requests,
                .errors = t->errors,
                .no_slot = t->no_slot,
                .too_big = t->too_big,
                .user_full = t->user_full,
        };
}
