/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sys/stat.h>
#include <zlib.h>

#include "log.h"
#include "profile-model.h"
#include "spool.h"

#define SPOOL_MAGIC "EPSPOOL1"
#define SPOOL_SUFFIX ".req"
#define SPOOL_TMP_PREFIX ".tmp-"
#define SPOOL_NAME_MAX 32

typedef struct SpoolEntry {
        uint64_t seq;
        uint64_t bytes; /* header included */
        void *mem;      /* payload, in-memory spool only */
} SpoolEntry;

struct Spool {
        char *dir;
        int dir_fd;
        uint64_t max_bytes, bytes, next_seq;
        SpoolEntry *entries; /* sorted by seq; live ones are [first, n) */
        size_t first, n, cap;
};

static void entry_name(uint64_t seq, char ret[static SPOOL_NAME_MAX]) {
        snprintf(ret, SPOOL_NAME_MAX, "%016" PRIx64 SPOOL_SUFFIX, seq);
}

/* "<16 hex digits>.req" → seq; anything else is not ours. */
static bool parse_name(const char *name, uint64_t *ret) {
        char *end;

        if (strlen(name) != 16 + strlen(SPOOL_SUFFIX) || !streq(name + 16, SPOOL_SUFFIX))
                return false;
        for (size_t i = 0; i < 16; i++)
                if (!strchr("0123456789abcdef", name[i]))
                        return false;
        *ret = strtoull(name, &end, 16);
        return end == name + 16;
}

size_t spool_files(const Spool *s) {
        return s ? s->n - s->first : 0;
}

uint64_t spool_bytes(const Spool *s) {
        return s ? s->bytes : 0;
}

const char *spool_dir(const Spool *s) {
        return s ? s->dir : NULL;
}

static int push_entry(Spool *s, uint64_t seq, uint64_t bytes, void *mem) {
        int r;

        /* Reuse the room of entries already consumed at the front before growing. */
        if (s->first > 0 && s->n == s->cap) {
                memmove(s->entries, s->entries + s->first, (s->n - s->first) * sizeof *s->entries);
                s->n -= s->first;
                s->first = 0;
        }
        r = exp_grow((void **) &s->entries, &s->cap, s->n + 1, sizeof *s->entries);
        if (r < 0)
                return r;
        s->entries[s->n++] = (SpoolEntry) { .seq = seq, .bytes = bytes, .mem = mem };
        s->bytes += bytes;
        return 0;
}

static void unlink_entry(Spool *s, uint64_t seq) {
        char name[SPOOL_NAME_MAX];

        if (s->dir_fd < 0)
                return;
        entry_name(seq, name);
        if (unlinkat(s->dir_fd, name, 0) < 0 && errno != ENOENT)
                log_once_errno(LOG_WARNING, errno, "Cannot delete spool file %s/%s: %m", s->dir, name);
}

/* Forgets entry i (an index into entries) and deletes its file. */
static void drop_entry(Spool *s, size_t i) {
        SpoolEntry *en = &s->entries[i];

        unlink_entry(s, en->seq);
        free(en->mem);
        s->bytes -= en->bytes;
        if (i == s->first)
                s->first++;
        else {
                memmove(en, en + 1, (s->n - i - 1) * sizeof *en);
                s->n--;
        }
        if (s->first == s->n)
                s->first = s->n = 0;
}

static int cmp_entry(const void *a, const void *b) {
        const SpoolEntry *x = a, *y = b;
        return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Indexes the requests left by an earlier run; temp files are unfinished writes: gone. */
static int scan_dir(Spool *s) {
        DIR *d;
        struct dirent *de;
        int fd, r = 0;

        fd = openat(s->dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        d = fdopendir(fd);
        if (!d) {
                r = -errno;
                close(fd);
                return r;
        }
        while ((errno = 0, de = readdir(d))) {
                struct stat st;
                uint64_t seq;

                if (startswith(de->d_name, SPOOL_TMP_PREFIX)) {
                        log_debug("Removing unfinished spool file %s/%s", s->dir, de->d_name);
                        (void) unlinkat(s->dir_fd, de->d_name, 0);
                        continue;
                }
                if (!parse_name(de->d_name, &seq) ||
                    fstatat(s->dir_fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
                        continue;
                r = push_entry(s, seq, (uint64_t) st.st_size, NULL);
                if (r < 0)
                        break;
                s->next_seq = MAX(s->next_seq, seq + 1);
        }
        if (r == 0 && errno)
                r = -errno;
        closedir(d);
        if (r < 0)
                return r;
        if (s->n > 0)
                qsort(s->entries, s->n, sizeof *s->entries, cmp_entry);
        return 0;
}

int spool_open(const char *dir, uint64_t max_bytes, Spool **ret) {
        _cleanup_(spool_freep) Spool *s = NULL;
        int r;

        s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        *s = (Spool) { .dir_fd = -EBADF, .max_bytes = max_bytes, .next_seq = 1 };
        if (dir) {
                s->dir = strdup(dir);
                if (!s->dir)
                        return -ENOMEM;
                if (mkdir(dir, 0700) < 0 && errno != EEXIST)
                        return -errno;
                s->dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (s->dir_fd < 0)
                        return -errno;
                r = scan_dir(s);
                if (r < 0)
                        return r;
        }
        *ret = TAKE_PTR(s);
        return 0;
}

Spool *spool_free(Spool *s) {
        if (!s)
                return NULL;
        for (size_t i = s->first; i < s->n; i++)
                free(s->entries[i].mem);
        free(s->entries);
        (void) close_nointr(s->dir_fd);
        free(s->dir);
        free(s);
        return NULL;
}

static void put_le(uint8_t *p, uint64_t v, unsigned n) {
        for (unsigned i = 0; i < n; i++)
                p[i] = (uint8_t) (v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, unsigned n) {
        uint64_t v = 0;
        for (unsigned i = 0; i < n; i++)
                v |= (uint64_t) p[i] << (8 * i);
        return v;
}

static uint32_t payload_crc(const void *data, size_t size) {
        uLong crc = crc32(0, Z_NULL, 0);

        /* zlib takes uInt lengths. */
        for (size_t off = 0; off < size;) {
                uInt k = (uInt) MIN(size - off, (size_t) (1u << 30));
                crc = crc32(crc, (const Bytef *) data + off, k);
                off += k;
        }
        return (uint32_t) crc;
}

static int write_all(int fd, const void *p, size_t n) {
        while (n > 0) {
                ssize_t k = write(fd, p, n);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                p = (const uint8_t *) p + k;
                n -= (size_t) k;
        }
        return 0;
}

/* temp name, fsync, rename, fsync the directory: after a crash the final name holds either
 * nothing or the whole request. */
static int write_file(Spool *s, uint64_t seq, const void *data, size_t size) {
        char tmp[SPOOL_NAME_MAX + 8], name[SPOOL_NAME_MAX];
        uint8_t hdr[SPOOL_HEADER_SIZE] = {};
        _cleanup_close_ int fd = -EBADF;
        int r;

        snprintf(tmp, sizeof tmp, SPOOL_TMP_PREFIX "%016" PRIx64, seq);
        entry_name(seq, name);
        memcpy(hdr, SPOOL_MAGIC, 8);
        put_le(hdr + 8, size, 8);
        put_le(hdr + 16, payload_crc(data, size), 4);

        fd = openat(s->dir_fd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
                return -errno;
        r = write_all(fd, hdr, sizeof hdr);
        if (r >= 0)
                r = write_all(fd, data, size);
        if (r >= 0 && fsync(fd) < 0)
                r = -errno;
        if (r >= 0 && renameat(s->dir_fd, tmp, s->dir_fd, name) < 0)
                r = -errno;
        if (r < 0) {
                (void) unlinkat(s->dir_fd, tmp, 0);
                return r;
        }
        (void) fsync(s->dir_fd);
        return 0;
}

int spool_append(Spool *s, const void *data, size_t size, unsigned *ret_dropped) {
        uint64_t bytes = SPOOL_HEADER_SIZE + (uint64_t) size, seq = s->next_seq;
        _cleanup_free_ void *mem = NULL;
        unsigned dropped = 0;
        int r;

        if (bytes > s->max_bytes)
                return -EFBIG;
        while (spool_files(s) > 0 && s->bytes + bytes > s->max_bytes) {
                drop_entry(s, s->first);
                dropped++;
        }
        if (ret_dropped)
                *ret_dropped = dropped;

        if (s->dir_fd >= 0)
                r = write_file(s, seq, data, size);
        else {
                mem = malloc(MAX(size, (size_t) 1));
                r = mem ? 0 : -ENOMEM;
                if (mem)
                        memcpy(mem, data, size);
        }
        if (r < 0)
                return r;
        r = push_entry(s, seq, bytes, mem);
        if (r < 0) {
                unlink_entry(s, seq);
                return r;
        }
        TAKE_PTR(mem);
        s->next_seq++;
        return 0;
}

/* 0 and the payload, or -EBADMSG for a file that is not a complete spool record. */
static int read_file(Spool *s, uint64_t seq, void **ret_data, size_t *ret_size) {
        char name[SPOOL_NAME_MAX];
        uint8_t hdr[SPOOL_HEADER_SIZE];
        _cleanup_close_ int fd = -EBADF;
        _cleanup_free_ void *data = NULL;
        struct stat st;
        uint64_t size;
        ssize_t k;

        entry_name(seq, name);
        fd = openat(s->dir_fd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0 || fstat(fd, &st) < 0)
                return -errno;
        k = pread(fd, hdr, sizeof hdr, 0);
        if (k < 0)
                return -errno;
        if (k != sizeof hdr || memcmp(hdr, SPOOL_MAGIC, 8) != 0)
                return -EBADMSG;
        size = get_le(hdr + 8, 8);
        if (size != (uint64_t) st.st_size - SPOOL_HEADER_SIZE || size > SIZE_MAX)
                return -EBADMSG;
        data = malloc(MAX((size_t) size, (size_t) 1));
        if (!data)
                return -ENOMEM;
        k = pread(fd, data, size, SPOOL_HEADER_SIZE);
        if (k < 0)
                return -errno;
        if ((uint64_t) k != size || get_le(hdr + 16, 4) != payload_crc(data, size))
                return -EBADMSG;
        *ret_data = TAKE_PTR(data);
        *ret_size = size;
        return 0;
}

int spool_peek(Spool *s, void **ret_data, size_t *ret_size, uint64_t *ret_seq, unsigned *ret_corrupt) {
        while (spool_files(s) > 0) {
                SpoolEntry *en = &s->entries[s->first];
                int r;

                if (!s->dir) {
                        size_t size = en->bytes - SPOOL_HEADER_SIZE;
                        void *copy = malloc(MAX(size, (size_t) 1));
                        if (!copy)
                                return -ENOMEM;
                        memcpy(copy, en->mem, size);
                        *ret_data = copy;
                        *ret_size = size;
                        *ret_seq = en->seq;
                        return 1;
                }
                r = read_file(s, en->seq, ret_data, ret_size);
                if (r >= 0) {
                        *ret_seq = en->seq;
                        return 1;
                }
                if (r == -ENOMEM)
                        return r;
                /* Unreadable or damaged: nothing to replay from it; skip it so it cannot block
                 * everything behind it. */
                log_once_errno(LOG_WARNING, r, "Skipping unreadable spool file %s/%016" PRIx64 SPOOL_SUFFIX ": %m",
                               s->dir, en->seq);
                log_debug_errno(r, "Deleting spool file %016" PRIx64 SPOOL_SUFFIX ": %m", en->seq);
                drop_entry(s, s->first);
                if (ret_corrupt)
                        (*ret_corrupt)++;
        }
        return 0;
}

static SpoolEntry *find_entry(const Spool *s, uint64_t seq) {
        SpoolEntry key = { .seq = seq };

        return bsearch(&key, s->entries + s->first, s->n - s->first, sizeof key, cmp_entry);
}

bool spool_contains(const Spool *s, uint64_t seq) {
        return find_entry(s, seq) != NULL;
}

int spool_remove(Spool *s, uint64_t seq) {
        SpoolEntry *en = find_entry(s, seq);

        if (en)
                drop_entry(s, (size_t) (en - s->entries));
        return 0;
}
