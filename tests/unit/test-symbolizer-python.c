/* SPDX-License-Identifier: MIT */
/* CPython frames named by the symbolizer (resolve-cpython.c, python-lines.c), for every CPython
 * on the machine (pyenv 3.6–3.13, /usr/bin/python3.N):
 *
 *  1. Line tables: each interpreter dumps co_lnotab / co_linetable of every code object of a
 *     few stdlib modules with the line of every code unit as it computes it itself
 *     (dis.findlinestarts() up to 3.9, co_lines() from 3.10); the decoder must agree on each.
 *  2. Live frames: a child runs main → outer → middle → Outer.method → inner, which spins on a
 *     known line. Stopped, its thread and frames are found through /proc/PID/mem with the
 *     layout (as test-symbolizer-python-layout.c walks them), an EP_FRAME_CPYTHON request is built
 *     for each frame as the contract says (f_lasti, prev_instr or instr_ptr) and resolved
 *     through the resolver with a source that opens /proc/PID/mem itself: qualified names,
 *     file and lines must be the script's (the callers' lines also as the child's own
 *     f_lineno says).
 *  3. Not a code object (a bytes object; a freed code object whose memory a bytes object
 *     took) → NOT_FOUND without lines, counted; the process gone → NO_FILE. */

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>

#include "fake-python-process.h"
#include "python-detect.h"
#include "python-layout.h"
#include "python-lines.h"
#include "resolve-cpython.h"
#include "resolver.h"
#include "test-python-util.h"

/* ---- 1. line tables ---------------------------------------------------------------------- */

static const char dump_script[] =
        "import sys, dis, types, importlib\n"
        "def walk(co):\n"
        "    yield co\n"
        "    for c in co.co_consts:\n"
        "        if isinstance(c, types.CodeType):\n"
        "            yield from walk(c)\n"
        "for name in ('argparse', 'json.decoder', 'dis', 'collections', 'enum'):\n"
        "    m = importlib.import_module(name)\n"
        "    src = open(m.__file__, encoding='utf-8').read()\n"
        "    for co in walk(compile(src, m.__file__, 'exec')):\n"
        "        units = len(co.co_code) // 2\n"
        "        lines = [0] * units\n"
        "        if sys.version_info >= (3, 10):\n"
        "            table = co.co_linetable\n"
        "            for s, e, l in co.co_lines():\n"
        "                for off in range(s, e, 2):\n"
        "                    if off // 2 < units: lines[off // 2] = l or 0\n"
        "        else:\n"
        "            table = co.co_lnotab\n"
        "            starts = dict(dis.findlinestarts(co))\n"
        "            cur = 0\n"
        "            for u in range(units):\n"
        "                cur = starts.get(2 * u, cur)\n"
        "                lines[u] = cur\n"
        "        print(co.co_firstlineno, table.hex() or '-', units, *lines)\n";

static int hexval(char c) {
        return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static void check_line_tables(const PyInstall *in, const EpPyLayout *l, const char *dump_path) {
        char cmd[2 * PATH_MAX];
        _cleanup_free_ char *buf = NULL;
        size_t cap = 0, n_codes = 0, n_units = 0;
        FILE *p;

        snprintf(cmd, sizeof cmd, "'%.4000s' -I '%.4000s'", in->exe, dump_path);
        p = popen(cmd, "r");
        ASSERT_TRUE(p);
        while (getline(&buf, &cap, p) > 0) {
                char *save = NULL, *hex, *tok;
                _cleanup_free_ uint8_t *table = NULL;
                int32_t first = (int32_t) strtol(strtok_r(buf, " \n", &save), NULL, 10);
                size_t size = 0, units;
                EpPyLines lines;

                hex = strtok_r(NULL, " \n", &save);
                ASSERT_TRUE(hex);
                table = malloc(strlen(hex) / 2 + 1);
                ASSERT_TRUE(table);
                if (!streq(hex, "-"))
                        for (size_t i = 0; hex[i] && hex[i + 1]; i += 2)
                                table[size++] = (uint8_t) (hexval(hex[i]) << 4 | hexval(hex[i + 1]));
                units = strtoul(strtok_r(NULL, " \n", &save), NULL, 10);

                ASSERT_OK(ep_py_lines_decode(l->line_table, table, size, first, false, &lines));
                for (size_t u = 0; u < units; u++) {
                        tok = strtok_r(NULL, " \n", &save);
                        ASSERT_TRUE(tok);
                        int32_t want = (int32_t) strtol(tok, NULL, 10), got;
                        if (2 * u >= EP_PY_LINES_MAX_OFFSET)
                                continue;
                        got = ep_py_lines_lookup(&lines, (uint32_t) (2 * u));
                        if (got != want)
                                fprintf(stderr, "%s: code at line %d, offset %zu: line %d, the interpreter says %d\n",
                                        in->exe, first, 2 * u, got, want);
                        ASSERT_EQ(got, want);
                        n_units++;
                }
                ep_py_lines_done(&lines);
                n_codes++;
        }
        ASSERT_EQ(pclose(p), 0);
        ASSERT_TRUE(n_codes > 100);
        printf("    line tables: %zu code objects, %zu instructions agree\n", n_codes, n_units);
}

/* ---- 2./3. live frames ------------------------------------------------------------------- */

/* Line numbers matter. */
static const char script[] =
        "import sys, threading, dis\n"                                          /* 1 */
        "def inner():\n"                                                        /* 2 */
        "    f, lines = sys._getframe(1), []\n"                                 /* 3 */
        "    while f: lines.append(str(f.f_lineno)); f = f.f_back\n"            /* 4 */
        /* 5: also the offset where the busy line starts (the first instruction of a line is
         * where an off-by-one instruction shows as the line before) */
        "    busy = min(o for o, l in dis.findlinestarts(sys._getframe().f_code) if l == 7); "
        "print('ready', threading.get_ident(), id(blob), freed, busy, ','.join(lines), flush=True)\n"
        "    n = 0\n"                                                           /* 6 */
        "    while True: n += 1\n"                                              /* 7: the busy line */
        "class Outer:\n"                                                        /* 8 */
        "    def method(self):\n"                                               /* 9 */
        "        return inner()\n"                                              /* 10 */
        "def middle():\n"                                                       /* 11 */
        "    x = 1\n"                                                           /* 12 */
        "    return Outer().method() + x\n"                                     /* 13 */
        "def outer():\n"                                                        /* 14 */
        "    return middle()\n"                                                 /* 15 */
        "def main():\n"                                                         /* 16 */
        "    outer()\n"                                                         /* 17 */
        "blob = b'not a code object'\n"                                         /* 18 */
        "def freed_code():\n"                                                   /* 19 */
        "    co = compile('a = 1', 'gone.py', 'exec')\n"                        /* 20 */
        "    addr, size = id(co), co.__sizeof__()\n"                            /* 21 */
        "    del co\n"                                                          /* 22 */
        "    keep = []\n"                                                       /* 23 */
        "    for n in range(1, 4 * size):\n"                                    /* 24 */
        "        keep.append(bytes(n))\n"                                       /* 25 */
        "        if id(keep[-1]) == addr: return addr, keep\n"                  /* 26 */
        "    return 0, keep\n"                                                  /* 27 */
        "freed, keep = freed_code()\n"                                          /* 28 */
        "main()\n";                                                             /* 29 */

static const struct {
        const char *qualname, *qualname_old; /* 3.11+ / before */
        uint32_t line;
} expected[] = {
        { "inner", "inner", 7 },
        { "Outer.method", "method", 10 },
        { "middle", "middle", 13 },
        { "outer", "outer", 15 },
        { "main", "main", 17 },
        { "<module>", "<module>", 29 },
};

typedef struct Child {
        pid_t pid;
        int in_fd, out_fd, mem_fd;
        EpPyLayout layout;
        uint32_t version;
} Child;

static uint64_t rd64(const Child *c, uint64_t addr) {
        uint64_t v = 0;
        ASSERT_EQ(pread(c->mem_fd, &v, sizeof v, (off_t) addr), (ssize_t) sizeof v);
        return v;
}

static uint8_t rd8(const Child *c, uint64_t addr) {
        uint8_t v = 0;
        ASSERT_EQ(pread(c->mem_fd, &v, sizeof v, (off_t) addr), 1);
        return v;
}

static uint64_t load_bias(pid_t pid, const char *runtime) {
        char line[PATH_MAX + 256], cmd[PATH_MAX + 64];
        unsigned long long first_vaddr = ULLONG_MAX;
        uint64_t start;
        FILE *p;

        /* The first PT_LOAD's page, from readelf (independent of the code under test). */
        snprintf(cmd, sizeof cmd, "readelf -lW '%s' 2>/dev/null", runtime);
        p = popen(cmd, "r");
        ASSERT_TRUE(p);
        while (fgets(line, sizeof line, p)) {
                unsigned long long off, vaddr;
                if (first_vaddr == ULLONG_MAX && sscanf(line, " LOAD 0x%llx 0x%llx", &off, &vaddr) == 2 && off == 0)
                        first_vaddr = vaddr & ~0xfffULL;
        }
        pclose(p);
        ASSERT_TRUE(first_vaddr != ULLONG_MAX);

        start = py_mapping_start(pid, runtime);
        return start == UINT64_MAX ? UINT64_MAX : start - first_vaddr;
}

static const EpSymResult *resolve(EpResolver *r, const Child *c, uint64_t code, uint32_t offset) {
        EpSymRequest req = {
                .kind = EP_FRAME_CPYTHON,
                .addr = EP_FRAME_CPYTHON_ADDR(code, offset),
                .pid = (uint32_t) c->pid,
                .start_time_ns = 12345,
        };
        const EpSymResult *res;

        ASSERT_OK(ep_resolver_symbolize(r, &req, &res));
        return res;
}

static bool check_live(const PyInstall *in, const char *script_path) {
        char line[512], lines_csv[256];
        unsigned long long ident, blob, freed, busy;
        EpPyRuntime rt;
        Child c = { .mem_fd = -EBADF };
        int status;
        uint64_t bias, tstate = 0, frame;
        size_t got = 0;
        EpSymStats stats = {};
        _cleanup_(ep_resolver_freep) EpResolver *r = NULL;

        ASSERT_EQ(ep_py_detect_path(in->runtime, &rt), 1);
        {
                _cleanup_close_ int fd = open(in->runtime, O_RDONLY | O_CLOEXEC);
                ASSERT_TRUE(fd >= 0);
                ASSERT_OK(ep_py_detect_layout(fd, &rt, &c.layout));
        }
        c.version = in->major << 8 | in->minor;
        const EpPyLayout *l = &c.layout;

        c.pid = py_spawn(in->exe, script_path, &c.in_fd, &c.out_fd);

        struct pollfd pfd = { .fd = c.out_fd, .events = POLLIN };
        ASSERT_EQ(poll(&pfd, 1, 30000), 1);
        ssize_t k = read(c.out_fd, line, sizeof line - 1);
        ASSERT_TRUE(k > 0);
        line[k] = '\0';
        ASSERT_EQ(sscanf(line, "ready %llu %llu %llu %llu %255s", &ident, &blob, &freed, &busy, lines_csv), 5);

        /* A consistent snapshot: the child stops while we read it, once print() returned and
         * inner() spins (10 ticks of CPU after "ready": `n = 0` takes far less). */
        py_wait_spinning(c.pid, 10);
        ASSERT_EQ(kill(c.pid, SIGSTOP), 0);
        ASSERT_EQ(waitpid(c.pid, &status, WUNTRACED), c.pid);
        ASSERT_TRUE(WIFSTOPPED(status));

        bias = load_bias(c.pid, in->runtime);
        if (bias == UINT64_MAX) {
                printf("    live: %s does not load %s, skipped\n", in->exe, in->runtime);
                kill(c.pid, SIGKILL);
                waitpid(c.pid, &status, 0);
                close(c.in_fd);
                close(c.out_fd);
                return false;
        }
        snprintf(line, sizeof line, "/proc/%d/mem", (int) c.pid);
        c.mem_fd = open(line, O_RDONLY | O_CLOEXEC);
        if (c.mem_fd < 0) {
                printf("    live: cannot open %s (%m), skipped\n", line);
                kill(c.pid, SIGKILL);
                waitpid(c.pid, &status, 0);
                close(c.in_fd);
                close(c.out_fd);
                return false;
        }

        FakePythonProcess fake = { .pid = c.pid, .version = c.version };
        EpFileSource src = { .open_file = fake_python_no_file, .open_process_memory = fake_python_open_memory,
                             .userdata = &fake };
        ASSERT_OK(ep_resolver_new(&src, NULL, &stats, &r));

        /* Runtime → interpreters → the thread that printed its ident → frames. */
        uint64_t head = rt.minor >= 7 ? rt.runtime_addr + bias + l->runtime_interpreters_head : rt.interp_head_addr + bias;
        for (uint64_t it = rd64(&c, head), i = 0; it && !tstate && i < 8; it = rd64(&c, it + l->interp_next), i++)
                for (uint64_t ts = rd64(&c, it + l->interp_tstate_head), j = 0; ts && j < 64; ts = rd64(&c, ts + l->tstate_next), j++)
                        if (rd64(&c, ts + l->tstate_thread_id) == ident) {
                                tstate = ts;
                                break;
                        }
        ASSERT_TRUE(tstate);
        if (l->frame_kind == EP_PY_FRAMES_OBJECT)
                frame = rd64(&c, tstate + l->tstate_frame);
        else if (l->frame_kind == EP_PY_FRAMES_CFRAME)
                frame = rd64(&c, rd64(&c, tstate + l->tstate_cframe) + l->cframe_current_frame);
        else
                frame = rd64(&c, tstate + l->tstate_current_frame);

        char *save = NULL, *own = strtok_r(lines_csv, ",", &save);
        for (unsigned depth = 0; frame && depth < 64; frame = rd64(&c, frame + l->frame_back), depth++) {
                uint64_t code, offset;

                if (l->frame_owner_cstack != EP_PY_NO_OFFSET && rd8(&c, frame + l->frame_owner) == l->frame_owner_cstack)
                        continue; /* 3.12+: the eval loop's entry shim */
                ASSERT_TRUE(got < ELEMENTSOF(expected));
                code = rd64(&c, frame + l->frame_code);
                /* The request exactly as the contract (common/wire.h) says. */
                if (l->frame_lasti != EP_PY_NO_OFFSET) {
                        uint32_t lasti;
                        ASSERT_EQ(pread(c.mem_fd, &lasti, sizeof lasti, (off_t) (frame + l->frame_lasti)), 4);
                        offset = (uint64_t) lasti * l->lasti_unit;
                } else
                        offset = rd64(&c, frame + l->frame_instr) - (code + l->co_code_adaptive);

                const EpSymResult *res = resolve(r, &c, code, (uint32_t) offset);
                const char *want = in->minor >= 11 ? expected[got].qualname : expected[got].qualname_old;
                if (res->status != EP_SYM_OK || res->n_lines != 1 || !streq(res->lines[0].function, want) ||
                    res->lines[0].line != expected[got].line)
                        fprintf(stderr, "%s: frame %zu (offset %" PRIu64 "): status %u, %s:%u, expected %s:%u\n", in->exe,
                                got, offset, res->status, res->n_lines ? res->lines[0].function : "-",
                                res->n_lines ? res->lines[0].line : 0, want, expected[got].line);
                ASSERT_EQ(res->status, EP_SYM_OK);
                ASSERT_EQ(res->n_lines, 1);
                ASSERT_STREQ(res->lines[0].function, want);
                ASSERT_STREQ(res->lines[0].file, script_path);
                ASSERT_EQ(res->lines[0].line, expected[got].line);
                ASSERT_STREQ(res->module, "");
                ASSERT_EQ(res->elf_addr, 0);
                if (got == 0) {
                        /* Whichever instruction the sample caught: the busy line's first one
                         * is on it too, the one before it is not. */
                        ASSERT_EQ(resolve(r, &c, code, (uint32_t) busy)->lines[0].line, expected[0].line);
                        ASSERT_EQ(resolve(r, &c, code, (uint32_t) busy - 2)->lines[0].line, expected[0].line - 1);
                } else {
                        /* The callers' lines as the child itself saw them. */
                        ASSERT_TRUE(own);
                        ASSERT_EQ(res->lines[0].line, (uint32_t) strtoul(own, NULL, 10));
                        own = strtok_r(NULL, ",", &save);
                }
                got++;
        }
        ASSERT_EQ(got, ELEMENTSOF(expected));

        EpPyStats ps;
        ep_resolver_python_stats(r, &ps);
        ASSERT_EQ(ps.processes, 1);
        ASSERT_EQ(ps.invalid_code, 0);
        ASSERT_TRUE(ps.code_objects >= ELEMENTSOF(expected));
        ASSERT_EQ(ps.bad_line_tables, 0);

        /* Not code objects: a bytes object; the freed code object's memory, when a bytes
         * object took it (the script reports whether that happened). */
        const EpSymResult *res = resolve(r, &c, blob, 0);
        ASSERT_EQ(res->status, EP_SYM_NOT_FOUND);
        ASSERT_EQ(res->n_lines, 0);
        if (freed) {
                res = resolve(r, &c, freed, 0);
                ASSERT_EQ(res->status, EP_SYM_NOT_FOUND);
                ASSERT_EQ(res->n_lines, 0);
        }
        res = resolve(r, &c, 0x10, 0); /* unmapped */
        ASSERT_EQ(res->status, EP_SYM_NOT_FOUND);
        ep_resolver_python_stats(r, &ps);
        ASSERT_EQ(ps.invalid_code, 2 + !!freed);

        /* The process gone: NO_FILE, not a name from a cache of the code objects. */
        kill(c.pid, SIGKILL);
        ASSERT_EQ(waitpid(c.pid, &status, 0), c.pid);
        res = resolve(r, &c, blob + 16, 0);
        ASSERT_EQ(res->status, EP_SYM_NO_FILE);
        ASSERT_EQ(res->n_lines, 0);

        close(c.mem_fd);
        close(c.in_fd);
        close(c.out_fd);
        printf("    live: %zu frames named (qualnames, file, lines)%s; bytes object%s and unmapped address: NOT_FOUND; "
               "exited: NO_FILE\n", got, in->minor >= 11 ? " incl. Outer.method" : "",
               freed ? ", freed code object" : "");
        return true;
}

/* ---- decoder edge cases ------------------------------------------------------------------ */

static void check_decoders(void) {
        EpPyLines l;

        /* lnotab: +6 bytes / +1 line, then a negative delta (3.6+: signed). */
        const uint8_t lnotab[] = { 6, 1, 4, 0xfe, 0, 5 };
        ASSERT_OK(ep_py_lines_decode(EP_PY_LINES_LNOTAB, lnotab, sizeof lnotab, 10, false, &l));
        ASSERT_EQ(ep_py_lines_lookup(&l, 0), 10);
        ASSERT_EQ(ep_py_lines_lookup(&l, 5), 10);
        ASSERT_EQ(ep_py_lines_lookup(&l, 6), 11);
        ASSERT_EQ(ep_py_lines_lookup(&l, 10), 14);
        ASSERT_EQ(ep_py_lines_lookup(&l, 1000), 14);
        ep_py_lines_done(&l);

        /* 3.10: a range without line (-128), then one more line. */
        const uint8_t linetable[] = { 4, 0, 2, 0x80, 2, 3 };
        ASSERT_OK(ep_py_lines_decode(EP_PY_LINES_LINETABLE, linetable, sizeof linetable, 5, false, &l));
        ASSERT_EQ(ep_py_lines_lookup(&l, 2), 5);
        ASSERT_EQ(ep_py_lines_lookup(&l, 4), 0);
        ASSERT_EQ(ep_py_lines_lookup(&l, 6), 8);
        ASSERT_EQ(ep_py_lines_lookup(&l, 8), 0); /* past the end */
        ep_py_lines_done(&l);

        /* 3.11+: short form (1 unit), one-line form +2 (2 units), no-column -1 (svarint 3),
         * long form +64 (svarint 128: two groups), none. */
        const uint8_t loc[] = { 0x80 | 0 << 3 | 0, 0x11,
                                0x80 | 12 << 3 | 1, 1, 2,
                                0x80 | 13 << 3 | 0, 3,
                                0x80 | 14 << 3 | 0, 0x40, 0x02, 0, 1, 2,
                                0x80 | 15 << 3 | 2 };
        ASSERT_OK(ep_py_lines_decode(EP_PY_LINES_LOCATIONS, loc, sizeof loc, 20, false, &l));
        ASSERT_EQ(ep_py_lines_lookup(&l, 0), 20);
        ASSERT_EQ(ep_py_lines_lookup(&l, 2), 22);
        ASSERT_EQ(ep_py_lines_lookup(&l, 4), 22);
        ASSERT_EQ(ep_py_lines_lookup(&l, 6), 21);
        ASSERT_EQ(ep_py_lines_lookup(&l, 8), 85);
        ASSERT_EQ(ep_py_lines_lookup(&l, 10), 0);
        ep_py_lines_done(&l);
        /* Cut inside the long form: malformed, or the entries before it when partial. */
        ASSERT_EQ(ep_py_lines_decode(EP_PY_LINES_LOCATIONS, loc, 9, 20, false, &l), -EBADMSG);
        ASSERT_OK(ep_py_lines_decode(EP_PY_LINES_LOCATIONS, loc, 9, 20, true, &l));
        ASSERT_EQ(ep_py_lines_lookup(&l, 6), 21);
        ASSERT_EQ(ep_py_lines_lookup(&l, 8), 0);
        ep_py_lines_done(&l);
}

int main(void) {
        char script_path[PATH_MAX], dump_path[PATH_MAX];
        PyInstall ins[PY_MAX_INSTALLS];
        size_t n, n_live = 0;
        const char *dir;
        FILE *f;

        check_decoders();

        n = py_discover(ins);
        if (n == 0) {
                printf("test-symbolizer-python: no CPython on this machine, skipped\n");
                return tests_summary("test-symbolizer-python");
        }
        dir = py_tmpdir_make("test-sym-python");
        snprintf(script_path, sizeof script_path, "%s/frames.py", dir);
        snprintf(dump_path, sizeof dump_path, "%s/dump.py", dir);
        f = fopen(script_path, "we");
        ASSERT_TRUE(f && fputs(script, f) >= 0 && fclose(f) == 0);
        f = fopen(dump_path, "we");
        ASSERT_TRUE(f && fputs(dump_script, f) >= 0 && fclose(f) == 0);

        for (size_t i = 0; i < n; i++) {
                const PyInstall *in = &ins[i];
                EpPyLayout l;

                printf("  %s: Python %u.%u.%u\n", in->runtime, in->major, in->minor, in->micro);
                if (ep_py_layout_for_version(in->major, in->minor, &l) < 0) {
                        printf("    no layout, skipped\n");
                        continue;
                }
                check_line_tables(in, &l, dump_path);
                if (check_live(in, script_path))
                        n_live++;
        }
        ASSERT_TRUE(n_live > 0);
        return tests_summary("test-symbolizer-python");
}
