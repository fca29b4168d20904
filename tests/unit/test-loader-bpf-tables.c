/* SPDX-License-Identifier: MIT */
/* unwinder-loader/tables.c against real BPF maps laid out like bpf/profiler.bpf.c's: loading a
 * table (pages, per-file delta array, shared rules), finding rules again the way the BPF
 * program does, refusing malformed or mismatched answers without touching the maps, files
 * without CFI, retries, and unloading. Needs root (BPF maps); skipped otherwise. */

#include <bpf/bpf.h>
#include <linux/capability.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "native-unwind.h"
#include "tables.h"
#include "tests.h"
#include "unwind-table.h"

#define MAX_FILES 64

static EpUnwindMaps maps;
static volatile uint32_t tables_gen; /* BPF's, in the real loader */

static int create_maps(void) {
        LIBBPF_OPTS(bpf_map_create_opts, nopre, .map_flags = BPF_F_NO_PREALLOC);
        LIBBPF_OPTS(bpf_map_create_opts, inner_opts, .map_flags = BPF_F_INNER_MAP);
        LIBBPF_OPTS(bpf_map_create_opts, outer_opts);
        int tmpl;

        maps.unwind_rules = bpf_map_create(BPF_MAP_TYPE_ARRAY, "t_rules", 4, sizeof(struct ep_unwind_rule),
                                           EP_BPF_MAX_RULES, NULL);
        if (maps.unwind_rules < 0)
                return -errno;
        maps.unwind_pages = bpf_map_create(BPF_MAP_TYPE_HASH, "t_pages", sizeof(struct ep_bpf_page_key),
                                           sizeof(struct ep_bpf_page), 4096, &nopre);
        tmpl = bpf_map_create(BPF_MAP_TYPE_ARRAY, "t_tmpl", 4, sizeof(struct ep_bpf_delta_pair), 1, &inner_opts);
        if (maps.unwind_pages < 0 || tmpl < 0)
                return -errno;
        outer_opts.inner_map_fd = tmpl;
        maps.unwind_tables = bpf_map_create(BPF_MAP_TYPE_ARRAY_OF_MAPS, "t_tables", 4, 4, MAX_FILES, &outer_opts);
        maps.file_state = bpf_map_create(BPF_MAP_TYPE_ARRAY, "t_state", 4, 4, MAX_FILES, NULL);
        close(tmpl);
        if (maps.unwind_tables < 0 || maps.file_state < 0)
                return -errno;
        maps.proc_mappings = -EBADF;
        maps.tables_gen = &tables_gen;
        return 0;
}

static unsigned count_pages(uint32_t slot) {
        struct ep_bpf_page_key k, next;
        unsigned n = 0;
        bool first = true;

        while (bpf_map_get_next_key(maps.unwind_pages, first ? NULL : &k, &next) == 0) {
                first = false;
                if (next.file_num == slot)
                        n++;
                k = next;
        }
        return n;
}

/* A table: functions every 0x300 bytes from 0x1000 over ~5 pages, a prologue rule at each
 * start and a body rule 4 bytes in, a gap at the end. */
/* A zeroed table of n_rules rules (rule 0: INVALID) and n_entries entries, the header filled. */
static EpUnwindTableHeader *new_table(const uint8_t id[EP_FILE_ID_SIZE], uint32_t n_rules, uint32_t n_entries,
                                      size_t *ret_size) {
        size_t size = ep_unwind_table_size(n_rules, n_entries);
        EpUnwindTableHeader *h = aligned_alloc(8, ALIGN8(size));

        ASSERT_TRUE(h);
        memset(h, 0, size);
        *h = (EpUnwindTableHeader) {
                .magic = EP_UNWIND_TABLE_MAGIC,
                .version = EP_UNWIND_TABLE_VERSION,
                .n_rules = n_rules,
                .n_entries = n_entries,
                .flags = EP_UNWIND_FROM_EH_FRAME,
        };
        memcpy(h->file_id, id, EP_FILE_ID_SIZE);
        *ret_size = size;
        return h;
}

static void *make_table(const uint8_t id[EP_FILE_ID_SIZE], size_t *ret_size, uint32_t *ret_end) {
        const uint32_t n_funcs = 1200;
        uint32_t n = 2 * n_funcs + 1;
        EpUnwindTableHeader *h = new_table(id, 3, n, ret_size);
        struct ep_unwind_rule *r;
        EpUnwindEntry *e;

        r = (struct ep_unwind_rule *) ep_unwind_table_rules(h);
        r[1] = (struct ep_unwind_rule) { .cfa_kind = EP_CFA_SP, .cfa_offset = 8 };
        r[2] = (struct ep_unwind_rule) { .cfa_kind = EP_CFA_SP, .fp_rule = EP_FP_AT_CFA, .fp_offset = -16,
                                         .cfa_offset = 16 };
        e = (EpUnwindEntry *) ep_unwind_table_entries(h);
        for (uint32_t i = 0; i < n_funcs; i++) {
                e[2 * i] = (EpUnwindEntry) { .file_offset = 0x1000 + 0x300 * i, .rule = 1 };
                e[2 * i + 1] = (EpUnwindEntry) { .file_offset = 0x1000 + 0x300 * i + 4, .rule = 2 };
        }
        e[n - 1] = (EpUnwindEntry) { .file_offset = 0x1000 + 0x300 * n_funcs, .rule = 0 };
        *ret_end = e[n - 1].file_offset;
        return h;
}

/* A table of n_rules distinct rules (CFA = rsp + base + 8 i), one function each. */
static void *make_rules_table(const uint8_t id[EP_FILE_ID_SIZE], uint32_t n_rules, int32_t base, size_t *ret_size) {
        uint32_t n = n_rules + 1;
        EpUnwindTableHeader *h = new_table(id, n_rules + 1, n, ret_size);
        struct ep_unwind_rule *r;
        EpUnwindEntry *e;

        r = (struct ep_unwind_rule *) ep_unwind_table_rules(h);
        e = (EpUnwindEntry *) ep_unwind_table_entries(h);
        for (uint32_t i = 0; i < n_rules; i++) {
                r[i + 1] = (struct ep_unwind_rule) { .cfa_kind = EP_CFA_SP, .cfa_offset = base + 8 * (int32_t) i };
                e[i] = (EpUnwindEntry) { .file_offset = 0x1000 + 0x10 * i, .rule = (uint16_t) (i + 1) };
        }
        e[n - 1] = (EpUnwindEntry) { .file_offset = 0x1000 + 0x10 * n_rules, .rule = 0 };
        return h;
}

static const char *state_of(EpTables *t, uint32_t key) {
        EpTableInfo info;
        ASSERT_OK(ep_tables_file_info(t, key, &info));
        return info.state;
}

static void request(EpTables *t, uint32_t want_key) {
        uint32_t key;
        ASSERT_TRUE(ep_tables_next_request(t, &key));
        ASSERT_EQ(key, want_key);
}

/* The loader unwinds again in user space with the capabilities it runs with (CAP_BPF among
 * them, never CAP_SYS_ADMIN: docs/systemd.md): a loaded table's rules are found with those. */
static void check_found_with_the_loaders_capabilities(EpTables *t, const void *blob) {
        int status;
        pid_t pid = fork();

        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
                struct __user_cap_data_struct c[2] = {};
                struct ep_unwind_rule rule;
                bool pending;
                c[CAP_BPF / 32].effective = c[CAP_BPF / 32].permitted = 1u << (CAP_BPF % 32);
                if (syscall(SYS_capset, &h, c) < 0)
                        _exit(10);
                uint32_t off = ep_unwind_table_entries(blob)[0].file_offset;
                _exit(ep_tables_find_rule(t, 7, off, &rule, &pending) == EP_LOOKUP_FOUND ? 0 : 11);
        }
        ASSERT_TRUE(waitpid(pid, &status, 0) == pid);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

int main(void) {
        _cleanup_(ep_tables_freep) EpTables *t = NULL;
        uint8_t id7[EP_FILE_ID_SIZE] = { 7 }, id8[EP_FILE_ID_SIZE] = { 8 }, id9[EP_FILE_ID_SIZE] = { 9 };
        struct ep_unwind_rule rule;
        EpTablesStats st;
        uint32_t slot7, slot8, slot9, end, key, id;
        size_t size;
        void *blob;
        bool pending;
        int r;

        if (geteuid() != 0) {
                printf("test-loader-bpf-tables: needs root for BPF maps, skipped\n");
                return 77;
        }
        r = create_maps();
        if (r < 0) {
                printf("test-loader-bpf-tables: cannot create BPF maps (%s), skipped\n", strerror(-r));
                return 77;
        }
        ASSERT_OK(ep_tables_new(&maps, MAX_FILES, 0, &t));

        /* A file is referenced: it gets a slot and a request; nothing is loaded yet. */
        slot7 = ep_tables_ref(t, 7, 0);
        ASSERT_TRUE(slot7 > 0);
        ASSERT_EQ(ep_tables_ref(t, 7, 0), slot7); /* a second process: same slot, one request */
        ASSERT_EQ(ep_tables_find_rule(t, 7, 0x1000, &rule, &pending), EP_LOOKUP_NO_TABLE);
        ASSERT_TRUE(pending);
        request(t, 7);
        ASSERT_TRUE(!ep_tables_next_request(t, &key));

        /* Its table arrives and is found again, offset by offset, as the blob says. */
        blob = make_table(id7, &size, &end);
        ep_tables_request_done(t, 7, id7, EP_TABLE_OK, blob, size);
        ep_tables_stats(t, &st);
        ASSERT_EQ(st.loaded, 1);
        ASSERT_EQ(st.rules, 3);
        ASSERT_EQ(count_pages(slot7), (end - 1) / 0x10000 + 1);
        ASSERT_EQ(bpf_map_lookup_elem(maps.unwind_tables, &slot7, &id), 0);
        check_found_with_the_loaders_capabilities(t, blob);
        for (uint32_t off = 0; off < end + 0x20000; off += 7) {
                long i = ep_unwind_table_find(blob, off);
                struct ep_unwind_rule want = {};
                if (i >= 0)
                        want = ep_unwind_table_rules(blob)[ep_unwind_table_entries(blob)[i].rule];
                ASSERT_EQ(ep_tables_find_rule(t, 7, off, &rule, &pending), EP_LOOKUP_FOUND);
                ASSERT_EQ(rule.cfa_kind, want.cfa_kind);
                ASSERT_EQ(rule.cfa_offset, want.cfa_offset);
                ASSERT_EQ(rule.fp_rule, want.fp_rule);
        }

        /* Malformed answers change nothing in BPF: a truncated blob, another file's table. */
        slot8 = ep_tables_ref(t, 8, 0);
        request(t, 8);
        ep_tables_request_done(t, 8, id8, EP_TABLE_OK, blob, size - 8);
        ep_tables_stats(t, &st);
        ASSERT_EQ(st.errors, 1);
        ASSERT_EQ(st.loaded, 1);
        ASSERT_EQ(count_pages(slot8), 0);
        ASSERT_TRUE(bpf_map_lookup_elem(maps.unwind_tables, &slot8, &id) < 0);
        ASSERT_EQ(ep_tables_find_rule(t, 8, 0x1000, &rule, &pending), EP_LOOKUP_NO_TABLE);
        ASSERT_TRUE(!pending);

        /* A file without CFI: frame-pointer steps, said by file_state. */
        slot9 = ep_tables_ref(t, 9, 0);
        request(t, 9);
        ep_tables_request_done(t, 9, id9, EP_TABLE_NO_CFI, NULL, 0);
        ASSERT_EQ(bpf_map_lookup_elem(maps.file_state, &slot9, &id), 0);
        ASSERT_EQ(id, EP_BPF_FILE_FP_ONLY);
        ASSERT_EQ(ep_tables_find_rule(t, 9, 0x1234, &rule, &pending), EP_LOOKUP_FOUND);
        ASSERT_EQ(rule.cfa_kind, EP_CFA_FP_FALLBACK);

        /* Transient failures are asked again when the symbolizer comes back. */
        ASSERT_TRUE(ep_tables_ref(t, 10, 0) > 0);
        request(t, 10);
        ep_tables_request_done(t, 10, NULL, EP_TABLE_UNSUPPORTED, NULL, 0);
        ep_tables_sweep(t);
        ASSERT_TRUE(!ep_tables_next_request(t, &key));
        ep_tables_retry_now(t);
        request(t, 10);
        ep_tables_request_done(t, 10, NULL, EP_TABLE_RETRY, NULL, 0);
        ASSERT_EQ(ep_tables_find_rule(t, 10, 0, &rule, &pending), EP_LOOKUP_NO_TABLE);
        ASSERT_TRUE(pending);

        /* Loading and refusing tables leave BPF's cached rules valid. */
        ASSERT_EQ(tables_gen, 0);

        /* The last user goes away: with no delay, the next sweep unloads everything of 7
         * and releases its slot and rules; BPF's cached rules of it are stale from then on. */
        ep_tables_unref(t, 7);
        ep_tables_sweep(t);
        ep_tables_stats(t, &st);
        ASSERT_EQ(st.loaded, 1); /* still one user */
        ASSERT_EQ(tables_gen, 0);
        ep_tables_unref(t, 7);
        ep_tables_sweep(t);
        ep_tables_stats(t, &st);
        ASSERT_EQ(st.loaded, 0);
        ASSERT_EQ(tables_gen, 1);
        ASSERT_EQ(st.rules, 1); /* INVALID only */
        ASSERT_EQ(count_pages(slot7), 0);
        ASSERT_TRUE(bpf_map_lookup_elem(maps.unwind_tables, &slot7, &id) < 0);
        ep_tables_unref(t, 9);
        ep_tables_sweep(t);
        ASSERT_EQ(bpf_map_lookup_elem(maps.file_state, &slot9, &id), 0);
        ASSERT_EQ(id, EP_BPF_FILE_NO_TABLE);
        ASSERT_EQ(tables_gen, 2); /* "frame pointers" is cached too */

        /* Slots are reused, the one freed last first: a file whose number BPF's cache still
         * holds rules of, which the generation above makes stale. */
        ASSERT_EQ(ep_tables_ref(t, 11, 0), slot9);
        ep_tables_unref(t, 11);
        free(blob);

        /* One file may not take more than its share of the rule array: refused. */
        {
                uint8_t big_id[EP_FILE_ID_SIZE] = { 20 };
                void *big = make_rules_table(big_id, 4096, 8, &size); /* and INVALID */

                ASSERT_TRUE(ep_tables_ref(t, 20, 0) > 0);
                request(t, 20);
                ep_tables_request_done(t, 20, big_id, EP_TABLE_OK, big, size);
                ASSERT_TRUE(streq(state_of(t, 20), "too-big"));
                ep_tables_stats(t, &st);
                ASSERT_EQ(st.too_big, 1);
                ASSERT_EQ(st.rules, 1);
                ASSERT_EQ(ep_tables_find_rule(t, 20, 0x1000, &rule, &pending), EP_LOOKUP_NO_TABLE);
                ASSERT_TRUE(!pending); /* nothing to wait for */
                ep_tables_unref(t, 20);
                ep_tables_sweep(t);
                free(big);
        }

        /* Files within their share (4095 rules and INVALID) fill the array (17 × 4095 > 65535):
         * the one that finds it full is loaded once another leaves. */
        {
                enum { N = 17, FIRST = 30 };
                void *tables[N];

                for (uint32_t i = 0; i < N; i++) {
                        uint8_t fid[EP_FILE_ID_SIZE] = { (uint8_t) (FIRST + i) };
                        tables[i] = make_rules_table(fid, 4095, 8 + 8 * 4096 * (int32_t) i, &size);
                        ASSERT_TRUE(ep_tables_ref(t, FIRST + i, 0) > 0);
                        request(t, FIRST + i);
                        ep_tables_request_done(t, FIRST + i, fid, EP_TABLE_OK, tables[i], size);
                }
                ep_tables_publish(t);
                for (uint32_t i = 0; i < N - 1; i++)
                        ASSERT_TRUE(streq(state_of(t, FIRST + i), "loaded"));
                ASSERT_TRUE(streq(state_of(t, FIRST + N - 1), "no-room"));
                ASSERT_EQ(ep_tables_find_rule(t, FIRST + N - 1, 0x1000, &rule, &pending), EP_LOOKUP_NO_TABLE);
                ASSERT_TRUE(!pending);
                ep_tables_sweep(t);
                ASSERT_TRUE(!ep_tables_next_request(t, &key)); /* no room yet: not asked again */

                ep_tables_unref(t, FIRST);
                ep_tables_sweep(t); /* the first leaves */
                ep_tables_sweep(t); /* and the one without room is asked again */
                request(t, FIRST + N - 1);
                {
                        uint8_t fid[EP_FILE_ID_SIZE] = { (uint8_t) (FIRST + N - 1) };
                        ep_tables_request_done(t, FIRST + N - 1, fid, EP_TABLE_OK, tables[N - 1], size);
                }
                ep_tables_publish(t);
                ASSERT_TRUE(streq(state_of(t, FIRST + N - 1), "loaded"));
                for (uint32_t i = 1; i < N; i++)
                        ep_tables_unref(t, FIRST + i);
                ep_tables_sweep(t);
                for (uint32_t i = 0; i < N; i++)
                        free(tables[i]);
        }

        /* A user other than root holds at most an eighth of the slots (8 of 64 here); others
         * and root still get theirs, and the share is the user's again once its files leave. */
        {
                const uint32_t share = MAX_FILES / 8;

                for (uint32_t k = 0; k < share; k++)
                        ASSERT_TRUE(ep_tables_ref(t, 200 + k, 1000) > 0);
                ASSERT_EQ(ep_tables_ref(t, 200 + share, 1000), 0);
                ASSERT_TRUE(ep_tables_ref(t, 200 + share, 2000) > 0); /* another user's process */
                ASSERT_TRUE(ep_tables_ref(t, 300, 0) > 0);
                ASSERT_TRUE(ep_tables_ref(t, 200, 2000) > 0);           /* held already: no new slot */
                ep_tables_stats(t, &st);
                ASSERT_EQ(st.user_full, 1);
                for (uint32_t k = 0; k < share; k++)
                        ep_tables_unref(t, 200 + k);
                ep_tables_unref(t, 200);
                ep_tables_unref(t, 200 + share);
                ep_tables_unref(t, 200 + share); /* the refused reference counts as a user too */
                ep_tables_unref(t, 300);
                ep_tables_sweep(t);
                for (uint32_t k = 0; k < share; k++)
                        ASSERT_TRUE(ep_tables_ref(t, 400 + k, 1000) > 0);
                for (uint32_t k = 0; k < share; k++)
                        ep_tables_unref(t, 400 + k);
                ep_tables_sweep(t);
        }

        /* Every slot taken: a reference gets none; a slot freed changes the epoch, so the
         * process that got none asks again and gets it. */
        {
                uint32_t key_full = 0;
                uint64_t epoch;

                for (uint32_t k = 100; k < 100 + MAX_FILES; k++)
                        if (ep_tables_ref(t, k, 0) == 0) {
                                key_full = k;
                                break;
                        }
                ASSERT_TRUE(key_full != 0);
                ep_tables_stats(t, &st);
                ASSERT_TRUE(st.no_slot >= 1);
                epoch = ep_tables_slot_epoch(t);
                ep_tables_unref(t, 100);
                ep_tables_sweep(t);
                ASSERT_TRUE(ep_tables_slot_epoch(t) != epoch);
                ASSERT_TRUE(ep_tables_ref(t, key_full, 0) > 0);
        }
        return tests_summary("test-loader-bpf-tables");
}
