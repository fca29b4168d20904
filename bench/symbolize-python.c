/* SPDX-License-Identifier: MIT */
/* CPython symbolization benchmark: what naming an EP_FRAME_CPYTHON frame costs through the
 * resolver (ep_resolver_symbolize, as the daemon answers it, reading /proc/PID/mem of a live
 * process as Loader1.OpenProcessMemory gives it).
 *
 * A child interpreter (pyenv 3.12, then 3.9: co_linetable, then co_lnotab) runs a generated
 * module of N distinct functions (default 2000) of 6–13 lines each, calls each once, prints
 * id() of each function's code object (its address) and waits. Then, per frame:
 *   new        a fresh resolver: the code object read and checked, its qualified name and file
 *              name (UTF-8) read, its line table read and decoded; the first request also
 *              opens the process's memory (one open per 2000 frames)
 *   code hit   the same code objects at another instruction (result-cache miss, code object
 *              kept: only the line lookup and the check that the code object is unchanged)
 *   cached     the same requests again (result cache)
 * Best of 3 rounds, each with a fresh resolver. Then the bytes the resolver keeps per decoded
 * code object (EpPyStats.code_bytes / code_objects). Prints a markdown table (bench/README.md).
 *
 *   bench-symbolize-python [N] [PYTHON...]
 */

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench-util.h"
#include "fake-python-process.h"
#include "resolve-cpython.h"
#include "resolver.h"

#define ROUNDS 3

typedef struct Child {
        pid_t pid;
        uint32_t version;
} Child;

/* The generated module: function i has 6 + i % 8 lines, a loop and a branch, so line tables
 * are of ordinary size. */
static char *make_module(size_t n) {
        size_t cap = n * 512 + 4096, len = 0;
        char *s = malloc(cap);

        if (!s)
                abort();
        len += (size_t) snprintf(s + len, cap - len, "import sys\n");
        for (size_t i = 0; i < n; i++) {
                len += (size_t) snprintf(s + len, cap - len,
                                         "def function_number_%zu(a, b=%zu):\n"
                                         "    total = 0\n"
                                         "    for k in range(a):\n"
                                         "        if k %% 3 == 0:\n"
                                         "            total += k * b\n"
                                         "        else:\n"
                                         "            total -= 1\n",
                                         i, i);
                for (size_t l = 0; l < i % 8; l++)
                        len += (size_t) snprintf(s + len, cap - len, "    total = total + %zu\n", l);
                len += (size_t) snprintf(s + len, cap - len, "    return total\n");
        }
        len += (size_t) snprintf(s + len, cap - len,
                                 "codes = []\n"
                                 "for i in range(%zu):\n"
                                 "    f = globals()['function_number_%%d' %% i]\n"
                                 "    f(4)\n"
                                 "    codes.append(f.__code__)\n"
                                 "print(' '.join('%%d:%%d' %% (id(c), len(c.co_code)) for c in codes), flush=True)\n"
                                 "sys.stdin.read()\n",
                                 n);
        return s;
}

static double run_pass(EpResolver *r, const Child *c, const uint64_t *codes, size_t n, uint32_t offset, size_t *ok) {
        double t0 = bench_now_ms();

        *ok = 0;
        for (size_t i = 0; i < n; i++) {
                EpSymRequest req = {
                        .kind = EP_FRAME_CPYTHON,
                        .addr = EP_FRAME_CPYTHON_ADDR(codes[i], offset),
                        .pid = (uint32_t) c->pid,
                        .start_time_ns = 12345,
                };
                const EpSymResult *res;

                if (ep_resolver_symbolize(r, &req, &res) < 0)
                        abort();
                if (res->status == EP_SYM_OK && res->n_lines == 1 && strncmp(res->lines[0].function, "function_number_", 16) == 0)
                        (*ok)++;
        }
        return bench_now_ms() - t0;
}

static void bench_python(const char *exe, size_t n) {
        char script_path[] = "/tmp/ep-bench-pyXXXXXX.py";
        const char *base = strrchr(exe, '/') ? strrchr(exe, '/') + 1 : exe;
        unsigned major, minor;
        int to[2], from[2], fd, status;
        Child c = {};
        uint64_t *codes;
        char *module, *line = NULL;
        size_t cap = 0, got = 0;
        FILE *out;

        if (sscanf(base, "python%u.%u", &major, &minor) != 2 || access(exe, X_OK) < 0) {
                printf("| %s | not found |\n", exe);
                return;
        }
        c.version = major << 8 | minor;

        module = make_module(n);
        fd = mkstemps(script_path, 3);
        if (fd < 0 || write(fd, module, strlen(module)) != (ssize_t) strlen(module))
                abort();
        close(fd);
        free(module);

        if (pipe2(to, O_CLOEXEC) < 0 || pipe2(from, O_CLOEXEC) < 0)
                abort();
        c.pid = fork();
        if (c.pid < 0)
                abort();
        if (c.pid == 0) {
                dup2(to[0], STDIN_FILENO);
                dup2(from[1], STDOUT_FILENO);
                execl(exe, exe, "-I", script_path, (char *) NULL);
                _exit(127);
        }
        close(to[0]);
        close(from[1]);
        out = fdopen(from[0], "r");
        codes = calloc(n, sizeof(uint64_t));
        if (!out || !codes)
                abort();
        if (getline(&line, &cap, out) > 0)
                for (char *save = NULL, *tok = strtok_r(line, " \n", &save); tok && got < n; tok = strtok_r(NULL, " \n", &save))
                        codes[got++] = strtoull(tok, NULL, 10);
        if (got != n) {
                printf("| %s | the child printed %zu of %zu code objects |\n", base, got, n);
                goto finish;
        }

        double best[3] = { 1e30, 1e30, 1e30 };
        size_t ok[3] = {};
        EpPyStats ps = {};
        for (int round = 0; round < ROUNDS; round++) {
                FakePythonProcess fake = { .pid = c.pid, .version = c.version };
                EpFileSource src = { .open_file = fake_python_no_file,
                                     .open_process_memory = fake_python_open_memory, .userdata = &fake };
                EpResolver *r = NULL;
                double ms;

                if (ep_resolver_new(&src, NULL, NULL, &r) < 0)
                        abort();
                ms = run_pass(r, &c, codes, n, 0, &ok[0]); /* new */
                best[0] = ms < best[0] ? ms : best[0];
                ms = run_pass(r, &c, codes, n, 2, &ok[1]); /* code hit */
                best[1] = ms < best[1] ? ms : best[1];
                ms = run_pass(r, &c, codes, n, 0, &ok[2]); /* cached */
                best[2] = ms < best[2] ? ms : best[2];
                ep_resolver_python_stats(r, &ps);
                ep_resolver_free(r);
        }

        printf("| %s | %zu | %.1f%% | %.2f | %.0f | %.3f | %.0f | %.3f | %.0f | %" PRIu64 " | %.0f |\n", base, n,
               100.0 * (double) ok[0] / (double) n, best[0] * 1e3 / (double) n, (double) n / (best[0] / 1e3),
               best[1] * 1e3 / (double) n, (double) n / (best[1] / 1e3), best[2] * 1e3 / (double) n,
               (double) n / (best[2] / 1e3), ps.code_decoded,
               ps.code_objects ? (double) ps.code_bytes / ps.code_objects : 0.0);
        if (ok[0] != n || ok[1] != n || ok[2] != n || ps.invalid_code || ps.bad_line_tables)
                printf("(%s: named %zu/%zu/%zu, invalid code %" PRIu64 ", bad line tables %" PRIu64 ")\n", base, ok[0],
                       ok[1], ok[2], ps.invalid_code, ps.bad_line_tables);
        fflush(stdout);

finish:
        close(to[1]);
        kill(c.pid, SIGKILL);
        waitpid(c.pid, &status, 0);
        fclose(out);
        free(line);
        free(codes);
        unlink(script_path);
}

static char *find_pyenv(const char *minor) {
        char pattern[512];
        glob_t g;
        char *ret = NULL;
        const char *home = getenv("HOME");

        snprintf(pattern, sizeof pattern, "%s/.pyenv/versions/%s.*/bin/python%s", home ? home : "/root", minor, minor);
        if (glob(pattern, 0, NULL, &g) == 0 && g.gl_pathc > 0)
                ret = strdup(g.gl_pathv[g.gl_pathc - 1]);
        globfree(&g);
        return ret;
}

int main(int argc, char **argv) {
        size_t n = argc > 1 ? strtoul(argv[1], NULL, 10) : 2000;

        if (n == 0)
                n = 2000;
        printf("| python | code objects | named | new µs/frame | new frames/s | code-hit µs/frame | code-hit frames/s "
               "| cached µs/frame | cached frames/s | decoded | bytes kept per code object |\n"
               "|---|---|---|---|---|---|---|---|---|---|---|\n");
        if (argc > 2)
                for (int i = 2; i < argc; i++)
                        bench_python(argv[i], n);
        else
                for (size_t i = 0; i < 2; i++) {
                        char *exe = find_pyenv(i == 0 ? "3.12" : "3.9");
                        if (exe)
                                bench_python(exe, n);
                        else
                                printf("| python%s | not installed (pyenv) |\n", i == 0 ? "3.12" : "3.9");
                        free(exe);
                }
        return 0;
}
