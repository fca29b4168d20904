/* SPDX-License-Identifier: MIT */
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "export-intake.h"
#include "frame-kind.h"
#include "log.h"
#include "wire-buf.h"

typedef struct FrameKey {
        uint8_t kind;
        uint8_t file_id[EP_FILE_ID_SIZE];
        uint8_t pad[7];
        uint64_t addr;
} FrameKey;

int exp_intake_new(ExpIntake **ret) {
        _cleanup_(exp_intake_freep) ExpIntake *in = calloc(1, sizeof *in);

        if (!in)
                return -ENOMEM;
        in->frame_refs = ep_hashmap_new(sizeof(uint32_t), sizeof(uint32_t));
        in->frame_keys = ep_hashmap_new(sizeof(FrameKey), sizeof(uint32_t));
        in->stack_refs = ep_hashmap_new(sizeof(uint32_t), sizeof(uint32_t));
        in->pids = ep_hashmap_new(sizeof(uint32_t), sizeof(uint32_t));
        if (!in->frame_refs || !in->frame_keys || !in->stack_refs || !in->pids)
                return -ENOMEM;
        *ret = TAKE_PTR(in);
        return 0;
}

static void group_clear(ExpIntake *in) {
        in->cur = exp_interval_free(in->cur);
        in->group_bytes = 0;
        ep_hashmap_clear(in->frame_refs);
        ep_hashmap_clear(in->frame_keys);
        ep_hashmap_clear(in->stack_refs);
        ep_hashmap_clear(in->pids);
}

void exp_intake_reset(ExpIntake *in) {
        group_clear(in);
        in->skipping = false;
}

ExpIntake *exp_intake_free(ExpIntake *in) {
        if (!in)
                return NULL;
        exp_interval_free(in->cur);
        ep_hashmap_free(in->frame_refs);
        ep_hashmap_free(in->frame_keys);
        ep_hashmap_free(in->stack_refs);
        ep_hashmap_free(in->pids);
        free(in);
        return NULL;
}

/* Drops the group in progress and remembers why; returns error. */
_printf_(3, 4) static int group_drop(ExpIntake *in, int error, const char *format, ...) {
        va_list ap;

        va_start(ap, format);
        vsnprintf(in->last_error, sizeof in->last_error, format, ap);
        va_end(ap);
        in->groups_dropped++;
        if (!in->logged) {
                in->logged = true;
                log_warning("Dropped an export-ring group: %s (further drops are counted in "
                            "DecodeErrors and logged at debug level)", in->last_error);
        } else
                log_debug("Dropped an export-ring group: %s", in->last_error);
        group_clear(in);
        in->skipping = true;
        return error;
}

/* Reads a string (NULL when it was empty); sets r->error on any problem. */
static char *get_str(EpReader *r, size_t max, bool *oom) {
        char *s = ep_get_str(r, max);
        if (!s) {
                if (!r->error)
                        *oom = true;
                return NULL;
        }
        if (!*s) {
                free(s);
                return NULL;
        }
        return s;
}

static int on_begin(ExpIntake *in, EpReader *r) {
        uint64_t id = ep_get_u64(r), start = ep_get_u64(r), end = ep_get_u64(r), period = ep_get_u64(r);

        if (!ep_reader_done(r))
                return group_drop(in, -EBADMSG, "BEGIN: bad length %zu", r->size);
        if (end < start)
                return group_drop(in, -EBADMSG, "BEGIN: interval %" PRIu64 " ends before it starts", id);
        in->cur = exp_interval_new(id, start, end, period);
        if (!in->cur)
                return group_drop(in, -ENOMEM, "out of memory");
        return 0;
}

static int on_process(ExpIntake *in, EpReader *r) {
        ExpProcess p = { .pid = ep_get_u32(r) };
        bool oom = false;
        uint32_t *idx;
        int k;

        p.comm = get_str(r, EXP_MAX_NAME, &oom);
        p.exe_path = get_str(r, EXP_MAX_PATH, &oom);
        p.container_id = get_str(r, EXP_MAX_NAME, &oom);
        if (oom || !ep_reader_done(r)) {
                free(p.comm);
                free(p.exe_path);
                free(p.container_id);
                return oom ? group_drop(in, -ENOMEM, "out of memory")
                           : group_drop(in, -EBADMSG, "PROCESS: malformed record");
        }
        /* A second record for the same PID (it exec'd) replaces the first. */
        k = ep_hashmap_put(in->pids, &p.pid, (void **) &idx);
        if (k == 0) {
                ExpProcess *old = &in->cur->processes[*idx];
                free(old->comm);
                free(old->exe_path);
                free(old->container_id);
                *old = p;
                return 0;
        }
        ExpProcess *np = k > 0 ? exp_interval_add_process(in->cur) : NULL;
        if (!np) {
                free(p.comm);
                free(p.exe_path);
                free(p.container_id);
                return group_drop(in, -ENOMEM, "out of memory");
        }
        *np = p;
        *idx = (uint32_t) (in->cur->n_processes - 1);
        return 0;
}

static int on_frame(ExpIntake *in, EpReader *r) {
        uint32_t ref = ep_get_u32(r), *idx;
        uint8_t htlhash[EP_FILE_ID_SIZE];
        FrameKey key = {};
        ExpFrame *f;
        const void *build_id;
        size_t build_id_len;
        _cleanup_free_ char *go_build_id = NULL, *path = NULL;
        uint64_t elf_addr;
        uint16_t n_lines;
        bool oom = false;
        int k;

        key.kind = ep_get_u8(r);
        ep_get_bytes(r, key.file_id, sizeof key.file_id);
        ep_get_bytes(r, htlhash, sizeof htlhash);
        build_id = ep_get_blob(r, EP_BUILD_ID_MAX, &build_id_len);
        go_build_id = get_str(r, EP_GO_BUILD_ID_MAX, &oom);
        path = get_str(r, EXP_MAX_PATH, &oom);
        key.addr = ep_get_u64(r);
        elf_addr = ep_get_u64(r);
        n_lines = ep_get_u16(r);
        if (oom)
                return group_drop(in, -ENOMEM, "out of memory");
        if (r->error || key.kind >= _EP_FRAME_KIND_MAX || n_lines > EXP_MAX_LINES)
                return group_drop(in, -EBADMSG, "FRAME %" PRIu32 ": malformed record", ref);
        if (ep_hashmap_get(in->frame_refs, &ref))
                return group_drop(in, -EBADMSG, "FRAME %" PRIu32 ": defined twice", ref);

        f = exp_interval_add_frame(in->cur);
        if (!f)
                return group_drop(in, -ENOMEM, "out of memory");
        /* From here on the frame belongs to the interval, whatever happens. */
        f->kind = key.kind;
        memcpy(f->file_id, key.file_id, sizeof f->file_id);
        memcpy(f->htlhash, htlhash, sizeof f->htlhash);
        f->build_id_len = (uint8_t) build_id_len;
        if (build_id_len)
                memcpy(f->build_id, build_id, build_id_len);
        f->go_build_id = TAKE_PTR(go_build_id);
        f->mapping_path = TAKE_PTR(path);
        f->addr = key.addr;
        f->elf_addr = elf_addr;
        if (n_lines > 0) {
                f->lines = calloc(n_lines, sizeof *f->lines);
                if (!f->lines)
                        return group_drop(in, -ENOMEM, "out of memory");
        }
        for (size_t i = 0; i < n_lines; i++) {
                ExpLine *l = &f->lines[f->n_lines++];
                l->function = get_str(r, EXP_MAX_FUNCTION, &oom);
                l->file = get_str(r, EXP_MAX_PATH, &oom);
                l->line = ep_get_u32(r);
        }
        if (oom)
                return group_drop(in, -ENOMEM, "out of memory");
        if (!ep_reader_done(r))
                return group_drop(in, -EBADMSG, "FRAME %" PRIu32 ": malformed lines", ref);

        /* The collector names each (kind, file, address) once; should two refs name the same
         * frame, both point at the first one. Not a per-process kind (a JIT's code, a Python
         * code object): its address means something in one process only and the record does
         * not say which, so two refs of one address are two frames (the same call sites of a
         * parent and of its forked child, one named, one read after the child's exec). */
        uint32_t frame = (uint32_t) (in->cur->n_frames - 1);
        if (!ep_frame_kind_per_process(key.kind)) {
                k = ep_hashmap_put(in->frame_keys, &key, (void **) &idx);
                if (k < 0)
                        return group_drop(in, -ENOMEM, "out of memory");
                if (k > 0)
                        *idx = frame;
                frame = *idx;
        }
        k = ep_hashmap_put(in->frame_refs, &ref, (void **) &idx);
        if (k < 0)
                return group_drop(in, -ENOMEM, "out of memory");
        *idx = frame;
        return 0;
}

static int on_stack(ExpIntake *in, EpReader *r) {
        uint32_t ref = ep_get_u32(r), n = ep_get_u32(r), *idx;
        ExpStack *s;
        int k;

        if (r->error || n > EP_MAX_FRAMES || (uint64_t) n * sizeof(uint32_t) != r->size - r->pos)
                return group_drop(in, -EBADMSG, "STACK %" PRIu32 ": malformed record", ref);
        if (ep_hashmap_get(in->stack_refs, &ref))
                return group_drop(in, -EBADMSG, "STACK %" PRIu32 ": defined twice", ref);
        s = exp_interval_add_stack(in->cur);
        if (!s)
                return group_drop(in, -ENOMEM, "out of memory");
        s->frames = malloc(MAX(n, 1u) * sizeof(uint32_t));
        if (!s->frames)
                return group_drop(in, -ENOMEM, "out of memory");
        for (uint32_t i = 0; i < n; i++) {
                uint32_t fref = ep_get_u32(r);
                const uint32_t *f = ep_hashmap_get(in->frame_refs, &fref);
                if (!f)
                        return group_drop(in, -EBADMSG, "STACK %" PRIu32 ": unknown frame %" PRIu32, ref, fref);
                s->frames[s->n_frames++] = *f;
        }
        k = ep_hashmap_put(in->stack_refs, &ref, (void **) &idx);
        if (k < 0)
                return group_drop(in, -ENOMEM, "out of memory");
        *idx = (uint32_t) (in->cur->n_stacks - 1);
        return 0;
}

static int on_sample(ExpIntake *in, EpReader *r) {
        uint32_t pid = ep_get_u32(r), tid = ep_get_u32(r), cpu = ep_get_u32(r), stack_ref, n_ts;
        const uint32_t *stack;
        bool oom = false;
        char *thread_name;
        uint64_t count;
        ExpSample *s;

        thread_name = get_str(r, EXP_MAX_NAME, &oom);
        stack_ref = ep_get_u32(r);
        count = ep_get_u64(r);
        n_ts = ep_get_u32(r);
        if (oom) {
                free(thread_name);
                return group_drop(in, -ENOMEM, "out of memory");
        }
        if (r->error || count == 0 || n_ts > count || (uint64_t) n_ts * sizeof(uint64_t) != r->size - r->pos) {
                free(thread_name);
                return group_drop(in, -EBADMSG, "SAMPLE (pid %" PRIu32 "): malformed record", pid);
        }
        stack = ep_hashmap_get(in->stack_refs, &stack_ref);
        if (!stack) {
                free(thread_name);
                return group_drop(in, -EBADMSG, "SAMPLE (pid %" PRIu32 "): unknown stack %" PRIu32, pid, stack_ref);
        }
        s = exp_interval_add_sample(in->cur);
        if (!s) {
                free(thread_name);
                return group_drop(in, -ENOMEM, "out of memory");
        }
        *s = (ExpSample) {
                .pid = pid,
                .tid = tid,
                .cpu = cpu,
                .thread_name = thread_name,
                .stack = *stack,
                .count = count,
        };
        if (n_ts > 0) {
                s->timestamps = malloc(n_ts * sizeof(uint64_t));
                if (!s->timestamps)
                        return group_drop(in, -ENOMEM, "out of memory");
                ep_get_bytes(r, s->timestamps, n_ts * sizeof(uint64_t));
                s->n_timestamps = n_ts;
        }
        return 0;
}

int exp_intake_feed(ExpIntake *in, uint16_t type, const void *payload, size_t size,
                    ExpInterval **ret_done) {
        EpReader r;

        ep_reader_init(&r, payload, size);

        if (type == EP_MSG_EXP_BEGIN) {
                int e = 0;
                if (in->cur)
                        e = group_drop(in, -EBADMSG, "interval %" PRIu64 ": BEGIN before its END", in->cur->id);
                in->skipping = false;
                int k = on_begin(in, &r);
                return e < 0 ? e : k;
        }

        if (!in->cur) {
                /* Outside any group. */
                in->records_skipped++;
                if (in->skipping) {
                        if (type == EP_MSG_EXP_END)
                                in->skipping = false;
                        return 0;
                }
                group_drop(in, -EBADMSG, "record type %u outside a BEGIN..END group", type);
                if (type == EP_MSG_EXP_END)
                        in->skipping = false;
                return -EBADMSG;
        }

        in->group_bytes += size;
        if (in->group_bytes > EXP_MAX_GROUP_BYTES)
                return group_drop(in, -EBADMSG, "interval %" PRIu64 ": group larger than %u bytes",
                                  in->cur->id, EXP_MAX_GROUP_BYTES);

        switch (type) {
        case EP_MSG_EXP_PROCESS:
                return on_process(in, &r);
        case EP_MSG_EXP_FRAME:
                return on_frame(in, &r);
        case EP_MSG_EXP_STACK:
                return on_stack(in, &r);
        case EP_MSG_EXP_SAMPLE:
                return on_sample(in, &r);
        case EP_MSG_EXP_END: {
                uint64_t id = ep_get_u64(&r);
                if (!ep_reader_done(&r) || id != in->cur->id)
                        return group_drop(in, -EBADMSG, "interval %" PRIu64 ": END does not match", in->cur->id);
                *ret_done = TAKE_PTR(in->cur);
                group_clear(in);
                in->groups_done++;
                return 1;
        }
        default:
                return group_drop(in, -EBADMSG, "interval %" PRIu64 ": unexpected record type %u",
                                  in->cur->id, type);
        }
}
