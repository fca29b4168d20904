/* SPDX-License-Identifier: MIT */
/* The symbolizer's side of the native worker (native-worker.h): starting it, one request at a
 * time, the files it asks for, and what a worker that fails costs the file it was working on. */

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "file-id.h"
#include "log.h"
#include "lru.h"
#include "native-worker.h"

#define POLL_SLICE_MS 1000 /* how often a request's CPU time is looked at */
#define START_BACKOFF_MIN_NS (1 * NSEC_PER_SEC)
#define START_BACKOFF_MAX_NS (60 * NSEC_PER_SEC)
#define NEED_FILE_MAX 2 /* files a worker may ask for per request: the request's, and once more */

struct EpNativeWorker {
        char *path;
        char **argv;
        EpFileSource source;
        EpSymStats *stats;
        uint64_t cpu_limit_usec;

        pid_t pid; /* 0: none runs */
        int sock;
        clockid_t cpu_clock;
        uint64_t started;
        /* A worker that could not start is not tried again before next_start_ns (CLOCK_MONOTONIC):
         * no fork and no log line per frame while, say, its program cannot be executed. */
        uint64_t next_start_ns, start_backoff_ns;

        EpWriter w;
        uint8_t *buf;

        EpLru *crashed;         /* file IDs a worker failed on ... */
        uint8_t *crash_counts;  /* ... how often (by slot) */

        uint32_t files_open;
        uint64_t go_malformed, go_malformed_before; /* this worker's, the earlier ones' */
};

static char **strv_copy(char *const *v) {
        size_t n = 0;

        while (v[n])
                n++;
        char **c = calloc(n + 1, sizeof *c);
        if (!c)
                return NULL;
        for (size_t i = 0; i < n; i++)
                if (!(c[i] = strdup(v[i]))) {
                        while (i > 0)
                                free(c[--i]);
                        free(c);
                        return NULL;
                }
        return c;
}

static void worker_stop(EpNativeWorker *w) {
        if (w->pid <= 0)
                return;
        close(w->sock);
        (void) kill(w->pid, SIGKILL);
        while (waitpid(w->pid, NULL, 0) < 0 && errno == EINTR)
                ;
        w->pid = 0;
        w->sock = -EBADF;
        w->go_malformed_before += w->go_malformed;
        w->go_malformed = 0;
        w->files_open = 0;
}

EpNativeWorker *ep_native_worker_free(EpNativeWorker *w) {
        if (!w)
                return NULL;
        worker_stop(w);
        if (w->argv)
                for (char **a = w->argv; *a; a++)
                        free(*a);
        free(w->argv);
        free(w->path);
        ep_writer_done(&w->w);
        free(w->buf);
        ep_lru_free(w->crashed);
        free(w->crash_counts);
        free(w);
        return NULL;
}

int ep_native_worker_new(const char *path, char *const *argv, const EpFileSource *source, EpSymStats *stats,
                         EpNativeWorker **ret) {
        _cleanup_(ep_native_worker_freep) EpNativeWorker *w = calloc(1, sizeof *w);
        int k;

        if (!w)
                return -ENOMEM;
        w->sock = -EBADF;
        w->source = *source;
        w->stats = stats;
        w->cpu_limit_usec = EP_NATIVE_WORKER_CPU_USEC;
        ep_writer_init_dynamic(&w->w);
        w->path = strdup(path);
        w->argv = strv_copy(argv);
        w->crash_counts = calloc(EP_NATIVE_WORKER_FILES_TRACKED, 1);
        if (!w->path || !w->argv || !w->crash_counts)
                return -ENOMEM;
        k = ep_lru_new(EP_FILE_ID_SIZE, EP_NATIVE_WORKER_FILES_TRACKED, &w->crashed);
        if (k < 0)
                return k;
        *ret = TAKE_PTR(w);
        return 0;
}

void ep_native_worker_set_cpu_limit(EpNativeWorker *w, uint64_t usec) {
        w->cpu_limit_usec = usec;
}

uint32_t ep_native_worker_files_open(const EpNativeWorker *w) {
        return w->files_open;
}

uint64_t ep_native_worker_go_malformed(const EpNativeWorker *w) {
        return w->go_malformed_before + w->go_malformed;
}

uint64_t ep_native_worker_started(const EpNativeWorker *w) {
        return w->started;
}

pid_t ep_native_worker_pid(const EpNativeWorker *w) {
        return w->pid;
}

/* In the child: the worker's end of the socket as descriptor 3 and nothing else but the
 * standard ones, then the worker program. Only system calls here (fork of a daemon). */
static _Noreturn void child_exec(const char *path, char **argv, int sock, pid_t parent) {
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
                _exit(EXIT_FAILURE);
        if (sock == 3 ? fcntl(3, F_SETFD, 0) < 0 : dup2(sock, 3) < 0)
                _exit(EXIT_FAILURE);
        if (syscall(SYS_close_range, 4U, ~0U, 0U) < 0)
                _exit(EXIT_FAILURE);
        (void) setrlimit(RLIMIT_CORE, &(struct rlimit) {});
        execv(path, argv);
        _exit(127);
}

static int worker_start(EpNativeWorker *w) {
        int sv[2];

        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
                return -errno;
        pid_t parent = getpid();
        pid_t pid = fork();
        if (pid < 0) {
                int k = -errno;
                close(sv[0]);
                close(sv[1]);
                return k;
        }
        if (pid == 0)
                child_exec(w->path, w->argv, sv[1], parent);
        close(sv[1]);
        w->pid = pid;
        w->sock = sv[0];
        if (clock_getcpuclockid(pid, &w->cpu_clock) != 0)
                w->cpu_clock = (clockid_t) -1;

        /* It says when it is ready: a worker that cannot start (its program replaced by an
         * upgrade, say) is told from one that fails on a file. */
        size_t size;
        int fd = -EBADF;
        int k = ep_native_recv(w->sock, &w->buf, &size, &fd, (int) (EP_NATIVE_WORKER_WALL_USEC / 1000));
        if (fd >= 0)
                close(fd);
        if (k >= 0 && (fd >= 0 || size != 1 || w->buf[0] != EP_NATIVE_DONE))
                k = -EBADMSG;
        if (k < 0) {
                worker_stop(w);
                return k;
        }
        w->started++;
        if (w->started > 1)
                log_info("Started the native worker again (pid %d).", (int) pid);
        return 0;
}

static uint64_t worker_cpu_usec(const EpNativeWorker *w) {
        struct timespec ts;

        if (w->cpu_clock == (clockid_t) -1 || clock_gettime(w->cpu_clock, &ts) < 0)
                return 0;
        return (uint64_t) ts.tv_sec * USEC_PER_SEC + (uint64_t) ts.tv_nsec / 1000;
}

/* Hands the worker the file it asked for (or why not). It may ask only for the file of the
 * request it works on: a worker taken over by one file gets no other. */
static int give_file(EpNativeWorker *w, const uint8_t file_id[EP_FILE_ID_SIZE], const uint8_t *msg, size_t size) {
        EpNativeRequest need;
        int k;

        k = ep_native_get_request(msg, size, &need);
        if (k < 0)
                return k;
        free(need.path);
        if (need.type != EP_NATIVE_NEED_FILE || memcmp(need.file_id, file_id, EP_FILE_ID_SIZE) != 0)
                return -EBADMSG;
        _cleanup_close_ int fd = w->source.open_file(w->source.userdata, need.file_id);
        ep_writer_reset(&w->w);
        ep_native_put_file(&w->w, MIN(fd, 0));
        return ep_native_send(w->sock, &w->w, fd);
}

/* Sends req and waits for the answer of type want (in w->buf, *ret_size bytes), serving the
 * worker's file requests meanwhile. 0; -ETIME (the request used up its CPU time), -EBADMSG or
 * -ECONNRESET (the worker broke or died): the worker is stopped, and the request is what failed
 * it; -ETIMEDOUT (no answer in EP_NATIVE_WORKER_WALL_USEC: the machine may be stuck), or another
 * error of starting or reaching it: stopped too, but no fault of the request. */
/* Starts a worker unless one failed to start a moment ago. */
static int worker_start_when_due(EpNativeWorker *w) {
        uint64_t now = ep_clock_ns(CLOCK_MONOTONIC);
        int k;

        if (now < w->next_start_ns)
                return -ESRCH;
        k = worker_start(w);
        if (k < 0) {
                w->start_backoff_ns = MIN(MAX(w->start_backoff_ns * 2, START_BACKOFF_MIN_NS), START_BACKOFF_MAX_NS);
                w->next_start_ns = now + w->start_backoff_ns;
                log_warning_errno(k, "Cannot start the native worker, native frames are answered RETRY for %u s: %m",
                                  (unsigned) (w->start_backoff_ns / NSEC_PER_SEC));
                return -ESRCH; /* not the request's doing */
        }
        w->start_backoff_ns = 0;
        return 0;
}

static int worker_call(EpNativeWorker *w, const EpNativeRequest *req, uint8_t want, size_t *ret_size) {
        unsigned files_given = 0;
        int k;

        ep_writer_reset(&w->w);
        ep_native_put_request(&w->w, req);
        /* A worker that died while idle fails the send: that is no fault of this request, and a
         * new one is started for it. */
        for (unsigned attempt = 0;; attempt++) {
                bool fresh = w->pid <= 0;
                if (fresh) {
                        k = worker_start_when_due(w);
                        if (k < 0)
                                return k;
                }
                k = ep_native_send(w->sock, &w->w, -1);
                if (k >= 0)
                        break;
                worker_stop(w);
                if (fresh || attempt > 0)
                        return -ESRCH; /* a new one that died at once: not this request's doing */
        }

        uint64_t cpu_start = worker_cpu_usec(w), wall_start = ep_clock_ns(CLOCK_MONOTONIC);
        while (k >= 0) {
                int fd = -EBADF;
                size_t size;

                k = ep_native_recv(w->sock, &w->buf, &size, &fd, POLL_SLICE_MS);
                if (fd >= 0) {
                        close(fd); /* the worker has none to give */
                        k = -EBADMSG;
                }
                if (k == -ETIMEDOUT) {
                        if (worker_cpu_usec(w) - cpu_start > w->cpu_limit_usec)
                                k = -ETIME;
                        else if (ep_clock_ns(CLOCK_MONOTONIC) - wall_start > EP_NATIVE_WORKER_WALL_USEC * 1000)
                                k = -ETIMEDOUT;
                        else
                                k = 0;
                        continue;
                }
                if (k < 0)
                        break;
                if (w->buf[0] == want) {
                        *ret_size = size;
                        return 0;
                }
                k = w->buf[0] == EP_NATIVE_NEED_FILE && files_given++ < NEED_FILE_MAX
                            ? give_file(w, req->file_id, w->buf, size)
                            : -EBADMSG;
        }
        worker_stop(w);
        return k;
}

/* The worker failed on a request for file_id (k from worker_call): RETRY once, BAD_FILE from
 * the second failure on. Failures that are not the request's (it could not start, the machine
 * is stuck) are RETRY and not counted. */
static uint8_t failed_status(EpNativeWorker *w, const uint8_t file_id[EP_FILE_ID_SIZE], int k) {
        char hex[2 * EP_FILE_ID_SIZE + 1];
        bool evicted;

        if (k != -ETIME && k != -EBADMSG && k != -ECONNRESET)
                return EP_SYM_RETRY;
        int slot = ep_lru_get(w->crashed, file_id);
        if (slot < 0) {
                slot = ep_lru_insert(w->crashed, file_id, &evicted);
                if (slot < 0)
                        return EP_SYM_RETRY;
                w->crash_counts[slot] = 0;
        }
        if (w->crash_counts[slot] < UINT8_MAX)
                w->crash_counts[slot]++;
        ep_file_id_to_hex(file_id, hex);
        log_warning_errno(k, "The native worker failed on file %s (%u time%s): %s%m", hex, w->crash_counts[slot],
                          w->crash_counts[slot] == 1 ? "" : "s",
                          w->crash_counts[slot] >= EP_NATIVE_WORKER_CRASHES_BAD ? "answering BAD_FILE for it: " :
                                                                                 "asked again later: ");
        ep_sym_stats_error(w->stats, "native worker failed on file %s: %s", hex, strerror(-k));
        return w->crash_counts[slot] >= EP_NATIVE_WORKER_CRASHES_BAD ? EP_SYM_BAD_FILE : EP_SYM_RETRY;
}

/* A file the workers failed on often enough is not handed to them again. */
static bool known_bad(EpNativeWorker *w, const uint8_t file_id[EP_FILE_ID_SIZE]) {
        int slot = ep_lru_get(w->crashed, file_id);
        return slot >= 0 && w->crash_counts[slot] >= EP_NATIVE_WORKER_CRASHES_BAD;
}

static void take_state(EpNativeWorker *w, const EpNativeWorkerState *s) {
        w->files_open = s->files_open;
        w->go_malformed = s->go_malformed;
        if (s->last_error && s->last_error[0])
                ep_sym_stats_error(w->stats, "%s", s->last_error);
}

/* An answer without a name: status alone. */
static int answer_status(EpNativeAnswer *a, uint8_t status) {
        a->result.status = status;
        a->result.module = strdup("");
        return a->result.module ? 0 : -ENOMEM;
}

int ep_native_worker_symbolize(EpNativeWorker *w, const EpSymRequest *req, EpNativeAnswer *ret) {
        EpNativeRequest msg = { .type = EP_NATIVE_SYMBOLIZE, .addr = req->addr, .flags = req->flags,
                                .path = (char *) req->path };
        size_t size;
        int k;

        memcpy(msg.file_id, req->file_id, EP_FILE_ID_SIZE);
        if (known_bad(w, req->file_id))
                return answer_status(ret, EP_SYM_BAD_FILE);
        k = worker_call(w, &msg, EP_NATIVE_ANSWER, &size);
        if (k >= 0) {
                k = ep_native_get_answer(w->buf, size, ret);
                if (k == -EBADMSG)
                        worker_stop(w);
        }
        if (k == -ENOMEM)
                return k;
        if (k < 0)
                return answer_status(ret, failed_status(w, req->file_id, k));
        take_state(w, &ret->state);
        return 0;
}

int ep_native_worker_file_info(EpNativeWorker *w, const uint8_t file_id[EP_FILE_ID_SIZE], EpFileInfo *ret) {
        EpNativeRequest msg = { .type = EP_NATIVE_FILE_INFO };
        EpNativeInfo info = {};
        size_t size;
        int k;

        memcpy(msg.file_id, file_id, EP_FILE_ID_SIZE);
        if (known_bad(w, file_id)) {
                *ret = (EpFileInfo) { .status = EP_SYM_BAD_FILE };
                return 0;
        }
        k = worker_call(w, &msg, EP_NATIVE_INFO, &size);
        if (k >= 0) {
                k = ep_native_get_info(w->buf, size, &info);
                if (k == -EBADMSG)
                        worker_stop(w);
        }
        if (k == -ENOMEM)
                return k;
        if (k < 0) {
                *ret = (EpFileInfo) { .status = failed_status(w, file_id, k) };
                return 0;
        }
        take_state(w, &info.state);
        *ret = info.info;
        ep_native_info_done(&info);
        return 0;
}

/* A request whose answer is DONE; a worker that fails it is simply stopped (the next one
 * starts with nothing open, which is what was asked). */
static void call_done(EpNativeWorker *w, const EpNativeRequest *req) {
        size_t size;

        if (w->pid <= 0)
                return;
        if (worker_call(w, req, EP_NATIVE_DONE, &size) >= 0 && size != 1)
                worker_stop(w);
}

void ep_native_worker_forget_file(EpNativeWorker *w, const uint8_t file_id[EP_FILE_ID_SIZE]) {
        EpNativeRequest msg = { .type = EP_NATIVE_FORGET };

        memcpy(msg.file_id, file_id, EP_FILE_ID_SIZE);
        call_done(w, &msg);
}

void ep_native_worker_source_changed(EpNativeWorker *w) {
        call_done(w, &(EpNativeRequest) { .type = EP_NATIVE_SOURCE_CHANGED });
}

/* ---- as the resolver's native parser ---- */

static int parser_answer(void *userdata, const EpSymRequest *req, EpNativeAnswer *ret) {
        return ep_native_worker_symbolize(userdata, req, ret);
}

static int parser_file_info(void *userdata, const uint8_t file_id[EP_FILE_ID_SIZE], EpFileInfo *ret) {
        return ep_native_worker_file_info(userdata, file_id, ret);
}

static void parser_forget_file(void *userdata, const uint8_t file_id[EP_FILE_ID_SIZE]) {
        ep_native_worker_forget_file(userdata, file_id);
}

static void parser_source_changed(void *userdata) {
        ep_native_worker_source_changed(userdata);
}

static uint32_t parser_files_open(void *userdata) {
        return ep_native_worker_files_open(userdata);
}

static uint64_t parser_go_malformed(void *userdata) {
        return ep_native_worker_go_malformed(userdata);
}

EpNativeParser ep_native_worker_parser(EpNativeWorker *w) {
        return (EpNativeParser) {
                .answer = parser_answer,
                .file_info = parser_file_info,
                .forget_file = parser_forget_file,
                .source_changed = parser_source_changed,
                .files_open = parser_files_open,
                .go_malformed = parser_go_malformed,
                .userdata = w,
        };
}
