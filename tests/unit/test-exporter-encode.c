/* SPDX-License-Identifier: MIT */

/* Exporter core: the OTLP encoder (interval model → ExportProfilesServiceRequest, decoded
 * back with protobuf-c and checked table by table) and the export-ring decoder (valid and
 * malformed BEGIN..END groups). With an argument, writes the encoded request there for the
 * protoc and Python receiver checks (exporter/meson.build). */

#include <stdbool.h>

#include "export-intake.h"
#include "file-id.h"
#include "log.h"
#include "otlp-encode.h"
#include "otlp-pb.h"
#include "tests.h"
#include "wire-buf.h"

#define START_NS 1700000000000000000ULL
#define END_NS (START_NS + 2 * NSEC_PER_SEC)
#define PERIOD_NS 10101010ULL
#define EARLY_NS (START_NS - 5 * NSEC_PER_MSEC)

static const uint8_t FILE_A[16] = { 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88,
                                    0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x01 };
static const uint8_t FILE_B[16] = { 0xb0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15 };
static const uint8_t BUILD_ID_A[20] = { 0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6,
                                        7, 8, 9, 10, 11, 12, 13, 14, 15, 16 };
#define GO_BUILD_ID_A "Xy12abcdefghijklmnop/qrstuvwxyzABCDEFGHIJ/KLMNOPQRSTUVWXYZ0123/456789abcdefghijklmn"
#define ELF_BIAS_A 0x400000 /* FILE_A's ELF address = file offset + this */

static char *xstrdup(const char *s) {
        char *p = strdup(s);
        ASSERT_TRUE(p);
        return p;
}

static void add_frame(ExpInterval *iv, uint8_t kind, const uint8_t *file_id, const char *path,
                      uint64_t addr, size_t n_lines, const char *const *names) {
        ExpFrame *f = exp_interval_add_frame(iv);
        ASSERT_TRUE(f);
        f->kind = kind;
        if (file_id) {
                memcpy(f->file_id, file_id, 16);
                memcpy(f->htlhash, file_id, 16);
        }
        if (file_id == FILE_B)
                f->file_id[15] ^= 0xff; /* a file a user owns: its ID is not its htlhash */
        if (file_id == FILE_A) {
                memcpy(f->build_id, BUILD_ID_A, sizeof BUILD_ID_A);
                f->build_id_len = sizeof BUILD_ID_A;
                f->go_build_id = xstrdup(GO_BUILD_ID_A);
                f->elf_addr = addr + ELF_BIAS_A; /* FILE_B's frames stay unsymbolized */
        }
        f->mapping_path = path ? xstrdup(path) : NULL;
        f->addr = addr;
        f->lines = calloc(n_lines ?: 1, sizeof *f->lines);
        ASSERT_TRUE(f->lines);
        for (size_t i = 0; i < n_lines; i++) {
                f->lines[i].function = xstrdup(names[i]);
                f->lines[i].file = xstrdup(kind == EP_FRAME_KERNEL ? "" : "app.c");
                f->lines[i].line = (uint32_t) (10 * (i + 1));
        }
        f->n_lines = n_lines;
}

static void add_stack(ExpInterval *iv, size_t n, const uint32_t *frames) {
        ExpStack *s = exp_interval_add_stack(iv);
        ASSERT_TRUE(s);
        s->frames = malloc(n * sizeof(uint32_t));
        ASSERT_TRUE(s->frames);
        memcpy(s->frames, frames, n * sizeof(uint32_t));
        s->n_frames = n;
}

static void add_process(ExpInterval *iv, uint32_t pid, const char *comm, const char *exe, const char *container) {
        ExpProcess *p = exp_interval_add_process(iv);
        ASSERT_TRUE(p);
        p->pid = pid;
        p->comm = xstrdup(comm);
        p->exe_path = xstrdup(exe);
        p->container_id = container ? xstrdup(container) : NULL;
}

static void add_sample(ExpInterval *iv, uint32_t pid, uint32_t tid, uint32_t cpu, const char *thread,
                       uint32_t stack, uint64_t count, size_t n_ts) {
        ExpSample *s = exp_interval_add_sample(iv);
        ASSERT_TRUE(s);
        *s = (ExpSample) { .pid = pid, .tid = tid, .cpu = cpu, .stack = stack, .count = count };
        s->thread_name = thread ? xstrdup(thread) : NULL;
        s->timestamps = calloc(n_ts ?: 1, sizeof(uint64_t));
        ASSERT_TRUE(s->timestamps);
        for (size_t i = 0; i < n_ts; i++)
                s->timestamps[i] = START_NS + (iv->n_samples * 10 + i) * PERIOD_NS;
        s->n_timestamps = n_ts;
}

/* Two processes sharing frames (plus one without a PROCESS record), inline lines, an
 * unsymbolized frame, a kernel frame; 12 events. */
static ExpInterval *make_interval(void) {
        static const char *const inl[] = { "inlined_leaf", "outer_fn" };
        static const char *const mainf[] = { "main" };
        static const char *const kern[] = { "do_syscall_64" };
        ExpInterval *iv = exp_interval_new(7, START_NS, END_NS, PERIOD_NS);

        ASSERT_TRUE(iv);
        add_frame(iv, EP_FRAME_NATIVE, FILE_A, "/usr/bin/app", 0x1234, 2, inl);       /* 0 */
        add_frame(iv, EP_FRAME_NATIVE, FILE_A, "/usr/bin/app", 0x2000, 1, mainf);     /* 1 */
        add_frame(iv, EP_FRAME_NATIVE, FILE_B, "/lib/libc.so.6", 0x500, 0, NULL);     /* 2 */
        add_frame(iv, EP_FRAME_KERNEL, NULL, NULL, 0xffffffff81000000ULL, 1, kern);  /* 3 */
        add_stack(iv, 3, (const uint32_t[]) { 3, 0, 1 });
        add_stack(iv, 2, (const uint32_t[]) { 2, 1 });
        add_stack(iv, 2, (const uint32_t[]) { 0, 1 });
        add_stack(iv, 2, (const uint32_t[]) { 2, 1 }); /* same as stack 1 */
        add_process(iv, 100, "app", "/usr/bin/app", "");
        add_process(iv, 200, "app2", "/usr/bin/app", "abc123");
        add_sample(iv, 100, 101, 0, "worker", 0, 3, 3);
        add_sample(iv, 100, 101, 0, "worker", 0, 2, 2); /* merges with the one above */
        add_sample(iv, 100, 102, 1, "main", 2, 1, 1);
        add_sample(iv, 200, 200, 1, "app2", 3, 4, 4);
        iv->samples[iv->n_samples - 1].timestamps[0] = EARLY_NS; /* taken before the interval began */
        add_sample(iv, 300, 300, 0, NULL, 1, 2, 1); /* fewer timestamps than events */
        return iv;
}

static const char *str(const PbDictionary *d, int32_t i) {
        ASSERT_TRUE(i >= 0 && (size_t) i < d->n_string_table);
        return d->string_table[i];
}

static const PbKeyValueAndUnit *attr(const PbDictionary *d, int32_t i) {
        ASSERT_TRUE(i > 0 && (size_t) i < d->n_attribute_table);
        return d->attribute_table[i];
}

/* The attribute with that key among indices, or NULL. */
static const PbKeyValueAndUnit *find_attr(const PbDictionary *d, size_t n, const int32_t *indices, const char *key) {
        const PbKeyValueAndUnit *found = NULL;
        for (size_t i = 0; i < n; i++) {
                const PbKeyValueAndUnit *a = attr(d, indices[i]);
                if (streq(str(d, a->key_strindex), key)) {
                        ASSERT_TRUE(!found); /* keys unique within one list */
                        found = a;
                }
        }
        return found;
}

static const char *find_str_attr(const PbDictionary *d, size_t n, const int32_t *indices, const char *key) {
        const PbKeyValueAndUnit *a = find_attr(d, n, indices, key);
        if (!a)
                return NULL;
        ASSERT_TRUE(a->value);
        ASSERT_EQ(a->value->value_case, PB_ANY_VALUE_STRING);
        return a->value->string_value;
}

static const PbKeyValue *resource_attr(const PbResource *r, const char *key) {
        for (size_t i = 0; i < r->n_attributes; i++)
                if (streq(r->attributes[i]->key, key))
                        return r->attributes[i];
        return NULL;
}

static void check_tables(const PbDictionary *d) {
        /* Element 0 of every table is present and zero. */
        ASSERT_TRUE(d->n_string_table > 0);
        ASSERT_STREQ(d->string_table[0], "");
        ASSERT_TRUE(d->n_mapping_table > 0);
        ASSERT_EQ(d->mapping_table[0]->memory_start, 0);
        ASSERT_EQ(d->mapping_table[0]->memory_limit, 0);
        ASSERT_EQ(d->mapping_table[0]->file_offset, 0);
        ASSERT_EQ(d->mapping_table[0]->filename_strindex, 0);
        ASSERT_EQ(d->mapping_table[0]->n_attribute_indices, 0);
        ASSERT_TRUE(d->n_location_table > 0);
        ASSERT_EQ(d->location_table[0]->mapping_index, 0);
        ASSERT_EQ(d->location_table[0]->address, 0);
        ASSERT_EQ(d->location_table[0]->n_lines, 0);
        ASSERT_EQ(d->location_table[0]->n_attribute_indices, 0);
        ASSERT_TRUE(d->n_function_table > 0);
        ASSERT_EQ(d->function_table[0]->name_strindex, 0);
        ASSERT_EQ(d->function_table[0]->system_name_strindex, 0);
        ASSERT_EQ(d->function_table[0]->filename_strindex, 0);
        ASSERT_EQ(d->function_table[0]->start_line, 0);
        ASSERT_EQ(d->n_link_table, 1);
        ASSERT_EQ(d->link_table[0]->trace_id.len, 0);
        ASSERT_EQ(d->link_table[0]->span_id.len, 0);
        ASSERT_TRUE(d->n_attribute_table > 0);
        ASSERT_EQ(d->attribute_table[0]->key_strindex, 0);
        ASSERT_TRUE(!d->attribute_table[0]->value);
        ASSERT_EQ(d->attribute_table[0]->unit_strindex, 0);
        ASSERT_TRUE(d->n_stack_table > 0);
        ASSERT_EQ(d->stack_table[0]->n_location_indices, 0);

        /* Strings, functions, attributes, stacks and mappings are de-duplicated. */
        for (size_t i = 0; i < d->n_string_table; i++)
                for (size_t j = i + 1; j < d->n_string_table; j++)
                        ASSERT_TRUE(!streq(d->string_table[i], d->string_table[j]));
        for (size_t i = 1; i < d->n_function_table; i++) {
                const PbFunction *f = d->function_table[i];
                ASSERT_TRUE(f->name_strindex || f->filename_strindex || f->system_name_strindex);
                str(d, f->name_strindex);
                str(d, f->filename_strindex);
                for (size_t j = i + 1; j < d->n_function_table; j++)
                        ASSERT_TRUE(f->name_strindex != d->function_table[j]->name_strindex ||
                                    f->filename_strindex != d->function_table[j]->filename_strindex);
        }
        for (size_t i = 1; i < d->n_attribute_table; i++) {
                const PbKeyValueAndUnit *a = d->attribute_table[i];
                ASSERT_TRUE(a->key_strindex > 0);
                str(d, a->key_strindex);
                ASSERT_TRUE(a->value);
                for (size_t j = i + 1; j < d->n_attribute_table; j++) {
                        const PbKeyValueAndUnit *b = d->attribute_table[j];
                        if (a->key_strindex != b->key_strindex || a->value->value_case != b->value->value_case)
                                continue;
                        if (a->value->value_case == PB_ANY_VALUE_STRING)
                                ASSERT_TRUE(!streq(a->value->string_value, b->value->string_value));
                        else
                                ASSERT_TRUE(a->value->int_value != b->value->int_value);
                }
        }
        for (size_t i = 1; i < d->n_stack_table; i++) {
                const PbStack *s = d->stack_table[i];
                ASSERT_TRUE(s->n_location_indices > 0);
                for (size_t k = 0; k < s->n_location_indices; k++)
                        ASSERT_TRUE(s->location_indices[k] > 0 && (size_t) s->location_indices[k] < d->n_location_table);
                for (size_t j = i + 1; j < d->n_stack_table; j++)
                        ASSERT_TRUE(s->n_location_indices != d->stack_table[j]->n_location_indices ||
                                    memcmp(s->location_indices, d->stack_table[j]->location_indices,
                                           s->n_location_indices * sizeof(int32_t)) != 0);
        }
        for (size_t i = 1; i < d->n_mapping_table; i++) {
                const PbMapping *m = d->mapping_table[i];
                ASSERT_TRUE(m->filename_strindex > 0);
                str(d, m->filename_strindex);
                ASSERT_TRUE(find_str_attr(d, m->n_attribute_indices, m->attribute_indices,
                                          "process.executable.build_id.htlhash"));
        }
        for (size_t i = 1; i < d->n_location_table; i++) {
                const PbLocation *l = d->location_table[i];
                ASSERT_TRUE(l->mapping_index >= 0 && (size_t) l->mapping_index < d->n_mapping_table);
                for (size_t k = 0; k < l->n_lines; k++)
                        ASSERT_TRUE(l->lines[k]->function_index >= 0 &&
                                    (size_t) l->lines[k]->function_index < d->n_function_table);
                ASSERT_TRUE(find_str_attr(d, l->n_attribute_indices, l->attribute_indices, "profile.frame.type"));
        }
}

static const PbLocation *location(const PbDictionary *d, int32_t i) {
        ASSERT_TRUE(i > 0 && (size_t) i < d->n_location_table);
        return d->location_table[i];
}

static const char *line_function(const PbDictionary *d, const PbLine *l) {
        ASSERT_TRUE(l->function_index > 0 && (size_t) l->function_index < d->n_function_table);
        return str(d, d->function_table[l->function_index]->name_strindex);
}

static void check_request(const PbRequest *req) {
        const PbDictionary *d = req->dictionary;
        uint64_t events = 0;
        bool seen[3] = {};

        ASSERT_TRUE(d);
        check_tables(d);
        ASSERT_EQ(d->n_mapping_table, 3);  /* zero, app, libc */
        ASSERT_EQ(d->n_location_table, 5); /* zero + 4 frames */
        ASSERT_EQ(d->n_function_table, 5); /* zero, inlined_leaf, outer_fn, main, do_syscall_64 */
        ASSERT_EQ(d->n_stack_table, 4);    /* zero + 3 distinct */

        ASSERT_EQ(req->n_resource_profiles, 3);
        for (size_t r = 0; r < req->n_resource_profiles; r++) {
                const PbResourceProfiles *rp = req->resource_profiles[r];
                const PbKeyValue *pid_kv, *kv;
                const PbProfile *p;

                ASSERT_TRUE(rp->resource);
                pid_kv = resource_attr(rp->resource, "process.pid");
                ASSERT_TRUE(pid_kv && pid_kv->value->value_case == PB_ANY_VALUE_INT);
                kv = resource_attr(rp->resource, "host.name");
                ASSERT_TRUE(kv);
                ASSERT_STREQ(kv->value->string_value, "testhost");
                ASSERT_EQ(rp->n_scope_profiles, 1);
                ASSERT_STREQ(rp->scope_profiles[0]->scope->name, "ebpf-profiler");
                ASSERT_TRUE(*rp->scope_profiles[0]->scope->version);
                ASSERT_EQ(rp->scope_profiles[0]->n_profiles, 1);
                p = rp->scope_profiles[0]->profiles[0];

                ASSERT_STREQ(str(d, p->sample_type->type_strindex), "samples");
                ASSERT_STREQ(str(d, p->sample_type->unit_strindex), "count");
                ASSERT_STREQ(str(d, p->period_type->type_strindex), "cpu");
                ASSERT_STREQ(str(d, p->period_type->unit_strindex), "nanoseconds");
                ASSERT_EQ(p->period, PERIOD_NS);
                /* The window covers the interval and every timestamp sent. */
                if (p->n_samples && p->samples[0]->n_timestamps_unix_nano) {
                        ASSERT_TRUE(p->time_unix_nano == EARLY_NS);
                        ASSERT_TRUE(p->duration_nano == END_NS - EARLY_NS);
                } else {
                        ASSERT_TRUE(p->time_unix_nano == START_NS);
                        ASSERT_TRUE(p->duration_nano == END_NS - START_NS);
                }

                for (size_t i = 0; i < p->n_samples; i++) {
                        const PbSample *s = p->samples[i];
                        ASSERT_TRUE(s->stack_index > 0 && (size_t) s->stack_index < d->n_stack_table);
                        ASSERT_EQ(s->link_index, 0);
                        for (size_t k = 0; k < s->n_attribute_indices; k++)
                                attr(d, s->attribute_indices[k]);
                        ASSERT_TRUE(find_attr(d, s->n_attribute_indices, s->attribute_indices, "thread.id"));
                        ASSERT_TRUE(find_attr(d, s->n_attribute_indices, s->attribute_indices, "cpu.logical_number"));
                        if (s->n_timestamps_unix_nano) {
                                ASSERT_EQ(s->n_values, 0);
                                events += s->n_timestamps_unix_nano;
                                for (size_t k = 0; k < s->n_timestamps_unix_nano; k++)
                                        ASSERT_TRUE(s->timestamps_unix_nano[k] >= p->time_unix_nano &&
                                                    s->timestamps_unix_nano[k] < p->time_unix_nano + p->duration_nano);
                        } else {
                                ASSERT_EQ(s->n_values, 1);
                                events += (uint64_t) s->values[0];
                        }
                }

                switch (pid_kv->value->int_value) {
                case 100: {
                        seen[0] = true;
                        ASSERT_STREQ(resource_attr(rp->resource, "process.executable.name")->value->string_value, "app");
                        ASSERT_STREQ(resource_attr(rp->resource, "process.executable.path")->value->string_value,
                                     "/usr/bin/app");
                        ASSERT_TRUE(!resource_attr(rp->resource, "container.id"));
                        ASSERT_EQ(p->n_samples, 2);
                        /* The merged sample: 5 timestamps, worker thread on CPU 0, kernel leaf. */
                        const PbSample *s = p->samples[0];
                        ASSERT_EQ(s->n_timestamps_unix_nano, 5);
                        ASSERT_STREQ(find_str_attr(d, s->n_attribute_indices, s->attribute_indices, "thread.name"),
                                     "worker");
                        ASSERT_EQ(find_attr(d, s->n_attribute_indices, s->attribute_indices, "thread.id")->value->int_value,
                                  101);
                        ASSERT_EQ(find_attr(d, s->n_attribute_indices, s->attribute_indices, "cpu.logical_number")
                                          ->value->int_value, 0);
                        const PbStack *st = d->stack_table[s->stack_index];
                        ASSERT_EQ(st->n_location_indices, 3);
                        const PbLocation *k = location(d, st->location_indices[0]);
                        ASSERT_STREQ(find_str_attr(d, k->n_attribute_indices, k->attribute_indices,
                                                   "profile.frame.type"), "kernel");
                        ASSERT_EQ(k->mapping_index, 0);
                        ASSERT_TRUE(k->address == 0xffffffff81000000ULL);
                        ASSERT_STREQ(line_function(d, k->lines[0]), "do_syscall_64");
                        const PbLocation *n = location(d, st->location_indices[1]);
                        ASSERT_STREQ(find_str_attr(d, n->n_attribute_indices, n->attribute_indices,
                                                   "profile.frame.type"), "native");
                        ASSERT_EQ(n->address, 0x1234 + ELF_BIAS_A); /* the ELF address, once known */
                        ASSERT_EQ(n->n_lines, 2);
                        ASSERT_STREQ(line_function(d, n->lines[0]), "inlined_leaf");
                        ASSERT_STREQ(line_function(d, n->lines[1]), "outer_fn");
                        ASSERT_EQ(n->lines[1]->line, 20);
                        ASSERT_STREQ(str(d, d->function_table[n->lines[0]->function_index]->filename_strindex), "app.c");
                        const PbMapping *m = d->mapping_table[n->mapping_index];
                        ASSERT_STREQ(str(d, m->filename_strindex), "/usr/bin/app");
                        ASSERT_STREQ(find_str_attr(d, m->n_attribute_indices, m->attribute_indices,
                                                   "process.executable.build_id.htlhash"),
                                     "112233445566778899aabbccddeeff01");
                        ASSERT_STREQ(find_str_attr(d, m->n_attribute_indices, m->attribute_indices,
                                                   "process.executable.build_id.gnu"),
                                     "deadbeef0102030405060708090a0b0c0d0e0f10");
                        ASSERT_STREQ(find_str_attr(d, m->n_attribute_indices, m->attribute_indices,
                                                   "process.executable.build_id.go"),
                                     GO_BUILD_ID_A);
                        break;
                }
                case 200: {
                        seen[1] = true;
                        ASSERT_STREQ(resource_attr(rp->resource, "container.id")->value->string_value, "abc123");
                        ASSERT_EQ(p->n_samples, 1);
                        const PbSample *s = p->samples[0];
                        ASSERT_EQ(s->n_timestamps_unix_nano, 4);
                        /* Stack 3 of the model equals stack 1: same stack index as pid 300's. */
                        const PbStack *st = d->stack_table[s->stack_index];
                        ASSERT_EQ(st->n_location_indices, 2);
                        const PbLocation *l = location(d, st->location_indices[0]);
                        ASSERT_EQ(l->n_lines, 0); /* unsymbolized libc frame */
                        const PbMapping *m = d->mapping_table[l->mapping_index];
                        ASSERT_STREQ(str(d, m->filename_strindex), "/lib/libc.so.6");
                        ASSERT_TRUE(!find_attr(d, m->n_attribute_indices, m->attribute_indices,
                                               "process.executable.build_id.gnu"));
                        ASSERT_TRUE(!find_attr(d, m->n_attribute_indices, m->attribute_indices,
                                               "process.executable.build_id.go"));
                        ASSERT_STREQ(find_str_attr(d, m->n_attribute_indices, m->attribute_indices,
                                                   "process.executable.build_id.htlhash"),
                                     "b00102030405060708090a0b0c0d0e0f");
                        ASSERT_EQ(l->address, 0x500); /* no ELF address: the file offset */
                        break;
                }
                case 300: {
                        seen[2] = true;
                        ASSERT_TRUE(!resource_attr(rp->resource, "process.executable.path"));
                        ASSERT_EQ(p->n_samples, 1);
                        const PbSample *s = p->samples[0];
                        ASSERT_EQ(s->n_timestamps_unix_nano, 0);
                        ASSERT_EQ(s->n_values, 1);
                        ASSERT_EQ(s->values[0], 2);
                        ASSERT_TRUE(!find_attr(d, s->n_attribute_indices, s->attribute_indices, "thread.name"));
                        break;
                }
                default:
                        ASSERT_TRUE(false);
                }
        }
        ASSERT_TRUE(seen[0] && seen[1] && seen[2]);
        ASSERT_EQ(events, 12);
}

static void test_encode(const char *out_path) {
        _cleanup_(exp_interval_freep) ExpInterval *iv = make_interval();
        const OtlpEncodeOptions opts = { .host_name = "testhost" };
        _cleanup_free_ void *data = NULL;
        OtlpEncodeStats st;
        PbRequest *req;
        size_t size;

        ASSERT_OK(otlp_encode_interval(iv, &opts, &data, &size, &st));
        ASSERT_TRUE(data && size > 0);
        ASSERT_EQ(st.resources, 3);
        ASSERT_EQ(st.events, 12);
        req = pb_request_unpack(NULL, size, data);
        ASSERT_TRUE(req);
        check_request(req);
        pb_request_free_unpacked(req, NULL);

        if (out_path) {
                _cleanup_fclose_ FILE *f = fopen(out_path, "we");
                ASSERT_TRUE(f);
                ASSERT_EQ(fwrite(data, 1, size, f), size);
        }
}

/* The same interval with strings by index: every attribute string and resource key is a
 * string_table reference naming what the plain encoding spells out. */
static void test_encode_strings_by_index(void) {
        _cleanup_(exp_interval_freep) ExpInterval *iv = make_interval();
        const OtlpEncodeOptions plain_opts = { .host_name = "testhost" },
                                opts = { .host_name = "testhost", .strings_by_index = true };
        _cleanup_free_ void *plain_data = NULL, *data = NULL;
        size_t plain_size, size, n_strindex = 0;
        PbRequest *plain, *req;

        ASSERT_OK(otlp_encode_interval(iv, &plain_opts, &plain_data, &plain_size, NULL));
        ASSERT_OK(otlp_encode_interval(iv, &opts, &data, &size, NULL));
        plain = pb_request_unpack(NULL, plain_size, plain_data);
        req = pb_request_unpack(NULL, size, data);
        ASSERT_TRUE(plain && req);

        const PbDictionary *pd = plain->dictionary, *d = req->dictionary;
        ASSERT_EQ(d->n_attribute_table, pd->n_attribute_table);
        for (size_t i = 1; i < d->n_attribute_table; i++) {
                const PbAnyValue *pv = pd->attribute_table[i]->value, *v = d->attribute_table[i]->value;
                ASSERT_STREQ(str(d, d->attribute_table[i]->key_strindex), str(pd, pd->attribute_table[i]->key_strindex));
                if (pv->value_case != PB_ANY_VALUE_STRING) {
                        ASSERT_EQ(v->value_case, pv->value_case);
                        continue;
                }
                ASSERT_EQ(v->value_case, PB_ANY_VALUE_STRINDEX);
                ASSERT_STREQ(str(d, v->string_value_strindex), pv->string_value);
                n_strindex++;
        }
        ASSERT_TRUE(n_strindex > 0);
        ASSERT_EQ(req->n_resource_profiles, plain->n_resource_profiles);
        for (size_t i = 0; i < req->n_resource_profiles; i++) {
                const PbResource *pr = plain->resource_profiles[i]->resource, *r = req->resource_profiles[i]->resource;
                ASSERT_EQ(r->n_attributes, pr->n_attributes);
                for (size_t j = 0; j < r->n_attributes; j++) {
                        const PbKeyValue *pkv = pr->attributes[j], *kv = r->attributes[j];
                        ASSERT_STREQ(kv->key, "");
                        ASSERT_STREQ(str(d, kv->key_strindex), pkv->key);
                        if (pkv->value->value_case == PB_ANY_VALUE_STRING)
                                ASSERT_STREQ(str(d, kv->value->string_value_strindex), pkv->value->string_value);
                        else
                                ASSERT_EQ(kv->value->int_value, pkv->value->int_value);
                }
        }
        pb_request_free_unpacked(plain, NULL);
        pb_request_free_unpacked(req, NULL);
}

static void test_encode_empty(void) {
        _cleanup_(exp_interval_freep) ExpInterval *iv = exp_interval_new(1, START_NS, END_NS, PERIOD_NS);
        void *data = (void *) 1;
        size_t size = 1;

        ASSERT_OK(otlp_encode_interval(iv, NULL, &data, &size, NULL));
        ASSERT_TRUE(!data);
        ASSERT_EQ(size, 0);
}

static void test_encode_bad_model(void) {
        _cleanup_(exp_interval_freep) ExpInterval *iv = make_interval();
        void *data = NULL;
        size_t size = 0;

        iv->samples[0].stack = 99; /* out of range: the encoder refuses instead of reading past */
        ASSERT_EQ(otlp_encode_interval(iv, NULL, &data, &size, NULL), -EINVAL);
        iv->samples[0].stack = 0;
        iv->stacks[0].frames[1] = 1000;
        ASSERT_EQ(otlp_encode_interval(iv, NULL, &data, &size, NULL), -EINVAL);
}

/* ---- the export-ring decoder ---- */

static int feed(ExpIntake *in, uint16_t type, EpWriter *w, ExpInterval **ret) {
        int r;
        ASSERT_TRUE(!w->overflow);
        r = exp_intake_feed(in, type, w->data, w->size, ret);
        ep_writer_reset(w);
        return r;
}

static void put_frame(EpWriter *w, uint32_t ref, uint8_t kind, const uint8_t *file_id, uint64_t addr,
                      uint16_t n_lines, const char *fn) {
        static const uint8_t zero[16];
        ep_put_u32(w, ref);
        ep_put_u8(w, kind);
        ep_put_bytes(w, file_id ?: zero, 16);
        ep_put_bytes(w, file_id ?: zero, 16); /* htlhash */
        ep_put_blob(w, file_id == FILE_A ? BUILD_ID_A : NULL, file_id == FILE_A ? sizeof BUILD_ID_A : 0);
        ep_put_str(w, file_id == FILE_A ? GO_BUILD_ID_A : "");
        ep_put_str(w, file_id ? "/usr/bin/app" : "");
        ep_put_u64(w, addr);
        ep_put_u64(w, file_id == FILE_A ? addr + ELF_BIAS_A : 0);
        ep_put_u16(w, n_lines);
        for (uint16_t i = 0; i < n_lines; i++) {
                ep_put_str(w, fn);
                ep_put_str(w, "app.c");
                ep_put_u32(w, 42 + i);
        }
}

static void put_begin(EpWriter *w, uint64_t id) {
        ep_put_u64(w, id);
        ep_put_u64(w, START_NS);
        ep_put_u64(w, END_NS);
        ep_put_u64(w, PERIOD_NS);
}

static void put_sample(EpWriter *w, uint32_t pid, uint32_t stack_ref, uint64_t count, uint32_t n_ts) {
        ep_put_u32(w, pid);
        ep_put_u32(w, pid + 1);
        ep_put_u32(w, 3);
        ep_put_str(w, "thr");
        ep_put_u32(w, stack_ref);
        ep_put_u64(w, count);
        ep_put_u32(w, n_ts);
        for (uint32_t i = 0; i < n_ts; i++)
                ep_put_u64(w, START_NS + i);
}

/* A complete valid group; returns the interval. */
static ExpInterval *feed_group(ExpIntake *in, EpWriter *w, uint64_t id, int begin_result) {
        ExpInterval *iv = NULL;

        put_begin(w, id);
        ASSERT_EQ(feed(in, EP_MSG_EXP_BEGIN, w, &iv), begin_result);
        ep_put_u32(w, 4242);
        ep_put_str(w, "prog");
        ep_put_str(w, "/usr/bin/prog");
        ep_put_str(w, "");
        ASSERT_EQ(feed(in, EP_MSG_EXP_PROCESS, w, &iv), 0);
        put_frame(w, 10, EP_FRAME_NATIVE, FILE_A, 0x100, 2, "leaf");
        ASSERT_EQ(feed(in, EP_MSG_EXP_FRAME, w, &iv), 0);
        put_frame(w, 11, EP_FRAME_KERNEL, NULL, 0xffffffff81001000ULL, 0, NULL);
        ASSERT_EQ(feed(in, EP_MSG_EXP_FRAME, w, &iv), 0);
        put_frame(w, 12, EP_FRAME_NATIVE, FILE_A, 0x100, 1, "same-frame-again");
        ASSERT_EQ(feed(in, EP_MSG_EXP_FRAME, w, &iv), 0);
        ep_put_u32(w, 77);
        ep_put_u32(w, 3);
        ep_put_u32(w, 11);
        ep_put_u32(w, 10);
        ep_put_u32(w, 12);
        ASSERT_EQ(feed(in, EP_MSG_EXP_STACK, w, &iv), 0);
        put_sample(w, 4242, 77, 3, 3);
        ASSERT_EQ(feed(in, EP_MSG_EXP_SAMPLE, w, &iv), 0);
        ep_put_u64(w, id);
        ASSERT_EQ(feed(in, EP_MSG_EXP_END, w, &iv), 1);
        ASSERT_TRUE(iv);
        return iv;
}

static ExpInterval *feed_valid_group(ExpIntake *in, EpWriter *w, uint64_t id) {
        return feed_group(in, w, id, 0);
}

static void test_intake_valid(void) {
        _cleanup_(exp_intake_freep) ExpIntake *in = NULL;
        _cleanup_(exp_interval_freep) ExpInterval *iv = NULL;
        _cleanup_free_ void *data = NULL;
        EpWriter w;
        size_t size;

        ASSERT_OK(exp_intake_new(&in));
        ep_writer_init_dynamic(&w);
        iv = feed_valid_group(in, &w, 5);
        ASSERT_EQ(iv->id, 5);
        ASSERT_TRUE(iv->start_ns == START_NS && iv->end_ns == END_NS && iv->period_ns == PERIOD_NS);
        ASSERT_EQ(iv->n_processes, 1);
        ASSERT_STREQ(iv->processes[0].exe_path, "/usr/bin/prog");
        ASSERT_TRUE(!iv->processes[0].container_id);
        ASSERT_EQ(iv->n_stacks, 1);
        ASSERT_EQ(iv->stacks[0].n_frames, 3);
        /* refs 10 and 12 name the same (kind, file, addr): one frame */
        ASSERT_EQ(iv->stacks[0].frames[1], iv->stacks[0].frames[2]);
        ASSERT_EQ(iv->frames[iv->stacks[0].frames[1]].n_lines, 2);
        ASSERT_STREQ(iv->frames[iv->stacks[0].frames[1]].lines[1].function, "leaf");
        ASSERT_EQ(iv->frames[iv->stacks[0].frames[1]].lines[1].line, 43);
        ASSERT_EQ(iv->frames[iv->stacks[0].frames[1]].build_id_len, sizeof BUILD_ID_A);
        ASSERT_EQ(memcmp(iv->frames[iv->stacks[0].frames[1]].htlhash, FILE_A, 16), 0);
        ASSERT_STREQ(iv->frames[iv->stacks[0].frames[1]].go_build_id, GO_BUILD_ID_A);
        ASSERT_EQ(iv->frames[iv->stacks[0].frames[1]].addr, 0x100);
        ASSERT_EQ(iv->frames[iv->stacks[0].frames[1]].elf_addr, 0x100 + ELF_BIAS_A);
        ASSERT_TRUE(!iv->frames[iv->stacks[0].frames[0]].go_build_id); /* kernel: none */
        ASSERT_EQ(iv->frames[iv->stacks[0].frames[0]].elf_addr, 0);
        ASSERT_EQ(iv->n_samples, 1);
        ASSERT_EQ(iv->samples[0].count, 3);
        ASSERT_EQ(iv->samples[0].n_timestamps, 3);
        ASSERT_EQ(in->groups_done, 1);
        ASSERT_EQ(in->groups_dropped, 0);
        ASSERT_OK(otlp_encode_interval(iv, NULL, &data, &size, NULL));
        ASSERT_TRUE(size > 0);
        ep_writer_done(&w);
}

/* A parent's Python code object and its forked child's at the same address are two frames:
 * the child's, read after its exec, stays unnamed, and the parent's keeps its name. */
static void test_intake_per_process_frames(void) {
        _cleanup_(exp_intake_freep) ExpIntake *in = NULL;
        _cleanup_(exp_interval_freep) ExpInterval *iv = NULL;
        EpWriter w;

        ASSERT_OK(exp_intake_new(&in));
        ep_writer_init_dynamic(&w);
        put_begin(&w, 9);
        ASSERT_EQ(feed(in, EP_MSG_EXP_BEGIN, &w, &iv), 0);
        for (uint32_t pid = 100; pid <= 101; pid++) {
                ep_put_u32(&w, pid);
                ep_put_str(&w, "python3");
                ep_put_str(&w, "/usr/bin/python3");
                ep_put_str(&w, "");
                ASSERT_EQ(feed(in, EP_MSG_EXP_PROCESS, &w, &iv), 0);
        }
        put_frame(&w, 1, EP_FRAME_CPYTHON, NULL, 0x7f0000001000ULL, 1, "parent_function");
        ASSERT_EQ(feed(in, EP_MSG_EXP_FRAME, &w, &iv), 0);
        put_frame(&w, 2, EP_FRAME_CPYTHON, NULL, 0x7f0000001000ULL, 0, NULL);
        ASSERT_EQ(feed(in, EP_MSG_EXP_FRAME, &w, &iv), 0);
        for (uint32_t ref = 1; ref <= 2; ref++) {
                ep_put_u32(&w, 20 + ref);
                ep_put_u32(&w, 1);
                ep_put_u32(&w, ref);
                ASSERT_EQ(feed(in, EP_MSG_EXP_STACK, &w, &iv), 0);
        }
        put_sample(&w, 100, 21, 1, 1);
        ASSERT_EQ(feed(in, EP_MSG_EXP_SAMPLE, &w, &iv), 0);
        put_sample(&w, 101, 22, 1, 1);
        ASSERT_EQ(feed(in, EP_MSG_EXP_SAMPLE, &w, &iv), 0);
        ep_put_u64(&w, 9);
        ASSERT_EQ(feed(in, EP_MSG_EXP_END, &w, &iv), 1);
        ASSERT_TRUE(iv);

        ASSERT_EQ(iv->n_frames, 2);
        ASSERT_EQ(iv->n_stacks, 2);
        ASSERT_TRUE(iv->stacks[0].frames[0] != iv->stacks[1].frames[0]);
        ASSERT_EQ(iv->frames[iv->stacks[0].frames[0]].n_lines, 1);
        ASSERT_STREQ(iv->frames[iv->stacks[0].frames[0]].lines[0].function, "parent_function");
        ASSERT_EQ(iv->frames[iv->stacks[1].frames[0]].n_lines, 0);
        ep_writer_done(&w);
}

static void test_intake_malformed(void) {
        _cleanup_(exp_intake_freep) ExpIntake *in = NULL;
        ExpInterval *iv = NULL;
        uint64_t dropped = 0;
        EpWriter w;

        ASSERT_OK(exp_intake_new(&in));
        ep_writer_init_dynamic(&w);

        /* Records before any BEGIN (the tail of a group consumed by someone else): one drop,
         * the rest skipped quietly up to the END. */
        put_sample(&w, 1, 1, 1, 1);
        ASSERT_EQ(feed(in, EP_MSG_EXP_SAMPLE, &w, &iv), -EBADMSG);
        ASSERT_EQ(in->groups_dropped, ++dropped);
        put_sample(&w, 1, 1, 1, 1);
        ASSERT_EQ(feed(in, EP_MSG_EXP_SAMPLE, &w, &iv), 0);
        ep_put_u64(&w, 3);
        ASSERT_EQ(feed(in, EP_MSG_EXP_END, &w, &iv), 0);
        ASSERT_EQ(in->groups_dropped, dropped);

        /* A stack naming an undefined frame: the group is dropped, its END ignored. */
        put_begin(&w, 8);
        ASSERT_EQ(feed(in, EP_MSG_EXP_BEGIN, &w, &iv), 0);
        put_frame(&w, 1, EP_FRAME_NATIVE, FILE_A, 0x10, 1, "f");
        ASSERT_EQ(feed(in, EP_MSG_EXP_FRAME, &w, &iv), 0);
        ep_put_u32(&w, 5);
        ep_put_u32(&w, 2);
        ep_put_u32(&w, 1);
        ep_put_u32(&w, 999);
        ASSERT_EQ(feed(in, EP_MSG_EXP_STACK, &w, &iv), -EBADMSG);
        ASSERT_EQ(in->groups_dropped, ++dropped);
        ASSERT_TRUE(strstr(in->last_error, "unknown frame 999"));
        put_sample(&w, 1, 5, 1, 1);
        ASSERT_EQ(feed(in, EP_MSG_EXP_SAMPLE, &w, &iv), 0);
        ep_put_u64(&w, 8);
        ASSERT_EQ(feed(in, EP_MSG_EXP_END, &w, &iv), 0);
        ASSERT_TRUE(!iv);

        /* The next group is fine again. */
        iv = feed_valid_group(in, &w, 9);
        iv = exp_interval_free(iv);

        /* Each kind of broken record drops its group. */
        for (int c = 0; c < 12; c++) {
                uint16_t type = 0;

                put_begin(&w, 20 + c);
                ASSERT_EQ(feed(in, EP_MSG_EXP_BEGIN, &w, &iv), 0);
                put_frame(&w, 1, EP_FRAME_NATIVE, FILE_A, 0x10, 1, "f");
                ASSERT_EQ(feed(in, EP_MSG_EXP_FRAME, &w, &iv), 0);
                ep_put_u32(&w, 2);
                ep_put_u32(&w, 1);
                ep_put_u32(&w, 1);
                ASSERT_EQ(feed(in, EP_MSG_EXP_STACK, &w, &iv), 0);
                switch (c) {
                case 0: /* FRAME announcing 2 lines but carrying 1 */
                        put_frame(&w, 3, EP_FRAME_NATIVE, FILE_A, 0x20, 1, "g");
                        w.data[4 + 1 + 16 + 16 + 4 + sizeof BUILD_ID_A + 4 + strlen(GO_BUILD_ID_A) + 4 +
                               strlen("/usr/bin/app") + 8 + 8] = 2;
                        type = EP_MSG_EXP_FRAME;
                        break;
                case 1: /* unknown frame kind */
                        put_frame(&w, 3, 200, FILE_A, 0x20, 0, NULL);
                        type = EP_MSG_EXP_FRAME;
                        break;
                case 2: /* frame_ref defined twice */
                        put_frame(&w, 1, EP_FRAME_NATIVE, FILE_A, 0x30, 0, NULL);
                        type = EP_MSG_EXP_FRAME;
                        break;
                case 3: /* more timestamps than events */
                        put_sample(&w, 1, 2, 1, 2);
                        type = EP_MSG_EXP_SAMPLE;
                        break;
                case 4: /* sample of an undefined stack */
                        put_sample(&w, 1, 3, 1, 1);
                        type = EP_MSG_EXP_SAMPLE;
                        break;
                case 5: /* trailing garbage */
                        put_sample(&w, 1, 2, 1, 1);
                        ep_put_u8(&w, 0);
                        type = EP_MSG_EXP_SAMPLE;
                        break;
                case 6: /* truncated */
                        put_sample(&w, 1, 2, 2, 2);
                        w.size -= 3;
                        type = EP_MSG_EXP_SAMPLE;
                        break;
                case 7: /* END of another interval */
                        ep_put_u64(&w, 12345);
                        type = EP_MSG_EXP_END;
                        break;
                case 8: /* unknown record type */
                        ep_put_u32(&w, 0);
                        type = EP_MSG_TRACE;
                        break;
                case 9: /* string longer than allowed */
                        ep_put_u32(&w, 7);
                        ep_put_u32(&w, 4000);
                        ep_put_bytes(&w, (char[4000]) { [0 ... 3999] = 'x' }, 4000);
                        ep_put_str(&w, "");
                        ep_put_str(&w, "");
                        type = EP_MSG_EXP_PROCESS;
                        break;
                case 10: /* stack count does not match the record */
                        ep_put_u32(&w, 9);
                        ep_put_u32(&w, 1000000);
                        ep_put_u32(&w, 1);
                        type = EP_MSG_EXP_STACK;
                        break;
                case 11: /* string with an embedded NUL */
                        ep_put_u32(&w, 7);
                        ep_put_blob(&w, "a\0b", 3);
                        ep_put_str(&w, "");
                        ep_put_str(&w, "");
                        type = EP_MSG_EXP_PROCESS;
                        break;
                }
                ASSERT_EQ(feed(in, type, &w, &iv), -EBADMSG);
                ASSERT_EQ(in->groups_dropped, ++dropped);
                ep_put_u64(&w, 20 + c);
                ASSERT_EQ(feed(in, EP_MSG_EXP_END, &w, &iv), 0);
                ASSERT_TRUE(!iv);
        }

        /* BEGIN inside a group: the open one is dropped, the new one proceeds. */
        put_begin(&w, 50);
        ASSERT_EQ(feed(in, EP_MSG_EXP_BEGIN, &w, &iv), 0);
        iv = feed_group(in, &w, 51, -EBADMSG);
        ASSERT_EQ(in->groups_dropped, ++dropped);
        ASSERT_EQ(iv->id, 51);
        iv = exp_interval_free(iv);

        /* BEGIN with a bad length or an interval ending before it starts. */
        ep_put_u64(&w, 1);
        ASSERT_EQ(feed(in, EP_MSG_EXP_BEGIN, &w, &iv), -EBADMSG);
        ASSERT_EQ(in->groups_dropped, ++dropped);
        ep_put_u64(&w, 60);
        ep_put_u64(&w, END_NS);
        ep_put_u64(&w, START_NS);
        ep_put_u64(&w, PERIOD_NS);
        ASSERT_EQ(feed(in, EP_MSG_EXP_BEGIN, &w, &iv), -EBADMSG);
        ASSERT_EQ(in->groups_dropped, ++dropped);

        /* Random records never crash the decoder (run under ASan in the sanitizer build). */
        srand(1);
        for (int i = 0; i < 20000; i++) {
                uint8_t buf[96];
                size_t n = (size_t) rand() % sizeof buf;
                for (size_t k = 0; k < n; k++)
                        buf[k] = (uint8_t) (rand() % 4 == 0 ? rand() : rand() % 3);
                iv = NULL;
                if (exp_intake_feed(in, (uint16_t) (EP_MSG_EXP_BEGIN + rand() % 7), buf, n, &iv) > 0)
                        iv = exp_interval_free(iv);
        }
        exp_intake_reset(in);
        iv = feed_valid_group(in, &w, 99);
        exp_interval_free(iv);
        ep_writer_done(&w);
}

int main(int argc, char **argv) {
        log_set_max_level(getenv("TEST_DEBUG") ? LOG_DEBUG : LOG_ERR);
        test_encode(argc > 1 ? argv[1] : NULL);
        test_encode_strings_by_index();
        test_encode_empty();
        test_encode_bad_model();
        test_intake_valid();
        test_intake_per_process_frames();
        test_intake_malformed();
        return tests_summary("test-exporter-encode");
}
