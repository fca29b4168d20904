/* SPDX-License-Identifier: MIT */
/* The native worker (symbolizer/native-worker.h): native frames named through it are named as
 * the symbolizer would name them itself; the worker holds nothing but its socket and the files
 * it was handed, under the sandbox's filter; a worker that crashes, answers nonsense or spins
 * on a file costs that file RETRY once and BAD_FILE after, and nothing else; one that died
 * while idle or cannot start costs no file anything.
 *
 * This program is also the worker: run with --native-worker it serves as the symbolizer's
 * does, with --misbehave=HOW it serves but misbehaves on file 7 (crash, garbage, spin, asks
 * for another file than the request's). */

#include <dirent.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon.h"
#include "native-worker.h"
#include "resolver.h"
#include "test-util.h"
#include "tests.h"
#include "wire-buf.h"

#define MAX_NAMES 16
#define BAD_FILE_ID 7 /* the file a misbehaving worker misbehaves on */

static TestOffset offsets[MAX_NAMES];
static size_t n_offsets;

static void read_offsets(const char *target) {
        n_offsets = test_target_offsets(target, offsets, MAX_NAMES);
        CHECK_INT(n_offsets, 8);
}

/* ---- the file source: file ID n is paths[n] ---- */

static const char *paths[8];
static int passing_failures; /* the next open_file calls that time out */

static int fake_open_file(void *userdata, const uint8_t id[EP_FILE_ID_SIZE]) {
        if (passing_failures > 0) {
                passing_failures--;
                return -ETIMEDOUT;
        }
        if (id[0] >= ELEMENTSOF(paths) || !paths[id[0]])
                return -ENOENT;
        int fd = open(paths[id[0]], O_RDONLY | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

static const EpFileSource source = { .open_file = fake_open_file };

/* A resolver with a worker started as this program with arg (NULL: a resolver of its own). */
typedef struct Setup {
        EpSymStats stats;
        EpResolver *resolver;
        EpNativeWorker *worker;
} Setup;

static void setup(Setup *s, const char *arg) {
        EpResolverConfig cfg = EP_RESOLVER_CONFIG_DEFAULT;

        *s = (Setup) {};
        CHECK_INT(ep_resolver_new(&source, &cfg, &s->stats, &s->resolver), 0);
        if (!arg)
                return;
        char *argv[] = { (char *) "test-native-worker", (char *) arg, NULL };
        CHECK_INT(ep_native_worker_new("/proc/self/exe", argv, &source, &s->stats, &s->worker), 0);
        EpNativeParser parser = ep_native_worker_parser(s->worker);
        ep_resolver_set_native_parser(s->resolver, &parser);
}

static void teardown(Setup *s) {
        ep_resolver_free(s->resolver);
        ep_native_worker_free(s->worker);
}

static const EpSymResult *sym(Setup *s, uint8_t file, uint64_t addr, uint8_t flags) {
        EpSymRequest req = { .kind = EP_FRAME_NATIVE, .flags = flags, .file_id = { file }, .addr = addr };
        const EpSymResult *res = NULL;

        CHECK_INT(ep_resolver_symbolize(s->resolver, &req, &res), 0);
        CHECK(res);
        return res;
}

/* Every answer through the worker is the resolver's own: functions (exact and return
 * addresses), an offset past the text, a file that is not ELF, one that is missing, build IDs. */
static void check_same_answers(void) {
        Setup here, there;
        EpFileInfo a, b;

        setup(&here, NULL);
        setup(&there, "--native-worker");
        for (size_t i = 0; i < n_offsets; i++)
                for (uint8_t flags = 0; flags <= EP_FRAME_FLAG_RETURN_ADDRESS; flags += EP_FRAME_FLAG_RETURN_ADDRESS) {
                        uint64_t addr = offsets[i].offset + (flags ? 1 : 0);
                        const EpSymResult *mine = sym(&here, 1, addr, flags);
                        CHECK_INT(mine->status, EP_SYM_OK);
                        test_check_same_result(mine, sym(&there, 1, addr, flags));
                }
        test_check_same_result(sym(&here, 1, UINT64_C(1) << 40, 0), sym(&there, 1, UINT64_C(1) << 40, 0));
        test_check_same_result(sym(&here, 2, offsets[0].offset, 0), sym(&there, 2, offsets[0].offset, 0));
        CHECK_INT(sym(&there, 2, offsets[0].offset, 0)->status, EP_SYM_BAD_FILE);
        test_check_same_result(sym(&here, 3, offsets[0].offset, 0), sym(&there, 3, offsets[0].offset, 0));
        CHECK_INT(sym(&there, 3, offsets[0].offset, 0)->status, EP_SYM_NO_FILE);

        CHECK_INT(ep_resolver_file_info(here.resolver, (uint8_t[EP_FILE_ID_SIZE]) { 1 }, &a), 0);
        CHECK_INT(ep_resolver_file_info(there.resolver, (uint8_t[EP_FILE_ID_SIZE]) { 1 }, &b), 0);
        CHECK_INT(a.status, EP_SYM_OK);
        CHECK_INT(b.status, EP_SYM_OK);
        CHECK_INT(b.ids.gnu_len, 20);
        CHECK(memcmp(a.ids.gnu, b.ids.gnu, 20) == 0);
        CHECK_STR(a.ids.go, b.ids.go);
        CHECK_INT(ep_resolver_files_open(there.resolver), 1); /* the worker's, the bad file closed */
        CHECK_INT(ep_native_worker_started(there.worker), 1);
        teardown(&here);
        teardown(&there);
}

/* A file the loader could not open for a passing reason is answered RETRY, not cached, and
 * named when it can be opened. */
static void check_passing_failure(void) {
        Setup s;

        setup(&s, "--native-worker");
        passing_failures = 1;
        CHECK_INT(sym(&s, 1, offsets[0].offset, 0)->status, EP_SYM_RETRY);
        /* The resolver's own back-off after a timeout holds files for timeout_hold_ns: wait it
         * out on the clock it reads rather than guess. */
        uint64_t until = ep_now_ns(CLOCK_MONOTONIC) + EP_RESOLVER_CONFIG_DEFAULT.timeout_hold_ns;
        const EpSymResult *res;
        for (;;) {
                res = sym(&s, 1, offsets[0].offset, 0);
                if (res->status != EP_SYM_RETRY || ep_now_ns(CLOCK_MONOTONIC) > until + 60 * NSEC_PER_SEC)
                        break;
                usleep(10 * 1000);
        }
        CHECK_INT(res->status, EP_SYM_OK);
        CHECK_STR(res->lines[res->n_lines - 1].function, offsets[0].name);
        teardown(&s);
}

static bool status_has(const char *status, const char *key, const char *value) {
        char path[64], line[256];
        bool found = false;

        snprintf(path, sizeof path, "/proc/%s/status", status);
        FILE *f = fopen(path, "re");
        CHECK(f);
        while (fgets(line, sizeof line, f))
                if (startswith(line, key) && strstr(line + strlen(key), value))
                        found = true;
        fclose(f);
        return found;
}

/* The worker holds its socket (3), the standard descriptors and the files it was handed, and
 * runs under the filter; a socket the symbolizer holds (its bus connection) is not its. */
static void check_holds_nothing(void) {
        int bus[2];
        Setup s;
        char pid[16], dir[64];

        CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, bus) == 0); /* not CLOEXEC: inherited if not closed */
        setup(&s, "--native-worker");
        CHECK_INT(sym(&s, 1, offsets[0].offset, 0)->status, EP_SYM_OK);
        snprintf(pid, sizeof pid, "%d", (int) ep_native_worker_pid(s.worker));
        CHECK(status_has(pid, "Seccomp:", "2"));
        CHECK(status_has(pid, "NoNewPrivs:", "1"));
        CHECK(status_has(pid, "Name:", "ep-native"));

        snprintf(dir, sizeof dir, "/proc/%s/fd", pid);
        DIR *d = opendir(dir);
        CHECK(d);
        unsigned sockets = 0, files = 0;
        for (struct dirent *de; (de = readdir(d));) {
                struct stat st;
                char fd_path[384];
                if (de->d_name[0] == '.')
                        continue;
                int fd = atoi(de->d_name);
                snprintf(fd_path, sizeof fd_path, "%s/%s", dir, de->d_name);
                CHECK(stat(fd_path, &st) == 0);
                if (fd <= 2)
                        continue;
                if (S_ISSOCK(st.st_mode)) {
                        CHECK_INT(fd, 3);
                        sockets++;
                } else {
                        CHECK(S_ISREG(st.st_mode));
                        files++;
                }
        }
        closedir(d);
        printf("worker %s: its socket and %u file(s)\n", pid, files);
        CHECK_INT(sockets, 1);
        CHECK(files >= 1);
        close(bus[0]);
        close(bus[1]);
        teardown(&s);
}

/* HOW on file 7 costs it RETRY, then BAD_FILE (without a worker from then on); other files
 * are named all along, by a new worker after each failure. A worker asking for a file other
 * than its request's gets none: it is taken for a broken one. */
static void check_misbehaving(const char *how) {
        char arg[64];
        Setup s;

        snprintf(arg, sizeof arg, "--misbehave=%s", how);
        setup(&s, arg);
        ep_native_worker_set_cpu_limit(s.worker, 1 * USEC_PER_SEC);
        CHECK_INT(sym(&s, 1, offsets[0].offset, 0)->status, EP_SYM_OK);
        CHECK_INT(sym(&s, BAD_FILE_ID, offsets[0].offset, 0)->status, EP_SYM_RETRY);
        CHECK_INT(sym(&s, 1, offsets[1].offset, 0)->status, EP_SYM_OK);
        CHECK_INT(sym(&s, BAD_FILE_ID, offsets[1].offset, 0)->status, EP_SYM_BAD_FILE);
        CHECK_INT(sym(&s, BAD_FILE_ID, offsets[2].offset, 0)->status, EP_SYM_BAD_FILE);
        CHECK_INT(sym(&s, 1, offsets[2].offset, 0)->status, EP_SYM_OK);
        CHECK_INT(ep_native_worker_started(s.worker), 3);
        CHECK(strstr(s.stats.last_error, "native worker failed on file 07"));
        printf("misbehaving worker (%s): %s\n", how, s.stats.last_error);
        teardown(&s);
}

/* A worker killed while idle, or one that cannot be started, fails no file. */
static void check_not_the_files_fault(void) {
        Setup s;

        setup(&s, "--native-worker");
        CHECK_INT(sym(&s, 1, offsets[0].offset, 0)->status, EP_SYM_OK);
        pid_t pid = ep_native_worker_pid(s.worker);
        CHECK(kill(pid, SIGKILL) == 0);
        /* Dead (a zombie: the worker's parent reaps it) before the next request. */
        char proc[64];
        snprintf(proc, sizeof proc, "%d", (int) pid);
        for (unsigned i = 0; !status_has(proc, "State:", "Z"); i++) {
                CHECK(i < 60000);
                usleep(1000);
        }
        CHECK_INT(sym(&s, 1, offsets[1].offset, 0)->status, EP_SYM_OK);
        CHECK_INT(ep_native_worker_started(s.worker), 2);
        teardown(&s);

        setup(&s, "--misbehave=exit");
        for (unsigned i = 0; i < 3; i++)
                CHECK_INT(sym(&s, 1, offsets[0].offset, 0)->status, EP_SYM_RETRY);
        CHECK_INT(ep_native_worker_started(s.worker), 0);
        teardown(&s);
}

/* ---- the worker's side, when this program is one ---- */

static int misbehave(const char *how) {
        EpNativeServe *s = NULL;
        uint8_t *buf = NULL;

        if (streq(how, "exit")) /* one that cannot start */
                return EXIT_FAILURE;
        if (ep_native_serve_new(3, &s) < 0 || ep_native_serve_one(s, &(EpNativeRequest) { .type = EP_NATIVE_DONE }) < 0)
                return EXIT_FAILURE;
        for (;;) {
                EpNativeRequest req = {};
                size_t size;
                int fd = -EBADF;

                if (ep_native_recv(3, &buf, &size, &fd, -1) < 0 || ep_native_get_request(buf, size, &req) < 0)
                        return EXIT_SUCCESS;
                if (req.type == EP_NATIVE_SYMBOLIZE && req.file_id[0] == BAD_FILE_ID) {
                        if (streq(how, "crash"))
                                abort();
                        if (streq(how, "spin"))
                                for (volatile unsigned long n = 0;; n++)
                                        ;
                        if (streq(how, "other-file")) {
                                /* another file than the request's: refused as a broken worker */
                                EpNativeRequest need = { .type = EP_NATIVE_NEED_FILE, .file_id = { 1 } };
                                EpWriter w;
                                ep_writer_init_dynamic(&w);
                                ep_native_put_request(&w, &need);
                                (void) ep_native_send(3, &w, -1);
                                ep_writer_done(&w);
                                (void) ep_native_recv(3, &buf, &size, &fd, -1);
                                return EXIT_FAILURE;
                        }
                        /* garbage: an answer with a status that does not exist */
                        EpWriter w;
                        ep_writer_init_dynamic(&w);
                        ep_put_u8(&w, EP_NATIVE_ANSWER);
                        ep_put_u8(&w, 200);
                        (void) ep_native_send(3, &w, -1);
                        ep_writer_done(&w);
                } else if (ep_native_serve_one(s, &req) < 0)
                        return EXIT_FAILURE;
                free(req.path);
        }
}

int main(int argc, char *argv[]) {
        if (argc == 2 && streq(argv[1], "--native-worker"))
                return ep_native_worker_main(3);
        if (argc == 2 && startswith(argv[1], "--misbehave="))
                return misbehave(argv[1] + strlen("--misbehave="));

        const char *target = test_env("SYM_TEST_TARGET");
        char bad[] = "/tmp/test-native-worker-XXXXXX";
        int fd = mkstemp(bad);
        CHECK(fd >= 0);
        CHECK(write(fd, "not an ELF file\n", 16) == 16);
        close(fd);

        read_offsets(target);
        paths[1] = target;
        paths[2] = bad;
        paths[BAD_FILE_ID] = target;

        check_same_answers();
        check_passing_failure();
        check_holds_nothing();
        check_misbehaving("crash");
        check_misbehaving("garbage");
        check_misbehaving("spin");
        check_misbehaving("other-file");
        check_not_the_files_fault();
        unlink(bad);
        TEST_DONE("test-symbolizer-native-worker");
}
