/* SPDX-License-Identifier: MIT */

/* BPF ring buffer records → trace ring messages. User PCs become (file_key, file offset)
 * through the per-process mapping cache; files and processes are announced to the consumer
 * before the first trace that refers to them. */

#include <signal.h>
#include <stddef.h>
#include <time.h>

#include "log.h"
#include "loader.h"
#include "profiler.h"
#include "wire-buf.h"

_Static_assert(offsetof(struct ep_bpf_sample, frames) == EP_BPF_SAMPLE_HEADER_SIZE, "bpf/profiler.h out of date");
_Static_assert(EP_BPF_MAX_FRAMES <= EP_MAX_FRAMES, "a BPF sample does not fit in one EpTraceMsg");
_Static_assert(_EP_STOP_MAX <= EP_BPF_CNT_MAX - EP_BPF_CNT_STOP_BASE, "stop counters out of range");

#define MAPS_REREAD_MIN_NS (500 * NSEC_PER_MSEC) /* per pid, when a PC is in no known mapping */
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

/* The tracked process a sample belongs to, starting to track it if needed. */
static EpProcess *process_for_sample(Loader *l, const struct ep_bpf_sample *s) {
        EpProcess *p = ep_proc_table_get(l->procs, (pid_t) s->pid);

        /* A sample taken after the exit we saw belongs to a new process with the same pid. */
        if (p && p->exit_boot_ns && s->time_ns > p->exit_boot_ns) {
                ep_proc_table_remove(l->procs, p->pid);
                p = NULL;
        }
        if (!p) {
                if (ep_proc_table_add(l->procs, (pid_t) s->pid, &p) < 0)
                        return NULL;
        } else if (p->maps_stale) {
                if (ep_process_refresh(l->procs, p) > 0)
                        p->announced_gen = 0;
        }
        if (!p->comm[0])
                memcpy(p->comm, s->comm, MIN(sizeof p->comm - 1, sizeof s->comm));
        return p;
}

static const EpMapping *resolve(Loader *l, EpProcess *p, uint64_t addr, bool *refreshed) {
        const EpMapping *m = ep_process_find_mapping(p, addr);
        uint64_t now;

        if (m || *refreshed || p->pid == 0)
                return m;
        /* Unknown PC: the process may have mapped something new (dlopen). Look again, but not
         * more often than MAPS_REREAD_MIN_NS per process. */
        now = ep_now_ns(CLOCK_MONOTONIC);
        if (p->maps_read_ns && now - p->maps_read_ns < MAPS_REREAD_MIN_NS)
                return NULL;
        *refreshed = true;
        if (ep_process_refresh(l->procs, p) > 0)
                p->announced_gen = 0;
        return ep_process_find_mapping(p, addr);
}

static int convert_sample(Loader *l, const struct ep_bpf_sample *s, size_t size) {
        unsigned nk = s->n_kernel, nu = s->n_user, n = nk + nu;
        bool refreshed = false;
        EpTraceMsg *msg;
        EpProcess *p;
        size_t len;

        if (nk > EP_BPF_MAX_KERNEL_FRAMES || n > EP_BPF_MAX_FRAMES || n > EP_MAX_FRAMES ||
            size < EP_BPF_SAMPLE_HEADER_SIZE + (size_t) n * sizeof(uint64_t)) {
                l->bad_records++;
                return -EBADMSG;
        }
        if (!ring_open(l))
                return 0; /* nobody to send it to; the next consumer resets the ring anyway */

        p = process_for_sample(l, s);
        if (!p)
                return -ENOMEM;

        for (unsigned i = 0; i < nk; i++)
                l->frames[i] = (EpFrame) { .addr = s->frames[i], .kind = EP_FRAME_KERNEL };
        for (unsigned i = 0; i < nu; i++) {
                uint64_t pc = s->frames[nk + i];
                EpFrame *f = &l->frames[nk + i];
                /* A return address points after the call: look up the call instruction's byte,
                 * which is in the caller's mapping even when the call ends it. */
                const EpMapping *m = resolve(l, p, i == 0 ? pc : pc - 1, &refreshed);

                *f = (EpFrame) {
                        .addr = pc,
                        .kind = EP_FRAME_UNMAPPED,
                        .flags = i == 0 ? 0 : EP_FRAME_FLAG_RETURN_ADDRESS,
                };
                if (m && m->file_key) {
                        f->kind = EP_FRAME_NATIVE;
                        f->file_key = m->file_key;
                        f->addr = pc - m->start + m->pgoff;
                }
        }

        /* Announcements first: the consumer must know every key and the pid before the trace. */
        if (announce_process(l, p) < 0)
                return -ENOBUFS;
        for (unsigned i = nk; i < n; i++)
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
                .stop_reason = s->stop_reason,
        };
        memcpy(msg->comm, s->comm, sizeof msg->comm);
        msg->comm[sizeof msg->comm - 1] = 0;
        memcpy(msg->frames, l->frames, (size_t) n * sizeof(EpFrame));
        ep_ring_commit(l->ring);
        l->ring_dirty = true;
        l->traces_sent++;
        return 0;
}

static void handle_exit(Loader *l, const struct ep_bpf_task_event *e) {
        EpProcess *p = ep_proc_table_get(l->procs, (pid_t) e->pid);

        if (!p || p->exit_boot_ns)
                return;
        p->exit_boot_ns = e->time_ns;
        p->exit_seen_ns = ep_now_ns(CLOCK_MONOTONIC);
        announce_exit(l, p);
}

static void handle_exec(Loader *l, const struct ep_bpf_task_event *e) {
        EpProcess *p = ep_proc_table_get(l->procs, (pid_t) e->pid);

        if (!p)
                return;
        /* New image: the mappings and the name change. Read them before the next sample is
         * resolved, and announce the process again. */
        p->maps_stale = true;
        p->announced_gen = 0;
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

        if (check_liveness)
                l->last_liveness_check_ns = now;
        while (ep_proc_table_iterate(l->procs, &state, &p)) {
                if (p->exit_seen_ns) {
                        if (now - p->exit_seen_ns >= EXITED_KEEP_NS)
                                ep_proc_table_remove(l->procs, p->pid);
                        continue;
                }
                /* An exit whose event was lost (BPF ring buffer full): notice it here. */
                if (check_liveness && p->pid != 0 && kill(p->pid, 0) < 0 && errno == ESRCH) {
                        struct timespec ts;
                        clock_gettime(CLOCK_BOOTTIME, &ts);
                        p->exit_boot_ns = (uint64_t) ts.tv_sec * NSEC_PER_SEC + ts.tv_nsec;
                        p->exit_seen_ns = now;
                        announce_exit(l, p);
                }
        }
        if (l->ring_dirty) {
                (void) ep_ring_notify(l->ring);
                l->ring_dirty = false;
        }
}
