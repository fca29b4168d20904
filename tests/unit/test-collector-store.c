/* SPDX-License-Identifier: MIT */
/* The collector's store: two intervals with shared frames and stacks written through the
 * store API, read back with raw SQL; reopening; files that are not stores; a name replaced by a
 * better one, never by a failure. */

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store.h"
#include "test-collector-util.h"
#include "wire.h"

static char dir[] = "/tmp/test-collector-store.XXXXXX";

/* Decodes stacks.frames of one stack row. */
static size_t stack_frames(sqlite3 *db, int64_t id, int64_t *out, size_t max) {
        sqlite3_stmt *st;
        size_t n;

        ASSERT_TRUE(sqlite3_prepare_v2(db, "SELECT frames FROM stacks WHERE id = ?", -1, &st, NULL) == SQLITE_OK);
        sqlite3_bind_int64(st, 1, id);
        ASSERT_TRUE(sqlite3_step(st) == SQLITE_ROW);
        ASSERT_TRUE(sqlite3_column_type(st, 0) == SQLITE_BLOB || sqlite3_column_bytes(st, 0) == 0);
        n = (size_t) sqlite3_column_bytes(st, 0);
        ASSERT_TRUE(n % 8 == 0 && n / 8 <= max);
        const uint8_t *b = sqlite3_column_blob(st, 0);
        for (size_t i = 0; i < n / 8; i++) {
                uint64_t v;
                memcpy(&v, b + 8 * i, 8);
                out[i] = (int64_t) le64toh(v);
        }
        sqlite3_finalize(st);
        return n / 8;
}

static void test_two_intervals(const char *path) {
        static const uint8_t fid[EP_FILE_ID_SIZE] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16 };
#define HTLHASH_HEX "A1000000000000000000000000000000"
        static const uint8_t htlhash[EP_FILE_ID_SIZE] = { 0xa1 };
        static const uint8_t build_id[20] = { 0xde, 0xad, 0xbe, 0xef };
        SymLine lines_main[2] = {
                { .function = (char *) "inlined_helper", .file = (char *) "/src/a.c", .line = 42 },
                { .function = (char *) "main", .file = (char *) "/src/a.c", .line = 7 },
        };
        SymLine lines_k[1] = { { .function = (char *) "do_syscall_64", .file = NULL, .line = 0 } };
        SymLine lines_late[1] = { { .function = (char *) "late", .file = (char *) "/src/b.c", .line = 3 } };
        const uint64_t kaddr = 0xffffffff81a00010ULL;
        int64_t file, file2, f_main, f_k, f_late, f_main2, f_k2, f_late2, s1, s2, s1b, s3, proc, proc2, iv1, iv2;
        Store *s = NULL;
        sqlite3 *db;
        char buf[128];

        ASSERT_OK(store_open(path, &s));
        ASSERT_TRUE(strcmp(store_path(s), path) == 0);

        /* interval 1 */
        ASSERT_OK(store_begin(s));
        ASSERT_OK(store_put_file(s, fid, htlhash, "/usr/bin/app", build_id, sizeof(build_id), NULL, &file));
        ASSERT_OK(store_put_frame(s, EP_FRAME_NATIVE, 0, file, 0x1234,
                                  &(StoreSymbol) { .status = EP_SYM_OK, .elf_addr_known = true,
                                                   .elf_addr = 0x401234, .lines = lines_main, .n_lines = 2 },
                                  &f_main));
        ASSERT_OK(store_put_frame(s, EP_FRAME_KERNEL, 0, 0, kaddr,
                                  &(StoreSymbol) { .status = EP_SYM_OK, .elf_addr_known = true,
                                                   .elf_addr = kaddr, .module = "", .lines = lines_k, .n_lines = 1 },
                                  &f_k));
        ASSERT_OK(store_put_frame(s, EP_FRAME_NATIVE, 0, file, 0x2000, NULL, &f_late)); /* pending */
        ASSERT_TRUE(f_main != f_k && f_k != f_late);
        ASSERT_OK(store_put_stack(s, (int64_t[]) { f_k, f_main }, 2, &s1));
        ASSERT_OK(store_put_stack(s, (int64_t[]) { f_late, f_main }, 2, &s2));
        ASSERT_TRUE(s1 != s2);
        ASSERT_OK(store_put_process(s, 4242, 1700000000000000000ULL, "app", "/usr/bin/app", "", &proc));
        ASSERT_OK(store_add_interval(s, 1000, 5000, 50000000, &iv1));
        ASSERT_OK(store_add_sample(s, iv1, proc, 4242, "app", s1, 5));
        ASSERT_OK(store_add_sample(s, iv1, proc, 4243, "worker", s2, 3));
        ASSERT_OK(store_add_sample(s, iv1, proc, 4242, "app", s1, 2)); /* same key: added up */
        ASSERT_OK(store_commit(s));

        /* A reader while the writer has the store open. */
        ASSERT_TRUE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
        ASSERT_TRUE(q_int(db, "SELECT status IS NULL AND elf_addr IS NULL FROM frames WHERE addr = 8192") == 1);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM frame_lines") == 3);
        /* the htlhash, what an export names the file by, beside its ID (a file a user owns) */
        ASSERT_TRUE(q_int(db, "SELECT hex(htlhash) = '" HTLHASH_HEX "' AND file_id != htlhash FROM files") == 1);
        sqlite3_close(db);

        /* interval 2: same file, frames and one stack again; a late symbol for f_late */
        ASSERT_OK(store_begin(s));
        ASSERT_OK(store_put_file(s, fid, fid, "/other/path/app", NULL, 0, NULL, &file2));
        ASSERT_TRUE(file2 == file);
        ASSERT_OK(store_put_frame(s, EP_FRAME_NATIVE, 0, file, 0x1234, NULL, &f_main2));
        ASSERT_OK(store_put_frame(s, EP_FRAME_KERNEL, 0, 0, kaddr, NULL, &f_k2));
        ASSERT_TRUE(f_main2 == f_main && f_k2 == f_k);
        ASSERT_OK(store_update_frame_symbol(s, f_late,
                                            &(StoreSymbol) { .status = EP_SYM_OK, .elf_addr_known = true,
                                                             .elf_addr = 0x402000, .lines = lines_late, .n_lines = 1 }));
        ASSERT_OK(store_put_frame(s, EP_FRAME_NATIVE, 0, file, 0x2000, NULL, &f_late2));
        ASSERT_TRUE(f_late2 == f_late);
        /* A later failure never unnames a row (a collector restarted after the file went away
         * asks again and gets NO_FILE): neither through the insert nor through an update. */
        ASSERT_OK(store_put_frame(s, EP_FRAME_NATIVE, 0, file, 0x1234,
                                  &(StoreSymbol) { .status = EP_SYM_NO_FILE }, &f_main2));
        ASSERT_OK(store_update_frame_symbol(s, f_main, &(StoreSymbol) { .status = EP_SYM_NOT_FOUND }));
        ASSERT_TRUE(f_main2 == f_main);
        /* The return-address variant of an offset is a row of its own. */
        int64_t f_main_ra;
        ASSERT_OK(store_put_frame(s, EP_FRAME_NATIVE, EP_FRAME_FLAG_RETURN_ADDRESS, file, 0x1234,
                                  &(StoreSymbol) { .status = EP_SYM_OK, .lines = lines_late, .n_lines = 1 },
                                  &f_main_ra));
        ASSERT_TRUE(f_main_ra != f_main);
        ASSERT_OK(store_put_stack(s, (int64_t[]) { f_k, f_main }, 2, &s1b));
        ASSERT_TRUE(s1b == s1);
        ASSERT_OK(store_put_stack(s, (int64_t[]) { f_late }, 1, &s3));
        ASSERT_TRUE(s3 != s1 && s3 != s2);
        ASSERT_OK(store_put_process(s, 4242, 1700000000000000000ULL, "app", "/usr/bin/app", "", &proc2));
        ASSERT_TRUE(proc2 == proc);
        ASSERT_OK(store_update_process(s, proc, "app2", "/usr/bin/app2", "c0ffee"));
        ASSERT_OK(store_add_interval(s, 5000, 9000, 50000000, &iv2));
        ASSERT_TRUE(iv2 != iv1);
        ASSERT_OK(store_add_sample(s, iv2, proc, 4242, "app", s1, 11));
        ASSERT_OK(store_add_sample(s, iv2, proc, 4242, "app", s3, 1));
        ASSERT_OK(store_commit(s));

        /* A failed transaction leaves nothing behind. */
        ASSERT_OK(store_begin(s));
        int64_t tmp;
        ASSERT_OK(store_add_interval(s, 9000, 9999, 1, &tmp));
        store_rollback(s);

        /* Read back with plain SQL. */
        ASSERT_TRUE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
        ASSERT_TRUE(q_int(db, "PRAGMA user_version") == STORE_SCHEMA_VERSION);
        q_text(db, "PRAGMA journal_mode", buf, sizeof(buf));
        ASSERT_TRUE(strcmp(buf, "wal") == 0);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM files") == 1);
        q_text(db, "SELECT path FROM files", buf, sizeof(buf));
        ASSERT_TRUE(strcmp(buf, "/usr/bin/app") == 0);
        ASSERT_TRUE(q_int(db, "SELECT length(gnu_build_id) FROM files") == 20);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM frames") == 4);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM stacks") == 3);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM processes") == 1);
        q_text(db, "SELECT exe || '|' || container_id FROM processes", buf, sizeof(buf));
        ASSERT_TRUE(strcmp(buf, "/usr/bin/app2|c0ffee") == 0);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM intervals") == 2);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM samples") == 4);
        ASSERT_TRUE(q_int(db, "SELECT sum(count) FROM samples") == 5 + 3 + 2 + 11 + 1);
        char sql[256];
        snprintf(sql, sizeof(sql), "SELECT count FROM samples WHERE interval = %lld AND stack = %lld",
                 (long long) iv1, (long long) s1);
        ASSERT_TRUE(q_int(db, sql) == 7);
        snprintf(sql, sizeof(sql), "SELECT sum(count) FROM samples WHERE stack = %lld", (long long) s1);
        ASSERT_TRUE(q_int(db, sql) == 18);
        ASSERT_TRUE(q_int(db, "SELECT period_ns FROM intervals ORDER BY id LIMIT 1") == 50000000);

        /* frames blob: little-endian u64 frame ids, leaf first */
        int64_t ids[8];
        ASSERT_TRUE(stack_frames(db, s1, ids, 8) == 2);
        ASSERT_TRUE(ids[0] == f_k && ids[1] == f_main);
        ASSERT_TRUE(stack_frames(db, s3, ids, 8) == 1 && ids[0] == f_late);
        ASSERT_TRUE(q_int(db, "SELECT min(length(hash)) FROM stacks") == STORE_STACK_HASH_SIZE);
        ASSERT_TRUE(q_int(db, "SELECT max(length(hash)) FROM stacks") == STORE_STACK_HASH_SIZE);

        /* the kernel address comes back with all 64 bits */
        snprintf(sql, sizeof(sql), "SELECT addr FROM frames WHERE id = %lld", (long long) f_k);
        ASSERT_TRUE((uint64_t) q_int(db, sql) == kaddr);
        snprintf(sql, sizeof(sql), "SELECT module FROM frames WHERE id = %lld", (long long) f_k);
        q_text(db, sql, buf, sizeof(buf));
        ASSERT_TRUE(strcmp(buf, "") == 0);
        snprintf(sql, sizeof(sql), "SELECT module IS NULL FROM frames WHERE id = %lld", (long long) f_main);
        ASSERT_TRUE(q_int(db, sql) == 1);

        /* lines, innermost first; the late frame got its symbol */
        snprintf(sql, sizeof(sql), "SELECT function FROM frame_lines WHERE frame = %lld AND depth = 0",
                 (long long) f_main);
        q_text(db, sql, buf, sizeof(buf));
        ASSERT_TRUE(strcmp(buf, "inlined_helper") == 0);
        snprintf(sql, sizeof(sql), "SELECT line FROM frame_lines WHERE frame = %lld AND depth = 1",
                 (long long) f_main);
        ASSERT_TRUE(q_int(db, sql) == 7);
        snprintf(sql, sizeof(sql), "SELECT status FROM frames WHERE id = %lld", (long long) f_main);
        ASSERT_TRUE(q_int(db, sql) == EP_SYM_OK); /* not unnamed by the failures */
        snprintf(sql, sizeof(sql), "SELECT flags FROM frames WHERE id = %lld", (long long) f_main_ra);
        ASSERT_TRUE(q_int(db, sql) == EP_FRAME_FLAG_RETURN_ADDRESS);
        snprintf(sql, sizeof(sql), "SELECT status FROM frames WHERE id = %lld", (long long) f_late);
        ASSERT_TRUE(q_int(db, sql) == EP_SYM_OK);
        snprintf(sql, sizeof(sql), "SELECT elf_addr FROM frames WHERE id = %lld", (long long) f_late);
        ASSERT_TRUE(q_int(db, sql) == 0x402000);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM frame_lines") == 5);
        sqlite3_close(db);

        store_free(s);

        /* readable by the collector's group (the CLI's users), by no other user */
        struct stat st;
        ASSERT_TRUE(stat(path, &st) == 0);
        ASSERT_TRUE((st.st_mode & 0777) == 0640);
        /* WAL companions are kept after close (readers cannot create them) and as readable */
        char side[300];
        snprintf(side, sizeof(side), "%s-wal", path);
        ASSERT_TRUE(stat(side, &st) == 0 && (st.st_mode & 0777) == 0640);
        snprintf(side, sizeof(side), "%s-shm", path);
        ASSERT_TRUE(stat(side, &st) == 0 && (st.st_mode & 0777) == 0640);

        /* reopen: same rows found again */
        ASSERT_OK(store_open(path, &s));
        ASSERT_OK(store_begin(s));
        ASSERT_OK(store_put_file(s, fid, fid, "/usr/bin/app", NULL, 0, "go-build-id", &file2));
        ASSERT_TRUE(file2 == file);
        ASSERT_OK(store_put_stack(s, (int64_t[]) { f_k, f_main }, 2, &s1b));
        ASSERT_TRUE(s1b == s1);
        ASSERT_OK(store_commit(s));
        store_free(s);

        ASSERT_TRUE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
        q_text(db, "SELECT go_build_id FROM files", buf, sizeof(buf));
        ASSERT_TRUE(strcmp(buf, "go-build-id") == 0);
        ASSERT_TRUE(q_int(db, "SELECT length(gnu_build_id) FROM files") == 20); /* kept */
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM stacks") == 3);
        sqlite3_close(db);
}

static void write_file(const char *path, const void *data, size_t n) {
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        ASSERT_TRUE(fd >= 0);
        ASSERT_TRUE(write(fd, data, n) == (ssize_t) n);
        close(fd);
}

static void test_bad_files(void) {
        char path[256];
        char garbage[8192];
        Store *s = NULL;
        sqlite3 *db;

        /* not a database */
        for (size_t i = 0; i < sizeof(garbage); i++)
                garbage[i] = (char) ("this is not a database\n"[i % 23]);
        snprintf(path, sizeof(path), "%s/garbage.db", dir);
        write_file(path, garbage, sizeof(garbage));
        ASSERT_TRUE(store_open(path, &s) == -EBADMSG);
        ASSERT_TRUE(!s);

        /* a short garbage file */
        snprintf(path, sizeof(path), "%s/short.db", dir);
        write_file(path, "hello", 5);
        ASSERT_TRUE(store_open(path, &s) < 0);
        ASSERT_TRUE(!s);

        /* a newer schema */
        snprintf(path, sizeof(path), "%s/newer.db", dir);
        ASSERT_TRUE(sqlite3_open(path, &db) == SQLITE_OK);
        ASSERT_TRUE(sqlite3_exec(db, "CREATE TABLE x(a); PRAGMA user_version = 7", NULL, NULL, NULL) == SQLITE_OK);
        sqlite3_close(db);
        ASSERT_TRUE(store_open(path, &s) == -EPROTONOSUPPORT);

        /* some other application's database */
        snprintf(path, sizeof(path), "%s/foreign.db", dir);
        ASSERT_TRUE(sqlite3_open(path, &db) == SQLITE_OK);
        ASSERT_TRUE(sqlite3_exec(db, "CREATE TABLE x(a)", NULL, NULL, NULL) == SQLITE_OK);
        sqlite3_close(db);
        ASSERT_TRUE(store_open(path, &s) == -EPROTONOSUPPORT);

        /* version 1 but tables missing */
        snprintf(path, sizeof(path), "%s/broken.db", dir);
        ASSERT_TRUE(sqlite3_open(path, &db) == SQLITE_OK);
        ASSERT_TRUE(sqlite3_exec(db, "CREATE TABLE files(id INTEGER PRIMARY KEY); PRAGMA user_version = 1",
                            NULL, NULL, NULL) == SQLITE_OK);
        sqlite3_close(db);
        ASSERT_TRUE(store_open(path, &s) < 0);
        ASSERT_TRUE(!s);

        /* an empty file is a new store */
        snprintf(path, sizeof(path), "%s/empty.db", dir);
        write_file(path, "", 0);
        ASSERT_OK(store_open(path, &s));
        store_free(s);
}

/* UNMAPPED (JIT) frames: frames.file holds the process's row, so the same address in two
 * processes is two rows, each with its own name, and the same process finds its row again. */
static void test_unmapped_frames(const char *path) {
        SymLine node[1] = { { .function = (char *) "LazyCompile:*hotLoop /tmp/x.js:3", .file = (char *) "" } };
        SymLine py[1] = { { .function = (char *) "py::fib:/tmp/fib.py", .file = (char *) "" } };
        const uint64_t addr = 0x7f1234560000ULL;
        int64_t p1, p2, f1, f2, f1b, native;
        Store *s = NULL;
        sqlite3 *db;
        char buf[128];

        ASSERT_OK(store_open(path, &s));
        ASSERT_OK(store_begin(s));
        ASSERT_OK(store_put_process(s, 5000, 1, "node", "/usr/bin/node", "", &p1));
        ASSERT_OK(store_put_process(s, 5001, 2, "python3.12", "/usr/bin/python3.12", "", &p2));
        ASSERT_OK(store_put_frame(s, EP_FRAME_UNMAPPED, 0, p1, addr,
                                  &(StoreSymbol) { .status = EP_SYM_OK, .elf_addr_known = true, .elf_addr = addr,
                                                   .lines = node, .n_lines = 1 },
                                  &f1));
        ASSERT_OK(store_put_frame(s, EP_FRAME_UNMAPPED, 0, p2, addr, NULL, &f2)); /* pending */
        ASSERT_TRUE(f1 != f2);
        /* a native frame with a files.id equal to that processes.id is yet another row */
        ASSERT_OK(store_put_frame(s, EP_FRAME_NATIVE, 0, p1, addr, NULL, &native));
        ASSERT_TRUE(native != f1 && native != f2);
        ASSERT_OK(store_put_frame(s, EP_FRAME_UNMAPPED, 0, p1, addr, NULL, &f1b));
        ASSERT_TRUE(f1b == f1);
        ASSERT_OK(store_update_frame_symbol(s, f2, &(StoreSymbol) { .status = EP_SYM_OK, .elf_addr_known = true,
                                                                    .elf_addr = addr, .lines = py, .n_lines = 1 }));
        ASSERT_OK(store_commit(s));
        store_free(s);

        ASSERT_TRUE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
        q_text(db, "SELECT l.function FROM frames f JOIN frame_lines l ON l.frame = f.id "
                   "JOIN processes p ON p.id = f.file WHERE f.kind = 3 AND p.pid = 5000", buf, sizeof buf);
        ASSERT_STREQ(buf, "LazyCompile:*hotLoop /tmp/x.js:3");
        q_text(db, "SELECT l.function FROM frames f JOIN frame_lines l ON l.frame = f.id "
                   "JOIN processes p ON p.id = f.file WHERE f.kind = 3 AND p.pid = 5001", buf, sizeof buf);
        ASSERT_STREQ(buf, "py::fib:/tmp/fib.py");
        sqlite3_close(db);
}

/* A frame asked again (its file's answers changed: a debug file appeared) gets a new name: the
 * row's lines are replaced, not added to, a NOT_FOUND row is named, and a failure afterwards
 * replaces nothing, by an update or by a re-insert. */
static void test_renamed(const char *path) {
        static const uint8_t fid[EP_FILE_ID_SIZE] = { 0xc0 };
        SymLine dynsym[1] = { { .function = (char *) "read" } };
        SymLine chain[2] = {
                { .function = (char *) "__libc_read", .file = (char *) "read.c", .line = 26 },
                { .function = (char *) "read", .file = (char *) "read.c", .line = 30 },
        };
        const StoreSymbol named_dynsym = { .status = EP_SYM_OK, .lines = dynsym, .n_lines = 1 };
        const StoreSymbol named_chain = { .status = EP_SYM_OK, .lines = chain, .n_lines = 2 };
        const StoreSymbol failed = { .status = EP_SYM_NO_FILE };
        int64_t file, named, unnamed, again;
        Store *s = NULL;
        sqlite3 *db;
        char buf[128];

        ASSERT_OK(store_open(path, &s));
        ASSERT_OK(store_begin(s));
        ASSERT_OK(store_put_file(s, fid, fid, "/usr/lib/libc.so.6", NULL, 0, NULL, &file));
        ASSERT_OK(store_put_frame(s, EP_FRAME_NATIVE, 0, file, 0x100, &named_dynsym, &named));
        ASSERT_OK(store_put_frame(s, EP_FRAME_NATIVE, 0, file, 0x200,
                                  &(StoreSymbol) { .status = EP_SYM_NOT_FOUND }, &unnamed));
        ASSERT_OK(store_update_frame_symbol(s, named, &named_chain));
        ASSERT_OK(store_update_frame_symbol(s, unnamed, &named_dynsym));
        ASSERT_OK(store_update_frame_symbol(s, named, &failed));
        ASSERT_OK(store_update_frame_symbol(s, unnamed, &failed));
        ASSERT_OK(store_put_frame(s, EP_FRAME_NATIVE, 0, file, 0x100, &failed, &again));
        ASSERT_TRUE(again == named);
        ASSERT_OK(store_commit(s));
        store_free(s);

        ASSERT_TRUE(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM frames WHERE status = 0") == 2);
        ASSERT_TRUE(q_int(db, "SELECT count(*) FROM frame_lines l JOIN frames f ON l.frame = f.id "
                              "WHERE f.addr = 256") == 2);
        q_text(db, "SELECT group_concat(function || ':' || line, ' ') FROM "
                   "(SELECT l.function, l.line FROM frame_lines l JOIN frames f ON l.frame = f.id "
                   "WHERE f.addr = 256 ORDER BY l.depth)", buf, sizeof buf);
        ASSERT_STREQ(buf, "__libc_read:26 read:30");
        q_text(db, "SELECT l.function FROM frame_lines l JOIN frames f ON l.frame = f.id WHERE f.addr = 512",
               buf, sizeof buf);
        ASSERT_STREQ(buf, "read");
        sqlite3_close(db);
}

int main(void) {
        char path[256], cmd[300];

        ASSERT_TRUE(mkdtemp(dir));
        /* the parent directory is created */
        snprintf(path, sizeof(path), "%s/state/sub/profiles.db", dir);
        umask(077); /* the store must still be readable by the collector's group */
        test_two_intervals(path);
        test_bad_files();
        snprintf(path, sizeof(path), "%s/jit.db", dir);
        test_unmapped_frames(path);
        snprintf(path, sizeof(path), "%s/renamed.db", dir);
        test_renamed(path);

        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        ASSERT_TRUE(system(cmd) == 0);
        printf("OK\n");
        return 0;
}
