/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "byte-parse.h"
#include "grow-array.h"
#include "perf-map.h"
#include "utf8.h"

#define READ_CHUNK (64u << 10)
/* A file that keeps growing is read this far and no further (the loader refuses to open
 * maps bigger than 256 MiB, but the process may append after that). */
#define READ_MAX (1ull << 30)

/* One range of the lookup table, or one line parsed since the last build. seq orders lines
 * of the same build (file order, 1 = oldest); built ranges are all older (seq 0). */
typedef struct Range {
        uint64_t start, end; /* [start, end) */
        uint32_t name;       /* offset in names */
        uint32_t seq;
} Range;

struct EpPerfMap {
        EpPerfMapLimits limits;

        Range *ranges; /* disjoint, sorted by start */
        size_t n_ranges, cap_ranges;
        Range *pending; /* lines not in ranges yet, file order */
        size_t n_pending, cap_pending;

        char *names; /* NUL-terminated names, one after the other */
        size_t names_size, names_cap;

        uint64_t offset;    /* file offset of the first byte not parsed for good */
        uint64_t size_seen; /* file size at the last read */
        bool skip_line;     /* inside an over-long line: skip up to its newline */

        EpPerfMapStats stats;
};

int ep_perf_map_new(const EpPerfMapLimits *limits, EpPerfMap **ret) {
        EpPerfMap *m = calloc(1, sizeof(EpPerfMap));

        if (!m)
                return -ENOMEM;
        m->limits = limits ? *limits
                           : (EpPerfMapLimits) { .max_entries = EP_PERF_MAP_MAX_ENTRIES,
                                                 .max_name_bytes = EP_PERF_MAP_MAX_NAME_BYTES };
        *ret = m;
        return 0;
}

EpPerfMap *ep_perf_map_free(EpPerfMap *m) {
        if (!m)
                return NULL;
        free(m->ranges);
        free(m->pending);
        free(m->names);
        free(m);
        return NULL;
}

size_t ep_perf_map_entries(const EpPerfMap *m) {
        return m->n_ranges;
}

size_t ep_perf_map_memory(const EpPerfMap *m) {
        return sizeof(*m) + (m->cap_ranges + m->cap_pending) * sizeof(Range) + m->names_cap;
}

const EpPerfMapStats *ep_perf_map_stats(const EpPerfMap *m) {
        return &m->stats;
}

/* ---- one line ---- */

/* A hexadecimal number with an optional 0x at *p; advances *p past it. */
static bool parse_hex(const char **p, const char *end, uint64_t *ret) {
        const char *s = *p, *digits;
        uint64_t v = 0;

        if (end - s >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
                s += 2;
        for (digits = s; s < end && ep_hex_digit(*s) >= 0; s++) {
                if (v >> 60)
                        return false; /* more than 64 bits */
                v = v << 4 | (uint64_t) ep_hex_digit(*s);
        }
        if (s == digits)
                return false;
        *p = s;
        *ret = v;
        return true;
}

static bool is_blank(char c) {
        return c == ' ' || c == '\t';
}

/* Names end up in the store, in views and in OTLP strings, which must be UTF-8 without
 * control characters (a tab is allowed). */
static bool name_valid(const unsigned char *s, size_t n) {
        for (size_t i = 0; i < n;) {
                uint32_t cp;
                size_t len = ep_utf8_char(s + i, n - i, &cp);

                if (len == 0 || (cp < 0x20 && cp != '\t') || cp == 0x7f)
                        return false;
                i += len;
        }
        return true;
}

/* "START SIZE NAME" → [start, end) and the name (not NUL-terminated). Returns false when the
 * line is malformed. */
static bool parse_line(const char *s, size_t len, uint64_t *ret_start, uint64_t *ret_end,
                       const char **ret_name, size_t *ret_name_len) {
        const char *end = s + len;
        uint64_t start, size;

        if (!parse_hex(&s, end, &start) || s == end || !is_blank(*s))
                return false;
        while (s < end && is_blank(*s))
                s++;
        if (!parse_hex(&s, end, &size) || s == end || !is_blank(*s))
                return false;
        while (s < end && is_blank(*s))
                s++;
        if (s == end || size == 0 || start == UINT64_MAX)
                return false;
        if (!name_valid((const unsigned char *) s, (size_t) (end - s)))
                return false;

        *ret_start = start;
        /* A size past the end of the address space covers up to its end. */
        *ret_end = size > UINT64_MAX - start ? UINT64_MAX : start + size;
        *ret_name = s;
        *ret_name_len = (size_t) (end - s);
        return true;
}

static int compare_u32(const void *a, const void *b) {
        uint32_t x = *(const uint32_t *) a, y = *(const uint32_t *) b;
        return x < y ? -1 : x > y;
}

/* Copies the names still referenced into a new buffer, dropping those of lines overridden
 * completely. Only when the name budget is exhausted: JITs that re-use addresses forever
 * would otherwise stop being named. */
static int compact_names(EpPerfMap *m) {
        _cleanup_free_ uint32_t *offs = NULL;
        _cleanup_free_ char *names = NULL;
        size_t n = 0, u = 0, size = 0;

        offs = malloc((m->n_ranges + m->n_pending + 1) * sizeof(uint32_t));
        if (!offs)
                return -ENOMEM;
        for (size_t i = 0; i < m->n_ranges; i++)
                offs[n++] = m->ranges[i].name;
        for (size_t i = 0; i < m->n_pending; i++)
                offs[n++] = m->pending[i].name;
        qsort(offs, n, sizeof(uint32_t), compare_u32);
        for (size_t i = 0; i < n; i++)
                if (u == 0 || offs[u - 1] != offs[i]) {
                        offs[u++] = offs[i];
                        size += strlen(m->names + offs[i]) + 1;
                }

        names = malloc(MAX(size, (size_t) 1));
        if (!names)
                return -ENOMEM;
        /* offs[i] moves to the offset the i-th kept name gets; remap through a search. */
        _cleanup_free_ uint32_t *new_offs = malloc(MAX(u, (size_t) 1) * sizeof(uint32_t));
        if (!new_offs)
                return -ENOMEM;
        size = 0;
        for (size_t i = 0; i < u; i++) {
                size_t l = strlen(m->names + offs[i]) + 1;
                memcpy(names + size, m->names + offs[i], l);
                new_offs[i] = (uint32_t) size;
                size += l;
        }
        for (size_t pass = 0; pass < 2; pass++) {
                Range *r = pass == 0 ? m->ranges : m->pending;
                size_t nr = pass == 0 ? m->n_ranges : m->n_pending;

                for (size_t i = 0; i < nr; i++) {
                        uint32_t *hit = bsearch(&r[i].name, offs, u, sizeof(uint32_t), compare_u32);
                        r[i].name = new_offs[hit - offs];
                }
        }
        free(m->names);
        m->names = TAKE_PTR(names);
        m->names_size = m->names_cap = size;
        return 0;
}

static int add_name(EpPerfMap *m, const char *name, size_t len, uint32_t *ret) {
        size_t need = len + 1;
        int r;

        if (need > m->limits.max_name_bytes - MIN(m->names_size, (size_t) m->limits.max_name_bytes)) {
                r = compact_names(m);
                if (r < 0)
                        return r;
                if (need > m->limits.max_name_bytes - MIN(m->names_size, (size_t) m->limits.max_name_bytes))
                        return -ENOSPC;
        }
        r = ARRAY_RESERVE(m->names, m->names_cap, m->names_size + need);
        if (r < 0)
                return r;
        memcpy(m->names + m->names_size, name, len);
        m->names[m->names_size + len] = 0;
        *ret = (uint32_t) m->names_size;
        m->names_size += need;
        return 0;
}

/* One line without its newline. Returns 0 or -ENOMEM. */
static int add_line(EpPerfMap *m, const char *line, size_t len) {
        uint64_t start, end;
        const char *name;
        size_t name_len;
        uint32_t off;
        int r;

        /* Trailing blanks and a CR (a map written on another system) are not part of the name. */
        while (len > 0 && (is_blank(line[len - 1]) || line[len - 1] == '\r'))
                len--;
        if (len == 0)
                return 0;
        m->stats.lines++;
        if (len > EP_PERF_MAP_LINE_MAX || !parse_line(line, len, &start, &end, &name, &name_len)) {
                m->stats.malformed++;
                return 0;
        }
        /* Splitting an old range can add one more; bounded by about twice the limit. */
        if (m->n_ranges + m->n_pending >= m->limits.max_entries || m->n_pending >= UINT32_MAX - 1) {
                m->stats.dropped++;
                return 0;
        }
        r = add_name(m, name, name_len, &off);
        if (r == -ENOSPC) {
                m->stats.dropped++;
                return 0;
        }
        if (r < 0)
                return r;
        r = ARRAY_RESERVE(m->pending, m->cap_pending, m->n_pending + 1);
        if (r < 0)
                return r;
        m->pending[m->n_pending] = (Range) {
                .start = start,
                .end = end,
                .name = off,
                .seq = (uint32_t) m->n_pending + 1,
        };
        m->n_pending++;
        m->stats.added++;
        return 0;
}

/* Parses the complete lines of buf (skipping the rest of an over-long line first); returns
 * how many bytes that was (up to and including the last newline), or -ENOMEM. */
static ssize_t add_lines(EpPerfMap *m, const char *buf, size_t size) {
        size_t pos = 0;
        int r;

        for (;;) {
                const char *nl = memchr(buf + pos, '\n', size - pos);
                size_t len;

                if (!nl)
                        return (ssize_t) pos;
                len = (size_t) (nl - (buf + pos));
                if (m->skip_line)
                        m->skip_line = false;
                else {
                        r = add_line(m, buf + pos, len);
                        if (r < 0)
                                return r;
                }
                pos += len + 1;
        }
}

/* ---- the lookup table ---- */

static int compare_range(const void *a, const void *b) {
        const Range *x = a, *y = b;

        if (x->start != y->start)
                return x->start < y->start ? -1 : 1;
        return x->seq < y->seq ? -1 : x->seq > y->seq;
}

typedef struct Heap {
        const Range *items;
        uint32_t *v; /* indices into items; max seq on top */
        size_t n;
} Heap;

static bool heap_less(const Heap *h, size_t a, size_t b) {
        return h->items[h->v[a]].seq < h->items[h->v[b]].seq;
}

static void heap_swap(Heap *h, size_t a, size_t b) {
        uint32_t t = h->v[a];
        h->v[a] = h->v[b];
        h->v[b] = t;
}

static void heap_push(Heap *h, uint32_t idx) {
        size_t i = h->n++;

        h->v[i] = idx;
        while (i > 0 && heap_less(h, (i - 1) / 2, i)) {
                heap_swap(h, (i - 1) / 2, i);
                i = (i - 1) / 2;
        }
}

static void heap_pop(Heap *h) {
        size_t i = 0;

        h->v[0] = h->v[--h->n];
        for (;;) {
                size_t l = 2 * i + 1, r = l + 1, top = i;

                if (l < h->n && heap_less(h, top, l))
                        top = l;
                if (r < h->n && heap_less(h, top, r))
                        top = r;
                if (top == i)
                        return;
                heap_swap(h, i, top);
                i = top;
        }
}

static int emit(Range **out, size_t *n, size_t *cap, uint64_t start, uint64_t end, uint32_t name) {
        Range *last = *n > 0 ? &(*out)[*n - 1] : NULL;
        int r;

        if (last && last->end == start && last->name == name) {
                last->end = end;
                return 0;
        }
        r = ARRAY_RESERVE(*out, *cap, *n + 1);
        if (r < 0)
                return r;
        (*out)[(*n)++] = (Range) { .start = start, .end = end, .name = name };
        return 0;
}

/* Folds the pending lines into the table: a sweep over all ranges by start, with the ranges
 * covering the current point in a heap by age; the newest one names the point. */
static int build(EpPerfMap *m) {
        _cleanup_free_ Range *all = NULL, *out = NULL;
        _cleanup_free_ uint32_t *heap_v = NULL;
        size_t n, n_out = 0, cap_out = 0, i = 0, a = 0, b = 0;
        uint64_t p = 0;
        int r;

        if (m->n_pending == 0)
                return 0;
        qsort(m->pending, m->n_pending, sizeof(Range), compare_range);

        n = m->n_ranges + m->n_pending;
        all = malloc(n * sizeof(Range));
        heap_v = malloc(n * sizeof(uint32_t));
        if (!all || !heap_v)
                return -ENOMEM;
        /* Both are sorted by start: merge. Built ranges (seq 0) go first on equal starts. */
        while (a < m->n_ranges || b < m->n_pending) {
                if (b >= m->n_pending || (a < m->n_ranges && m->ranges[a].start <= m->pending[b].start))
                        all[i++] = m->ranges[a++];
                else
                        all[i++] = m->pending[b++];
        }

        Heap h = { .items = all, .v = heap_v };
        i = 0;
        while (i < n || h.n > 0) {
                if (h.n == 0)
                        p = all[i].start; /* a gap no range covers */
                while (i < n && all[i].start <= p)
                        heap_push(&h, (uint32_t) i++);
                /* Ranges that ended leave when they reach the top; others cannot be the
                 * newest while a newer one covers the point. */
                while (h.n > 0 && all[h.v[0]].end <= p)
                        heap_pop(&h);
                if (h.n == 0)
                        continue;

                const Range *w = &all[h.v[0]];
                uint64_t next = w->end;
                if (i < n && all[i].start < next)
                        next = all[i].start;
                r = emit(&out, &n_out, &cap_out, p, next, w->name);
                if (r < 0)
                        return r;
                p = next;
        }

        free(m->ranges);
        m->ranges = TAKE_PTR(out);
        m->n_ranges = n_out;
        m->cap_ranges = cap_out;
        m->n_pending = 0;
        return 0;
}

const char *ep_perf_map_lookup(const EpPerfMap *m, uint64_t addr, uint64_t *ret_start) {
        size_t lo = 0, hi = m->n_ranges;

        /* The last range starting at or before addr. */
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (m->ranges[mid].start <= addr)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        if (lo == 0 || addr >= m->ranges[lo - 1].end)
                return NULL;
        if (ret_start)
                *ret_start = m->ranges[lo - 1].start;
        return m->names + m->ranges[lo - 1].name;
}

/* ---- input ---- */

int ep_perf_map_add_text(EpPerfMap *m, const char *text, size_t size) {
        ssize_t done;
        int r;

        done = add_lines(m, text, size);
        if (done < 0) {
                r = (int) done;
                goto finish;
        }
        r = 0;
        if (m->skip_line)
                m->skip_line = false; /* the rest of an over-long line, now ended */
        else if ((size_t) done < size)
                r = add_line(m, text + done, size - (size_t) done);
finish:
        m->stats.bytes += size;
        /* Keep what was parsed usable even after running out of memory. */
        int k = build(m);
        if (k < 0) {
                m->n_pending = 0;
                return k;
        }
        return r;
}

static void reset(EpPerfMap *m) {
        m->n_ranges = m->n_pending = 0;
        m->names_size = 0;
        m->offset = m->size_seen = 0;
        m->skip_line = false;
        m->stats.rereads++;
}

/* Reads [m->offset, size) and parses what it can; sets *ret_tail to the bytes of a last line
 * without a newline, left in buf[0..*ret_tail). */
static int read_lines(EpPerfMap *m, int fd, uint64_t size, char *buf, size_t *ret_tail) {
        uint64_t pos = m->offset; /* file offset of buf[0] */
        size_t have = 0;

        while (pos + have < size) {
                size_t want = (size_t) MIN((uint64_t) READ_CHUNK, size - (pos + have));
                ssize_t k = pread(fd, buf + have, want, (off_t) (pos + have));
                ssize_t done;

                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (k == 0)
                        break; /* shrank meanwhile: the next read notices */
                have += (size_t) k;
                m->stats.bytes += (uint64_t) k;

                done = add_lines(m, buf, have);
                if (done < 0)
                        return (int) done;
                memmove(buf, buf + done, have - (size_t) done);
                pos += (uint64_t) done;
                have -= (size_t) done;
                if (m->skip_line || have > EP_PERF_MAP_LINE_MAX) {
                        /* Inside a line too long to be one: skip the rest of it. */
                        if (!m->skip_line) {
                                m->stats.lines++;
                                m->stats.malformed++;
                        }
                        m->skip_line = true;
                        pos += have;
                        have = 0;
                }
        }
        m->offset = pos;
        m->size_seen = pos + have;
        *ret_tail = have;
        return 0;
}

int ep_perf_map_read(EpPerfMap *m, int fd, bool *ret_changed) {
        _cleanup_free_ char *buf = NULL;
        size_t tail = 0;
        struct stat st;
        uint64_t size;
        int r, k;

        if (ret_changed)
                *ret_changed = false;
        if (fstat(fd, &st) < 0)
                return -errno;
        size = (uint64_t) MAX(st.st_size, (off_t) 0);
        if (size < m->size_seen)
                reset(m); /* rewritten: the old table does not describe it */
        size = MIN(size, (uint64_t) READ_MAX);
        if (size <= m->size_seen)
                return 0;

        buf = malloc(READ_CHUNK + EP_PERF_MAP_LINE_MAX + 1);
        if (!buf)
                return -ENOMEM;
        r = read_lines(m, fd, size, buf, &tail);
        /* The last line may be half written: use it now, parse it again once it grows (the
         * complete line is newer and wins). Its malformation is counted then. */
        if (r >= 0 && tail > 0) {
                uint64_t malformed = m->stats.malformed, lines = m->stats.lines;
                r = add_line(m, buf, tail);
                m->stats.malformed = malformed;
                m->stats.lines = lines;
        }
        k = build(m);
        if (k < 0) {
                m->n_pending = 0;
                r = r < 0 ? r : k;
        }
        if (ret_changed)
                *ret_changed = true;
        return r;
}
