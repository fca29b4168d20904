/* SPDX-License-Identifier: MIT */
#pragma once

/* Shared by the CPython tests (test-symbolizer-python*.c, test-symbolizer-runtime-detect.c):
 * finds the CPython installations of this machine at test time, asks each interpreter its
 * version, and reads symbols with readelf (a tool independent of the code under test). */

#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <glob.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "macro.h"
#include "tests.h"

#define PY_MAX_INSTALLS 64

/* A scratch directory of plain files, removed at exit (also when an assertion fails). */
static char py_tmpdir[64];

static void py_tmpdir_remove(void) {
        DIR *d;

        if (!py_tmpdir[0])
                return;
        d = opendir(py_tmpdir);
        if (d) {
                for (struct dirent *de; (de = readdir(d));)
                        if (!streq(de->d_name, ".") && !streq(de->d_name, ".."))
                                (void) unlinkat(dirfd(d), de->d_name, 0);
                closedir(d);
        }
        (void) rmdir(py_tmpdir);
        py_tmpdir[0] = '\0';
}

static inline const char *py_tmpdir_make(const char *name) {
        snprintf(py_tmpdir, sizeof py_tmpdir, "/tmp/%s-XXXXXX", name);
        ASSERT_TRUE(mkdtemp(py_tmpdir));
        ASSERT_EQ(atexit(py_tmpdir_remove), 0);
        return py_tmpdir;
}

/* Copies from to to, at most limit bytes (-1: all). */
static inline void py_copy_file(const char *from, const char *to, off_t limit) {
        char buf[65536];
        off_t done = 0;
        int in = open(from, O_RDONLY | O_CLOEXEC), out;
        ssize_t k;

        ASSERT_TRUE(in >= 0);
        out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        ASSERT_TRUE(out >= 0);
        while ((limit < 0 || done < limit) &&
               (k = read(in, buf, limit < 0 ? (off_t) sizeof buf : MIN((off_t) sizeof buf, limit - done))) > 0) {
                ASSERT_EQ(write(out, buf, (size_t) k), k);
                done += k;
        }
        close(in);
        close(out);
}

typedef struct PyInstall {
        char exe[PATH_MAX];      /* the interpreter (asked for its version) */
        char runtime[PATH_MAX];  /* the file holding the interpreter: libpython, else exe */
        char label[PATH_MAX];    /* for messages */
        bool pyenv;              /* a pyenv build (DWARF expected) */
        unsigned major, minor, micro; /* sys.version_info, 0.0.0 when the interpreter failed */
} PyInstall;

/* "python3.N" exactly (no ABI flags, no -config). */
static inline bool py_is_exe_name(const char *base) {
        const char *p;

        if (!startswith(base, "python3."))
                return false;
        p = base + strlen("python3.");
        if (!*p)
                return false;
        for (; *p; p++)
                if (!isdigit((unsigned char) *p))
                        return false;
        return true;
}

static inline bool py_run_line(const char *cmd, char *buf, size_t size) {
        FILE *p = popen(cmd, "r");
        bool ok;

        if (!p)
                return false;
        ok = fgets(buf, (int) size, p) != NULL;
        if (pclose(p) != 0)
                ok = false;
        return ok;
}

static inline bool py_query_version(PyInstall *in) {
        char cmd[PATH_MAX + 128], line[128];

        snprintf(cmd, sizeof cmd,
                 "'%s' -c \"import sys; print('%%d %%d %%d' %% tuple(sys.version_info[:3]))\" 2>/dev/null",
                 in->exe);
        if (!py_run_line(cmd, line, sizeof line))
                return false;
        return sscanf(line, "%u %u %u", &in->major, &in->minor, &in->micro) == 3;
}

/* Whether readelf lists name as a defined symbol of path (dyn_only: .dynsym). */
typedef struct PySym {
        char name[256];
        uint64_t value, size;
        char type[16], bind[16];
} PySym;

/* Every defined symbol named name (prefix: whose name starts with it), at most max. */
static inline size_t py_readelf_syms(const char *path, bool dyn_only, const char *name, bool prefix,
                                     PySym *ret, size_t max) {
        char cmd[PATH_MAX + 64], line[1024];
        size_t n = 0;
        FILE *p;

        snprintf(cmd, sizeof cmd, "readelf -W %s '%s' 2>/dev/null", dyn_only ? "--dyn-syms" : "-s", path);
        p = popen(cmd, "r");
        ASSERT_TRUE(p);
        while (fgets(line, sizeof line, p)) {
                PySym s = {};
                unsigned long long value, size;
                char vis[16], ndx[16], *at;

                if (sscanf(line, " %*u: %llx %lli %15s %15s %15s %15s %255s", &value, &size, s.type,
                           s.bind, vis, ndx, s.name) != 7)
                        continue;
                at = strchr(s.name, '@');
                if (at)
                        *at = '\0';
                if (streq(ndx, "UND") || value == 0)
                        continue;
                if (prefix ? !startswith(s.name, name) : !streq(s.name, name))
                        continue;
                s.value = value;
                s.size = size;
                /* .dynsym and .symtab both list exported symbols: keep each address once. */
                bool dup = false;
                for (size_t i = 0; i < n; i++)
                        if (ret[i].value == s.value && streq(ret[i].name, s.name))
                                dup = true;
                if (!dup && n < max)
                        ret[n++] = s;
        }
        pclose(p);
        return n;
}

static inline bool py_readelf_sym(const char *path, bool dyn_only, const char *name, PySym *ret) {
        return py_readelf_syms(path, dyn_only, name, false, ret, 1) == 1;
}

/* The libpython a dynamically linked interpreter needs, looked up in the usual directories. */
static inline bool py_needed_libpython(const char *exe, char *ret, size_t size) {
        static const char *const dirs[] = {
                "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib", "/lib/x86_64-linux-gnu",
        };
        char cmd[PATH_MAX + 64], line[1024];
        char name[256] = "";
        FILE *p;

        snprintf(cmd, sizeof cmd, "readelf -dW '%s' 2>/dev/null", exe);
        p = popen(cmd, "r");
        ASSERT_TRUE(p);
        while (fgets(line, sizeof line, p)) {
                char *s = strstr(line, "Shared library: [libpython");
                if (s && sscanf(s, "Shared library: [%255[^]]]", name) == 1)
                        break;
        }
        pclose(p);
        if (!name[0])
                return false;
        for (size_t i = 0; i < ELEMENTSOF(dirs); i++) {
                snprintf(ret, size, "%s/%s", dirs[i], name);
                if (access(ret, R_OK) == 0)
                        return true;
        }
        return false;
}

static inline bool py_seen(const PyInstall *ins, size_t n, const char *runtime) {
        char a[PATH_MAX], b[PATH_MAX];

        if (!realpath(runtime, a))
                return false;
        for (size_t i = 0; i < n; i++)
                if (realpath(ins[i].runtime, b) && streq(a, b))
                        return true;
        return false;
}

static inline void py_add(PyInstall *ins, size_t *n, const char *exe, const char *runtime, bool pyenv) {
        PyInstall *in;

        if (*n >= PY_MAX_INSTALLS || py_seen(ins, *n, runtime))
                return;
        in = &ins[*n];
        *in = (PyInstall) { .pyenv = pyenv };
        snprintf(in->exe, sizeof in->exe, "%s", exe);
        snprintf(in->runtime, sizeof in->runtime, "%s", runtime);
        snprintf(in->label, sizeof in->label, "%s", runtime);
        if (!py_query_version(in)) {
                printf("  %s: the interpreter %s does not run, skipped\n", runtime, exe);
                return;
        }
        (*n)++;
}

/* pyenv versions under $HOME and /root, then the system's python3.N and libpython3.N. */
static inline size_t py_discover(PyInstall *ins) {
        char pattern[PATH_MAX];
        const char *home = getenv("HOME");
        const char *roots[] = { home, "/root" };
        size_t n = 0;

        for (size_t r = 0; r < ELEMENTSOF(roots); r++) {
                glob_t g = {};

                if (!roots[r])
                        continue;
                snprintf(pattern, sizeof pattern, "%s/.pyenv/versions/*/bin/python3.*", roots[r]);
                if (glob(pattern, 0, NULL, &g) == 0)
                        for (size_t i = 0; i < g.gl_pathc; i++) {
                                const char *exe = g.gl_pathv[i], *base = strrchr(exe, '/') + 1;
                                char dir[PATH_MAX], libpat[PATH_MAX + 64];
                                glob_t lg = {};

                                if (!py_is_exe_name(base))
                                        continue;
                                snprintf(dir, sizeof dir, "%.*s", (int) (base - exe - strlen("bin/")), exe);
                                /* libpython3.N.so.1.0 or libpython3.Nm.so.1.0 */
                                snprintf(libpat, sizeof libpat, "%slib/lib%s*.so.1.0", dir, base);
                                if (glob(libpat, 0, NULL, &lg) == 0 && lg.gl_pathc > 0)
                                        py_add(ins, &n, exe, lg.gl_pathv[0], true);
                                else
                                        py_add(ins, &n, exe, exe, true);
                                globfree(&lg);
                        }
                globfree(&g);
        }

        glob_t g = {};
        if (glob("/usr/bin/python3.*", 0, NULL, &g) == 0)
                for (size_t i = 0; i < g.gl_pathc; i++) {
                        const char *exe = g.gl_pathv[i];
                        char lib[PATH_MAX];
                        PySym s;

                        if (!py_is_exe_name(strrchr(exe, '/') + 1))
                                continue;
                        if (py_readelf_sym(exe, true, "_PyEval_EvalFrameDefault", &s))
                                py_add(ins, &n, exe, exe, false);
                        else if (py_needed_libpython(exe, lib, sizeof lib))
                                py_add(ins, &n, exe, lib, false);
                        /* The shared library of the same version, when the executable has the
                         * interpreter linked in (Debian ships both, from one source package). */
                        char pat[PATH_MAX + 64];
                        glob_t lg = {};
                        snprintf(pat, sizeof pat, "/usr/lib/x86_64-linux-gnu/lib%s.so.1.0", strrchr(exe, '/') + 1);
                        if (glob(pat, 0, NULL, &lg) == 0)
                                for (size_t j = 0; j < lg.gl_pathc; j++)
                                        py_add(ins, &n, exe, lg.gl_pathv[j], false);
                        globfree(&lg);
                }
        globfree(&g);
        return n;
}

/* Where a live process maps runtime's first page (file offset 0), or UINT64_MAX: with the
 * file's first PT_LOAD address this gives the load bias. */
static inline uint64_t py_mapping_start(pid_t pid, const char *runtime) {
        char maps[64], line[PATH_MAX + 256], real[PATH_MAX];
        _cleanup_fclose_ FILE *f = NULL;

        ASSERT_TRUE(realpath(runtime, real));
        snprintf(maps, sizeof maps, "/proc/%d/maps", (int) pid);
        f = fopen(maps, "re");
        ASSERT_TRUE(f);
        while (fgets(line, sizeof line, f)) {
                unsigned long long start, end, off;
                char path[PATH_MAX] = "";

                if (sscanf(line, "%llx-%llx %*s %llx %*s %*u %4095[^\n]", &start, &end, &off, path) < 3)
                        continue;
                if (off == 0 && streq(path, real))
                        return start;
        }
        return UINT64_MAX;
}

/* Starts `exe -I script` with its standard input and output on pipes: *ret_in writes to it,
 * *ret_out reads what it prints. Returns its pid. */
/* CPU time pid has used (user + system, clock ticks), or -1. */
static inline long long py_cpu_ticks(pid_t pid) {
        char path[64], buf[1024];
        unsigned long long utime, stime;
        FILE *f;

        snprintf(path, sizeof path, "/proc/%d/stat", (int) pid);
        f = fopen(path, "re");
        if (!f)
                return -1;
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = '\0';
        const char *p = strrchr(buf, ')'); /* after the command name, which may hold spaces */
        if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime) != 2)
                return -1;
        return (long long) (utime + stime);
}

/* Waits until pid has spun for `ticks` of CPU time (a wall-clock wait is not enough on a busy
 * machine: the child may not have run at all). */
static inline void py_wait_spinning(pid_t pid, long long ticks) {
        long long start = py_cpu_ticks(pid), now = start;

        ASSERT_TRUE(start >= 0);
        ASSERT_EVENTUALLY((now = py_cpu_ticks(pid)) - start >= ticks, 30, "pid %d spun %lld of %lld ticks", (int) pid,
                          now - start, ticks);
}

/* Runs argv with pipes to its stdin (*ret_in) and from its stdout (*ret_out). */
static inline pid_t py_spawn_argv(const char *const argv[], int *ret_in, int *ret_out) {
        int to[2], from[2];
        pid_t pid;

        ASSERT_EQ(pipe2(to, O_CLOEXEC), 0);
        ASSERT_EQ(pipe2(from, O_CLOEXEC), 0);
        pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                /* Dies with the test: a failed check exits while the child may be stopped, and
                 * a child left behind holds the test's stderr open (meson waits for it). */
                (void) prctl(PR_SET_PDEATHSIG, SIGKILL);
                dup2(to[0], STDIN_FILENO);
                dup2(from[1], STDOUT_FILENO);
                execv(argv[0], (char *const *) argv);
                _exit(127);
        }
        close(to[0]);
        close(from[1]);
        *ret_in = to[1];
        *ret_out = from[0];
        return pid;
}

static inline pid_t py_spawn(const char *exe, const char *script, int *ret_in, int *ret_out) {
        return py_spawn_argv((const char *const[]) { exe, "-I", script, NULL }, ret_in, ret_out);
}
