/* SPDX-License-Identifier: MIT */

/* BPF ring buffer records → trace ring messages. User PCs become (file_key, file offset)
 * through the per-process mapping cache; files and processes are announced to the consumer
 * before the first trace that refers to them. */

#include <signal.h>
#include <stddef.h>
#include <time.h>

#include "log.h"
#include "interp-splice.h"
#include "loader.h"
#include "native-unwind.h"
#include "profiler.h"
#include "wire-buf.h"

_Static_assert(offsetof(struct ep_bpf_sample, frames) == EP_BPF_SAMPLE_HEADER_SIZE, "bpf/profiler.h out of date");
_Static_assert(EP_BPF_MAX_FRAMES <= EP_MAX_FRAMES, "a BPF sample does not fit in one EpTraceMsg");
_Static_assert(_EP_STOP_MAX <= EP_BPF_CNT_MAX - EP_BPF_CNT_STOP_BASE, "stop counters out of range");

/* A PC in no known mapping re-reads the process's mappings when the sample is newer than the
 * last read, at most every REREAD_MIN_NS, backing off to REREAD_MAX_NS while re-reads find
 * nothing new (PCs that are garbage from a frame-pointer step through code without frame
 * pointers, say). */
#define REREAD_MIN_NS (20 * NSEC_PER_MSEC)
#define REREAD_MAX_NS (2 * NSEC_PER_SEC)
#define RESYNC_MIN_NS (100 * NSEC_PER_MSEC)      /* per pid, when BPF lost a synchronised entry */
/* Samples with a stack copy whose tables are still coming wait for them, within limits. */
#define DEFER_MAX_NS (10 * NSEC_PER_SEC) /* a first extraction from a cold disk takes seconds */
#define DEFER_MAX_SAMPLES 512
#define DEFER_MAX_BYTES (16u << 20)
#define EXITED_KEEP_NS (5 * NSEC_PER_SEC)        /* traces still in flight after an exit */
#define LIVENESS_CHECK_NS (30 * NSEC_PER_SEC)    /* catches exits whose event was lost */

/* Traces are only produced while a consumer holds the ring: a new consumer resets the ring
 * anyway, so anything written with nobody attached would only be thrown away. */
static bool ring_open(const Loader *l) {
        return l->ring && l->ring_gen != 0 && l->ring_active;
}

static void ring_full(Loader *l) {
        if (l->ring_was_full)
                return;
        l->ring_was_full = true; /* until the consumer takes it again */
        log_warning("The trace ring is full: the collector is not keeping up. Dropping records (see "
                    "the RingFullDrops property).");
        loader_set_error(l, "trace ring full: the collector is not keeping up, records dropped");
}

static int push(Loader *l, uint16_t type, const void *data, size_t size) {
        int r = ep_ring_push(l->ring, type, data, (uint32_t) size);
        if (r < 0) {
                ring_full(l);
                return r;
        }
        l->ring_dirty = true;
        return 0;
}

static int announce_process(Loader *l, EpProcess *p) {
        uint8_t buf[8192];
        EpWriter w;

        if (p->announced_gen == l->ring_gen)
                return 0;
        ep_writer_init(&w, buf, sizeof buf);
        ep_put_u32(&w, (uint32_t) p->pid);
        ep_put_u64(&w, p->start_time_ns);
        ep_put_strn(&w, p->comm, strnlen(p->comm, sizeof p->comm));
        ep_put_str(&w, p->exe);
        ep_put_str(&w, p->container_id);
        if (w.overflow)
                return -E2BIG;
        if (push(l, EP_MSG_PROCESS, w.data, w.size) < 0)
                return -ENOBUFS;
        p->announced_gen = l->ring_gen;
        return 0;
}

static int announce_file(Loader *l, uint32_t key) {
        EpFile *f = ep_proc_table_file(l->procs, key);
        uint8_t buf[8192];
        EpWriter w;

        if (!f || f->announced_gen == l->ring_gen)
                return 0;
        ep_writer_init(&w, buf, sizeof buf);
        ep_put_u32(&w, f->key);
        ep_put_bytes(&w, f->id, EP_FILE_ID_SIZE);
        ep_put_bytes(&w, f->htlhash, EP_FILE_ID_SIZE);
        ep_put_u64(&w, f->size);
        ep_put_str(&w, f->path);
        if (w.overflow)
                return -E2BIG;
        if (push(l, EP_MSG_FILE, w.data, w.size) < 0)
                return -ENOBUFS;
        f->announced_gen = l->ring_gen;
        return 0;
}

static void announce_exit(Loader *l, EpProcess *p) {
        uint8_t buf[4];
        EpWriter w;

        if (!ring_open(l) || p->announced_gen != l->ring_gen)
                return; /* the consumer never heard of it */
        ep_writer_init(&w, buf, sizeof buf);
        ep_put_u32(&w, (uint32_t) p->pid);
        (void) push(l, EP_MSG_PROCESS_EXIT, w.data, w.size);
}

static void deferred_walk(Loader *l, pid_t pid, uint32_t file_key, bool force);

/* The tracked process a sample belongs to, starting to track it if needed, and brought in step
 * with the BPF side. */
static EpProcess *process_for_sample(Loader *l, const struct ep_bpf_sample *s) {
        EpProcess *p = ep_proc_table_get(l->procs, (pid_t) s->pid);

        /* A sample taken after the exit we saw belongs to a new process with the same pid. */
        if (p && p->exit_boot_ns && s->time_ns > p->exit_boot_ns) {
                if (p->n_deferred > 0)
                        deferred_walk(l, p->pid, 0, true); /* the old one's, first */
                ep_proc_table_remove(l->procs, p->pid);
                p = NULL;
        }
        if (!p) {
                if (ep_proc_table_add(l->procs, (pid_t) s->pid, &p) < 0)
                        return NULL;
        } else if (p->maps_stale) {
                if (ep_process_refresh(l->procs, p) > 0)
                        p->announced_gen = 0;
        } else if ((s->flags & EP_BPF_SAMPLE_UNKNOWN_PROCESS) && p->synced_gen != 0 &&
                   s->time_ns > p->synced_boot_ns &&
                   ep_now_ns(CLOCK_MONOTONIC) - p->maps_read_ns >= RESYNC_MIN_NS) {
                /* BPF lost the entry after we wrote it (an exec or exit event we missed, a
                 * pid reused): read the process again. */
                p->synced_gen = 0;
                if (ep_process_refresh(l->procs, p) > 0)
                        p->announced_gen = 0;
        } else if (p->unidentified > 0 &&
                   ep_now_ns(CLOCK_MONOTONIC) - p->maps_read_ns >= (p->identify_retry_ns ?: REREAD_MIN_NS)) {
                /* A file it maps could not be identified for a passing reason (a probe that
                 * timed out on a loaded machine): its frames and its table wait for that, so
                 * look again, whatever PC the sample has, backing off while it still fails. */
                p->identify_retry_ns = MIN(2 * (p->identify_retry_ns ?: REREAD_MIN_NS), REREAD_MAX_NS);
                if (ep_process_refresh(l->procs, p) > 0)
                        p->announced_gen = 0;
                if (p->unidentified == 0 || p->identify_deferred)
                        p->identify_retry_ns = 0; /* done, or more to do: no back-off */
        }
        loader_track_process(l, p);
        if (!p->comm[0])
                memcpy(p->comm, s->comm, MIN(sizeof p->comm - 1, sizeof s->comm));
        return p;
}

static const EpMapping *resolve(Loader *l, EpProcess *p, uint64_t addr, uint64_t sample_ns, bool *refreshed) {
        const EpMapping *m = ep_process_find_mapping(p, addr);
        uint64_t now, interval, gen;

        if (m || *refreshed || p->pid == 0)
                return m;
        /* Unknown PC: the process may have mapped something new (dlopen) after we last looked.
         * If we looked after the sample was taken, looking again shows nothing new. */
        if (sample_ns <= p->maps_read_boot_ns)
                return NULL;
        now = ep_now_ns(CLOCK_MONOTONIC);
        interval = p->reread_interval_ns ?: REREAD_MIN_NS;
        if (p->maps_read_ns && now - p->maps_read_ns < interval)
                return NULL;
        *refreshed = true;
        gen = p->maps_gen;
        if (ep_process_refresh(l->procs, p) > 0)
                p->announced_gen = 0;
        p->reread_interval_ns = p->maps_gen != gen ? REREAD_MIN_NS : MIN(interval * 2, REREAD_MAX_NS);
        loader_track_process(l, p); /* the BPF side learns the new mapping too */
        return ep_process_find_mapping(p, addr);
}

/* Checks a sample record's counts and finds its stack copy. */
static int sample_parse(Loader *l, const struct ep_bpf_sample *s, size_t size,
                        const struct ep_bpf_stack_copy **ret_copy) {
        unsigned nk = s->n_kernel, n = nk + s->n_user;
        const struct ep_bpf_stack_copy *c;
        size_t off;

        *ret_copy = NULL;
        if (nk > EP_BPF_MAX_KERNEL_FRAMES || n > EP_BPF_MAX_FRAMES || n > EP_MAX_FRAMES ||
            size < EP_BPF_SAMPLE_HEADER_SIZE + (size_t) n * sizeof(uint64_t)) {
                l->bad_records++;
                return -EBADMSG;
        }
        if (!(s->flags & EP_BPF_SAMPLE_STACK_COPY))
                return 0;
        off = EP_BPF_STACK_COPY_OFFSET;
        c = (const struct ep_bpf_stack_copy *) ((const uint8_t *) s + off);
        if (size < off + EP_BPF_STACK_COPY_HEADER_SIZE || c->len > EP_BPF_STACK_COPY_MAX ||
            size < off + EP_BPF_STACK_COPY_HEADER_SIZE + c->len) {
                l->bad_records++;
                return -EBADMSG;
        }
        *ret_copy = c;
        return 0;
}

typedef struct SpliceContext {
        Loader *l;
        const EpProcess *p;
} SpliceContext;

static bool interp_loop(void *userdata, uint64_t pc) {
        const SpliceContext *c = userdata;

        return loader_runtimes_is_interp_loop(c->l, c->p, pc);
}

/* The loader's own unwind (l->user_frames, n_native frames) with BPF's interpreter frames put
 * in place, into l->spliced_frames: returns the number of slots there. */
static unsigned splice_interp_frames(Loader *l, const EpProcess *p, const uint64_t *bpf, unsigned n_bpf,
                                     unsigned n_native, bool native_complete) {
        SpliceContext c = { .l = l, .p = p };
        EpSpliceResult r = ep_splice_interp_frames(bpf, n_bpf, l->user_frames, n_native, native_complete,
                                                   interp_loop, &c, l->spliced_frames, EP_BPF_MAX_USER_FRAMES);

        if (r.dropped > 0 && l->interp_unplaced_dropped == 0)
                log_notice("Process %d: %u interpreter frames of a sample found no interpreter-loop frame in the "
                           "loader's own unwind of it; they are left out (see PythonCounters, unplaced-dropped).",
                           (int) p->pid, r.dropped);
        l->interp_unplaced_dropped += r.dropped;
        l->interp_spliced += r.placed;
        return r.n;
}

/* The state of p a conversion of its frames holds in (trace-cache.h); false when it cannot be
 * told apart from another process's (no start time). */
static bool trace_state(const Loader *l, const EpProcess *p, TraceCacheState *ret) {
        if (p->start_time_ns == 0)
                return false;
        *ret = (TraceCacheState) {
                .pid = p->pid,
                .start_time_ns = p->start_time_ns,
                .maps_gen = p->maps_gen,
                .runtime = p->runtime,
                .runtime_version = p->runtime_version,
                .ring_gen = l->ring_gen,
        };
        return true;
}

/* BPF's user slots (or the loader's own unwind) as trace frames, into out (room for nu):
 * returns how many, with *ret_n_interp of them interpreter frames. *ret_pure: they depend on
 * nothing but the process's state trace-cache.h keys conversions by (no mapping read again,
 * every frame in a known file or the runtime's, no table asked for), so they may be kept. */
static unsigned convert_user_frames(Loader *l, EpProcess *p, const struct ep_bpf_sample *s, const uint64_t *user,
                                    unsigned nu, bool *refreshed, EpFrame *out, unsigned *ret_n_interp,
                                    bool *ret_pure) {
        unsigned n = 0, n_interp = 0;
        bool pure = true;

        for (unsigned i = 0; i < nu; i++) {
                uint64_t raw = user[i], pc = raw & EP_BPF_FRAME_ADDR_MASK;
                unsigned uflags = (unsigned) (raw >> EP_BPF_FRAME_FLAGS_SHIFT);
                bool ra = uflags & EP_UNWIND_F_RETURN_ADDRESS;
                EpFrame *f = &out[n++];

                if (uflags & EP_BPF_FRAME_F_RUNTIME) {
                        /* An interpreter frame of the process's runtime: two slots (bpf/profiler.h). */
                        int64_t off = i + 1 < nu ? (int64_t) user[i + 1] : 0;

                        i++;
                        if (!p->runtime) {
                                /* The process left its runtime (exec) after BPF sampled it. */
                                if (l->interp_orphaned++ == 0)
                                        log_notice("Process %d: interpreter frames of a process that runs no "
                                                   "interpreter any more are left out (frames-orphaned).",
                                                   (int) p->pid);
                                n--;
                                pure = false;
                                continue;
                        }
                        *f = (EpFrame) { .addr = p->runtime->frame_addr(pc, off), .kind = p->runtime->frame_kind };
                        n_interp++;
                        continue;
                }
                /* A return address points after the call: look up the call instruction's byte,
                 * which is in the caller's mapping even when the call ends it. */
                const EpMapping *m = resolve(l, p, ra ? pc - 1 : pc, s->time_ns, refreshed);

                *f = (EpFrame) {
                        .addr = pc,
                        .kind = EP_FRAME_UNMAPPED,
                        .flags = (ra ? EP_FRAME_FLAG_RETURN_ADDRESS : 0) |
                                 (uflags & EP_UNWIND_F_AFTER_FP_STEP ? EP_FRAME_FLAG_FP_STEP : 0),
                };
                if (m && m->file_key) {
                        f->kind = EP_FRAME_NATIVE;
                        f->file_key = m->file_key;
                        f->addr = pc - m->start + m->pgoff;
                } else
                        pure = false;
                if (uflags & EP_UNWIND_F_AFTER_FP_STEP)
                        pure = false;
                /* This frame was reached by a frame-pointer step: the frame below it had no
                 * table. Ask for that table before the ones no sample needed yet. */
                if ((uflags & EP_UNWIND_F_AFTER_FP_STEP) && n >= 2 && out[n - 2].kind == EP_FRAME_NATIVE)
                        ep_tables_hint_needed(l->tables, out[n - 2].file_key);
        }
        *ret_n_interp = n_interp;
        *ret_pure = pure && !*refreshed;
        return n;
}

/* The process whose address space the sample's PCs are in: the parent whose mappings BPF
 * walked with, for a forked child BPF had given the parent's entry (bpf/profiler.h,
 * maps_owner) when the loader tracks that parent, else the process itself. Before its exec a
 * child runs its parent's image, while the loader may read the child's mappings only after the
 * exec (a loaded machine): placed in those, the PCs would be in no file or in the wrong one. */
static EpProcess *sample_image(Loader *l, EpProcess *p, const struct ep_bpf_sample *s) {
        EpProcess *owner;

        if (s->maps_owner == 0 || s->maps_owner == s->pid)
                return p;
        owner = ep_proc_table_get(l->procs, (pid_t) s->maps_owner);
        return owner && !owner->gone && owner->n_mappings > 0 ? owner : p;
}

/* Converts one sample and pushes it to the trace ring. With a stack copy, the loader unwinds
 * it again and keeps whichever unwind got further. Returns 1 (and sends nothing) when that
 * unwind waits for a table and allow_wait is set; *ret_waiting is that table's file key. */
static int sample_emit(Loader *l, EpProcess *p, const struct ep_bpf_sample *s, const struct ep_bpf_stack_copy *copy,
                       bool allow_wait, uint32_t *ret_waiting) {
        unsigned nk = s->n_kernel, nu = s->n_user, n, n_user = 0, n_interp = 0;
        const uint64_t *user = (const uint64_t *) s->frames + nk;
        unsigned stop = s->stop_reason;
        bool refreshed = false, from_bpf = true, have_state, pure = false;
        const EpFrame *cached = NULL;
        EpProcess *image;
        TraceCacheState state;
        EpTraceMsg *msg;
        size_t len;

        if (!ring_open(l))
                return 0;
        image = sample_image(l, p, s);
        if (copy) {
                unsigned un, n_bpf_native;
                uint32_t waiting;
                int us;

                /* A PC the cache does not know makes it read the mappings again (the reason
                 * BPF could not unwind may be a mapping it did not know either). */
                (void) resolve(l, image, copy->pc, s->time_ns, &refreshed);
                for (unsigned i = 1; i < nu && !refreshed; i++) {
                        if (user[i] >> EP_BPF_FRAME_FLAGS_SHIFT & EP_BPF_FRAME_F_RUNTIME) {
                                i++; /* a CPython frame's two slots: no code address */
                                continue;
                        }
                        (void) resolve(l, image, (user[i] & EP_BPF_FRAME_ADDR_MASK) - 1, s->time_ns, &refreshed);
                }
                us = loader_user_unwind(l, image, copy, l->user_frames, EP_BPF_MAX_USER_FRAMES, &un, &waiting);

                if (waiting && allow_wait) {
                        *ret_waiting = waiting;
                        return 1;
                }
                n_bpf_native = ep_native_frame_count(user, nu);
                if (us == EP_STOP_OK || un > n_bpf_native) {
                        /* Interpreter frames from BPF go into the loader's native unwind. */
                        if (n_bpf_native < nu) {
                                nu = splice_interp_frames(l, image, user, nu, un, us == EP_STOP_OK);
                                user = l->spliced_frames;
                        } else {
                                user = l->user_frames;
                                nu = un;
                        }
                        from_bpf = false;
                        stop = (unsigned) us;
                        l->user_unwinds++;
                }
        }
        for (unsigned i = 0; i < nk; i++)
                l->frames[i] = (EpFrame) { .addr = s->frames[i], .kind = EP_FRAME_KERNEL };
        /* BPF's own frames, in a state of the process they were converted in before: copied. A
         * pure conversion read no mappings again, so the state is still the one taken here. */
        have_state = from_bpf && image == p && trace_state(l, p, &state);
        if (have_state)
                cached = trace_cache_find(l->trace_cache, &state, user, nu, &n_user, &n_interp);
        if (cached)
                memcpy(l->frames + nk, cached, (size_t) n_user * sizeof *cached);
        else
                n_user = convert_user_frames(l, image, s, user, nu, &refreshed, l->frames + nk, &n_interp, &pure);
        l->interp_frames_sent += n_interp;
        n = nk + n_user;

        /* The user stack ended early: say why, as the outermost frame. */
        if (nu > 0 && stop != EP_STOP_OK && stop != EP_STOP_NO_USER_REGS && n < EP_MAX_FRAMES)
                l->frames[n++] = (EpFrame) { .addr = stop, .kind = EP_FRAME_ABORT };

        /* Announcements first: the consumer must know every key and the pid before the trace.
         * A kept conversion was sent in this ring generation: its files were announced. */
        if (announce_process(l, p) < 0)
                return -ENOBUFS;
        for (unsigned i = nk; i < n && !cached; i++)
                if (l->frames[i].kind == EP_FRAME_NATIVE && announce_file(l, l->frames[i].file_key) < 0)
                        return -ENOBUFS;

        len = sizeof(EpTraceMsg) + (size_t) n * sizeof(EpFrame);
        msg = ep_ring_reserve(l->ring, EP_MSG_TRACE, (uint32_t) len);
        if (!msg) {
                ring_full(l);
                return -ENOBUFS;
        }
        *msg = (EpTraceMsg) {
                .time_ns = s->time_ns + l->boot_to_realtime_ns,
                .pid = s->pid,
                .tid = s->tid,
                .cpu = s->cpu,
                .n_frames = (uint16_t) n,
                .n_kernel = (uint16_t) nk,
                .stop_reason = stop,
        };
        memcpy(msg->comm, s->comm, sizeof msg->comm);
        msg->comm[sizeof msg->comm - 1] = 0;
        memcpy(msg->frames, l->frames, (size_t) n * sizeof(EpFrame));
        ep_ring_commit(l->ring);
        l->ring_dirty = true;
        l->traces_sent++;
        if (image != p)
                l->inherited_images++; /* once sent: a sample that waited comes here twice */
        if (have_state && !cached && pure) /* only once sent: its announcements are in the ring */
                trace_cache_add(l->trace_cache, &state, user, nu, l->frames + nk, n_user, n_interp);
        return 0;
}

/* ---- samples waiting for tables ---- */

typedef struct Deferred {
        struct Deferred *next;
        uint64_t deadline_ns; /* CLOCK_MONOTONIC */
        uint32_t waiting;     /* the file key whose table it waits for */
        pid_t pid;
        size_t size;
        uint64_t data[]; /* the BPF record, 8-byte aligned */
} Deferred;

static bool defer_sample(Loader *l, EpProcess *p, const struct ep_bpf_sample *s, size_t size, uint32_t waiting) {
        Deferred *d;

        if (l->n_deferred >= DEFER_MAX_SAMPLES || l->deferred_bytes + size > DEFER_MAX_BYTES)
                return false;
        d = malloc(sizeof *d + ALIGN8(size));
        if (!d)
                return false;
        *d = (Deferred) {
                .deadline_ns = ep_now_ns(CLOCK_MONOTONIC) + DEFER_MAX_NS,
                .waiting = waiting,
                .pid = p->pid,
                .size = size,
        };
        memcpy(d->data, s, size);
        if (!l->deferred_tail)
                l->deferred_tail = &l->deferred_head;
        *l->deferred_tail = d;
        l->deferred_tail = &d->next;
        l->n_deferred++;
        l->deferred_bytes += size;
        l->deferred_total++;
        p->n_deferred++;
        return true;
}

/* Goes through the waiting samples of pid (0: all): a sample is tried again when the table it
 * waited for is no longer pending (file_key), and sent when its tables are all there, its wait
 * ran out, or force. */
static void deferred_walk(Loader *l, pid_t pid, uint32_t file_key, bool force) {
        uint64_t now = ep_now_ns(CLOCK_MONOTONIC);
        Deferred **pp = &l->deferred_head;

        while (*pp) {
                Deferred *d = *pp;
                const struct ep_bpf_sample *s = (const struct ep_bpf_sample *) d->data;
                const struct ep_bpf_stack_copy *copy;
                EpProcess *p = ep_proc_table_get(l->procs, d->pid);
                bool expired = force || now >= d->deadline_ns;

                if ((pid != 0 && d->pid != pid) || (!expired && (file_key == 0 || d->waiting != file_key))) {
                        pp = &d->next;
                        continue;
                }
                if (p && sample_parse(l, s, d->size, &copy) >= 0 &&
                    sample_emit(l, p, s, copy, !expired, &d->waiting) == 1) {
                        pp = &d->next; /* waits for another table now */
                        continue;
                }
                if (expired)
                        l->deferred_expired++;
                *pp = d->next;
                l->n_deferred--;
                l->deferred_bytes -= d->size;
                if (p && p->n_deferred > 0 && --p->n_deferred == 0 && p->exit_announce_pending) {
                        p->exit_announce_pending = false;
                        announce_exit(l, p);
                }
                free(d);
        }
        l->deferred_tail = pp;
        if (l->ring_dirty) {
                (void) ep_ring_notify(l->ring);
                l->ring_dirty = false;
        }
}

void loader_retry_deferred(Loader *l, uint32_t file_key) {
        if (l->n_deferred > 0)
                deferred_walk(l, 0, file_key, false);
}

void loader_deferred_free(Loader *l) {
        while (l->deferred_head) {
                Deferred *d = l->deferred_head;
                l->deferred_head = d->next;
                free(d);
        }
        l->deferred_tail = NULL;
        l->n_deferred = 0;
        l->deferred_bytes = 0;
}

static int convert_sample(Loader *l, const struct ep_bpf_sample *s, size_t size) {
        const struct ep_bpf_stack_copy *copy;
        uint32_t waiting = 0;
        EpProcess *p;
        int r;

        r = sample_parse(l, s, size, &copy);
        if (r < 0)
                return r;
        if (copy)
                l->stack_copies++;
        /* Processes are tracked whether or not anyone consumes traces: the BPF side needs
         * their mappings to unwind. */
        p = process_for_sample(l, s);
        if (!p)
                return -ENOMEM;
        if (!ring_open(l))
                return 0; /* nobody to send it to; the next consumer resets the ring anyway */
        r = sample_emit(l, p, s, copy, copy != NULL, &waiting);
        if (r == 1 && !defer_sample(l, p, s, size, waiting))
                r = sample_emit(l, p, s, copy, false, &waiting); /* no room to wait: send it as it is */
        return r < 0 ? r : 0;
}

static void handle_exit(Loader *l, const struct ep_bpf_task_event *e) {
        EpProcess *p = ep_proc_table_get(l->procs, (pid_t) e->pid);

        if (!p || p->exit_boot_ns)
                return;
        p->exit_boot_ns = e->time_ns;
        p->exit_seen_ns = ep_now_ns(CLOCK_MONOTONIC);
        ep_process_release_inodes(l->procs, p);
        if (p->n_deferred > 0)
                p->exit_announce_pending = true; /* after its waiting samples */
        else
                announce_exit(l, p);
}

static void handle_exec(Loader *l, const struct ep_bpf_task_event *e) {
        EpProcess *p = ep_proc_table_get(l->procs, (pid_t) e->pid);

        if (!p || p->maps_read_boot_ns >= e->time_ns)
                return; /* unknown, or read after the exec: what we have is the new image's */
        /* New image: the mappings, the name and the runtime change. Read them before the next
         * sample is resolved, and announce the process again. The BPF side dropped its entries
         * at the exec; they are written again then (the first sample of the new image is
         * flagged and wakes us at once). */
        loader_process_exec(l, p);
        p->maps_stale = true;
        p->announced_gen = 0;
        /* The old image's files are mapped no more: their inodes may go (proc-maps.c). */
        ep_process_release_inodes(l->procs, p);
}

int loader_handle_bpf_record(Loader *l, const void *data, size_t size) {
        uint32_t type;

        if (size < sizeof type) {
                l->bad_records++;
                return -EBADMSG;
        }
        memcpy(&type, data, sizeof type);
        switch (type) {
        case EP_BPF_REC_SAMPLE:
                return convert_sample(l, data, size);
        case EP_BPF_REC_EXIT:
        case EP_BPF_REC_EXEC:
                if (size < sizeof(struct ep_bpf_task_event)) {
                        l->bad_records++;
                        return -EBADMSG;
                }
                if (type == EP_BPF_REC_EXIT)
                        handle_exit(l, data);
                else
                        handle_exec(l, data);
                return 0;
        default:
                l->bad_records++;
                return -EBADMSG;
        }
}

void loader_ring_reset(Loader *l) {
        /* Announcement state is "announced in generation ring_gen": bumping the generation
         * makes every file and process un-announced at once. */
        l->ring_gen++;
        l->ring_active = true;
        l->ring_dirty = false;
        l->ring_was_full = false;
}

void loader_sweep_processes(Loader *l) {
        uint64_t now = ep_now_ns(CLOCK_MONOTONIC);
        bool check_liveness = now - l->last_liveness_check_ns >= LIVENESS_CHECK_NS;
        size_t state = 0;
        EpProcess *p;

        if (check_liveness) {
                l->last_liveness_check_ns = now;
                loader_prune_files(l, now);
        }
        while (ep_proc_table_iterate(l->procs, &state, &p)) {
                if (p->exit_seen_ns) {
                        if (now - p->exit_seen_ns >= EXITED_KEEP_NS && p->n_deferred == 0)
                                ep_proc_table_remove(l->procs, p->pid);
                        continue;
                }
                /* An exit whose event was lost (BPF ring buffer full): notice it here. */
                if (check_liveness && p->pid != 0 && kill(p->pid, 0) < 0 && errno == ESRCH) {
                        struct timespec ts;
                        clock_gettime(CLOCK_BOOTTIME, &ts);
                        p->exit_boot_ns = (uint64_t) ts.tv_sec * NSEC_PER_SEC + ts.tv_nsec;
                        p->exit_seen_ns = now;
                        loader_process_dead(l, p);
                        if (p->n_deferred > 0)
                                p->exit_announce_pending = true;
                        else
                                announce_exit(l, p);
                }
        }
        if (l->ring_dirty) {
                (void) ep_ring_notify(l->ring);
                l->ring_dirty = false;
        }
}
