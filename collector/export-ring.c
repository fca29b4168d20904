/* SPDX-License-Identifier: MIT */
/* The collector → exporter ring: each finished interval as one EP_MSG_EXP_BEGIN..END group
 * holding the processes, frames and stacks it uses (refs local to the group) and its samples.
 * A group is written whole or not at all; the collector never waits for the exporter. */

#include <inttypes.h>
#include <string.h>

#include "array.h"
#include "collector.h"
#include "log.h"
#include "wire-buf.h"

typedef struct GroupRecord {
        uint16_t type;
        size_t off, len;
} GroupRecord;

typedef struct Group {
        EpWriter w;
        GroupRecord *recs;
        size_t n, cap;
        size_t start;     /* offset of the record being built */
        size_t ring_bytes; /* ring space the records take, headers and alignment included */
        size_t max_len;
        uint64_t unnamed_frames; /* frames whose symbols were still pending */
} Group;

static void group_done(Group *g) {
        ep_writer_done(&g->w);
        free(g->recs);
}

static void record_start(Group *g) {
        g->start = g->w.size;
}

static int record_end(Group *g, uint16_t type) {
        GroupRecord rec = { .type = type, .off = g->start, .len = g->w.size - g->start };

        if (g->w.overflow)
                return -ENOMEM;
        g->ring_bytes += sizeof(EpRingRecord) + ALIGN8(rec.len);
        g->max_len = MAX(g->max_len, rec.len);
        return ARRAY_PUSH(g->recs, g->n, g->cap, rec);
}

int collector_export_open(Collector *c, int *ret_memfd, int *ret_eventfd) {
        _cleanup_ring_ EpRing *ring = NULL;
        int r;

        r = ep_ring_create("ebpf-profiler-export", COLLECTOR_EXPORT_RING_SIZE, &ring);
        if (r < 0)
                return log_error_errno(r, "Cannot create the export ring: %m");
        if (c->export_ring)
                log_info("Replacing the export ring (a new exporter attached).");
        collector_ring_release(c, c->export_ring);
        c->export_ring = TAKE_PTR(ring);
        *ret_memfd = ep_ring_memfd(c->export_ring);
        *ret_eventfd = ep_ring_eventfd(c->export_ring);
        log_info("Exporter attached.");
        return 0;
}

void collector_export_close(Collector *c) {
        if (!c->export_ring)
                return;
        c->export_ring = collector_ring_release(c, c->export_ring);
        log_info("Exporter detached.");
}

/* The ELF virtual address of a native frame, 0 while unknown: what a backend symbolizes
 * with the build IDs when we could not (the symbolizer reports it with OK and NOT_FOUND).
 * Like the lines, only an answer sets it, and a frame asked again (its file's answers changed)
 * keeps its last answer until the new one comes, so an interval closed meanwhile still goes
 * out named. */
static uint64_t frame_elf_addr(const Frame *f) {
        if (f->kind != EP_FRAME_NATIVE)
                return 0;
        return f->status == EP_SYM_OK || f->status == EP_SYM_NOT_FOUND ? f->elf_addr : 0;
}

static void put_frame(Collector *c, Group *g, const Frame *f) {
        static const uint8_t no_file_id[EP_FILE_ID_SIZE] = {};
        const FileEntry *file = f->file ? &c->files.items[f->file] : NULL;
        uint32_t n_lines = MIN(f->n_lines, UINT16_MAX); /* 0 until answered */

        ep_put_u32(&g->w, f->ref);
        ep_put_u8(&g->w, f->kind);
        ep_put_bytes(&g->w, file ? file->file_id : no_file_id, EP_FILE_ID_SIZE);
        ep_put_bytes(&g->w, file ? file->htlhash : no_file_id, EP_FILE_ID_SIZE);
        ep_put_blob(&g->w, file ? file->gnu_build_id : no_file_id, file ? file->gnu_build_id_len : 0);
        ep_put_str(&g->w, file ? file->go_build_id : NULL);
        /* the mapping: the file's path, or the kernel module ("" = vmlinux) */
        ep_put_str(&g->w, file ? file->path : f->kind == EP_FRAME_KERNEL ? f->module : "");
        ep_put_u64(&g->w, f->addr);
        ep_put_u64(&g->w, frame_elf_addr(f));
        ep_put_u16(&g->w, (uint16_t) n_lines);
        for (uint32_t i = 0; i < n_lines; i++) {
                ep_put_str(&g->w, f->lines[i].function);
                ep_put_str(&g->w, f->lines[i].file);
                ep_put_u32(&g->w, f->lines[i].line);
        }
}

/* One sample entry; split into several records when its timestamps do not fit one. */
static int put_sample(Collector *c, Group *g, const SampleKey *key, const SampleAgg *a,
                      size_t max_record) {
        const Process *p = &c->processes.items[key->process];
        size_t name_len = strlen(a->thread_name);
        size_t fixed = 4 + 4 + 4 + 4 + name_len + 4 + 8 + 4;
        size_t per_record = max_record > fixed ? (max_record - fixed) / sizeof(uint64_t) : 0;
        uint64_t left = a->count;
        uint32_t done = 0;
        int r;

        if (per_record == 0 && a->n_ts > 0)
                return -E2BIG;
        do {
                uint32_t n = (uint32_t) MIN((size_t) (a->n_ts - done), per_record);
                bool last = done + n == a->n_ts;
                uint64_t count = last ? left : n;

                record_start(g);
                ep_put_u32(&g->w, p->pid);
                ep_put_u32(&g->w, key->tid);
                ep_put_u32(&g->w, key->cpu);
                ep_put_strn(&g->w, a->thread_name, name_len);
                ep_put_u32(&g->w, c->stacks.items[key->stack].ref);
                ep_put_u64(&g->w, count);
                ep_put_u32(&g->w, n);
                for (uint32_t i = 0; i < n; i++)
                        ep_put_u64(&g->w, a->ts[done + i]);
                r = record_end(g, EP_MSG_EXP_SAMPLE);
                if (r < 0)
                        return r;
                done += n;
                left -= count;
        } while (done < a->n_ts);
        return 0;
}

static int build_group(Collector *c, Group *g, Interval *iv, const IntervalRefs *refs,
                       uint64_t interval_id, size_t max_record) {
        size_t state = 0;
        const void *k;
        void *v;
        int r;

        record_start(g);
        ep_put_u64(&g->w, interval_id);
        ep_put_u64(&g->w, iv->start_ns);
        ep_put_u64(&g->w, iv->end_ns);
        ep_put_u64(&g->w, collector_period_ns(c));
        r = record_end(g, EP_MSG_EXP_BEGIN);
        if (r < 0)
                return r;

        for (size_t i = 0; i < refs->n_processes; i++) {
                const Process *p = &c->processes.items[refs->processes[i]];

                record_start(g);
                ep_put_u32(&g->w, p->pid);
                ep_put_str(&g->w, p->comm);
                ep_put_str(&g->w, p->exe);
                ep_put_str(&g->w, p->container_id);
                r = record_end(g, EP_MSG_EXP_PROCESS);
                if (r < 0)
                        return r;
        }

        for (size_t i = 0; i < refs->n_frames; i++) {
                const Frame *f = &c->frames.items[refs->frames[i]];

                g->unnamed_frames += sym_state_pending(f->sym_state) && f->n_lines == 0;
                record_start(g);
                put_frame(c, g, f);
                r = record_end(g, EP_MSG_EXP_FRAME);
                if (r < 0)
                        return r;
        }

        for (size_t i = 0; i < refs->n_stacks; i++) {
                const Stack *s = &c->stacks.items[refs->stacks[i]];
                const uint32_t *frames = stack_table_frames(&c->stacks, refs->stacks[i]);

                record_start(g);
                ep_put_u32(&g->w, s->ref);
                ep_put_u32(&g->w, s->n);
                for (uint32_t j = 0; j < s->n; j++)
                        ep_put_u32(&g->w, c->frames.items[frames[j]].ref);
                r = record_end(g, EP_MSG_EXP_STACK);
                if (r < 0)
                        return r;
        }

        while (ep_hashmap_iterate(iv->samples, &state, &k, &v)) {
                const SampleAgg *a = v;

                if (a->count == 0)
                        continue;
                r = put_sample(c, g, k, a, max_record);
                if (r < 0)
                        return r;
        }

        record_start(g);
        ep_put_u64(&g->w, interval_id);
        return record_end(g, EP_MSG_EXP_END);
}

static void export_dropped(Collector *c, const char *why) {
        static bool logged = false;

        c->export_drops++;
        if (!logged) {
                logged = true;
                log_warning("Dropping an interval for the exporter: %s", why);
        }
        collector_set_error(c, "Dropped an interval for the exporter: %s", why);
}

int collector_export(Collector *c, Interval *iv, const IntervalRefs *refs, uint64_t interval_id) {
        _cleanup_(group_done) Group g = {};
        size_t room, max_record;
        int r;

        if (!c->export_ring || iv->n_samples == 0)
                return 0;

        max_record = ep_ring_max_record(c->export_ring);
        ep_writer_init_dynamic(&g.w);
        r = build_group(c, &g, iv, refs, interval_id, max_record);
        if (r < 0) {
                export_dropped(c, r == -E2BIG ? "a record is larger than the ring allows"
                                              : "out of memory");
                return r;
        }
        if (g.max_len > max_record) {
                export_dropped(c, "a record is larger than the ring allows");
                return -E2BIG;
        }

        /* Room for every record plus one wrap-around padding. The room only grows while we
         * look (the exporter consumes), so this is conservative. */
        room = ep_ring_room(c->export_ring);
        if (g.ring_bytes + sizeof(EpRingRecord) + ALIGN8(g.max_len) > room) {
                export_dropped(c, "the export ring is full (exporter not keeping up)");
                return -ENOBUFS;
        }

        for (size_t i = 0; i < g.n; i++) {
                r = ep_ring_push(c->export_ring, g.recs[i].type, g.w.data + g.recs[i].off,
                                 (uint32_t) g.recs[i].len);
                if (r < 0) {
                        /* Cannot happen after the check above; the exporter discards a group
                         * that has no END. */
                        export_dropped(c, "the export ring filled up mid-group");
                        (void) ep_ring_notify(c->export_ring);
                        return r;
                }
        }
        (void) ep_ring_notify(c->export_ring);
        /* The store UPDATEs them when the names come; what was exported stays unnamed. */
        c->exported_unnamed_frames += g.unnamed_frames;
        return 0;
}
