/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "pb-build.h"
#include "arena.h"
#include "file-id.h"
#include "intern.h"
#include "pprof.h"
#include "pprof/profile.pb-c.h"

typedef Perftools__Profiles__Profile PbProfile;
typedef Perftools__Profiles__ValueType PbValueType;
typedef Perftools__Profiles__Sample PbSample;
typedef Perftools__Profiles__Label PbLabel;
typedef Perftools__Profiles__Mapping PbMapping;
typedef Perftools__Profiles__Location PbLocation;
typedef Perftools__Profiles__Line PbLine;
typedef Perftools__Profiles__Function PbFunction;

#define KERNEL_MAPPING "[kernel.kallsyms]"
enum { MAX_LABELS = 4 };

typedef struct Encoder {
        const EpExportModel *m;
        ExpArena arena;
        ExpIntern strings, functions, mappings;
        ExpPtrVec mapping_table, location_table, function_table, sample_table;
        uint64_t *frame_location; /* per model frame: Location id, 0 until emitted */
} Encoder;

/* Index of s in the string table ("" and NULL are 0, as the format requires). */
static int str_index(Encoder *e, const char *s, int64_t *ret) {
        uint32_t i;
        int r = exp_string_index(&e->strings, s, &i);

        if (r >= 0)
                *ret = (int64_t) i;
        return r;
}

static int mapping_key(const ExpFrame *f, const uint8_t **ret_key, size_t *ret_len) {
        static const uint8_t zero[EP_FILE_ID_SIZE];

        if (f->kind == EP_FRAME_KERNEL) {
                *ret_key = (const uint8_t *) KERNEL_MAPPING;
                *ret_len = strlen(KERNEL_MAPPING);
                return 1;
        }
        if (f->kind != EP_FRAME_NATIVE || memcmp(f->file_id, zero, sizeof zero) == 0)
                return 0; /* JIT code, unwinding stops: no file */
        *ret_key = f->file_id;
        *ret_len = sizeof f->file_id;
        return 1;
}

static int new_mapping(Encoder *e, const ExpFrame *f, PbMapping **ret) {
        PbMapping *mp = EXP_NEW_MSG(&e->arena, PbMapping, perftools__profiles__mapping__init);
        char hex[2 * MAX(EP_BUILD_ID_MAX, EP_FILE_ID_SIZE) + 1];
        const char *filename = f->mapping_path;
        int r;

        if (!mp)
                return -ENOMEM;
        mp->id = e->mapping_table.n + 1;
        if (f->kind == EP_FRAME_KERNEL)
                filename = KERNEL_MAPPING;
        else if (!filename || !*filename) {
                /* pprof merges mappings without a name: keep files apart by their ID. */
                ep_file_id_to_hex(f->file_id, hex);
                filename = hex;
        }
        r = str_index(e, filename, &mp->filename);
        if (r < 0)
                return r;
        if (f->build_id_len > 0) {
                ep_hex_encode(f->build_id, MIN((size_t) f->build_id_len, (size_t) EP_BUILD_ID_MAX), hex);
                r = str_index(e, hex, &mp->build_id);
                if (r < 0)
                        return r;
        }
        /* Claimed until a frame without a name shows up (location_for). */
        mp->has_functions = mp->has_filenames = mp->has_line_numbers = mp->has_inline_frames = true;
        *ret = mp;
        return exp_ptrvec_push(&e->mapping_table, mp);
}

static int mapping_for(Encoder *e, const ExpFrame *f, PbMapping **ret) {
        const uint8_t *key;
        size_t len;
        uint32_t i;
        int r;

        if (!mapping_key(f, &key, &len)) {
                *ret = NULL;
                return 0;
        }
        r = exp_intern_put(&e->mappings, key, len, &i);
        if (r < 0)
                return r;
        if (r == 0) {
                *ret = e->mapping_table.v[i];
                return 0;
        }
        return new_mapping(e, f, ret);
}

static int function_for(Encoder *e, const char *name, const char *file, uint64_t *ret) {
        int64_t key[2];
        uint32_t i;
        int r;

        if ((r = str_index(e, name, &key[0])) < 0 || (r = str_index(e, file, &key[1])) < 0)
                return r;
        r = exp_intern_put(&e->functions, key, sizeof key, &i);
        if (r < 0)
                return r;
        *ret = (uint64_t) i + 1;
        if (r == 0)
                return 0;

        PbFunction *fn = EXP_NEW_MSG(&e->arena, PbFunction, perftools__profiles__function__init);
        if (!fn)
                return -ENOMEM;
        fn->id = *ret;
        fn->name = fn->system_name = key[0];
        fn->filename = key[1];
        return exp_ptrvec_push(&e->function_table, fn);
}

/* A Line for the i-th inline line of f, or for f as a whole when ln is NULL (the view's name). */
static int new_line(Encoder *e, const ExpFrame *f, const ExpLine *ln, PbLine **ret) {
        _cleanup_free_ char *view_name = NULL;
        const char *name = ln && ln->function && *ln->function ? ln->function : NULL;
        int r;

        if (!name) {
                EpStoredFrame stored = ep_export_stored_frame(f);
                const char *module;
                EpViewKind kind;
                r = ep_store_frame_name(&stored, NULL, &view_name, &module, &kind);
                if (r < 0)
                        return r;
                name = view_name;
        }
        PbLine *l = EXP_NEW_MSG(&e->arena, PbLine, perftools__profiles__line__init);
        if (!l)
                return -ENOMEM;
        r = function_for(e, name, ln ? ln->file : NULL, &l->function_id);
        if (r < 0)
                return r;
        l->line = ln ? ln->line : 0;
        *ret = l;
        return 0;
}

static void note_symbolization(PbMapping *mp, const ExpFrame *f) {
        bool named = f->n_lines > 0, files = named, lines = named;
        for (size_t i = 0; i < f->n_lines; i++) {
                named = named && f->lines[i].function && *f->lines[i].function;
                files = files && f->lines[i].file && *f->lines[i].file;
                lines = lines && f->lines[i].line > 0;
        }
        mp->has_functions = mp->has_functions && named;
        mp->has_inline_frames = mp->has_inline_frames && named;
        mp->has_filenames = mp->has_filenames && files;
        mp->has_line_numbers = mp->has_line_numbers && lines;
}

static int location_for(Encoder *e, uint32_t frame, uint64_t *ret) {
        const ExpFrame *f = &e->m->iv->frames[frame];
        PbMapping *mp;
        int r;

        if (e->frame_location[frame]) {
                *ret = e->frame_location[frame];
                return 0;
        }
        PbLocation *l = EXP_NEW_MSG(&e->arena, PbLocation, perftools__profiles__location__init);
        if (!l)
                return -ENOMEM;
        l->id = e->location_table.n + 1;
        r = mapping_for(e, f, &mp);
        if (r < 0)
                return r;
        if (mp) {
                l->mapping_id = mp->id;
                note_symbolization(mp, f);
        }
        /* The ELF address, with the mapping's build ID what pprof needs to symbolize. */
        l->address = f->kind == EP_FRAME_NATIVE && f->elf_addr ? f->elf_addr : f->addr;

        /* A native frame without lines stays without: pprof can symbolize it from the file. */
        size_t n = f->n_lines > 0 ? f->n_lines : f->kind == EP_FRAME_NATIVE ? 0 : 1;
        l->line = exp_arena_alloc_array(&e->arena, MAX(n, (size_t) 1), sizeof(PbLine *));
        if (!l->line)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                r = new_line(e, f, f->n_lines > 0 ? &f->lines[i] : NULL, &l->line[i]);
                if (r < 0)
                        return r;
        }
        l->n_line = n;
        *ret = e->frame_location[frame] = l->id;
        return exp_ptrvec_push(&e->location_table, l);
}

static int add_label(Encoder *e, PbSample *s, const char *key, const char *str, int64_t num) {
        PbLabel *l = EXP_NEW_MSG(&e->arena, PbLabel, perftools__profiles__label__init);
        int r;

        if (!l)
                return -ENOMEM;
        if ((r = str_index(e, key, &l->key)) < 0 || (r = str_index(e, str, &l->str)) < 0)
                return r;
        l->num = str ? 0 : num;
        s->label[s->n_label++] = l;
        return 0;
}

static int add_sample(Encoder *e, size_t idx) {
        const ExpInterval *iv = e->m->iv;
        const ExpSample *smp = &iv->samples[idx];
        const ExpStack *st = &iv->stacks[smp->stack];
        const ExpProcess *p = &iv->processes[e->m->sample_process[idx]];
        PbSample *s = EXP_NEW_MSG(&e->arena, PbSample, perftools__profiles__sample__init);
        int r;

        if (!s)
                return -ENOMEM;
        s->location_id = exp_arena_alloc_array(&e->arena, MAX(st->n_frames, (size_t) 1), sizeof(uint64_t));
        s->value = exp_arena_alloc_array(&e->arena, 2, sizeof(int64_t));
        s->label = exp_arena_alloc_array(&e->arena, MAX_LABELS, sizeof(PbLabel *));
        if (!s->location_id || !s->value || !s->label)
                return -ENOMEM;
        for (size_t i = 0; i < st->n_frames; i++) {
                r = location_for(e, st->frames[i], &s->location_id[i]);
                if (r < 0)
                        return r;
        }
        s->n_location_id = st->n_frames;
        s->value[0] = (int64_t) MIN(smp->count, (uint64_t) INT64_MAX);
        s->value[1] = (int64_t) MIN(e->m->cpu_ns[idx], (uint64_t) INT64_MAX);
        s->n_value = 2;
        if ((r = add_label(e, s, "pid", NULL, p->pid)) < 0 || (r = add_label(e, s, "tid", NULL, smp->tid)) < 0)
                return r;
        if (p->comm && *p->comm && (r = add_label(e, s, "comm", p->comm, 0)) < 0)
                return r;
        if (smp->thread_name && *smp->thread_name && (r = add_label(e, s, "thread", smp->thread_name, 0)) < 0)
                return r;
        return exp_ptrvec_push(&e->sample_table, s);
}

static int value_type(Encoder *e, const char *type, const char *unit, PbValueType **ret) {
        PbValueType *vt = EXP_NEW_MSG(&e->arena, PbValueType, perftools__profiles__value_type__init);
        int r;

        if (!vt)
                return -ENOMEM;
        if ((r = str_index(e, type, &vt->type)) < 0 || (r = str_index(e, unit, &vt->unit)) < 0)
                return r;
        *ret = vt;
        return 0;
}

static int build(Encoder *e, EpProgress *progress, PbProfile *ret) {
        const ExpInterval *iv = e->m->iv;
        PbValueType **types;
        uint32_t i;
        int r;

        perftools__profiles__profile__init(ret);
        e->frame_location = calloc(MAX(iv->n_frames, (size_t) 1), sizeof(uint64_t));
        types = exp_arena_alloc_array(&e->arena, 2, sizeof(PbValueType *));
        if (!e->frame_location || !types)
                return -ENOMEM;
        /* string_table[0] must be "". */
        r = exp_intern_put(&e->strings, "", 0, &i);
        if (r < 0)
                return r;

        if ((r = value_type(e, "samples", "count", &types[0])) < 0 ||
            (r = value_type(e, "cpu", "nanoseconds", &types[1])) < 0 ||
            (r = value_type(e, "cpu", "nanoseconds", &ret->period_type)) < 0)
                return r;
        ret->sample_type = types;
        ret->n_sample_type = 2;
        ret->period = (int64_t) MIN(iv->period_ns, (uint64_t) INT64_MAX);
        ret->time_nanos = (int64_t) MIN(iv->start_ns, (uint64_t) INT64_MAX);
        ret->duration_nanos = (int64_t) MIN(iv->end_ns - MIN(iv->start_ns, iv->end_ns), (uint64_t) INT64_MAX);

        for (size_t j = 0; j < iv->n_samples; j++) {
                r = add_sample(e, j);
                if (r < 0)
                        return r;
                ep_progress_add(progress, 0, 1);
        }

        ret->sample = (PbSample **) e->sample_table.v;
        ret->n_sample = e->sample_table.n;
        ret->mapping = (PbMapping **) e->mapping_table.v;
        ret->n_mapping = e->mapping_table.n;
        ret->location = (PbLocation **) e->location_table.v;
        ret->n_location = e->location_table.n;
        ret->function = (PbFunction **) e->function_table.v;
        ret->n_function = e->function_table.n;
        ret->string_table = exp_arena_alloc_array(&e->arena, exp_intern_size(&e->strings), sizeof(char *));
        if (!ret->string_table)
                return -ENOMEM;
        for (size_t j = 0; j < exp_intern_size(&e->strings); j++)
                ret->string_table[j] = (char *) exp_intern_get(&e->strings, (uint32_t) j);
        ret->n_string_table = exp_intern_size(&e->strings);
        return 0;
}

static void encoder_done(Encoder *e) {
        exp_arena_done(&e->arena);
        exp_intern_done(&e->strings);
        exp_intern_done(&e->functions);
        exp_intern_done(&e->mappings);
        free(e->mapping_table.v);
        free(e->location_table.v);
        free(e->function_table.v);
        free(e->sample_table.v);
        free(e->frame_location);
}

/* protobuf-c packs into this buffer, which compresses as it goes: the packed profile is never
 * in memory as a whole. */
typedef struct GzBuffer {
        ProtobufCBuffer base;
        gzFile gz;
        bool failed;
} GzBuffer;

static void gz_append(ProtobufCBuffer *b, size_t len, const uint8_t *data) {
        GzBuffer *g = (GzBuffer *) b;
        while (!g->failed && len > 0) {
                unsigned n = (unsigned) MIN(len, (size_t) 1 << 30);
                if (gzwrite(g->gz, data, n) != (int) n)
                        g->failed = true;
                data += n;
                len -= n;
        }
}

static int write_gzip(const PbProfile *p, FILE *out) {
        if (fflush(out) != 0)
                return -errno;
        /* gzclose() closes the descriptor it was given: give it its own. */
        int fd = dup(fileno(out));
        if (fd < 0)
                return -errno;
        GzBuffer g = { .base.append = gz_append, .gz = gzdopen(fd, "wb") };
        if (!g.gz) {
                close(fd);
                return -ENOMEM;
        }
        protobuf_c_message_pack_to_buffer(&p->base, &g.base);
        int r = gzclose(g.gz);
        return g.failed || r != Z_OK ? -EIO : 0;
}

int ep_pprof_write(const EpExportModel *m, FILE *out, EpProgress *progress) {
        Encoder e = { .m = m };
        PbProfile p;

        exp_intern_init(&e.strings);
        exp_intern_init(&e.functions);
        exp_intern_init(&e.mappings);
        int r = build(&e, progress, &p);
        if (r >= 0)
                r = write_gzip(&p, out);
        encoder_done(&e);
        return r;
}
