/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>


#include "python-lines.h"

/* Lines are summed in 64 bits and kept within int32_t: the first line and the deltas come
 * from another process's memory. */
static int64_t line_add(int64_t line, int64_t delta) {
        int64_t sum = line + delta;

        return sum < INT32_MIN ? INT32_MIN : sum > INT32_MAX ? INT32_MAX : sum;
}

static int32_t line_value(int64_t line) {
        return line > 0 ? (int32_t) line : 0;
}

typedef struct Builder {
        EpPyLineEntry *e;
        uint32_t n, cap;
} Builder;

/* The line from start on is line (0: none). Merges with the last entry when possible. */
static int put(Builder *b, uint32_t start, int32_t line) {
        if (b->n > 0 && b->e[b->n - 1].start == start) {
                b->e[b->n - 1].line = line;
                if (b->n > 1 && b->e[b->n - 2].line == line)
                        b->n--;
                return 0;
        }
        if (b->n > 0 && b->e[b->n - 1].line == line)
                return 0;
        if (b->n == 0 && start > 0) {
                /* Nothing before the first range. */
                int k = put(b, 0, 0);
                if (k < 0)
                        return k;
        }
        if (b->n == b->cap) {
                uint32_t cap = b->cap ? b->cap * 2 : 16;
                EpPyLineEntry *e = reallocarray(b->e, cap, sizeof *e);
                if (!e)
                        return -ENOMEM;
                b->e = e;
                b->cap = cap;
        }
        b->e[b->n++] = (EpPyLineEntry) { .start = start, .line = line };
        return 0;
}

static int decode_lnotab(const uint8_t *t, size_t size, int32_t first, Builder *b, uint32_t *ret_end) {
        uint32_t addr = 0;
        int64_t line = first;
        int k;

        k = put(b, 0, line_value(line));
        for (size_t i = 0; k >= 0 && i + 1 < size; i += 2) {
                addr += t[i];
                line = line_add(line, (int8_t) t[i + 1]);
                if (addr >= EP_PY_LINES_MAX_OFFSET)
                        break;
                k = put(b, addr, line_value(line));
        }
        *ret_end = UINT32_MAX;
        return k;
}

static int decode_linetable(const uint8_t *t, size_t size, int32_t first, Builder *b, uint32_t *ret_end) {
        uint32_t end = 0;
        int64_t line = first;
        int k = 0;

        for (size_t i = 0; i + 1 < size; i += 2) {
                uint32_t start = end;
                int8_t delta = (int8_t) t[i + 1];

                end += t[i];
                if (delta != -128)
                        line = line_add(line, delta);
                if (start >= EP_PY_LINES_MAX_OFFSET)
                        break;
                if (end == start)
                        continue;
                k = put(b, start, delta == -128 ? 0 : line_value(line));
                if (k < 0)
                        return k;
        }
        *ret_end = end;
        return 0;
}

static bool varint(const uint8_t *t, size_t size, size_t *i, uint32_t *ret) {
        uint32_t v = 0;

        for (unsigned shift = 0; shift < 32; shift += 6) {
                if (*i >= size)
                        return false;
                uint8_t c = t[(*i)++];
                if (c & 0x80)
                        return false; /* the next entry's first byte */
                v |= (uint32_t) (c & 0x3f) << shift;
                if (!(c & 0x40)) {
                        *ret = v;
                        return true;
                }
        }
        return false;
}

static bool svarint(const uint8_t *t, size_t size, size_t *i, int32_t *ret) {
        uint32_t v;

        if (!varint(t, size, i, &v))
                return false;
        *ret = (v & 1) ? -(int32_t) (v >> 1) : (int32_t) (v >> 1);
        return true;
}

static int decode_locations(const uint8_t *t, size_t size, int32_t first, bool partial, Builder *b,
                            uint32_t *ret_end) {
        uint32_t end = 0, start = 0, skip;
        int64_t line = first;
        int32_t delta;
        size_t i = 0;
        int k;

        while (i < size && end < EP_PY_LINES_MAX_OFFSET) {
                uint8_t head = t[i++];
                unsigned code = (head >> 3) & 15;
                bool none = false;

                start = end;

                if (!(head & 0x80))
                        goto bad;
                end += 2 * ((head & 7) + 1);
                switch (code) {
                case 15:
                        none = true;
                        break;
                case 14:
                        if (!svarint(t, size, &i, &delta) || !varint(t, size, &i, &skip) ||
                            !varint(t, size, &i, &skip) || !varint(t, size, &i, &skip))
                                goto bad;
                        line = line_add(line, delta);
                        break;
                case 13:
                        if (!svarint(t, size, &i, &delta))
                                goto bad;
                        line = line_add(line, delta);
                        break;
                case 10:
                case 11:
                case 12:
                        if (i + 2 > size)
                                goto bad;
                        i += 2;
                        line = line_add(line, (int32_t) code - 10);
                        break;
                default:
                        if (i + 1 > size)
                                goto bad;
                        i += 1;
                        break;
                }
                k = put(b, start, none ? 0 : line_value(line));
                if (k < 0)
                        return k;
        }
        *ret_end = end;
        return 0;

bad:
        if (!partial)
                return -EBADMSG;
        /* A cut last entry: everything before it stands. */
        *ret_end = start;
        return 0;
}

int ep_py_lines_decode(EpPyLineTable kind, const uint8_t *table, size_t size, int32_t firstlineno,
                       int partial, EpPyLines *ret) {
        Builder b = {};
        uint32_t end = 0;
        int k;

        *ret = (EpPyLines) {};
        switch (kind) {
        case EP_PY_LINES_LNOTAB:
                k = decode_lnotab(table, size, firstlineno, &b, &end);
                break;
        case EP_PY_LINES_LINETABLE:
                k = decode_linetable(table, size, firstlineno, &b, &end);
                break;
        case EP_PY_LINES_LOCATIONS:
                k = decode_locations(table, size, firstlineno, partial, &b, &end);
                break;
        default:
                return -EPROTONOSUPPORT;
        }
        if (k < 0) {
                free(b.e);
                return k;
        }
        /* Trailing entries without a line add nothing to what "end" says. */
        while (b.n > 0 && b.e[b.n - 1].line == 0) {
                if (end == UINT32_MAX || b.e[b.n - 1].start < end)
                        end = b.e[b.n - 1].start;
                b.n--;
        }
        if (b.n == 0) {
                free(b.e);
                b.e = NULL;
                end = 0;
        } else if (b.n < b.cap) {
                EpPyLineEntry *e = reallocarray(b.e, b.n, sizeof *e);
                if (e)
                        b.e = e;
        }
        *ret = (EpPyLines) { .entries = b.e, .n = b.n, .end = end };
        return 0;
}

int32_t ep_py_lines_lookup(const EpPyLines *l, uint32_t offset) {
        uint32_t lo = 0, hi = l->n;

        if (l->n == 0 || offset >= l->end)
                return 0;
        /* The last entry starting at or before offset. */
        while (hi - lo > 1) {
                uint32_t mid = lo + (hi - lo) / 2;
                if (l->entries[mid].start <= offset)
                        lo = mid;
                else
                        hi = mid;
        }
        return l->entries[lo].start <= offset ? l->entries[lo].line : 0;
}

size_t ep_py_lines_memory(const EpPyLines *l) {
        return (size_t) l->n * sizeof(EpPyLineEntry);
}

void ep_py_lines_done(EpPyLines *l) {
        free(l->entries);
        *l = (EpPyLines) {};
}
