/* SPDX-License-Identifier: MIT */
#include <string.h>

#include "array.h"
#include "files.h"
#include "macro.h"

int file_table_init(FileTable *t) {
        *t = (FileTable) {};
        t->by_id = ep_hashmap_new(EP_FILE_ID_SIZE, sizeof(uint32_t));
        t->by_key = ep_hashmap_new(sizeof(uint32_t), sizeof(uint32_t));
        if (!t->by_id || !t->by_key || ARRAY_RESERVE(t->items, t->cap, 64) < 0) {
                file_table_done(t);
                return -ENOMEM;
        }
        t->items[0] = (FileEntry) {};
        t->n = 1;
        return 0;
}

void file_table_done(FileTable *t) {
        for (size_t i = 0; i < t->n; i++) {
                free(t->items[i].path);
                free(t->items[i].go_build_id);
        }
        free(t->items);
        ep_hashmap_free(t->by_id);
        ep_hashmap_free(t->by_key);
        *t = (FileTable) {};
}

int file_table_intern(FileTable *t, const uint8_t file_id[EP_FILE_ID_SIZE],
                      const uint8_t htlhash[EP_FILE_ID_SIZE], const char *path, uint64_t size, uint32_t *ret_idx) {
        uint32_t *v;
        int r;

        r = INTERN_FIND_OR_RESERVE(t->by_id, file_id, t->items, t->cap, t->n, ret_idx);
        if (r <= 0)
                return r;
        FileEntry *f = &t->items[t->n];
        *f = (FileEntry) { .size = size };
        memcpy(f->file_id, file_id, EP_FILE_ID_SIZE);
        memcpy(f->htlhash, htlhash, EP_FILE_ID_SIZE);
        f->path = strdup(path ?: "");
        if (!f->path)
                return -ENOMEM;

        r = ep_hashmap_put(t->by_id, file_id, (void **) &v);
        if (r < 0) {
                free(f->path);
                return r;
        }
        *v = (uint32_t) t->n;
        *ret_idx = (uint32_t) t->n++;
        return 1;
}

int file_table_bind_key(FileTable *t, uint32_t file_key, uint32_t idx) {
        uint32_t *v;
        int r;

        r = ep_hashmap_put(t->by_key, &file_key, (void **) &v);
        if (r < 0)
                return r;
        *v = idx;
        return 0;
}

uint32_t file_table_by_key(const FileTable *t, uint32_t file_key) {
        const uint32_t *v = ep_hashmap_get(t->by_key, &file_key);
        return v ? *v : 0;
}

uint32_t file_table_by_id(const FileTable *t, const uint8_t file_id[EP_FILE_ID_SIZE]) {
        const uint32_t *v = ep_hashmap_get(t->by_id, file_id);
        return v ? *v : 0;
}

void file_table_reset_keys(FileTable *t) {
        ep_hashmap_clear(t->by_key);
}
