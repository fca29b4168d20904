/* SPDX-License-Identifier: MIT */
#pragma once

/* The store's schema as version 1 shipped it (docs/ARCHITECTURE.md, "Local store"). Stores of
 * that version exist on disk: the migration tests start from it, and the CLI's synthetic test
 * store is written with it, so readers are checked against the oldest layout they accept. */

static const char schema_v1_sql[] =
        "CREATE TABLE files(id INTEGER PRIMARY KEY, file_id BLOB NOT NULL UNIQUE, path TEXT,"
        "                   gnu_build_id BLOB, go_build_id TEXT);"
        "CREATE TABLE frames(id INTEGER PRIMARY KEY, kind INTEGER NOT NULL, file INTEGER NOT NULL,"
        "                    addr INTEGER NOT NULL, elf_addr INTEGER, module TEXT, status INTEGER,"
        "                    UNIQUE(kind, file, addr));"
        "CREATE TABLE frame_lines(frame INTEGER NOT NULL, depth INTEGER NOT NULL,"
        "                         function TEXT, source_file TEXT, line INTEGER,"
        "                         PRIMARY KEY(frame, depth)) WITHOUT ROWID;"
        "CREATE TABLE stacks(id INTEGER PRIMARY KEY, hash BLOB NOT NULL UNIQUE, frames BLOB NOT NULL);"
        "CREATE TABLE processes(id INTEGER PRIMARY KEY, pid INTEGER NOT NULL, start_time_ns INTEGER,"
        "                       comm TEXT, exe TEXT, container_id TEXT, UNIQUE(pid, start_time_ns));"
        "CREATE TABLE intervals(id INTEGER PRIMARY KEY, start_ns INTEGER NOT NULL,"
        "                       end_ns INTEGER NOT NULL, period_ns INTEGER NOT NULL);"
        "CREATE INDEX intervals_by_start ON intervals(start_ns);"
        "CREATE TABLE samples(interval INTEGER NOT NULL, process INTEGER NOT NULL, tid INTEGER NOT NULL,"
        "                     thread_name TEXT, stack INTEGER NOT NULL, count INTEGER NOT NULL,"
        "                     PRIMARY KEY(interval, process, tid, stack)) WITHOUT ROWID;";

