/* SPDX-License-Identifier: MIT */
/* The collector's export ring: each closed interval is one BEGIN..END group whose refs are
 * defined before use; a sample with too many timestamps for one record is split; a full ring
 * drops whole intervals (counted) and never leaves half a group. No bus, no store. */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collector.h"
#include "tests.h"
#include "wire-buf.h"
#include "wire.h"

static uint64_t rec[(sizeof(EpTraceMsg) + 8 * sizeof(EpFrame)) / 8 + 1];

static void push_trace(Collector *c, uint32_t pid, uint32_t tid, uint64_t leaf, uint64_t time_ns) {
        EpTraceMsg *m = (EpTraceMsg *) rec;

        memset(rec, 0, sizeof(rec));
        m->time_ns = time_ns;
        m->pid = pid;
        m->tid = tid;
        m->cpu = tid % 2;
        m->n_frames = 3;
        m->n_kernel = 1;
        snprintf(m->comm, EP_COMM_LEN, "t%u", tid);
        m->frames[0] = (EpFrame) { .addr = 0xffffffff81000000ULL, .kind = EP_FRAME_KERNEL };
        m->frames[1] = (EpFrame) { .addr = leaf, .file_key = 1, .kind = EP_FRAME_NATIVE };
        m->frames[2] = (EpFrame) { .addr = 0x100, .file_key = 1, .kind = EP_FRAME_NATIVE,
                                   .flags = EP_FRAME_FLAG_RETURN_ADDRESS };
        ASSERT_OK(collector_intake(c, EP_MSG_TRACE, rec, sizeof(EpTraceMsg) + 3 * sizeof(EpFrame)));
}

/* What a backend gets of one frame. */
typedef struct FrameSeen {
        uint8_t kind;
        uint8_t file_id[EP_FILE_ID_SIZE];
        uint8_t htlhash[EP_FILE_ID_SIZE];
        uint8_t gnu[EP_BUILD_ID_MAX];
        size_t gnu_len;
        char go[EP_GO_BUILD_ID_MAX + 1];
        uint64_t addr, elf_addr;
        uint16_t n_lines;
} FrameSeen;

typedef struct GroupStats {
        uint64_t id, begin_start, begin_end, period;
        uint32_t processes, frames, stacks, sample_records, lines;
        uint64_t count, timestamps;
        bool ts_sorted;
        FrameSeen seen[16]; /* the first frames of the group */
} GroupStats;

/* Reads one whole group; returns 1, or 0 when the ring is empty. Aborts on anything malformed. */
static int read_group(EpRing *r, GroupStats *g) {
        EpRingRecord h;
        const void *p;
        bool begun = false;

        *g = (GroupStats) { .ts_sorted = true };
        for (;;) {
                EpReader rd;
                int k = ep_ring_peek(r, &h, &p);

                ASSERT_TRUE(k >= 0);
                if (k == 0) {
                        ASSERT_TRUE(!begun); /* never half a group */
                        return 0;
                }
                ep_reader_init(&rd, p, h.len);
                ASSERT_TRUE(begun || h.type == EP_MSG_EXP_BEGIN);
                switch (h.type) {
                case EP_MSG_EXP_BEGIN:
                        ASSERT_TRUE(!begun);
                        begun = true;
                        g->id = ep_get_u64(&rd);
                        g->begin_start = ep_get_u64(&rd);
                        g->begin_end = ep_get_u64(&rd);
                        g->period = ep_get_u64(&rd);
                        break;
                case EP_MSG_EXP_PROCESS:
                        ep_get_u32(&rd);
                        free(ep_get_str(&rd, 4096));
                        free(ep_get_str(&rd, 4096));
                        free(ep_get_str(&rd, 4096));
                        g->processes++;
                        break;
                case EP_MSG_EXP_FRAME: {
                        FrameSeen fs = {}, *keep = g->frames < 16 ? &g->seen[g->frames] : &fs;
                        const void *gnu;
                        char *go;

                        ASSERT_TRUE(ep_get_u32(&rd) == g->frames); /* refs numbered in order */
                        g->frames++;
                        keep->kind = ep_get_u8(&rd);
                        ep_get_bytes(&rd, keep->file_id, sizeof(keep->file_id));
                        ep_get_bytes(&rd, keep->htlhash, sizeof(keep->htlhash));
                        gnu = ep_get_blob(&rd, EP_BUILD_ID_MAX, &keep->gnu_len);
                        if (keep->gnu_len > 0)
                                memcpy(keep->gnu, gnu, keep->gnu_len);
                        go = ep_get_str(&rd, EP_GO_BUILD_ID_MAX);
                        ASSERT_TRUE(go);
                        snprintf(keep->go, sizeof(keep->go), "%s", go);
                        free(go);
                        free(ep_get_str(&rd, 4096));
                        keep->addr = ep_get_u64(&rd);
                        keep->elf_addr = ep_get_u64(&rd);
                        uint16_t nl = keep->n_lines = ep_get_u16(&rd);
                        for (uint16_t i = 0; i < nl; i++) {
                                free(ep_get_str(&rd, 65536));
                                free(ep_get_str(&rd, 4096));
                                ep_get_u32(&rd);
                        }
                        g->lines += nl;
                        break;
                }
                case EP_MSG_EXP_STACK: {
                        ASSERT_TRUE(ep_get_u32(&rd) == g->stacks);
                        g->stacks++;
                        uint32_t n = ep_get_u32(&rd);
                        for (uint32_t i = 0; i < n; i++)
                                ASSERT_TRUE(ep_get_u32(&rd) < g->frames); /* defined before use */
                        break;
                }
                case EP_MSG_EXP_SAMPLE: {
                        uint64_t prev = 0;

                        ep_get_u32(&rd);
                        ep_get_u32(&rd);
                        ep_get_u32(&rd);
                        free(ep_get_str(&rd, 64));
                        ASSERT_TRUE(ep_get_u32(&rd) < g->stacks);
                        g->count += ep_get_u64(&rd);
                        uint32_t n = ep_get_u32(&rd);
                        for (uint32_t i = 0; i < n; i++) {
                                uint64_t t = ep_get_u64(&rd);
                                if (t < prev)
                                        g->ts_sorted = false;
                                prev = t;
                        }
                        g->timestamps += n;
                        g->sample_records++;
                        break;
                }
                case EP_MSG_EXP_END:
                        ASSERT_TRUE(ep_get_u64(&rd) == g->id);
                        ASSERT_TRUE(ep_reader_done(&rd));
                        ep_ring_consume(r);
                        return 1;
                default:
                        ASSERT_TRUE(!"unknown record type");
                }
                ASSERT_TRUE(ep_reader_done(&rd));
                ep_ring_consume(r);
        }
}

int main(void) {
        EpRing *consumer = NULL;
        GroupStats g;
        Collector c;
        int memfd, efd;

        ASSERT_OK(collector_init(&c));

        /* a file and a process */
        {
                uint8_t id[EP_FILE_ID_SIZE], htlhash[EP_FILE_ID_SIZE];
                EpWriter w;

                memset(id, 0x42, sizeof(id));
                memset(htlhash, 0x43, sizeof(htlhash)); /* a file a user owns: its ID is not its htlhash */
                ep_writer_init_dynamic(&w);
                ep_put_u32(&w, 1);
                ep_put_bytes(&w, id, sizeof(id));
                ep_put_bytes(&w, htlhash, sizeof(htlhash));
                ep_put_u64(&w, 1);
                ep_put_str(&w, "/usr/bin/app");
                ASSERT_OK(collector_intake(&c, EP_MSG_FILE, w.data, w.size));
                ep_writer_reset(&w);
                ep_put_u32(&w, 10);
                ep_put_u64(&w, 1);
                ep_put_str(&w, "app");
                ep_put_str(&w, "/usr/bin/app");
                ep_put_str(&w, "");
                ASSERT_OK(collector_intake(&c, EP_MSG_PROCESS, w.data, w.size));
                ep_writer_done(&w);
        }

        /* No exporter yet: no timestamps kept, nothing exported. */
        push_trace(&c, 10, 11, 0x1000, 5);
        ASSERT_OK(collector_export_open(&c, &memfd, &efd));
        ASSERT_OK(ep_ring_attach(memfd, efd, &consumer));
        ASSERT_TRUE(ep_ring_data_size(consumer) == COLLECTOR_EXPORT_RING_SIZE);

        /* 1: a small interval, its first sample from before the exporter came */
        for (uint32_t i = 0; i < 10; i++)
                push_trace(&c, 10, 11 + i % 3, 0x1000 + 0x10 * (i % 4), 100 + i);
        ASSERT_OK(collector_close_interval(&c, NULL));
        ASSERT_TRUE(read_group(consumer, &g) == 1);
        ASSERT_TRUE(g.id == 1); /* no store: the collector's interval number */
        ASSERT_TRUE(g.processes == 1 && g.frames == 6 && g.stacks == 4);
        ASSERT_TRUE(g.count == 11 && g.timestamps == 10 && g.ts_sorted);
        ASSERT_TRUE(g.period == NSEC_PER_SEC / COLLECTOR_DEFAULT_FREQUENCY_HZ);
        ASSERT_TRUE(g.begin_end >= g.begin_start);
        ASSERT_TRUE(read_group(consumer, &g) == 0);

        /* Every frame carries its file's IDs; ELF addresses are unknown until symbolized. */
        for (uint32_t i = 0; i < g.frames && i < 16; i++) {
                const FrameSeen *f = &g.seen[i];
                ASSERT_TRUE(f->elf_addr == 0 && f->gnu_len == 0 && f->go[0] == 0);
                if (f->kind == EP_FRAME_NATIVE)
                        ASSERT_TRUE(f->file_id[0] == 0x42 && f->file_id[15] == 0x42 && f->htlhash[0] == 0x43 &&
                                    f->htlhash[15] == 0x43);
        }

        /* 1b: the symbolizer's answers: build IDs of the file, an ELF address per frame (also
         * when no symbol was found: a backend may know better) */
        {
                static const uint8_t gnu[20] = { 0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16 };
                FileEntry *file = &c.files.items[1];

                memcpy(file->gnu_build_id, gnu, sizeof(gnu));
                file->gnu_build_id_len = sizeof(gnu);
                file->go_build_id = strdup("abcdefghij/klmnopqrst/uvwxyzABCD/EFGHIJKLMN");
                ASSERT_TRUE(file->go_build_id);
                for (size_t i = 0; i < c.frames.n; i++) {
                        Frame *f = &c.frames.items[i];
                        if (f->kind == EP_FRAME_NATIVE && f->addr == 0x1000)
                                frame_set_symbol(f, EP_SYM_OK, 0x401000, NULL, NULL, 0);
                        else if (f->kind == EP_FRAME_NATIVE && f->addr == 0x1010)
                                frame_set_symbol(f, EP_SYM_NOT_FOUND, 0x401010, NULL, NULL, 0);
                        else if (f->kind == EP_FRAME_NATIVE && f->addr == 0x1020)
                                frame_set_symbol(f, EP_SYM_BAD_FILE, 0x401020, NULL, NULL, 0);
                        else if (f->kind == EP_FRAME_KERNEL)
                                frame_set_symbol(f, EP_SYM_OK, f->addr, strdup(""), NULL, 0);
                }
                for (uint32_t i = 0; i < 4; i++)
                        push_trace(&c, 10, 11, 0x1000 + 0x10 * i, 200 + i);
                ASSERT_OK(collector_close_interval(&c, NULL));
                ASSERT_TRUE(read_group(consumer, &g) == 1);
                unsigned native = 0;
                for (uint32_t i = 0; i < g.frames; i++) {
                        const FrameSeen *f = &g.seen[i];
                        if (f->kind != EP_FRAME_NATIVE) {
                                ASSERT_TRUE(f->elf_addr == 0 && f->gnu_len == 0 && f->go[0] == 0);
                                continue;
                        }
                        native++;
                        ASSERT_TRUE(f->gnu_len == sizeof(gnu) && memcmp(f->gnu, gnu, sizeof(gnu)) == 0);
                        ASSERT_TRUE(strcmp(f->go, "abcdefghij/klmnopqrst/uvwxyzABCD/EFGHIJKLMN") == 0);
                        if (f->addr == 0x1000 || f->addr == 0x1010)
                                ASSERT_TRUE(f->elf_addr == f->addr + 0x400000);
                        else /* BAD_FILE, or not symbolized yet */
                                ASSERT_TRUE(f->elf_addr == 0);
                }
                ASSERT_TRUE(native == 5); /* 4 leaves and the caller */
                ASSERT_TRUE(read_group(consumer, &g) == 0);
        }

        /* 1c: a named frame asked again (its file's answers changed) goes out with its last
         * answer while the new one is pending, and is not counted unnamed. */
        {
                uint64_t unnamed = c.exported_unnamed_frames;
                SymLine *line = calloc(1, sizeof(SymLine));
                uint32_t idx = UINT32_MAX;

                ASSERT_TRUE(line && (line->function = strdup("leaf")));
                for (uint32_t i = 0; i < c.frames.n; i++)
                        if (c.frames.items[i].kind == EP_FRAME_NATIVE && c.frames.items[i].addr == 0x1000)
                                idx = i;
                ASSERT_TRUE(idx != UINT32_MAX);
                frame_set_symbol(&c.frames.items[idx], EP_SYM_OK, 0x401000, NULL, line, 1);
                ASSERT_OK(collector_sym_queue_frame(&c, idx));
                ASSERT_TRUE(sym_state_pending(c.frames.items[idx].sym_state));
                push_trace(&c, 10, 11, 0x1000, 300);
                ASSERT_OK(collector_close_interval(&c, NULL));
                ASSERT_TRUE(read_group(consumer, &g) == 1);
                bool seen = false;
                for (uint32_t i = 0; i < g.frames; i++)
                        if (g.seen[i].kind == EP_FRAME_NATIVE && g.seen[i].addr == 0x1000) {
                                ASSERT_TRUE(g.seen[i].elf_addr == 0x401000 && g.seen[i].n_lines == 1);
                                seen = true;
                        }
                ASSERT_TRUE(seen);
                /* only the caller, never answered, goes out unnamed */
                ASSERT_TRUE(c.exported_unnamed_frames == unnamed + 1);
                ASSERT_TRUE(read_group(consumer, &g) == 0);
        }

        /* 2: one sample with more timestamps than a record may carry is split */
        size_t per_record = ep_ring_max_record(consumer) / sizeof(uint64_t);
        uint64_t n_big = per_record + 1000;
        for (uint64_t i = 0; i < n_big; i++)
                push_trace(&c, 10, 11, 0x1000, 1000 + i);
        ASSERT_OK(collector_close_interval(&c, NULL));
        ASSERT_TRUE(c.export_drops == 0);
        ASSERT_TRUE(read_group(consumer, &g) == 1);
        ASSERT_TRUE(g.sample_records == 2 && g.count == n_big && g.timestamps == n_big && g.ts_sorted);
        ASSERT_TRUE(read_group(consumer, &g) == 0);

        /* 3: nobody reads: intervals are dropped whole once the ring is full, never blocking */
        unsigned closed = 0;
        while (c.export_drops == 0 && closed < 64) {
                for (uint64_t i = 0; i < 200000; i++)
                        push_trace(&c, 10, 11 + i % 7, 0x1000 + 0x10 * (i % 50), i);
                ASSERT_OK(collector_close_interval(&c, NULL));
                closed++;
        }
        ASSERT_TRUE(c.export_drops == 1);
        ASSERT_TRUE(c.last_error && strstr(c.last_error, "export ring is full"));
        unsigned groups = 0;
        while (read_group(consumer, &g) == 1) {
                ASSERT_TRUE(g.count == 200000 && g.timestamps == 200000 && g.stacks == 50);
                groups++;
        }
        ASSERT_TRUE(groups == closed - 1);
        fprintf(stderr, "export ring held %u intervals of 200000 samples before dropping one\n", groups);

        /* drained: the next interval goes through again */
        push_trace(&c, 10, 11, 0x1000, 1);
        ASSERT_OK(collector_close_interval(&c, NULL));
        ASSERT_TRUE(read_group(consumer, &g) == 1 && g.count == 1);
        ASSERT_TRUE(c.export_drops == 1);

        /* the exporter goes away: no more timestamps are kept */
        collector_export_close(&c);
        push_trace(&c, 10, 11, 0x1000, 1);
        SampleAgg *a = NULL;
        size_t state = 0;
        const void *k;
        ASSERT_TRUE(ep_hashmap_iterate(c.current->samples, &state, &k, (void **) &a));
        ASSERT_TRUE(a->count == 1 && a->n_ts == 0);

        ep_ring_free(consumer);
        collector_done(&c);
        printf("OK\n");
        return 0;
}
