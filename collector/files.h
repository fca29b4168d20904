/* SPDX-License-Identifier: MIT */
#pragma once

/* Files the collector has heard of, named by file ID. The loader's file_key is only an alias
 * valid for one trace-ring session (file_table_reset_keys() when the ring is re-opened). Index 0
 * means "no file" (kernel and other non-native frames). */

#include <stdbool.h>
#include <stdint.h>

#include "hashmap.h"
#include "wire.h"

typedef struct FileEntry {
        uint8_t file_id[EP_FILE_ID_SIZE];
        uint8_t htlhash[EP_FILE_ID_SIZE]; /* what OTLP backends know it by (file-id.h) */
        uint64_t size;
        char *path;
        char *go_build_id;
        uint8_t gnu_build_id[EP_BUILD_ID_MAX];
        uint8_t gnu_build_id_len;
        uint8_t sym_state; /* SymState: the EP_MSG_SYM_FILE_REQUEST */
        uint8_t status;    /* EP_SYM_* once answered */
        bool store_dirty;  /* build IDs arrived after the row was written */
        uint8_t retries;   /* EP_SYM_RETRY answers so far: the back-off of the next ask */
        int64_t store_id;  /* files.id, 0 while not in the store */
        uint64_t mark;     /* interval seq that last collected it (see interval refs) */
} FileEntry;

typedef struct FileTable {
        FileEntry *items; /* items[0] is the "no file" placeholder */
        size_t n, cap;
        EpHashmap *by_id;  /* file_id → u32 index */
        EpHashmap *by_key; /* loader file_key → u32 index */
} FileTable;

int file_table_init(FileTable *t);
void file_table_done(FileTable *t);

/* Returns 1 when the file ID is new, 0 when known; *ret_idx either way. */
int file_table_intern(FileTable *t, const uint8_t file_id[EP_FILE_ID_SIZE],
                      const uint8_t htlhash[EP_FILE_ID_SIZE], const char *path, uint64_t size, uint32_t *ret_idx);
int file_table_bind_key(FileTable *t, uint32_t file_key, uint32_t idx);
/* 0 when the key was never announced in this session. */
uint32_t file_table_by_key(const FileTable *t, uint32_t file_key);
/* 0 when the collector never heard of that file. */
uint32_t file_table_by_id(const FileTable *t, const uint8_t file_id[EP_FILE_ID_SIZE]);
void file_table_reset_keys(FileTable *t);

static inline FileEntry *file_table_get(FileTable *t, uint32_t idx) {
        return idx < t->n ? &t->items[idx] : NULL;
}
