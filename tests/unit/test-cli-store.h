/* SPDX-License-Identifier: MIT */
#pragma once

/* The synthetic profile store the CLI's unit tests read (test-cli-store-read, test-cli-export):
 * written by raw SQL with the schema of docs/ARCHITECTURE.md ("Local store"), so the readers
 * are checked against the documented layout, not against the collector's writer. */

#include <inttypes.h>
#include <stdbool.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>

#include "daemon.h"
#include "wire.h"

#include "store-schema-v1.h"
#include "test-cli-util.h"

static void exec_sql(sqlite3 *db, const char *sql) {
        char *err = NULL;
        if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
                fprintf(stderr, "SQL failed: %s\n%s\n", err, sql);
                exit(EXIT_FAILURE);
        }
}

static void add_stack(sqlite3 *db, int id, const int64_t *frames, size_t n) {
        uint8_t blob[64];
        sqlite3_stmt *st;
        for (size_t i = 0; i < n; i++)
                for (unsigned b = 0; b < 8; b++)
                        blob[i * 8 + b] = (uint8_t) ((uint64_t) frames[i] >> (8 * b));
        CHECK(sqlite3_prepare_v2(db, "INSERT INTO stacks VALUES(?1, ?2, ?3)", -1, &st, NULL) == SQLITE_OK);
        sqlite3_bind_int(st, 1, id);
        sqlite3_bind_blob(st, 2, &id, sizeof(id), SQLITE_TRANSIENT);
        sqlite3_bind_blob(st, 3, blob, (int) (n * 8), SQLITE_TRANSIENT);
        CHECK(sqlite3_step(st) == SQLITE_DONE);
        sqlite3_finalize(st);
}

/* Frames (leaf first in stacks):
 *   1 native app+0x1000: compute_inner (inlined) in compute
 *   2 native app+0x2000: main          3 native libc.so.6+0x3000: __libc_start_main
 *   4 native libc.so.6+0x4444: not symbolized
 *   5 kernel: do_syscall_64            6 kernel 0xffffffff81001234: not symbolized
 *   7 native app+0x5000: helper
 * Stacks: S1 [1,2,3]  S2 [7,2,3]  S3 [6,5,4,2,3]  S4 [7,7,2,3] (recursion)
 * Intervals (t0 = an hour ago): I1 [t0, t0+10s)  I2 [t0+10s, t0+20s)  I3 [t0+3000s, t0+3010s)
 * Samples:  I1: app S1 10, app S2 5, worker S3 4   I2: app S1 6, worker S4 3
 *           I3: worker S1 2, app S3 1                                     total 31 */
/* Containers of the extended store: C1 and C2 share the prefix "abcd". */
#define C1 "abcd1111" "00000000000000000000000000000000000000000000000000000000"
#define C2 "abcd2222" "00000000000000000000000000000000000000000000000000000000"
#define C3 "ef01" "000000000000000000000000000000000000000000000000000000000000"

/* The extended store adds, to the samples above (figures per process in test_filter_fixture()):
 *   process 1 (pid 100, app) in container C1; process 2 (pid 200, worker) in none;
 *   process 3: pid 300, also "app", in C2; process 4: pid 100 again (reused), "app", in C3.
 *   I1: pid 300 tid 300 "app" S1 7, pid 300 tid 301 "io" S2 2
 *   I3: pid 100' tid 100 "app" S2 4, pid 100 tid 101 renamed to "renamed" S1 1     total 45 */
static void extend_store(sqlite3 *db) {
        exec_sql(db,
                 "UPDATE processes SET container_id = '" C1 "' WHERE id = 1;"
                 "INSERT INTO processes VALUES(3, 300, 3, 'app', '/usr/bin/app', '" C2 "');"
                 "INSERT INTO processes VALUES(4, 100, 4, 'app', '/usr/bin/app', '" C3 "');"
                 "INSERT INTO samples VALUES(1, 3, 300, 'app', 1, 7);"
                 "INSERT INTO samples VALUES(1, 3, 301, 'io', 2, 2);"
                 "INSERT INTO samples VALUES(3, 4, 100, 'app', 2, 4);"
                 "INSERT INTO samples VALUES(3, 1, 101, 'renamed', 1, 1);");
}

static void create_store(const char *path, uint64_t t0, bool extended) {
        sqlite3 *db;
        char sql[4096];

        CHECK(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) == SQLITE_OK);
        exec_sql(db, "PRAGMA journal_mode=WAL; PRAGMA user_version=1;");
        exec_sql(db, schema_v1_sql);
        snprintf(sql, sizeof(sql),
                 "INSERT INTO files VALUES(1, x'01', '/usr/bin/app', NULL, NULL);"
                 "INSERT INTO files VALUES(2, x'02', '/lib/x86_64-linux-gnu/libc.so.6', NULL, NULL);"
                 "INSERT INTO frames VALUES(1, %d, 1, 4096, 4096, NULL, 0);"
                 "INSERT INTO frames VALUES(2, %d, 1, 8192, 8192, NULL, 0);"
                 "INSERT INTO frames VALUES(3, %d, 2, 12288, 12288, NULL, 0);"
                 "INSERT INTO frames VALUES(4, %d, 2, 17476, NULL, NULL, 1);"
                 "INSERT INTO frames VALUES(5, %d, 0, -2130706432, -2130706432, '', 0);"
                 "INSERT INTO frames VALUES(6, %d, 0, -2130701772, NULL, '', 1);"
                 "INSERT INTO frames VALUES(7, %d, 1, 20480, 20480, NULL, 0);"
                 "INSERT INTO frame_lines VALUES(1, 0, 'compute_inner', 'app.c', 10);"
                 "INSERT INTO frame_lines VALUES(1, 1, 'compute', 'app.c', 20);"
                 "INSERT INTO frame_lines VALUES(2, 0, 'main', 'app.c', 30);"
                 "INSERT INTO frame_lines VALUES(3, 0, '__libc_start_main', NULL, NULL);"
                 "INSERT INTO frame_lines VALUES(5, 0, 'do_syscall_64', NULL, NULL);"
                 "INSERT INTO frame_lines VALUES(7, 0, 'helper', 'app.c', 40);"
                 "INSERT INTO processes VALUES(1, 100, 1, 'app', '/usr/bin/app', '');"
                 "INSERT INTO processes VALUES(2, 200, 2, 'worker', '/usr/bin/app', '');",
                 EP_FRAME_NATIVE, EP_FRAME_NATIVE, EP_FRAME_NATIVE, EP_FRAME_NATIVE, EP_FRAME_KERNEL,
                 EP_FRAME_KERNEL, EP_FRAME_NATIVE);
        exec_sql(db, sql);

        /* Kernel addresses above are 0xffffffff81000000 and 0xffffffff81001234 as signed. */
        add_stack(db, 1, (const int64_t[]) { 1, 2, 3 }, 3);
        add_stack(db, 2, (const int64_t[]) { 7, 2, 3 }, 3);
        add_stack(db, 3, (const int64_t[]) { 6, 5, 4, 2, 3 }, 5);
        add_stack(db, 4, (const int64_t[]) { 7, 7, 2, 3 }, 4);

        const uint64_t s = NSEC_PER_SEC;
        snprintf(sql, sizeof(sql),
                 "INSERT INTO intervals VALUES(1, %" PRIu64 ", %" PRIu64 ", 50000000);"
                 "INSERT INTO intervals VALUES(2, %" PRIu64 ", %" PRIu64 ", 50000000);"
                 "INSERT INTO intervals VALUES(3, %" PRIu64 ", %" PRIu64 ", 50000000);"
                 "INSERT INTO samples VALUES(1, 1, 100, 'app', 1, 10);"
                 "INSERT INTO samples VALUES(1, 1, 101, 'app-t', 2, 5);"
                 "INSERT INTO samples VALUES(1, 2, 200, 'worker', 3, 4);"
                 "INSERT INTO samples VALUES(2, 1, 100, 'app', 1, 6);"
                 "INSERT INTO samples VALUES(2, 2, 200, 'worker', 4, 3);"
                 "INSERT INTO samples VALUES(3, 2, 200, 'worker', 1, 2);"
                 "INSERT INTO samples VALUES(3, 1, 100, 'app', 3, 1);",
                 t0, t0 + 10 * s, t0 + 10 * s, t0 + 20 * s, t0 + 3000 * s, t0 + 3010 * s);
        exec_sql(db, sql);
        if (extended)
                extend_store(db);
        sqlite3_close(db);
}
