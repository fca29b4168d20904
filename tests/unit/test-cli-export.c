/* SPDX-License-Identifier: MIT */
/* `ebpf-profiler export` on the synthetic store (test-cli-store.h): the folded text exactly,
 * the pprof file decoded back with protobuf-c and checked for consistency and totals, the OTLP
 * request decoded with the exporter's schema. */

#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "export.h"
#include "otlp-pb.h"
#include "pprof/profile.pb-c.h"
#include "store-read.h"

#include "test-cli-store.h"

#define PERIOD_NS 50000000ULL /* the store's intervals */
#define TOTAL 31

static const char *scratch;

/* Loads what f selects and exports it; returns the bytes written (free()). */
static char *export_to_memory(const char *path, const EpStoreFilter *f, EpExportFormat format,
                              EpFoldedFlags flags, size_t *ret_size) {
        _cleanup_sqlite_ sqlite3 *db = NULL;
        _cleanup_export_model_ EpExportModel *m = NULL;
        char file[600];
        char *data = NULL;
        size_t size = 0;

        CHECK_INT(ep_store_open(path, &db), 0);
        CHECK_INT(ep_export_model_load(db, f, NULL, &m), 0);
        if (!m)
                return NULL;
        /* Through a real file: pprof writes with zlib on the descriptor. */
        snprintf(file, sizeof(file), "%s/out", scratch);
        FILE *out = fopen(file, "w+");
        CHECK(out != NULL);
        if (!out)
                return NULL;
        CHECK_INT(ep_export_write(m, format, flags, out, NULL), 0);
        fclose(out);

        FILE *in = fopen(file, "r");
        CHECK(in != NULL);
        if (!in)
                return NULL;
        char buf[4096];
        size_t n;
        FILE *mem = open_memstream(&data, &size);
        while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
                fwrite(buf, 1, n, mem);
        fclose(mem);
        fclose(in);
        unlink(file);
        *ret_size = size;
        return data;
}

static void check_folded(const char *path, const EpStoreFilter *f, EpFoldedFlags flags, const char *expected) {
        size_t size;
        _cleanup_free_ char *text = export_to_memory(path, f, EP_EXPORT_FOLDED, flags, &size);
        CHECK_STR(text, expected);
}

static void test_folded(const char *path, uint64_t t0) {
        EpStoreFilter f = EP_STORE_FILTER_INIT;

        /* Root first, inline lines expanded outermost first, one line per process and stack
         * (app's tid 100 S1 in two intervals: 10 + 6), sorted. */
        check_folded(path, &f, EP_FOLDED_PROCESS,
                     "app (100);__libc_start_main;main;[unknown] libc.so.6;do_syscall_64 [k];[k] 0xffffffff81001234 1\n"
                     "app (100);__libc_start_main;main;compute;compute_inner 16\n"
                     "app (100);__libc_start_main;main;helper 5\n"
                     "worker (200);__libc_start_main;main;[unknown] libc.so.6;do_syscall_64 [k];[k] 0xffffffff81001234 4\n"
                     "worker (200);__libc_start_main;main;compute;compute_inner 2\n"
                     "worker (200);__libc_start_main;main;helper;helper 3\n");

        /* Without the process frame the same stacks of two processes are one line. */
        check_folded(path, &f, 0,
                     "__libc_start_main;main;[unknown] libc.so.6;do_syscall_64 [k];[k] 0xffffffff81001234 5\n"
                     "__libc_start_main;main;compute;compute_inner 18\n"
                     "__libc_start_main;main;helper 5\n"
                     "__libc_start_main;main;helper;helper 3\n");

        check_folded(path, &f, EP_FOLDED_LINES,
                     "__libc_start_main;main (app.c:30);[unknown] libc.so.6;do_syscall_64 [k];[k] 0xffffffff81001234 5\n"
                     "__libc_start_main;main (app.c:30);compute (app.c:20);compute_inner (app.c:10) 18\n"
                     "__libc_start_main;main (app.c:30);helper (app.c:40) 5\n"
                     "__libc_start_main;main (app.c:30);helper (app.c:40);helper (app.c:40) 3\n");

        /* Filters: the view options' EpStoreFilter. */
        CHECK_INT(ep_store_filter_add_pid(&f, 200), 0);
        f.kernel = false;
        check_folded(path, &f, EP_FOLDED_PROCESS,
                     "worker (200);__libc_start_main;main;[unknown] libc.so.6 4\n"
                     "worker (200);__libc_start_main;main;compute;compute_inner 2\n"
                     "worker (200);__libc_start_main;main;helper;helper 3\n");
        f = EP_STORE_FILTER_INIT;
        f.since_ns = t0 + 100 * NSEC_PER_SEC;
        check_folded(path, &f, EP_FOLDED_PROCESS,
                     "app (100);__libc_start_main;main;[unknown] libc.so.6;do_syscall_64 [k];[k] 0xffffffff81001234 1\n"
                     "worker (200);__libc_start_main;main;compute;compute_inner 2\n");
        CHECK_INT(ep_store_filter_add_pid(&f, 300), 0);
        check_folded(path, &f, EP_FOLDED_PROCESS, "");

        char name[] = "a;b\nc\td";
        ep_folded_sanitize(name);
        CHECK_STR(name, "a:b c d");
}

typedef Perftools__Profiles__Profile Profile;

static const char *pstr(const Profile *p, int64_t i) {
        return i >= 0 && (size_t) i < p->n_string_table ? p->string_table[i] : NULL;
}

static const Perftools__Profiles__Location *location_by_id(const Profile *p, uint64_t id) {
        for (size_t i = 0; i < p->n_location; i++)
                if (p->location[i]->id == id)
                        return p->location[i];
        return NULL;
}

static const Perftools__Profiles__Mapping *mapping_by_id(const Profile *p, uint64_t id) {
        for (size_t i = 0; i < p->n_mapping; i++)
                if (p->mapping[i]->id == id)
                        return p->mapping[i];
        return NULL;
}

static const Perftools__Profiles__Function *function_by_id(const Profile *p, uint64_t id) {
        for (size_t i = 0; i < p->n_function; i++)
                if (p->function[i]->id == id)
                        return p->function[i];
        return NULL;
}

static const Perftools__Profiles__Mapping *mapping_named(const Profile *p, const char *name) {
        for (size_t i = 0; i < p->n_mapping; i++)
                if (streq(pstr(p, p->mapping[i]->filename) ?: "", name))
                        return p->mapping[i];
        return NULL;
}

static const char *line_name(const Profile *p, const Perftools__Profiles__Line *l) {
        const Perftools__Profiles__Function *fn = function_by_id(p, l->function_id);
        return fn ? pstr(p, fn->name) : NULL;
}

/* Every id referenced exists, ids are unique and nonzero. */
static void check_consistent(const Profile *p) {
        for (size_t i = 0; i < p->n_location; i++) {
                const Perftools__Profiles__Location *l = p->location[i];
                CHECK(l->id != 0 && location_by_id(p, l->id) == l);
                CHECK(l->mapping_id == 0 || mapping_by_id(p, l->mapping_id) != NULL);
                for (size_t j = 0; j < l->n_line; j++)
                        CHECK(function_by_id(p, l->line[j]->function_id) != NULL);
        }
        for (size_t i = 0; i < p->n_function; i++) {
                CHECK(p->function[i]->id != 0 && function_by_id(p, p->function[i]->id) == p->function[i]);
                CHECK(pstr(p, p->function[i]->name) != NULL && pstr(p, p->function[i]->filename) != NULL);
                /* de-duplicated by (name, file) */
                for (size_t j = 0; j < i; j++)
                        CHECK(p->function[i]->name != p->function[j]->name ||
                              p->function[i]->filename != p->function[j]->filename);
        }
        for (size_t i = 0; i < p->n_mapping; i++)
                CHECK(p->mapping[i]->id != 0 && mapping_by_id(p, p->mapping[i]->id) == p->mapping[i]);
        for (size_t i = 0; i < p->n_sample; i++)
                for (size_t j = 0; j < p->sample[i]->n_location_id; j++)
                        CHECK(location_by_id(p, p->sample[i]->location_id[j]) != NULL);
}

static const char *label_str(const Profile *p, const Perftools__Profiles__Sample *s, const char *key) {
        for (size_t i = 0; i < s->n_label; i++)
                if (streq(pstr(p, s->label[i]->key) ?: "", key))
                        return pstr(p, s->label[i]->str);
        return NULL;
}

static int64_t label_num(const Profile *p, const Perftools__Profiles__Sample *s, const char *key) {
        for (size_t i = 0; i < s->n_label; i++)
                if (streq(pstr(p, s->label[i]->key) ?: "", key))
                        return s->label[i]->num;
        return -1;
}

static void test_pprof(const char *path, uint64_t t0) {
        EpStoreFilter f = EP_STORE_FILTER_INIT;
        size_t size;
        _cleanup_free_ char *gz = export_to_memory(path, &f, EP_EXPORT_PPROF, 0, &size);

        CHECK(gz && size > 2 && (uint8_t) gz[0] == 0x1f && (uint8_t) gz[1] == 0x8b);
        if (!gz || size < 2)
                return;

        /* gunzip */
        uint8_t raw[1 << 16];
        z_stream z = { .next_in = (uint8_t *) gz, .avail_in = (uInt) size, .next_out = raw, .avail_out = sizeof(raw) };
        CHECK_INT(inflateInit2(&z, 15 + 16), Z_OK);
        CHECK_INT(inflate(&z, Z_FINISH), Z_STREAM_END);
        inflateEnd(&z);

        Profile *p = perftools__profiles__profile__unpack(NULL, z.total_out, raw);
        CHECK(p != NULL);
        if (!p)
                return;

        CHECK(p->n_string_table > 0 && streq(p->string_table[0], ""));
        CHECK_INT(p->n_sample_type, 2);
        CHECK_STR(pstr(p, p->sample_type[0]->type), "samples");
        CHECK_STR(pstr(p, p->sample_type[0]->unit), "count");
        CHECK_STR(pstr(p, p->sample_type[1]->type), "cpu");
        CHECK_STR(pstr(p, p->sample_type[1]->unit), "nanoseconds");
        CHECK(p->period_type && streq(pstr(p, p->period_type->type) ?: "", "cpu"));
        CHECK_U64(p->period, PERIOD_NS);
        CHECK_U64(p->time_nanos, t0);
        CHECK_U64(p->duration_nanos, 3010 * NSEC_PER_SEC);

        /* app: (tid 100, S1: 10 + 6), (101, S2), (100, S3); worker: (200, S3), (200, S4), (200, S1) */
        CHECK_INT(p->n_sample, 6);
        uint64_t count = 0, cpu = 0, app = 0;
        bool saw_thread = false;
        for (size_t i = 0; i < p->n_sample; i++) {
                const Perftools__Profiles__Sample *s = p->sample[i];
                CHECK_INT(s->n_value, 2);
                if (s->n_value < 2)
                        continue;
                count += (uint64_t) s->value[0];
                cpu += (uint64_t) s->value[1];
                CHECK_U64(s->value[1], (uint64_t) s->value[0] * PERIOD_NS);
                int64_t pid = label_num(p, s, "pid");
                CHECK(pid == 100 || pid == 200);
                CHECK_STR(label_str(p, s, "comm"), pid == 100 ? "app" : "worker");
                if (pid == 100)
                        app += (uint64_t) s->value[0];
                if (label_num(p, s, "tid") == 101) {
                        CHECK_STR(label_str(p, s, "thread"), "app-t");
                        saw_thread = true;
                }
        }
        CHECK_U64(count, TOTAL);
        CHECK_U64(cpu, TOTAL * PERIOD_NS);
        CHECK_U64(app, 22);
        CHECK(saw_thread);

        check_consistent(p);
        /* 7 functions: compute_inner, compute, main, __libc_start_main, do_syscall_64, helper and
         * the unnamed kernel address; the unsymbolized libc frame has none (pprof may
         * symbolize it). */
        CHECK_INT(p->n_function, 7);
        CHECK_INT(p->n_location, 7);
        CHECK_INT(p->n_mapping, 3);

        const Perftools__Profiles__Mapping *app_map = mapping_named(p, "/usr/bin/app");
        const Perftools__Profiles__Mapping *libc = mapping_named(p, "/lib/x86_64-linux-gnu/libc.so.6");
        const Perftools__Profiles__Mapping *kernel = mapping_named(p, "[kernel.kallsyms]");
        CHECK(app_map && libc && kernel);
        if (!app_map || !libc || !kernel)
                goto out;
        CHECK(app_map->has_functions && app_map->has_filenames && app_map->has_line_numbers);
        CHECK(!libc->has_functions);
        CHECK(!kernel->has_functions);

        /* The inlined frame: one Location, its lines innermost first. */
        bool saw_inline = false, saw_unsymbolized = false, saw_kernel = false;
        for (size_t i = 0; i < p->n_location; i++) {
                const Perftools__Profiles__Location *l = p->location[i];
                if (l->mapping_id == app_map->id && l->address == 4096) {
                        CHECK_INT(l->n_line, 2);
                        if (l->n_line == 2) {
                                CHECK_STR(line_name(p, l->line[0]), "compute_inner");
                                CHECK_INT(l->line[0]->line, 10);
                                CHECK_STR(line_name(p, l->line[1]), "compute");
                                CHECK_INT(l->line[1]->line, 20);
                        }
                        saw_inline = true;
                }
                if (l->mapping_id == libc->id && l->address == 17476) {
                        CHECK_INT(l->n_line, 0);
                        saw_unsymbolized = true;
                }
                if (l->mapping_id == kernel->id && l->address == 0xffffffff81000000ULL) {
                        CHECK_INT(l->n_line, 1);
                        if (l->n_line == 1)
                                CHECK_STR(line_name(p, l->line[0]), "do_syscall_64");
                        saw_kernel = true;
                }
        }
        CHECK(saw_inline && saw_unsymbolized && saw_kernel);

        /* Stacks are leaf first: S1's first location is the inlined frame. */
        for (size_t i = 0; i < p->n_sample; i++) {
                const Perftools__Profiles__Sample *s = p->sample[i];
                if (label_num(p, s, "tid") != 100 || s->value[0] != 16)
                        continue;
                CHECK_INT(s->n_location_id, 3);
                const Perftools__Profiles__Location *leaf = location_by_id(p, s->location_id[0]);
                const Perftools__Profiles__Location *root = location_by_id(p, s->location_id[2]);
                CHECK(leaf && leaf->address == 4096);
                CHECK(root && root->n_line == 1 && streq(line_name(p, root->line[0]) ?: "", "__libc_start_main"));
        }
out:
        perftools__profiles__profile__free_unpacked(p, NULL);
}

static void test_otlp(const char *path) {
        EpStoreFilter f = EP_STORE_FILTER_INIT;
        size_t size;
        _cleanup_free_ char *data = export_to_memory(path, &f, EP_EXPORT_OTLP, 0, &size);

        PbRequest *req = data ? pb_request_unpack(NULL, size, (const uint8_t *) data) : NULL;
        CHECK(req != NULL);
        if (!req)
                return;
        CHECK_INT(req->n_resource_profiles, 2);
        uint64_t total = 0;
        for (size_t i = 0; i < req->n_resource_profiles; i++) {
                const PbResourceProfiles *rp = req->resource_profiles[i];
                int64_t pid = -1;
                for (size_t j = 0; j < rp->resource->n_attributes; j++)
                        if (streq(rp->resource->attributes[j]->key, "process.pid"))
                                pid = rp->resource->attributes[j]->value->int_value;
                uint64_t n = 0;
                const PbProfile *prof = rp->scope_profiles[0]->profiles[0];
                for (size_t j = 0; j < prof->n_samples; j++)
                        for (size_t k = 0; k < prof->samples[j]->n_values; k++)
                                n += (uint64_t) prof->samples[j]->values[k];
                CHECK_U64(n, pid == 100 ? 22 : 9);
                CHECK_U64(prof->period, PERIOD_NS);
                total += n;
        }
        CHECK_U64(total, TOTAL);
        /* The store has no CPU numbers: none are made up. */
        const PbDictionary *d = req->dictionary;
        for (size_t i = 1; i < d->n_attribute_table; i++)
                CHECK(!streq(d->string_table[d->attribute_table[i]->key_strindex], "cpu.logical_number"));
        pb_request_free_unpacked(req, NULL);

        /* Nothing matches: the empty request, zero bytes. */
        CHECK_INT(ep_store_filter_add_pid(&f, 300), 0);
        free(export_to_memory(path, &f, EP_EXPORT_OTLP, 0, &size));
        CHECK_INT(size, 0);
}

static void test_formats(void) {
        EpExportFormat fmt;

        CHECK(ep_export_format_from_path("x.pb.gz", &fmt) == 0 && fmt == EP_EXPORT_PPROF);
        CHECK(ep_export_format_from_path("x.pprof", &fmt) == 0 && fmt == EP_EXPORT_PPROF);
        CHECK(ep_export_format_from_path("x.folded", &fmt) == 0 && fmt == EP_EXPORT_FOLDED);
        CHECK(ep_export_format_from_path("x.txt", &fmt) == 0 && fmt == EP_EXPORT_FOLDED);
        CHECK(ep_export_format_from_path("dir/x.otlp", &fmt) == 0 && fmt == EP_EXPORT_OTLP);
        CHECK(ep_export_format_from_path("x.binpb", &fmt) == 0 && fmt == EP_EXPORT_OTLP);
        CHECK(ep_export_format_from_path("x.gz", &fmt) < 0);
        CHECK(ep_export_format_from_path(".pprof", &fmt) < 0);
        CHECK(ep_export_format_from_name("folded", &fmt) == 0 && fmt == EP_EXPORT_FOLDED);
        CHECK(ep_export_format_from_name("svg", &fmt) < 0);
}

int main(void) {
        char dir[] = "/tmp/test-cli-export.XXXXXX";
        char path[512];

        if (!mkdtemp(dir)) {
                perror("mkdtemp");
                return EXIT_FAILURE;
        }
        scratch = dir;
        snprintf(path, sizeof(path), "%s/profiles.db", dir);

        uint64_t t0 = (ep_now_ns(CLOCK_REALTIME) / NSEC_PER_SEC - 3600) * NSEC_PER_SEC;
        create_store(path, t0, false);

        test_folded(path, t0);
        test_pprof(path, t0);
        test_otlp(path);
        test_formats();

        return test_finish(dir);
}
