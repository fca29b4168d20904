/* SPDX-License-Identifier: MIT */
/* libFuzzer target: a damaged profile store as the CLI reads it (cli/store-read.c, with
 * SQLite's defensive settings). A store is a file anyone may hand the CLI (copied from another
 * host, written by a collector that crashed, or crafted), so every view must refuse it or read
 * it, never crash. Random bytes are almost never an SQLite file, so the input patches a valid
 * store that the collector's own code (collector/store.c) writes once: a sequence of patches,
 * each a u16 offset (modulo the file's size), a u8 length and that many bytes. The patched file
 * is opened with ep_store_open() and read as top, the flame graph and top --by read it. Any
 * crash, sanitizer report or leak is a bug. Built with clang by tests/fuzz/meson.build; seeds in
 * corpus-store-read/. */

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "calltree.h"
#include "log.h"
#include "store-read.h"
#include "store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[] = "/tmp/fuzz-store-read-XXXXXX";
static char path[64];
static uint8_t *base;
static size_t base_size;

#define CHECK(x) do { if ((x) < 0) abort(); } while (0)

/* Two processes, three frames (native with two lines, kernel, Python), two stacks, one
 * interval: every table the views join. */
static void write_base(void) {
        static const uint8_t fid[EP_FILE_ID_SIZE] = { 1, 2, 3 };
        SymLine lines[2] = { { .function = (char *) "inner", .file = (char *) "a.c", .line = 3 },
                             { .function = (char *) "outer", .file = (char *) "a.c", .line = 9 } };
        SymLine kline = { .function = (char *) "do_syscall_64" };
        SymLine pyline = { .function = (char *) "spin", .file = (char *) "a.py", .line = 1 };
        int64_t file, f[3], st[2], proc[2], iv;
        Store *s = NULL;
        FILE *in;

        CHECK(store_open(path, &s));
        CHECK(store_begin(s));
        CHECK(store_put_file(s, fid, fid, "/usr/bin/app", NULL, 0, NULL, &file));
        CHECK(store_put_process(s, 100, 1000, "app", "/usr/bin/app", "", &proc[0]));
        CHECK(store_put_process(s, 200, 2000, "python3", "/usr/bin/python3", "c0ffee", &proc[1]));
        CHECK(store_put_frame(s, EP_FRAME_NATIVE, 0, file, 0x1234,
                              &(StoreSymbol) { .elf_addr_known = true, .elf_addr = 0x401234, .lines = lines,
                                               .n_lines = 2 }, &f[0]));
        CHECK(store_put_frame(s, EP_FRAME_KERNEL, 0, 0, 0xffffffff81000010ULL,
                              &(StoreSymbol) { .module = "", .lines = &kline, .n_lines = 1 }, &f[1]));
        CHECK(store_put_frame(s, EP_FRAME_CPYTHON, 0, proc[1], 0x7f0000001000ULL,
                              &(StoreSymbol) { .lines = &pyline, .n_lines = 1 }, &f[2]));
        CHECK(store_put_stack(s, (int64_t[]) { f[1], f[0] }, 2, &st[0]));
        CHECK(store_put_stack(s, (int64_t[]) { f[2], f[0] }, 2, &st[1]));
        CHECK(store_add_interval(s, 1000000000ULL, 3000000000ULL, 10000000ULL, &iv));
        CHECK(store_add_sample(s, iv, proc[0], 100, "app", st[0], 5));
        CHECK(store_add_sample(s, iv, proc[1], 201, "worker", st[1], 7));
        CHECK(store_finish_interval(s, iv, 12));
        CHECK(store_commit(s));
        store_free(s); /* the last connection: the WAL goes into the file */

        in = fopen(path, "rb");
        if (!in || fseek(in, 0, SEEK_END) < 0)
                abort();
        base_size = (size_t) ftell(in);
        base = malloc(base_size);
        if (!base || fseek(in, 0, SEEK_SET) < 0 || fread(base, 1, base_size, in) != base_size)
                abort();
        fclose(in);
}

static void setup(void) {
        if (base)
                return;
        log_set_max_level(LOG_EMERG);
        if (!mkdtemp(dir))
                abort();
        snprintf(path, sizeof path, "%s/profiles.db", dir);
        write_base();
}

static void read_views(sqlite3 *db) {
        EpStoreFilter f = EP_STORE_FILTER_INIT;
        EpStoreSummary summary;
        EpStoreGroup *groups = NULL;
        size_t n = 0;

        for (int flags = 0; flags < 4; flags++) {
                EpCallTree *tree = NULL;

                CHECK(ep_calltree_new(&tree));
                (void) ep_store_read(db, &f, (EpStoreReadFlags) flags, tree, &summary);
                ep_calltree_free(tree);
        }
        for (EpStoreGroupBy by = 0; by < _EP_STORE_GROUP_MAX; by++)
                if (ep_store_read_groups(db, &f, by, &groups, &n, &summary) >= 0)
                        ep_store_groups_free(groups, n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        uint8_t *image;
        sqlite3 *db = NULL;
        char side[80];
        int fd;

        setup();
        image = malloc(base_size);
        if (!image)
                abort();
        memcpy(image, base, base_size);
        while (size >= 3) {
                size_t off = ((size_t) data[0] | (size_t) data[1] << 8) % base_size, len = data[2];

                data += 3;
                size -= 3;
                len = len < size ? len : size;
                len = len < base_size - off ? len : base_size - off;
                memcpy(image + off, data, len);
                data += len;
                size -= len;
        }
        fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC);
        if (fd < 0 || write(fd, image, base_size) != (ssize_t) base_size)
                abort();
        close(fd);
        free(image);
        snprintf(side, sizeof side, "%s-wal", path);
        (void) unlink(side);
        snprintf(side, sizeof side, "%s-shm", path);
        (void) unlink(side);

        if (ep_store_open(path, &db) >= 0) {
                read_views(db);
                sqlite3_close_v2(db);
        }
        return 0;
}
