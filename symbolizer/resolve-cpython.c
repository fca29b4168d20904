/* SPDX-License-Identifier: MIT */
/* CPython frames: an EP_FRAME_CPYTHON request names a code object by its address in process
 * pid (started at start_time_ns) and the byte offset of an instruction in its bytecode
 * (EP_FRAME_CPYTHON_ADDR). The answer is one line: co_qualname (3.11+) or co_name, co_filename
 * and the instruction's line from co_lnotab / co_linetable (python-lines.c).
 *
 * Per process (pid + start time, an LRU of EP_PY_MAX_PROCESSES): the descriptor of
 * /proc/PID/mem and the CPython version from Loader1.OpenProcessMemory, the layout of that
 * version, and the addresses of the types "code", "str" and "bytes" once seen. A process the
 * loader says runs no runtime (it hands out the memory of no other: unwinder-loader/
 * process-memory.c), or that is gone, is remembered for EP_PY_MISSING_RETRY_NS and answered
 * NO_FILE; a version without layout BAD_FILE; a loader that did not answer (away, timed out)
 * or does not know yet what the process runs, RETRY, remembered for nothing.
 *
 * All of that belongs to one image of the process: an exec keeps the pid and the start time
 * but brings another program, maybe another CPython or none. The descriptor tells: it reads
 * the address space it was opened on, and once that is gone (exit or exec) every read of it
 * returns 0 bytes, where an unmapped address of a live one fails with EIO (image_gone()).
 * So a descriptor is kept whatever runtime the loader named, a read that fails asks whether
 * its image is gone, so does every request while the process is not CPython, and a gone image
 * drops the process's code objects and asks the loader again at once: the new image's frames
 * are read with its own version's layout. A process that runs no runtime has no descriptor: an
 * exec of it back into CPython within EP_PY_MISSING_RETRY_NS is seen when that ends. A frame
 * of the old image asked after the exec is read in the new one (requests carry no image):
 * NOT_FOUND, as a code object gone.
 *
 * Code objects (an LRU of EP_PY_MAX_CODES within EP_PY_CODE_BUDGET bytes, keyed by process and
 * address): names and the decoded line table. A code object can be freed and its memory
 * reused, so every lookup reads its header again: the object's type must be the "code" type
 * (learned through tp_name the first time), and the pointers to its names and line table and
 * its first line must be those decoded, else it is decoded again. The strings must be of type
 * "str", the table of type "bytes". Anything else — no code object there, an unreadable
 * address — answers NOT_FOUND without lines (counted), never another object's name. Results
 * are cacheable by the resolver's result cache (keyed by pid, start time and address, never
 * persisted); a code object replaced at the same address after it was named keeps the first
 * name there, like a JIT's perf map: the collector asks once per (process, address). */

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "resolve-cpython.h"
#include "resolver-internal.h"
#include "runtime-facts.h"
#include "utf8.h"

#define TP_NAME_OFFSET 24u /* PyTypeObject.tp_name, after its PyVarObject header (3.6–3.13) */
#define HEADER_MAX 256u

typedef struct ProcKey {
        uint64_t start_time_ns;
        uint32_t pid;
        uint32_t zero;
} ProcKey;

typedef enum ProcState {
        PROC_OPEN,        /* fd and layout valid */
        PROC_MISSING,     /* gone, or not CPython (yet) */
        PROC_UNSUPPORTED, /* a version without layout */
} ProcState;

typedef struct PyProcess {
        ProcState state;
        int fd; /* the image the loader answered for, whatever the state; -EBADF: none */
        EpPyLayout layout;
        uint64_t code_type, str_type, bytes_type; /* learned type addresses, 0: not yet */
        uint64_t since_ns;
        bool logged;
} PyProcess;

typedef struct CodeKey {
        uint64_t start_time_ns;
        uint64_t addr;
        uint32_t pid;
        uint32_t zero;
} CodeKey;

/* What must not change for a cached code object to be the same one. */
typedef struct CodeId {
        uint64_t name, qualname, filename, linetable;
        int32_t firstlineno;
        uint32_t zero;
} CodeId;

typedef struct PyCode {
        CodeId id;
        char *qualname, *filename;
        EpPyLines lines;
        size_t bytes;
        uint64_t used_ns;
} PyCode;

struct ResolverPython {
        EpLru *procs;
        PyProcess *proc_slots;
        EpLru *codes;
        PyCode *code_slots;
        EpPyStats stats;
};

/* ---- state ---- */

static void process_done(PyProcess *p) {
        if (p->fd >= 0)
                close(p->fd);
        *p = (PyProcess) { .fd = -EBADF };
}

static void code_done(ResolverPython *py, PyCode *c) {
        py->stats.code_bytes -= c->bytes;
        free(c->qualname);
        free(c->filename);
        ep_py_lines_done(&c->lines);
        *c = (PyCode) {};
}

static ResolverPython *python_state(EpResolver *r) {
        ResolverPython *py;

        if (r->python)
                return r->python;
        py = calloc(1, sizeof(ResolverPython));
        if (!py)
                return NULL;
        py->proc_slots = calloc(EP_PY_MAX_PROCESSES, sizeof(PyProcess));
        py->code_slots = calloc(EP_PY_MAX_CODES, sizeof(PyCode));
        if (!py->proc_slots || !py->code_slots ||
            ep_lru_new(sizeof(ProcKey), EP_PY_MAX_PROCESSES, &py->procs) < 0 ||
            ep_lru_new(sizeof(CodeKey), EP_PY_MAX_CODES, &py->codes) < 0) {
                ep_lru_free(py->procs);
                free(py->proc_slots);
                free(py->code_slots);
                free(py);
                return NULL;
        }
        for (uint32_t i = 0; i < EP_PY_MAX_PROCESSES; i++)
                py->proc_slots[i].fd = -EBADF;
        r->python = py;
        return py;
}

void ep_resolve_python_free(EpResolver *r) {
        ResolverPython *py = r->python;

        if (!py)
                return;
        for (uint32_t i = 0; i < EP_PY_MAX_PROCESSES; i++)
                process_done(&py->proc_slots[i]);
        for (uint32_t i = 0; i < EP_PY_MAX_CODES; i++)
                code_done(py, &py->code_slots[i]);
        ep_lru_free(py->procs);
        ep_lru_free(py->codes);
        free(py->proc_slots);
        free(py->code_slots);
        free(py);
        r->python = NULL;
}

void ep_resolve_python_source_changed(EpResolver *r) {
        ResolverPython *py = r->python;

        if (!py)
                return;
        for (uint32_t i = 0; i < EP_PY_MAX_PROCESSES; i++)
                if (ep_lru_slot_key(py->procs, i) && py->proc_slots[i].state != PROC_OPEN)
                        py->proc_slots[i].since_ns = 0;
}

void ep_resolver_python_stats(EpResolver *r, EpPyStats *ret) {
        *ret = r->python ? r->python->stats : (EpPyStats) {};
        if (r->python) {
                ret->processes = ep_lru_size(r->python->procs);
                ret->code_objects = ep_lru_size(r->python->codes);
        }
}

/* Drops the code objects of one process (it is gone or its entry recycled). */
static void drop_codes_of(ResolverPython *py, const ProcKey *pk) {
        for (uint32_t i = 0; i < EP_PY_MAX_CODES; i++) {
                const CodeKey *key = ep_lru_slot_key(py->codes, i);

                if (key && key->pid == pk->pid && key->start_time_ns == pk->start_time_ns) {
                        CodeKey copy = *key;
                        code_done(py, &py->code_slots[i]);
                        (void) ep_lru_remove(py->codes, &copy);
                }
        }
}

/* Keeps the code objects within the byte budget, dropping the least recently used (down to
 * 7/8 of it, so the scan is rare). */
static void enforce_budget(ResolverPython *py, const PyCode *keep) {
        if (py->stats.code_bytes <= EP_PY_CODE_BUDGET)
                return;
        while (py->stats.code_bytes > EP_PY_CODE_BUDGET / 8 * 7) {
                uint32_t victim = UINT32_MAX;

                for (uint32_t i = 0; i < EP_PY_MAX_CODES; i++) {
                        const PyCode *c = &py->code_slots[i];
                        if (c == keep || !ep_lru_slot_key(py->codes, i))
                                continue;
                        if (victim == UINT32_MAX || c->used_ns < py->code_slots[victim].used_ns)
                                victim = i;
                }
                if (victim == UINT32_MAX)
                        return;
                CodeKey key = *(const CodeKey *) ep_lru_slot_key(py->codes, victim);
                code_done(py, &py->code_slots[victim]);
                (void) ep_lru_remove(py->codes, &key);
                py->stats.evictions++;
        }
}

/* ---- reading the process ---- */

static bool mem_read(int fd, uint64_t addr, void *buf, size_t size) {
        ssize_t k;

        if (addr == 0 || addr + size < addr)
                return false;
        k = pread(fd, buf, size, (off_t) addr);
        return k == (ssize_t) size;
}

static bool mem_u64(int fd, uint64_t addr, uint64_t *ret) {
        return mem_read(fd, addr, ret, sizeof *ret);
}

/* Whether the address space fd was opened on is gone (the process exited or exec'd): the
 * kernel then reads 0 bytes anywhere, where a live one fails with EIO at page 0. */
static bool image_gone(int fd) {
        uint8_t b;

        return fd >= 0 && pread(fd, &b, 1, 0) == 0;
}

/* Whether obj's type is the type named name, learning its address the first time (*type). */
static bool check_type(const PyProcess *p, uint64_t obj, const char *name, uint64_t *type) {
        uint64_t t, tp_name;
        char buf[16];
        size_t len = strlen(name);

        if (!mem_u64(p->fd, obj + p->layout.ob_type, &t) || t == 0)
                return false;
        if (*type)
                return t == *type;
        if (!mem_u64(p->fd, t + TP_NAME_OFFSET, &tp_name) || !mem_read(p->fd, tp_name, buf, len + 1))
                return false;
        if (memcmp(buf, name, len) != 0 || buf[len] != '\0')
                return false;
        *type = t;
        return true;
}

static void utf8_put(char *buf, size_t size, size_t *n, uint32_t cp) {
        char enc[4];
        size_t len = ep_utf8_encode(cp, enc);

        if (*n + len >= size)
                return;
        memcpy(buf + *n, enc, len);
        *n += len;
}

/* Length of the longest valid UTF-8 prefix of s without NUL, cut at a character. */
static size_t utf8_valid_prefix(const uint8_t *s, size_t n) {
        size_t i = 0;

        while (i < n) {
                uint32_t cp;
                size_t len = ep_utf8_char(s + i, n - i, &cp);

                if (len == 0 || cp == 0)
                        break;
                i += len;
        }
        return i;
}

/* A compact str as UTF-8, at most EP_PY_STR_MAX - 1 bytes (cut at a character). NULL when obj
 * is not a compact str (or unreadable); -ENOMEM through *ret_error. */
static char *read_str(PyProcess *p, uint64_t obj, int *ret_error) {
        const EpPyLayout *l = &p->layout;
        uint8_t hdr[HEADER_MAX];
        uint8_t data[EP_PY_STR_MAX];
        char out[EP_PY_STR_MAX];
        uint64_t length, utf8_length = 0, utf8 = 0;
        uint32_t state;
        size_t n = 0, hdr_size = l->unicode_compact_data;
        char *ret;

        *ret_error = 0;
        if (!check_type(p, obj, "str", &p->str_type) || hdr_size > sizeof hdr || !mem_read(p->fd, obj, hdr, hdr_size))
                return NULL;
        memcpy(&length, hdr + l->unicode_length, sizeof length);
        memcpy(&state, hdr + l->unicode_state, sizeof state);
        unsigned kind = (state >> l->unicode_kind_shift) & 7;
        bool compact = (state >> l->unicode_compact_shift) & 1, ascii = (state >> l->unicode_ascii_shift) & 1;
        if (!compact || (kind != 1 && kind != 2 && kind != 4) || (ascii && kind != 1) || length > (1u << 30))
                return NULL;

        if (ascii) {
                n = MIN(length, (uint64_t) sizeof out - 1);
                if (!mem_read(p->fd, obj + l->unicode_ascii_data, out, n))
                        return NULL;
                for (size_t i = 0; i < n; i++)
                        if ((uint8_t) out[i] >= 0x80 || out[i] == 0)
                                return NULL;
        } else {
                /* PyCompactUnicodeObject: utf8_length, then the utf8 pointer, after the ASCII header. */
                memcpy(&utf8_length, hdr + l->unicode_ascii_data, sizeof utf8_length);
                memcpy(&utf8, hdr + l->unicode_ascii_data + 8, sizeof utf8);
                if (utf8 && utf8_length > 0) {
                        size_t want = MIN(utf8_length, (uint64_t) sizeof out - 1);
                        if (mem_read(p->fd, utf8, data, want))
                                n = utf8_valid_prefix(data, want);
                        if (n > 0 && (n == utf8_length || n + 4 >= want))
                                memcpy(out, data, n);
                        else
                                n = 0;
                }
                if (n == 0) {
                        size_t chars = MIN(length, (uint64_t) sizeof data / kind);
                        if (!mem_read(p->fd, obj + l->unicode_compact_data, data, chars * kind))
                                return NULL;
                        for (size_t i = 0; i < chars; i++) {
                                uint32_t cp;
                                if (kind == 1)
                                        cp = data[i];
                                else if (kind == 2) {
                                        uint16_t u;
                                        memcpy(&u, data + 2 * i, 2);
                                        cp = u;
                                } else
                                        memcpy(&cp, data + 4 * i, 4);
                                if (cp == 0)
                                        break;
                                utf8_put(out, sizeof out, &n, cp);
                        }
                }
        }
        out[n] = '\0';
        ret = strdup(out);
        if (!ret)
                *ret_error = -ENOMEM;
        return ret;
}

/* A bytes object's contents, at most max bytes (*ret_partial: cut). */
static int read_bytes(PyProcess *p, uint64_t obj, size_t max, uint8_t **ret, size_t *ret_size, bool *ret_partial) {
        int64_t size;
        uint8_t *buf;

        if (!check_type(p, obj, "bytes", &p->bytes_type) ||
            !mem_read(p->fd, obj + p->layout.bytes_size, &size, sizeof size) || size < 0)
                return -EBADMSG;
        *ret_partial = (uint64_t) size > max;
        size = MIN((uint64_t) size, max);
        buf = malloc(MAX(size, 1));
        if (!buf)
                return -ENOMEM;
        if (size > 0 && !mem_read(p->fd, obj + p->layout.bytes_sval, buf, (size_t) size)) {
                free(buf);
                return -EBADMSG;
        }
        *ret = buf;
        *ret_size = (size_t) size;
        return 0;
}

static uint64_t hdr_u64(const uint8_t *hdr, uint32_t off) {
        uint64_t v;
        memcpy(&v, hdr + off, sizeof v);
        return v;
}

/* Reads and decodes the code object at addr into c (empty). 1 done, 0 not a valid code
 * object, -ENOMEM. */
static int decode_code(ResolverPython *py, PyProcess *p, uint64_t addr, const CodeId *id, PyCode *c) {
        const EpPyLayout *l = &p->layout;
        _cleanup_free_ uint8_t *table = NULL;
        size_t table_size = 0;
        bool partial = false;
        int k;

        c->id = *id;
        c->qualname = read_str(p, id->qualname ?: id->name, &k);
        if (!c->qualname)
                return k;
        c->filename = read_str(p, id->filename, &k);
        if (!c->filename)
                return k;

        k = read_bytes(p, id->linetable, EP_PY_LINETABLE_MAX, &table, &table_size, &partial);
        if (k == -ENOMEM)
                return k;
        if (k < 0)
                return 0;
        k = ep_py_lines_decode(l->line_table, table, table_size, id->firstlineno, partial, &c->lines);
        if (k == -ENOMEM)
                return k;
        if (k < 0) {
                /* Named, without lines. */
                py->stats.bad_line_tables++;
                log_once_errno(LOG_DEBUG, k, "Python code object 0x%" PRIx64 ": line table not decoded: %m", addr);
        }
        c->bytes = sizeof(PyCode) + strlen(c->qualname) + strlen(c->filename) + 2 + ep_py_lines_memory(&c->lines);
        py->stats.code_decoded++;
        return 1;
}

/* ---- processes ---- */

static int open_process(EpResolver *r, ResolverPython *py, PyProcess *p, const ProcKey *key) {
        char runtime[32] = "";
        uint32_t version = 0;
        int fd, k;
        LOG_CONTEXT_PID((pid_t) key->pid);

        if (p->fd >= 0)
                close(p->fd);
        p->fd = -EBADF;
        p->code_type = p->str_type = p->bytes_type = 0;
        p->since_ns = ep_resolver_now_ns();
        drop_codes_of(py, key); /* another image's, if any */

        fd = r->source.open_process_memory
                     ? r->source.open_process_memory(r->source.userdata, key->pid, runtime, sizeof runtime, &version)
                     : -ENXIO;
        if (fd < 0) {
                if (ep_error_passing(fd))
                        return fd; /* not remembered: asked again with the next request */
                if (fd != -ENOENT && fd != -ESRCH && fd != -ENOMEDIUM)
                        ep_sym_stats_error(r->stats, "memory of process %" PRIu32 ": %s", key->pid, strerror(-fd));
                p->state = PROC_MISSING;
                py->stats.not_python++;
                return 0;
        }
        py->stats.processes_opened++;
        p->fd = fd; /* also when it is not CPython: it tells when this image is gone */
        if (!streq(runtime, EP_RUNTIME_CPYTHON)) {
                p->state = PROC_MISSING;
                py->stats.not_python++;
                return 0;
        }
        k = ep_py_layout_for_version(version >> 8, version & 0xff, &p->layout);
        if (k < 0) {
                if (!p->logged) {
                        p->logged = true;
                        log_warning("Process %" PRIu32 " runs CPython %u.%u, which has no known layout: "
                                    "its Python frames stay unnamed.", key->pid, version >> 8, version & 0xff);
                }
                p->state = PROC_UNSUPPORTED;
                py->stats.unsupported++;
                return 0;
        }
        p->state = PROC_OPEN;
        return 0;
}

/* The entry of key's process: 0 with *ret, 1 with *ret NULL when the loader could not be
 * asked or did not answer (a passing failure, not remembered), -ENOMEM. */
static int get_process(EpResolver *r, ResolverPython *py, const ProcKey *key, PyProcess **ret) {
        PyProcess *p;
        bool evicted;
        int slot, k;

        *ret = NULL;
        slot = ep_lru_get(py->procs, key);
        if (slot >= 0) {
                p = &py->proc_slots[slot];
                /* Not CPython when asked: it may be now, after an exec (a CPython frame of it
                 * was asked for). A read of an open one that fails asks the same. */
                if (p->state != PROC_OPEN && image_gone(p->fd))
                        py->stats.images_gone++;
                else if (p->state == PROC_OPEN || ep_resolver_now_ns() - p->since_ns < EP_PY_MISSING_RETRY_NS) {
                        *ret = p;
                        return 0;
                }
        } else {
                slot = ep_lru_insert(py->procs, key, &evicted);
                if (slot < 0)
                        return slot;
                p = &py->proc_slots[slot];
                if (evicted)
                        process_done(p);
                *p = (PyProcess) { .fd = -EBADF };
        }
        k = open_process(r, py, p, key);
        if (k < 0) {
                process_done(p);
                (void) ep_lru_remove(py->procs, key);
                return k == -ENOMEM ? k : 1;
        }
        *ret = p;
        return 0;
}

/* ---- lookups ---- */

static int answer(EpSymResult *out, const PyCode *c, int32_t line) {
        ep_sym_result_done(out);
        out->status = EP_SYM_OK;
        out->module = strdup("");
        out->lines = calloc(1, sizeof(EpSymLine));
        if (!out->module || !out->lines)
                return -ENOMEM;
        out->n_lines = 1;
        out->lines[0] = (EpSymLine) {
                .function = strdup(c->qualname),
                .file = strdup(c->filename),
                .line = line > 0 ? (uint32_t) line : 0,
        };
        if (!out->lines[0].function || !out->lines[0].file)
                return -ENOMEM;
        return 0;
}

int ep_resolve_python(EpResolver *r, const EpSymRequest *req, EpSymResult *out, bool *ret_cacheable) {
        ProcKey pkey = { .start_time_ns = req->start_time_ns, .pid = req->pid };
        uint64_t addr = EP_FRAME_CPYTHON_CODE(req->addr);
        uint32_t offset = EP_FRAME_CPYTHON_OFFSET(req->addr);
        uint8_t hdr[HEADER_MAX];
        ResolverPython *py;
        PyProcess *p;
        PyCode *c = NULL;
        bool asked_again = false;
        CodeId id;
        int k, slot;

        *ret_cacheable = false;
        py = python_state(r);
        if (!py)
                return -ENOMEM;
        py->stats.lookups++;

again:
        k = get_process(r, py, &pkey, &p);
        if (k < 0)
                return k;
        if (k > 0)
                return ep_resolver_result_set(out, EP_SYM_RETRY, 0, "", NULL);
        if (!p || p->state == PROC_MISSING)
                return ep_resolver_result_set(out, EP_SYM_NO_FILE, 0, "", NULL);
        if (p->state == PROC_UNSUPPORTED)
                return ep_resolver_result_set(out, EP_SYM_BAD_FILE, 0, "", NULL);

        const EpPyLayout *l = &p->layout;
        uint32_t hdr_size = MAX(MAX(l->co_name, l->co_filename), MAX(l->co_linetable, l->co_firstlineno)) + 8;
        if (l->co_qualname != EP_PY_NO_OFFSET)
                hdr_size = MAX(hdr_size, l->co_qualname + 8);
        if (hdr_size > sizeof hdr || !mem_read(p->fd, addr, hdr, hdr_size)) {
                if (!asked_again && image_gone(p->fd)) {
                        /* Exited, or exec'd into another program: what does it run now? */
                        asked_again = true;
                        p->state = PROC_MISSING;
                        goto again;
                }
                py->stats.read_errors++;
                py->stats.invalid_code++;
                return ep_resolver_result_set(out, EP_SYM_NOT_FOUND, 0, "", NULL);
        }
        if (!check_type(p, addr, "code", &p->code_type)) {
                py->stats.invalid_code++;
                return ep_resolver_result_set(out, EP_SYM_NOT_FOUND, 0, "", NULL);
        }
        id = (CodeId) {
                .name = hdr_u64(hdr, l->co_name),
                .qualname = l->co_qualname != EP_PY_NO_OFFSET ? hdr_u64(hdr, l->co_qualname) : 0,
                .filename = hdr_u64(hdr, l->co_filename),
                .linetable = hdr_u64(hdr, l->co_linetable),
        };
        memcpy(&id.firstlineno, hdr + l->co_firstlineno, sizeof id.firstlineno);

        CodeKey ckey = { .start_time_ns = req->start_time_ns, .addr = addr, .pid = req->pid };
        slot = ep_lru_get(py->codes, &ckey);
        if (slot >= 0 && memcmp(&py->code_slots[slot].id, &id, sizeof id) == 0) {
                c = &py->code_slots[slot];
                py->stats.code_hits++;
        } else {
                PyCode fresh = {};

                k = decode_code(py, p, addr, &id, &fresh);
                if (k <= 0) {
                        code_done(py, &fresh);
                        if (k < 0)
                                return k;
                        py->stats.invalid_code++;
                        return ep_resolver_result_set(out, EP_SYM_NOT_FOUND, 0, "", NULL);
                }
                if (slot < 0) {
                        bool evicted;
                        slot = ep_lru_insert(py->codes, &ckey, &evicted);
                        if (slot < 0) {
                                code_done(py, &fresh);
                                return slot;
                        }
                        if (evicted)
                                py->stats.evictions++;
                }
                code_done(py, &py->code_slots[slot]);
                c = &py->code_slots[slot];
                *c = fresh;
                py->stats.code_bytes += c->bytes;
        }
        c->used_ns = ep_resolver_now_ns();

        /* The offset is the instruction the frame is executing (for a caller, its CALL), in
         * every version: f_lasti, prev_instr and 3.13's instr_ptr all point at it, as the
         * interpreter's own f_lineno reads them. A saturated offset (0xffff) says nothing. */
        int32_t line = offset < 0xffff ? ep_py_lines_lookup(&c->lines, offset) : 0;
        k = answer(out, c, line);
        enforce_budget(py, c);
        if (k < 0)
                return k;
        *ret_cacheable = true;
        return 0;
}
