/* SPDX-License-Identifier: MIT */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "pb-build.h"
#include "arena.h"
#include "file-id.h"
#include "frame-kind.h"
#include "hashmap.h"
#include "intern.h"
#include "otlp-encode.h"
#include "otlp-pb.h"

#define DEFAULT_SCOPE_NAME "ebpf-profiler"

/* Attribute keys (semantic conventions; see docs/ARCHITECTURE.md, Export). */
#define ATTR_THREAD_NAME "thread.name"
#define ATTR_THREAD_ID "thread.id"
#define ATTR_CPU "cpu.logical_number"
#define ATTR_FRAME_TYPE "profile.frame.type"
#define ATTR_BUILD_ID_HTLHASH "process.executable.build_id.htlhash"
#define ATTR_BUILD_ID_GNU "process.executable.build_id.gnu"
#define ATTR_BUILD_ID_GO "process.executable.build_id.go"

enum { ATTR_STRING = 1, ATTR_INT = 2 };
enum { SAMPLE_ATTRS = 3 };

/* Samples of one Profile that share stack and attributes: merged into one OTLP Sample. */
typedef struct Group {
        uint32_t slot;
        int32_t stack_index;
        int32_t attrs[SAMPLE_ATTRS]; /* 0 = absent */
        uint64_t count, n_timestamps;
        size_t first, last; /* model samples, chained through Encoder.next_sample */
} Group;

typedef struct GroupKey {
        uint32_t slot;
        int32_t stack_index;
        int32_t attrs[SAMPLE_ATTRS];
} GroupKey;

/* One process → one ResourceProfiles with one Profile. */
typedef struct Slot {
        uint32_t pid;
        const ExpProcess *process; /* NULL when the group had no PROCESS record for it */
        size_t n_groups, filled;
        bool timestamps;
        PbSample **samples;
} Slot;

typedef struct Encoder {
        const ExpInterval *iv;
        ExpArena arena;
        ExpIntern strings, functions, mappings, attributes, stacks;
        ExpPtrVec mapping_table, location_table, function_table, attribute_table, stack_table;
        int32_t *frame_location; /* per model frame, 0 until emitted */
        int32_t *stack_result;   /* per model stack, valid when stack_done */
        bool *stack_done;
        Slot *slots;
        size_t n_slots, cap_slots;
        Group *groups;
        size_t n_groups, cap_groups;
        size_t *next_sample;
        EpHashmap *slot_by_pid, *group_by_key;
        uint64_t min_ts, max_ts; /* over every timestamp sent; min_ts > max_ts when none */
        bool no_cpu;
        bool strings_by_index; /* OtlpEncodeOptions.strings_by_index */
} Encoder;

const char *otlp_frame_type(uint8_t kind) {
        const EpFrameKind *k = ep_frame_kind(kind);
        return k ? k->otlp_type : "unknown";
}

/* Index of s in the string table; NULL and "" are index 0. */
static int str_index(Encoder *e, const char *s, int32_t *ret) {
        uint32_t i;
        int r = exp_string_index(&e->strings, s, &i);

        if (r >= 0)
                *ret = (int32_t) i;
        return r;
}

static int attr_index(Encoder *e, const char *key, int type, const char *sval, int64_t ival, int32_t *ret) {
        _cleanup_free_ uint8_t *heap = NULL;
        uint8_t stack_buf[256], *buf = stack_buf;
        size_t slen = type == ATTR_STRING ? strlen(sval) : 0, n;
        PbKeyValueAndUnit *kv;
        PbAnyValue *v;
        int32_t k;
        uint32_t i;
        int r;

        r = str_index(e, key, &k);
        if (r < 0)
                return r;
        /* Identity: type, key index, value. */
        n = 1 + sizeof k + (type == ATTR_STRING ? slen : sizeof ival);
        if (n > sizeof stack_buf) {
                buf = heap = malloc(n);
                if (!heap)
                        return -ENOMEM;
        }
        buf[0] = (uint8_t) type;
        memcpy(buf + 1, &k, sizeof k);
        if (type == ATTR_STRING)
                memcpy(buf + 1 + sizeof k, sval, slen);
        else
                memcpy(buf + 1 + sizeof k, &ival, sizeof ival);
        r = exp_intern_put(&e->attributes, buf, n, &i);
        if (r < 0)
                return r;
        *ret = (int32_t) i;
        if (r == 0)
                return 0;

        kv = EXP_NEW_MSG(&e->arena, PbKeyValueAndUnit, pb_key_value_and_unit_init);
        v = EXP_NEW_MSG(&e->arena, PbAnyValue, pb_any_value_init);
        if (!kv || !v)
                return -ENOMEM;
        kv->key_strindex = k;
        kv->value = v;
        if (type == ATTR_STRING && e->strings_by_index) {
                v->value_case = PB_ANY_VALUE_STRINDEX;
                r = str_index(e, sval, &v->string_value_strindex);
                if (r < 0)
                        return r;
        } else if (type == ATTR_STRING) {
                /* Plain string_value: every OTLP receiver understands it. The interned key
                 * holds a NUL-terminated copy right after the type and key index. */
                v->value_case = PB_ANY_VALUE_STRING;
                v->string_value = (char *) exp_intern_get(&e->attributes, i) + 1 + sizeof k;
        } else {
                v->value_case = PB_ANY_VALUE_INT;
                v->int_value = ival;
        }
        return exp_ptrvec_push(&e->attribute_table, kv);
}

static int attr_string(Encoder *e, const char *key, const char *value, int32_t *ret) {
        return attr_index(e, key, ATTR_STRING, value, 0, ret);
}

static int attr_int(Encoder *e, const char *key, int64_t value, int32_t *ret) {
        return attr_index(e, key, ATTR_INT, NULL, value, ret);
}

static int mapping_for(Encoder *e, const ExpFrame *f, int32_t *ret) {
        static const uint8_t zero[EP_FILE_ID_SIZE];
        char hex[2 * EP_BUILD_ID_MAX + 1];
        int32_t attrs[3];
        size_t n_attrs = 0;
        PbMapping *m;
        uint32_t i;
        int r;

        if (memcmp(f->file_id, zero, sizeof zero) == 0) {
                *ret = 0; /* no file: no mapping (OTLP wants a build ID on every Mapping) */
                return 0;
        }
        r = exp_intern_put(&e->mappings, f->file_id, sizeof f->file_id, &i);
        if (r < 0)
                return r;
        *ret = (int32_t) i;
        if (r == 0)
                return 0;

        m = EXP_NEW_MSG(&e->arena, PbMapping, pb_mapping_init);
        if (!m)
                return -ENOMEM;
        r = str_index(e, f->mapping_path, &m->filename_strindex);
        if (r < 0)
                return r;
        ep_file_id_to_hex(f->htlhash, hex);
        r = attr_string(e, ATTR_BUILD_ID_HTLHASH, hex, &attrs[n_attrs++]);
        if (r < 0)
                return r;
        if (f->build_id_len > 0) {
                ep_hex_encode(f->build_id, MIN((size_t) f->build_id_len, (size_t) EP_BUILD_ID_MAX), hex);
                r = attr_string(e, ATTR_BUILD_ID_GNU, hex, &attrs[n_attrs++]);
                if (r < 0)
                        return r;
        }
        if (f->go_build_id && *f->go_build_id) {
                r = attr_string(e, ATTR_BUILD_ID_GO, f->go_build_id, &attrs[n_attrs++]);
                if (r < 0)
                        return r;
        }
        m->attribute_indices = exp_arena_alloc_array(&e->arena, n_attrs, sizeof(int32_t));
        if (!m->attribute_indices)
                return -ENOMEM;
        memcpy(m->attribute_indices, attrs, n_attrs * sizeof(int32_t));
        m->n_attribute_indices = n_attrs;
        return exp_ptrvec_push(&e->mapping_table, m);
}

static int function_for(Encoder *e, const ExpLine *ln, int32_t *ret) {
        int32_t key[2];
        PbFunction *fn;
        uint32_t i;
        int r;

        r = str_index(e, ln->function, &key[0]);
        if (r < 0)
                return r;
        r = str_index(e, ln->file, &key[1]);
        if (r < 0)
                return r;
        if (key[0] == 0 && key[1] == 0) {
                *ret = 0; /* nothing to name: no function */
                return 0;
        }
        r = exp_intern_put(&e->functions, key, sizeof key, &i);
        if (r < 0)
                return r;
        *ret = (int32_t) i;
        if (r == 0)
                return 0;
        fn = EXP_NEW_MSG(&e->arena, PbFunction, pb_function_init);
        if (!fn)
                return -ENOMEM;
        fn->name_strindex = key[0];
        fn->filename_strindex = key[1];
        return exp_ptrvec_push(&e->function_table, fn);
}

static int location_for(Encoder *e, uint32_t frame, int32_t *ret) {
        const ExpFrame *f;
        PbLocation *l;
        int r;

        if (frame >= e->iv->n_frames)
                return -EINVAL;
        if (e->frame_location[frame]) {
                *ret = e->frame_location[frame];
                return 0;
        }
        f = &e->iv->frames[frame];
        l = EXP_NEW_MSG(&e->arena, PbLocation, pb_location_init);
        if (!l)
                return -ENOMEM;
        r = mapping_for(e, f, &l->mapping_index);
        if (r < 0)
                return r;
        /* The ELF address once known: with the mapping's build IDs, what a backend needs to
         * symbolize (the file offset only means something together with the file). */
        l->address = f->kind == EP_FRAME_NATIVE && f->elf_addr ? f->elf_addr : f->addr;
        if (f->n_lines > 0) {
                l->lines = exp_arena_alloc_array(&e->arena, f->n_lines, sizeof(PbLine *));
                if (!l->lines)
                        return -ENOMEM;
                for (size_t j = 0; j < f->n_lines; j++) {
                        PbLine *ln = EXP_NEW_MSG(&e->arena, PbLine, pb_line_init);
                        if (!ln)
                                return -ENOMEM;
                        r = function_for(e, &f->lines[j], &ln->function_index);
                        if (r < 0)
                                return r;
                        ln->line = f->lines[j].line;
                        l->lines[l->n_lines++] = ln;
                }
        }
        l->attribute_indices = exp_arena_alloc(&e->arena, sizeof(int32_t));
        if (!l->attribute_indices)
                return -ENOMEM;
        r = attr_string(e, ATTR_FRAME_TYPE, otlp_frame_type(f->kind), &l->attribute_indices[0]);
        if (r < 0)
                return r;
        l->n_attribute_indices = 1;

        if (e->location_table.n >= INT32_MAX)
                return -E2BIG;
        *ret = e->frame_location[frame] = (int32_t) e->location_table.n;
        return exp_ptrvec_push(&e->location_table, l);
}

static int stack_for(Encoder *e, uint32_t stack, int32_t *ret) {
        const ExpStack *s;
        int32_t *locs;
        PbStack *st;
        uint32_t i;
        int r;

        if (stack >= e->iv->n_stacks)
                return -EINVAL;
        if (e->stack_done[stack]) {
                *ret = e->stack_result[stack];
                return 0;
        }
        s = &e->iv->stacks[stack];
        if (s->n_frames > INT32_MAX)
                return -E2BIG;
        locs = exp_arena_alloc_array(&e->arena, s->n_frames, sizeof(int32_t));
        if (!locs)
                return -ENOMEM;
        for (size_t j = 0; j < s->n_frames; j++) {
                r = location_for(e, s->frames[j], &locs[j]);
                if (r < 0)
                        return r;
        }
        /* Two model stacks may resolve to the same locations: keep one. The empty stack is
         * the zero value at index 0. */
        r = exp_intern_put(&e->stacks, locs, s->n_frames * sizeof(int32_t), &i);
        if (r < 0)
                return r;
        if (r > 0) {
                st = EXP_NEW_MSG(&e->arena, PbStack, pb_stack_init);
                if (!st)
                        return -ENOMEM;
                st->location_indices = locs;
                st->n_location_indices = s->n_frames;
                r = exp_ptrvec_push(&e->stack_table, st);
                if (r < 0)
                        return r;
        }
        e->stack_done[stack] = true;
        *ret = e->stack_result[stack] = (int32_t) i;
        return 0;
}

static int slot_for(Encoder *e, uint32_t pid, uint32_t *ret) {
        uint32_t *v;
        int r;

        r = ep_hashmap_put(e->slot_by_pid, &pid, (void **) &v);
        if (r < 0)
                return r;
        if (r > 0) {
                r = exp_grow((void **) &e->slots, &e->cap_slots, e->n_slots + 1, sizeof *e->slots);
                if (r < 0) {
                        ep_hashmap_remove(e->slot_by_pid, &pid, NULL);
                        return r;
                }
                e->slots[e->n_slots] = (Slot) { .pid = pid, .timestamps = true };
                *v = (uint32_t) e->n_slots++;
        }
        *ret = *v;
        return 0;
}

static int add_sample(Encoder *e, size_t idx) {
        const ExpSample *s = &e->iv->samples[idx];
        GroupKey key = {};
        uint32_t *gi;
        Group *g;
        int r;

        if (s->count == 0)
                return 0; /* nothing happened */
        if (s->n_timestamps > s->count || (s->n_timestamps > 0 && !s->timestamps))
                return -EINVAL;
        r = slot_for(e, s->pid, &key.slot);
        if (r < 0)
                return r;
        r = stack_for(e, s->stack, &key.stack_index);
        if (r < 0)
                return r;
        if (s->thread_name && *s->thread_name) {
                r = attr_string(e, ATTR_THREAD_NAME, s->thread_name, &key.attrs[0]);
                if (r < 0)
                        return r;
        }
        r = attr_int(e, ATTR_THREAD_ID, s->tid, &key.attrs[1]);
        if (r < 0)
                return r;
        if (!e->no_cpu) {
                r = attr_int(e, ATTR_CPU, s->cpu, &key.attrs[2]);
                if (r < 0)
                        return r;
        }

        r = ep_hashmap_put(e->group_by_key, &key, (void **) &gi);
        if (r < 0)
                return r;
        if (r > 0) {
                r = exp_grow((void **) &e->groups, &e->cap_groups, e->n_groups + 1, sizeof *e->groups);
                if (r < 0) {
                        ep_hashmap_remove(e->group_by_key, &key, NULL);
                        return r;
                }
                *gi = (uint32_t) e->n_groups;
                e->groups[e->n_groups++] = (Group) {
                        .slot = key.slot,
                        .stack_index = key.stack_index,
                        .attrs = { key.attrs[0], key.attrs[1], key.attrs[2] },
                        .first = idx,
                        .last = idx,
                };
                e->slots[key.slot].n_groups++;
        } else {
                g = &e->groups[*gi];
                e->next_sample[g->last] = idx;
                g->last = idx;
        }
        g = &e->groups[*gi];
        g->count += s->count;
        g->n_timestamps += s->n_timestamps;
        for (size_t i = 0; i < s->n_timestamps; i++) {
                e->min_ts = MIN(e->min_ts, s->timestamps[i]);
                e->max_ts = MAX(e->max_ts, s->timestamps[i]);
        }
        return 0;
}

static PbSample *build_sample(Encoder *e, const Group *g, bool timestamps) {
        PbSample *s = EXP_NEW_MSG(&e->arena, PbSample, pb_sample_init);
        size_t n = 0;

        if (!s)
                return NULL;
        s->stack_index = g->stack_index;
        s->attribute_indices = exp_arena_alloc_array(&e->arena, SAMPLE_ATTRS, sizeof(int32_t));
        if (!s->attribute_indices)
                return NULL;
        for (size_t i = 0; i < SAMPLE_ATTRS; i++)
                if (g->attrs[i])
                        s->attribute_indices[s->n_attribute_indices++] = g->attrs[i];
        if (timestamps) {
                s->timestamps_unix_nano = exp_arena_alloc_array(&e->arena, g->n_timestamps, sizeof(uint64_t));
                if (!s->timestamps_unix_nano)
                        return NULL;
                for (size_t i = g->first; i != SIZE_MAX; i = e->next_sample[i]) {
                        const ExpSample *m = &e->iv->samples[i];
                        memcpy(s->timestamps_unix_nano + n, m->timestamps, m->n_timestamps * sizeof(uint64_t));
                        n += m->n_timestamps;
                }
                s->n_timestamps_unix_nano = n;
        } else {
                s->values = exp_arena_alloc(&e->arena, sizeof(int64_t));
                if (!s->values)
                        return NULL;
                s->values[0] = g->count > INT64_MAX ? INT64_MAX : (int64_t) g->count;
                s->n_values = 1;
        }
        return s;
}

static PbKeyValue *kv_new(Encoder *e, const char *key, const char *sval, int64_t ival) {
        PbKeyValue *kv = EXP_NEW_MSG(&e->arena, PbKeyValue, pb_key_value_init);
        PbAnyValue *v = EXP_NEW_MSG(&e->arena, PbAnyValue, pb_any_value_init);

        if (!kv || !v)
                return NULL;
        kv->key = (char *) key;
        kv->value = v;
        if (sval) {
                v->value_case = PB_ANY_VALUE_STRING;
                v->string_value = (char *) sval;
        } else {
                v->value_case = PB_ANY_VALUE_INT;
                v->int_value = ival;
        }
        return kv;
}

static bool strv_pairs_have(char *const *pairs, size_t n, const char *key) {
        for (size_t i = 0; i < n; i += 2)
                if (streq(pairs[i], key))
                        return true;
        return false;
}

static bool resource_has(const PbResource *res, const char *key) {
        for (size_t i = 0; i < res->n_attributes; i++)
                if (streq(res->attributes[i]->key, key))
                        return true;
        return false;
}

/* Moves the keys and string values of a Resource's attributes into the string table. */
static int resource_strings_by_index(Encoder *e, PbResource *res) {
        int r;

        for (size_t i = 0; i < res->n_attributes; i++) {
                PbKeyValue *kv = res->attributes[i];
                r = str_index(e, kv->key, &kv->key_strindex);
                if (r < 0)
                        return r;
                kv->key = (char *) "";
                if (kv->value->value_case != PB_ANY_VALUE_STRING)
                        continue;
                r = str_index(e, kv->value->string_value, &kv->value->string_value_strindex);
                if (r < 0)
                        return r;
                kv->value->value_case = PB_ANY_VALUE_STRINDEX;
        }
        return 0;
}

static PbResource *build_resource(Encoder *e, const Slot *slot, const char *host_name,
                                  char *const *user_attributes) {
        const ExpProcess *p = slot->process;
        PbResource *res = EXP_NEW_MSG(&e->arena, PbResource, pb_resource_init);
        const char *exe = p && p->exe_path && *p->exe_path ? p->exe_path : NULL;
        const char *name = NULL;
        size_t n_user = 0;

        if (!res)
                return NULL;
        while (user_attributes && user_attributes[n_user] && user_attributes[n_user + 1])
                n_user += 2;
        res->attributes = exp_arena_alloc_array(&e->arena, 5 + n_user / 2, sizeof(PbKeyValue *));
        if (!res->attributes)
                return NULL;
        if (exe)
                name = strrchr(exe, '/') ? strrchr(exe, '/') + 1 : exe;
        if ((!name || !*name) && p && p->comm && *p->comm)
                name = p->comm;

#define ADD(key, s, i)                                                  \
        do {                                                            \
                PbKeyValue *_kv = kv_new(e, (key), (s), (i));           \
                if (!_kv)                                               \
                        return NULL;                                    \
                res->attributes[res->n_attributes++] = _kv;             \
        } while (0)
        ADD("process.pid", NULL, slot->pid);
        if (name && *name)
                ADD("process.executable.name", name, 0);
        if (exe)
                ADD("process.executable.path", exe, 0);
        if (p && p->container_id && *p->container_id)
                ADD("container.id", p->container_id, 0);
        /* The user's host.name (a node name, say) wins over gethostname(). */
        if (host_name && *host_name && !strv_pairs_have(user_attributes, n_user, "host.name"))
                ADD("host.name", host_name, 0);
        for (size_t i = 0; i < n_user; i += 2)
                if (!resource_has(res, user_attributes[i]))
                        ADD(user_attributes[i], user_attributes[i + 1], 0);
#undef ADD
        if (e->strings_by_index && resource_strings_by_index(e, res) < 0)
                return NULL;
        return res;
}

static PbValueType *value_type(Encoder *e, const char *type, const char *unit) {
        PbValueType *vt = EXP_NEW_MSG(&e->arena, PbValueType, pb_value_type_init);
        if (!vt || str_index(e, type, &vt->type_strindex) < 0 || str_index(e, unit, &vt->unit_strindex) < 0)
                return NULL;
        return vt;
}

static PbResourceProfiles *build_resource_profiles(Encoder *e, Slot *slot, const OtlpEncodeOptions *o) {
        const ExpInterval *iv = e->iv;
        PbResourceProfiles *rp = EXP_NEW_MSG(&e->arena, PbResourceProfiles, pb_resource_profiles_init);
        PbScopeProfiles *sp = EXP_NEW_MSG(&e->arena, PbScopeProfiles, pb_scope_profiles_init);
        PbScope *scope = EXP_NEW_MSG(&e->arena, PbScope, pb_scope_init);
        PbProfile *prof = EXP_NEW_MSG(&e->arena, PbProfile, pb_profile_init);
        uint64_t start, end;

        if (!rp || !sp || !scope || !prof)
                return NULL;
        rp->resource = build_resource(e, slot, o->host_name, o->resource_attributes);
        if (!rp->resource)
                return NULL;
        scope->name = (char *) (o->scope_name ?: DEFAULT_SCOPE_NAME);
        scope->version = (char *) (o->scope_version ?: EP_VERSION_STRING);
        sp->scope = scope;

        prof->sample_type = value_type(e, "samples", "count");
        prof->period_type = value_type(e, "cpu", "nanoseconds");
        if (!prof->sample_type || !prof->period_type)
                return NULL;
        prof->period = iv->period_ns > INT64_MAX ? INT64_MAX : (int64_t) iv->period_ns;
        /* The window is the interval's, widened to cover every timestamp: samples reach the
         * collector a little after they were taken, so an interval's first timestamps can
         * precede its start. OTLP wants timestamps in [time, time + duration). */
        start = iv->start_ns;
        end = MAX(iv->end_ns, iv->start_ns);
        if (slot->timestamps && e->min_ts <= e->max_ts) {
                start = MIN(start, e->min_ts);
                end = MAX(end, e->max_ts < UINT64_MAX ? e->max_ts + 1 : e->max_ts);
        }
        prof->time_unix_nano = start;
        prof->duration_nano = end - start;
        prof->samples = slot->samples;
        prof->n_samples = slot->n_groups;

        sp->profiles = exp_arena_alloc(&e->arena, sizeof(PbProfile *));
        rp->scope_profiles = exp_arena_alloc(&e->arena, sizeof(PbScopeProfiles *));
        if (!sp->profiles || !rp->scope_profiles)
                return NULL;
        sp->profiles[0] = prof;
        sp->n_profiles = 1;
        rp->scope_profiles[0] = sp;
        rp->n_scope_profiles = 1;
        return rp;
}

static int encoder_init(Encoder *e, const ExpInterval *iv) {
        uint32_t i;
        PbMapping *m;
        PbLocation *l;
        PbFunction *f;
        PbKeyValueAndUnit *a;
        PbStack *s;
        int r;

        *e = (Encoder) { .iv = iv, .min_ts = UINT64_MAX, .max_ts = 0 };
        exp_intern_init(&e->strings);
        exp_intern_init(&e->functions);
        exp_intern_init(&e->mappings);
        exp_intern_init(&e->attributes);
        exp_intern_init(&e->stacks);
        e->frame_location = calloc(MAX(iv->n_frames, (size_t) 1), sizeof(int32_t));
        e->stack_result = calloc(MAX(iv->n_stacks, (size_t) 1), sizeof(int32_t));
        e->stack_done = calloc(MAX(iv->n_stacks, (size_t) 1), sizeof(bool));
        e->next_sample = malloc(MAX(iv->n_samples, (size_t) 1) * sizeof(size_t));
        e->slot_by_pid = ep_hashmap_new(sizeof(uint32_t), sizeof(uint32_t));
        e->group_by_key = ep_hashmap_new(sizeof(GroupKey), sizeof(uint32_t));
        if (!e->frame_location || !e->stack_result || !e->stack_done || !e->next_sample ||
            !e->slot_by_pid || !e->group_by_key)
                return -ENOMEM;
        for (size_t j = 0; j < iv->n_samples; j++)
                e->next_sample[j] = SIZE_MAX;

        /* Element 0 of every table: the zero value (index 0 means "unset" everywhere). The
         * de-duplicating tables get an empty key at 0 so their indices are table indices. */
        if ((r = exp_intern_put(&e->strings, "", 0, &i)) < 0 ||
            (r = exp_intern_put(&e->functions, "", 0, &i)) < 0 ||
            (r = exp_intern_put(&e->mappings, "", 0, &i)) < 0 ||
            (r = exp_intern_put(&e->attributes, "", 0, &i)) < 0 ||
            (r = exp_intern_put(&e->stacks, "", 0, &i)) < 0)
                return r;
        m = EXP_NEW_MSG(&e->arena, PbMapping, pb_mapping_init);
        l = EXP_NEW_MSG(&e->arena, PbLocation, pb_location_init);
        f = EXP_NEW_MSG(&e->arena, PbFunction, pb_function_init);
        a = EXP_NEW_MSG(&e->arena, PbKeyValueAndUnit, pb_key_value_and_unit_init);
        s = EXP_NEW_MSG(&e->arena, PbStack, pb_stack_init);
        if (!m || !l || !f || !a || !s)
                return -ENOMEM;
        if ((r = exp_ptrvec_push(&e->mapping_table, m)) < 0 || (r = exp_ptrvec_push(&e->location_table, l)) < 0 ||
            (r = exp_ptrvec_push(&e->function_table, f)) < 0 || (r = exp_ptrvec_push(&e->attribute_table, a)) < 0 ||
            (r = exp_ptrvec_push(&e->stack_table, s)) < 0)
                return r;
        return 0;
}

static void encoder_done(Encoder *e) {
        exp_arena_done(&e->arena);
        exp_intern_done(&e->strings);
        exp_intern_done(&e->functions);
        exp_intern_done(&e->mappings);
        exp_intern_done(&e->attributes);
        exp_intern_done(&e->stacks);
        free(e->mapping_table.v);
        free(e->location_table.v);
        free(e->function_table.v);
        free(e->attribute_table.v);
        free(e->stack_table.v);
        free(e->frame_location);
        free(e->stack_result);
        free(e->stack_done);
        free(e->next_sample);
        free(e->slots);
        free(e->groups);
        ep_hashmap_free(e->slot_by_pid);
        ep_hashmap_free(e->group_by_key);
}

static int encode(Encoder *e, const ExpInterval *iv, const OtlpEncodeOptions *o, void **ret_data,
                  size_t *ret_size, OtlpEncodeStats *st) {
        PbRequest req;
        PbDictionary *dict;
        PbLink *link;
        size_t size;
        void *buf;
        int r;

        r = encoder_init(e, iv);
        if (r < 0)
                return r;
        e->no_cpu = o->no_cpu;
        e->strings_by_index = o->strings_by_index;

        for (size_t i = 0; i < iv->n_samples; i++) {
                r = add_sample(e, i);
                if (r < 0)
                        return r;
        }
        if (e->n_groups == 0) {
                *ret_data = NULL;
                *ret_size = 0;
                return 0;
        }

        for (size_t i = 0; i < iv->n_processes; i++) {
                uint32_t *v = ep_hashmap_get(e->slot_by_pid, &iv->processes[i].pid);
                if (v)
                        e->slots[*v].process = &iv->processes[i];
        }
        for (size_t i = 0; i < e->n_slots; i++) {
                e->slots[i].samples = exp_arena_alloc_array(&e->arena, e->slots[i].n_groups, sizeof(PbSample *));
                if (!e->slots[i].samples)
                        return -ENOMEM;
        }
        for (size_t i = 0; i < e->n_groups; i++)
                if (e->groups[i].n_timestamps != e->groups[i].count)
                        e->slots[e->groups[i].slot].timestamps = false;
        for (size_t i = 0; i < e->n_groups; i++) {
                Slot *slot = &e->slots[e->groups[i].slot];
                PbSample *s = build_sample(e, &e->groups[i], slot->timestamps);
                if (!s)
                        return -ENOMEM;
                slot->samples[slot->filled++] = s;
                st->events += e->groups[i].count;
        }

        pb_request_init(&req);
        req.resource_profiles = exp_arena_alloc_array(&e->arena, e->n_slots, sizeof(PbResourceProfiles *));
        if (!req.resource_profiles)
                return -ENOMEM;
        for (size_t i = 0; i < e->n_slots; i++) {
                PbResourceProfiles *rp = build_resource_profiles(e, &e->slots[i], o);
                if (!rp)
                        return -ENOMEM;
                req.resource_profiles[req.n_resource_profiles++] = rp;
        }

        dict = EXP_NEW_MSG(&e->arena, PbDictionary, pb_dictionary_init);
        link = EXP_NEW_MSG(&e->arena, PbLink, pb_link_init);
        if (!dict || !link)
                return -ENOMEM;
        /* Index 0 of every table is the message's zero value: a Link with empty IDs (16/8 zero
         * bytes would be a link to trace 0, which the Profiles rules refuse). */
        dict->link_table = exp_arena_alloc(&e->arena, sizeof(PbLink *));
        dict->string_table = exp_arena_alloc_array(&e->arena, exp_intern_size(&e->strings), sizeof(char *));
        if (!dict->link_table || !dict->string_table)
                return -ENOMEM;
        dict->link_table[0] = link;
        dict->n_link_table = 1;
        for (size_t i = 0; i < exp_intern_size(&e->strings); i++)
                dict->string_table[i] = (char *) exp_intern_get(&e->strings, i);
        dict->n_string_table = exp_intern_size(&e->strings);
        dict->mapping_table = (PbMapping **) e->mapping_table.v;
        dict->n_mapping_table = e->mapping_table.n;
        dict->location_table = (PbLocation **) e->location_table.v;
        dict->n_location_table = e->location_table.n;
        dict->function_table = (PbFunction **) e->function_table.v;
        dict->n_function_table = e->function_table.n;
        dict->attribute_table = (PbKeyValueAndUnit **) e->attribute_table.v;
        dict->n_attribute_table = e->attribute_table.n;
        dict->stack_table = (PbStack **) e->stack_table.v;
        dict->n_stack_table = e->stack_table.n;
        req.dictionary = dict;

        size = pb_request_get_packed_size(&req);
        buf = malloc(MAX(size, (size_t) 1));
        if (!buf)
                return -ENOMEM;
        if (pb_request_pack(&req, buf) != size) {
                free(buf);
                return -EIO;
        }

        *st = (OtlpEncodeStats) {
                .resources = e->n_slots,
                .samples = e->n_groups,
                .stacks = e->stack_table.n,
                .locations = e->location_table.n,
                .functions = e->function_table.n,
                .mappings = e->mapping_table.n,
                .strings = dict->n_string_table,
                .attributes = e->attribute_table.n,
                .events = st->events,
        };
        *ret_data = buf;
        *ret_size = size;
        return 0;
}

int otlp_encode_interval(const ExpInterval *iv, const OtlpEncodeOptions *opts, void **ret_data,
                         size_t *ret_size, OtlpEncodeStats *ret_stats) {
        static const OtlpEncodeOptions defaults = {};
        OtlpEncodeStats st = {};
        Encoder e;
        int r;

        r = encode(&e, iv, opts ?: &defaults, ret_data, ret_size, &st);
        encoder_done(&e);
        if (r >= 0 && ret_stats)
                *ret_stats = st;
        return r;
}

/* ---- splitting ---- */

static int cmp_sample_pid(const void *a, const void *b) {
        const ExpSample *x = a, *y = b;
        return x->pid < y->pid ? -1 : x->pid > y->pid;
}

static int emit_part(const void *data, size_t size, const OtlpEncodeStats *part, otlp_emit_t emit,
                     void *userdata, OtlpEncodeStats *st) {
        st->resources += part->resources;
        st->samples += part->samples;
        st->events += part->events;
        st->requests++;
        st->bytes += size;
        return emit(data, size, userdata);
}

/* Where to cut samples sorted by pid: the process boundary nearest the middle, so each process
 * stays whole; within a single process the middle. */
static size_t split_point(const ExpInterval *iv) {
        size_t n = iv->n_samples, mid = n / 2;

        for (size_t d = 0; d <= mid; d++) {
                if (mid + d < n && iv->samples[mid + d].pid != iv->samples[mid + d - 1].pid)
                        return mid + d;
                if (mid - d > 0 && iv->samples[mid - d].pid != iv->samples[mid - d - 1].pid)
                        return mid - d;
        }
        return mid;
}

static int encode_split(const ExpInterval *iv, const OtlpEncodeOptions *opts, size_t max_size, otlp_emit_t emit,
                        void *userdata, OtlpEncodeStats *st);

/* Encodes both halves of iv (samples sorted by pid) separately. A half is a shallow view of
 * iv: the encoder only puts the dictionary entries its own samples use into each request. */
static int encode_halves(const ExpInterval *iv, const OtlpEncodeOptions *opts, size_t max_size, otlp_emit_t emit,
                         void *userdata, OtlpEncodeStats *st) {
        size_t cut = split_point(iv);
        ExpInterval lo = *iv, hi = *iv;
        int r;

        lo.n_samples = lo.cap_samples = cut;
        hi.samples = iv->samples + cut;
        hi.n_samples = hi.cap_samples = iv->n_samples - cut;
        r = encode_split(&lo, opts, max_size, emit, userdata, st);
        if (r < 0)
                return r;
        return encode_split(&hi, opts, max_size, emit, userdata, st);
}

static int encode_split(const ExpInterval *iv, const OtlpEncodeOptions *opts, size_t max_size, otlp_emit_t emit,
                        void *userdata, OtlpEncodeStats *st) {
        _cleanup_free_ void *data = NULL;
        OtlpEncodeStats part = {};
        size_t size = 0;
        int r;

        r = otlp_encode_interval(iv, opts, &data, &size, &part);
        if (r < 0 || size == 0)
                return r;
        /* One sample cannot be cut further: send it as it is. */
        if (size <= max_size || iv->n_samples < 2)
                return emit_part(data, size, &part, emit, userdata, st);
        free(TAKE_PTR(data));
        return encode_halves(iv, opts, max_size, emit, userdata, st);
}

int otlp_encode_interval_split(const ExpInterval *iv, const OtlpEncodeOptions *opts, size_t max_size,
                               otlp_emit_t emit, void *userdata, OtlpEncodeStats *ret_stats) {
        _cleanup_free_ ExpSample *samples = NULL;
        _cleanup_free_ void *data = NULL;
        OtlpEncodeStats st = {}, whole = {};
        ExpInterval view = *iv;
        size_t size = 0;
        int r;

        /* The common case, one request, encoded exactly as otlp_encode_interval() does. */
        r = otlp_encode_interval(iv, opts, &data, &size, &whole);
        if (r < 0 || size == 0)
                goto finish;
        if (size <= max_size || iv->n_samples < 2) {
                r = emit_part(data, size, &whole, emit, userdata, &st);
                goto finish;
        }
        free(TAKE_PTR(data));

        /* Too large: cut a copy of the sample array sorted by pid (the samples' own pointers
         * stay shared with iv). */
        samples = malloc(iv->n_samples * sizeof *samples);
        if (!samples)
                return -ENOMEM;
        memcpy(samples, iv->samples, iv->n_samples * sizeof *samples);
        qsort(samples, iv->n_samples, sizeof *samples, cmp_sample_pid);
        view.samples = samples;
        view.cap_samples = view.n_samples;
        r = encode_halves(&view, opts, max_size, emit, userdata, &st);
finish:
        if (r >= 0 && ret_stats)
                *ret_stats = st;
        return r;
}
