/* SPDX-License-Identifier: MIT */
/* Writes a closed interval to the store in one transaction: the files, frames, stacks and
 * processes it uses that are not there yet, the symbols that arrived for rows written earlier,
 * the interval and its sample counts. On failure nothing is half-written and the in-memory
 * row ids assigned during the attempt are forgotten again. */

#include "array.h"
#include "collector.h"
#include "frame-kind.h"
#include "log.h"

typedef struct Undo {
        int64_t **ids;
        size_t n, cap;
} Undo;

static int undo_note(Undo *u, int64_t *id) {
        return ARRAY_PUSH(u->ids, u->n, u->cap, id);
}

static void undo_apply(Undo *u) {
        for (size_t i = 0; i < u->n; i++)
                *u->ids[i] = 0;
}

static void undo_done(Undo *u) {
        free(u->ids);
}

/* NULL while the frame waits for its symbols. */
static const StoreSymbol *frame_symbol(const Frame *f, StoreSymbol *buf) {
        switch (f->sym_state) {
        case SYM_STATE_DONE:
                *buf = (StoreSymbol) {
                        .status = f->status,
                        /* 0: the offset lies in no loaded segment, there is no ELF address */
                        .elf_addr_known = (f->status == EP_SYM_OK || f->status == EP_SYM_NOT_FOUND) &&
                                          f->elf_addr != 0,
                        .elf_addr = f->elf_addr,
                        /* module only means something for kernel frames ("" = vmlinux) */
                        .module = f->kind == EP_FRAME_KERNEL ? (f->module ?: "") : NULL,
                        .lines = f->lines,
                        .n_lines = f->n_lines,
                };
                return buf;
        case SYM_STATE_NONE:
                *buf = (StoreSymbol) { .status = EP_SYM_NOT_FOUND };
                return buf;
        default:
                return NULL;
        }
}

static int put_process(Collector *c, Process *p, Undo *undo) {
        int r;

        if (p->store_id != 0)
                return 0;
        r = store_put_process(c->store, p->pid, p->start_time_ns, p->comm, p->exe, p->container_id,
                              &p->store_id);
        if (r < 0)
                return r;
        return undo_note(undo, &p->store_id);
}

static int put_refs(Collector *c, const IntervalRefs *refs, Undo *undo) {
        Store *s = c->store;
        _cleanup_free_ int64_t *ids = NULL;
        size_t cap_ids = 0;
        int r;

        for (size_t i = 0; i < refs->n_files; i++) {
                FileEntry *f = &c->files.items[refs->files[i]];

                if (f->store_id != 0)
                        continue;
                r = store_put_file(s, f->file_id, f->htlhash, f->path, f->gnu_build_id, f->gnu_build_id_len,
                                   f->go_build_id, &f->store_id);
                if (r < 0)
                        return r;
                r = undo_note(undo, &f->store_id);
                if (r < 0)
                        return r;
        }

        /* Processes before frames: an UNMAPPED frame's row names its process's row. */
        for (size_t i = 0; i < refs->n_processes; i++) {
                r = put_process(c, &c->processes.items[refs->processes[i]], undo);
                if (r < 0)
                        return r;
        }

        for (size_t i = 0; i < refs->n_frames; i++) {
                Frame *f = &c->frames.items[refs->frames[i]];
                StoreSymbol buf;
                int64_t owner = 0;

                if (f->store_id != 0)
                        continue;
                if (ep_frame_kind_per_process(f->kind)) {
                        /* frames.file is processes.id for them: JIT and Python code addresses
                         * mean something in one process only. Its samples are in this interval, so it is among
                         * the processes above; written here should that ever not hold. */
                        Process *p = &c->processes.items[f->process];

                        r = put_process(c, p, undo);
                        if (r < 0)
                                return r;
                        owner = p->store_id;
                } else if (f->file)
                        owner = c->files.items[f->file].store_id;
                r = store_put_frame(s, f->kind, f->flags, owner, f->addr, frame_symbol(f, &buf), &f->store_id);
                if (r < 0)
                        return r;
                r = undo_note(undo, &f->store_id);
                if (r < 0)
                        return r;
        }

        for (size_t i = 0; i < refs->n_stacks; i++) {
                Stack *st = &c->stacks.items[refs->stacks[i]];
                const uint32_t *frames = stack_table_frames(&c->stacks, refs->stacks[i]);

                if (st->store_id != 0)
                        continue;
                r = ARRAY_RESERVE(ids, cap_ids, st->n);
                if (r < 0)
                        return r;
                for (uint32_t j = 0; j < st->n; j++)
                        ids[j] = c->frames.items[frames[j]].store_id;
                r = store_put_stack(s, ids, st->n, &st->store_id);
                if (r < 0)
                        return r;
                r = undo_note(undo, &st->store_id);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int put_updates(Collector *c) {
        Store *s = c->store;
        int r;

        for (size_t i = 0; i < c->n_dirty_files; i++) {
                FileEntry *f = &c->files.items[c->dirty_files[i]];

                if (f->store_id == 0)
                        continue;
                r = store_update_file_build_ids(s, f->store_id, f->gnu_build_id,
                                                f->gnu_build_id_len, f->go_build_id);
                if (r < 0)
                        return r;
        }
        for (size_t i = 0; i < c->n_dirty_frames; i++) {
                Frame *f = &c->frames.items[c->dirty_frames[i]];
                StoreSymbol buf;
                const StoreSymbol *sym = frame_symbol(f, &buf);

                if (f->store_id == 0 || !sym)
                        continue;
                r = store_update_frame_symbol(s, f->store_id, sym);
                if (r < 0)
                        return r;
        }
        for (size_t i = 0; i < c->processes.n; i++) {
                Process *p = &c->processes.items[i];

                if (!p->used || !p->store_dirty || p->store_id == 0)
                        continue;
                r = store_update_process(s, p->store_id, p->comm, p->exe, p->container_id);
                if (r < 0)
                        return r;
        }
        return 0;
}

static void updates_written(Collector *c) {
        for (size_t i = 0; i < c->n_dirty_files; i++)
                c->files.items[c->dirty_files[i]].store_dirty = false;
        for (size_t i = 0; i < c->n_dirty_frames; i++)
                c->frames.items[c->dirty_frames[i]].store_dirty = false;
        for (size_t i = 0; i < c->processes.n; i++)
                c->processes.items[i].store_dirty = false;
        c->n_dirty_files = c->n_dirty_frames = 0;
}

static int put_samples(Collector *c, Interval *iv, int64_t *ret_id, uint64_t *ret_count) {
        uint64_t count = 0;
        size_t state = 0;
        const void *k;
        void *v;
        int64_t id;
        int r;

        r = store_add_interval(c->store, iv->start_ns, iv->end_ns, collector_period_ns(c), &id);
        if (r < 0)
                return r;
        while (ep_hashmap_iterate(iv->samples, &state, &k, &v)) {
                const SampleKey *key = k;
                const SampleAgg *a = v;
                const Process *p = &c->processes.items[key->process];

                if (a->count == 0)
                        continue;
                r = store_add_sample(c->store, id, p->store_id, key->tid, a->thread_name,
                                     c->stacks.items[key->stack].store_id, a->count);
                if (r < 0)
                        return r;
                count += a->count;
        }
        r = store_finish_interval(c->store, id, count);
        if (r < 0)
                return r;
        *ret_id = id;
        *ret_count = count;
        return 0;
}

static bool have_updates(Collector *c) {
        if (c->n_dirty_files > 0 || c->n_dirty_frames > 0)
                return true;
        for (size_t i = 0; i < c->processes.n; i++)
                if (c->processes.items[i].store_dirty)
                        return true;
        return false;
}

int collector_persist(Collector *c, Interval *iv, const IntervalRefs *refs, int64_t *ret_id) {
        _cleanup_(undo_done) Undo undo = {};
        bool with_samples = iv && iv->n_samples > 0;
        uint64_t count = 0;
        int64_t id = 0;
        int r;

        *ret_id = 0;
        if (!c->store || (!with_samples && !have_updates(c)))
                return 0;

        r = store_begin(c->store);
        if (r < 0)
                return r;
        if (with_samples)
                r = put_refs(c, refs, &undo);
        if (r >= 0)
                r = put_updates(c);
        if (r >= 0 && with_samples)
                r = put_samples(c, iv, &id, &count);
        if (r >= 0)
                r = store_commit(c->store);
        if (r < 0) {
                store_rollback(c->store);
                undo_apply(&undo);
                return r;
        }

        updates_written(c);
        c->samples_written += count;
        if (with_samples)
                store_stats_add_interval(&c->store_stats, iv->start_ns, iv->end_ns, count);
        c->store_stats.bytes = store_file_bytes(c->store);
        *ret_id = id;
        return 0;
}
