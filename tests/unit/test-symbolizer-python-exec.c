/* SPDX-License-Identifier: MIT */
/* A process that execs keeps its pid and start time, so the CPython resolver's per-process
 * state (resolve-cpython.c: the /proc/PID/mem descriptor, the version's layout, the code
 * objects) must follow its image, not its key. For each CPython on the machine, a child runs
 * it, then execs the next one (another version), then a shell (no Python), then the first
 * one again; at each step one resolver, with the same (pid, start time), is asked to name
 * the code object the child reports, with the version the loader would answer for the image
 * then (Loader1.OpenProcessMemory, faked): the new image's function, or NO_FILE for the
 * shell. Each request has its own instruction offset, so the resolver's result cache (keyed
 * by pid, start time and address) cannot answer it. */

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>

#include "fake-python-process.h"
#include "resolve-cpython.h"
#include "resolver.h"
#include "test-python-util.h"

/* argv: the script's own name is the function's; it prints its code object's address, waits
 * for a line, then execs argv[1..] (if any). */
static const char script[] =
        "import os, sys\n"
        "def %s():\n"
        "    print(id(sys._getframe().f_code), flush=True)\n"
        "    sys.stdin.readline()\n"
        "    if len(sys.argv) > 1:\n"
        "        os.execv(sys.argv[1], sys.argv[1:])\n"
        "%s()\n";

static void write_script(const char *path, const char *function) {
        FILE *f = fopen(path, "we");

        ASSERT_TRUE(f);
        ASSERT_TRUE(fprintf(f, script, function, function) > 0);
        ASSERT_EQ(fclose(f), 0);
}

/* The child's next line (30 s at most). */
static void read_line(int fd, char *buf, size_t size) {
        size_t n = 0;

        while (n + 1 < size) {
                struct pollfd pfd = { .fd = fd, .events = POLLIN };
                ASSERT_EQ(poll(&pfd, 1, 30000), 1);
                ssize_t k = read(fd, buf + n, 1);
                ASSERT_EQ(k, 1);
                if (buf[n] == '\n')
                        break;
                n++;
        }
        buf[n] = '\0';
}

static const EpSymResult *resolve(EpResolver *r, pid_t pid, uint64_t code, uint32_t offset) {
        EpSymRequest req = {
                .kind = EP_FRAME_CPYTHON,
                .addr = EP_FRAME_CPYTHON_ADDR(code, offset),
                .pid = (uint32_t) pid,
                .start_time_ns = 12345,
        };
        const EpSymResult *res;

        ASSERT_OK(ep_resolver_symbolize(r, &req, &res));
        return res;
}

static void expect_named(EpResolver *r, pid_t pid, uint64_t code, uint32_t offset, const char *function,
                         const char *file, const char *label) {
        const EpSymResult *res = resolve(r, pid, code, offset);

        if (res->status != EP_SYM_OK || res->n_lines != 1 || !streq(res->lines[0].function, function))
                fprintf(stderr, "%s: status %u, %s, expected %s\n", label, res->status,
                        res->n_lines ? res->lines[0].function : "-", function);
        ASSERT_EQ(res->status, EP_SYM_OK);
        ASSERT_EQ(res->n_lines, 1);
        ASSERT_STREQ(res->lines[0].function, function);
        ASSERT_STREQ(res->lines[0].file, file);
}

/* Lets the child exec its next image (a line on in_fd), reads the code object it prints and
 * expects it named with py's layout, as the loader now says; returns the code object. */
static unsigned long long next_image(EpResolver *r, FakePythonProcess *fake, int in_fd, int out_fd,
                                     const PyInstall *py, uint32_t offset, const char *function, const char *file) {
        unsigned long long code;
        char line[128];

        ASSERT_EQ(write(in_fd, "\n", 1), 1);
        read_line(out_fd, line, sizeof line);
        ASSERT_EQ(sscanf(line, "%llu", &code), 1);
        fake->version = py->major << 8 | py->minor;
        expect_named(r, (pid_t) fake->pid, code, offset, function, file, py->label);
        return code;
}

static void check_exec(const PyInstall *a, const PyInstall *b, const char *dir) {
        char before[PATH_MAX], after[PATH_MAX], again[PATH_MAX], line[128], shell[3 * PATH_MAX];
        unsigned long long code;
        int in_fd, out_fd, status;
        EpSymStats stats = {};
        EpPyStats ps;
        _cleanup_(ep_resolver_freep) EpResolver *r = NULL;
        const EpSymResult *res;

        snprintf(before, sizeof before, "%s/before.py", dir);
        snprintf(after, sizeof after, "%s/after.py", dir);
        snprintf(again, sizeof again, "%s/again.py", dir);
        write_script(before, "before");
        write_script(after, "after");
        write_script(again, "again");

        /* a runs before.py → exec b after.py → exec sh (reads a line) → exec a again.py */
        snprintf(shell, sizeof shell, "echo native; read x; exec '%s' -I '%s'", a->exe, again);
        const char *argv[] = { a->exe, "-I", before, b->exe, "-I", after, "/bin/sh", "-c", shell, NULL };
        pid_t pid = py_spawn_argv(argv, &in_fd, &out_fd);

        FakePythonProcess fake = { .pid = pid, .version = a->major << 8 | a->minor };
        EpFileSource src = { .open_file = fake_python_no_file, .open_process_memory = fake_python_open_memory,
                             .userdata = &fake };
        ASSERT_OK(ep_resolver_new(&src, NULL, &stats, &r));

        /* 1. The first image, as the loader says: named with a's layout. */
        read_line(out_fd, line, sizeof line);
        ASSERT_EQ(sscanf(line, "%llu", &code), 1);
        expect_named(r, pid, code, 0, "before", before, a->label);

        /* 2. Exec'd into b: the descriptor of a's image reads nothing now; the resolver must
         * ask again and read b's code objects with b's layout. */
        code = next_image(r, &fake, in_fd, out_fd, b, 2, "after", after);
        ep_resolver_python_stats(r, &ps);
        ASSERT_EQ(ps.processes, 1);
        ASSERT_EQ(ps.processes_opened, 2);

        /* 3. Exec'd out of Python: no Python state, NO_FILE. */
        ASSERT_EQ(write(in_fd, "\n", 1), 1);
        read_line(out_fd, line, sizeof line);
        ASSERT_STREQ(line, "native");
        fake.version = 0;
        res = resolve(r, pid, code, 4);
        ASSERT_EQ(res->status, EP_SYM_NO_FILE);
        ASSERT_EQ(res->n_lines, 0);

        /* 4. And back into a: not CPython a moment ago, named now (no waiting for a retry). */
        code = next_image(r, &fake, in_fd, out_fd, a, 6, "again", again);
        ep_resolver_python_stats(r, &ps);
        ASSERT_EQ(ps.processes_opened, 4);
        ASSERT_EQ(ps.images_gone, 3);

        /* Gone: NO_FILE. */
        kill(pid, SIGKILL);
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        res = resolve(r, pid, code, 8);
        ASSERT_EQ(res->status, EP_SYM_NO_FILE);
        close(in_fd);
        close(out_fd);
        printf("  %s → %s → sh → %s: each image's function named, NO_FILE without Python\n", a->label, b->label,
               a->label);
}

int main(void) {
        PyInstall ins[PY_MAX_INSTALLS];
        const PyInstall *usable[PY_MAX_INSTALLS];
        size_t n, n_usable = 0, n_checked = 0;
        const char *dir;

        n = py_discover(ins);
        for (size_t i = 0; i < n; i++) {
                EpPyLayout l;
                if (ep_py_layout_for_version(ins[i].major, ins[i].minor, &l) >= 0)
                        usable[n_usable++] = &ins[i];
        }
        dir = py_tmpdir_make("test-sym-python-exec");
        /* Each CPython execs the next one of another version. */
        for (size_t i = 0; i < n_usable; i++)
                for (size_t k = 1; k < n_usable; k++) {
                        const PyInstall *a = usable[i], *b = usable[(i + k) % n_usable];
                        if (a->major == b->major && a->minor == b->minor)
                                continue;
                        check_exec(a, b, dir);
                        n_checked++;
                        break;
                }
        if (n_checked == 0)
                printf("test-symbolizer-python-exec: fewer than two CPython versions on this machine, skipped\n");
        return tests_summary("test-symbolizer-python-exec");
}
