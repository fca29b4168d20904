/* SPDX-License-Identifier: MIT */
#pragma once

/* What the collector's unit tests share besides tests.h: reading a store back with raw SQL. */

#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>

#include "tests.h"

/* The first column of the first row of sql, as an integer. */
static inline int64_t q_int(sqlite3 *db, const char *sql) {
        sqlite3_stmt *st;
        int64_t v;

        ASSERT_TRUE(sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK);
        ASSERT_TRUE(sqlite3_step(st) == SQLITE_ROW);
        v = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
        return v;
}

/* The same as text ("(null)" for NULL), in buf. */
static inline void q_text(sqlite3 *db, const char *sql, char *buf, size_t size) {
        sqlite3_stmt *st;

        ASSERT_TRUE(sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK);
        ASSERT_TRUE(sqlite3_step(st) == SQLITE_ROW);
        snprintf(buf, size, "%s", (const char *) sqlite3_column_text(st, 0) ?: "(null)");
        sqlite3_finalize(st);
}
