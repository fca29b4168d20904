/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <libelf.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include "daemon.h"
#include "file-id.h"
#include "log.h"
#include "runtime-detect.h"
#include "sandbox.h"
#include "unwind-service.h"
#include "wire.h"

#define SLOW_EXTRACTION_NS (5 * NSEC_PER_SEC)

typedef struct Job {
        struct Job *next;

        /* event loop only */
        sd_bus_message *msg;

        /* in */
        bool detect; /* DetectRuntime, else GetUnwindTable */
        int fd;
        uint8_t file_id[EP_FILE_ID_SIZE];

        /* out: DetectRuntime */
        EpRuntimeDetection detection;
        /* out: GetUnwindTable */
        int error;
        int memfd;
        EpUnwindStats delta; /* counters this job moved; cache_bytes is a level, not a delta */
        bool cache_bytes_known;
} Job;

typedef struct JobQueue {
        Job *head, **tail;
} JobQueue;

/* A thread that serves one queue, in order. */
typedef struct Worker {
        EpUnwindService *service;
        pthread_t thread;
        bool started;
        pthread_cond_t wake;
        JobQueue pending; /* under the service's lock */
} Worker;

struct EpUnwindService {
        sd_event_source *done_source;
        int done_fd; /* eventfd: the worker finished jobs */
        EpSymStats *sym_stats;
        EpUnwindStats stats;

        /* worker configuration, fixed after start */
        char *cache_dir;
        uint64_t cache_max;
        EpUnwindExtractOptions options;
        char *debug_root;

        pthread_mutex_t lock;
        bool stop;     /* under lock */
        JobQueue done; /* under lock */
        /* The table worker's pending are GetUnwindTable calls, the detection worker's are
         * DetectRuntime calls: a detection takes milliseconds, an extraction of a cold file
         * seconds, and Python frames wait for the detection, not for the table. */
        Worker table_worker, detect_worker;

        /* table worker only */
        EpUnwindCache *cache;
        bool cache_tried;
};

static void queue_init(JobQueue *q) {
        q->head = NULL;
        q->tail = &q->head;
}

static void queue_push(JobQueue *q, Job *j) {
        j->next = NULL;
        *q->tail = j;
        q->tail = &j->next;
}

static Job *queue_pop(JobQueue *q) {
        Job *j = q->head;

        if (!j)
                return NULL;
        q->head = j->next;
        if (!q->head)
                q->tail = &q->head;
        return j;
}

static void job_free(Job *j) {
        if (!j)
                return;
        sd_bus_message_unref(j->msg);
        (void) close_nointr(j->fd);
        (void) close_nointr(j->memfd);
        free(j);
}

/* ---- worker ---- */

static int make_sealed_memfd(const void *blob, size_t size) {
        _cleanup_close_ int fd = memfd_create("ep-unwind-table", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        size_t done = 0;

        if (fd < 0)
                return -errno;
        while (done < size) {
                ssize_t k = write(fd, (const uint8_t *) blob + done, size - done);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                done += (size_t) k;
        }
        if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0)
                return -errno;
        if (lseek(fd, 0, SEEK_SET) < 0)
                return -errno;
        return TAKE_FD(fd);
}

static void worker_open_cache(EpUnwindService *s) {
        int r;

        if (s->cache_tried)
                return;
        s->cache_tried = true;
        if (!s->cache_dir || !*s->cache_dir) /* "" for none */
                return;

        r = ep_unwind_cache_open(s->cache_dir, s->cache_max, &s->cache);
        if (r < 0) {
                log_warning_errno(r, "Cannot use the unwind table cache in %s, working without it: %m", s->cache_dir);
                return;
        }
        log_info("Unwind table cache: %s", ep_unwind_cache_path(s->cache));
}

/* Extractions run one at a time: one that takes long holds up every table behind it, and the log
 * says which file did. */
static void log_slow_extraction(const Job *j) {
        char link[64], path[PATH_MAX];
        ssize_t n;

        if (j->delta.extract_nsec < SLOW_EXTRACTION_NS)
                return;
        snprintf(link, sizeof link, "/proc/self/fd/%d", j->fd);
        n = readlink(link, path, sizeof path - 1);
        path[n < 0 ? 0 : n] = '\0';
        log_info("Extracting the unwind table of %s took %.1f s (%s).", n > 0 ? path : "a file",
                 (double) j->delta.extract_nsec / NSEC_PER_SEC,
                 j->error < 0 ? strerror(-j->error) : "a cold disk or a busy machine");
}

static void worker_detect(Job *j) {
        (void) ep_runtime_detect_sandboxed(j->fd, j->file_id, &j->detection);
        (void) close_nointr(j->fd);
        j->fd = -EBADF;
}

static void worker_run(EpUnwindService *s, Job *j) {
        _cleanup_free_ void *blob = NULL;
        size_t size = 0;

        if (j->detect) {
                worker_detect(j);
                return;
        }
        worker_open_cache(s);

        j->error = ep_unwind_lookup(s->cache, j->fd, j->file_id, &s->options, &j->delta, &blob, &size);
        log_slow_extraction(j);
        if (j->error >= 0) {
                j->memfd = make_sealed_memfd(blob, size);
                if (j->memfd < 0) {
                        j->error = j->memfd;
                        j->delta.tables = 0;
                }
        }
        if (s->cache) {
                EpUnwindCacheInfo info;
                ep_unwind_cache_info(s->cache, &info);
                j->delta.cache_bytes = info.bytes;
                j->cache_bytes_known = true;
        }
        (void) close_nointr(j->fd);
        j->fd = -EBADF;
        /* An extraction allocates and frees megabytes in this thread's own malloc arena,
         * which glibc does not shrink by itself; jobs come once per new file. */
        (void) malloc_trim(0);
}

static void *worker_main(void *userdata) {
        Worker *w = userdata;
        EpUnwindService *s = w->service;

        pthread_mutex_lock(&s->lock);
        for (;;) {
                Job *j;

                while (!s->stop && !w->pending.head)
                        pthread_cond_wait(&w->wake, &s->lock);
                if (s->stop)
                        break;
                j = queue_pop(&w->pending);
                pthread_mutex_unlock(&s->lock);

                worker_run(s, j);

                pthread_mutex_lock(&s->lock);
                queue_push(&s->done, j);
                uint64_t one = 1;
                (void) !write(s->done_fd, &one, sizeof one);
        }
        pthread_mutex_unlock(&s->lock);

        if (w == &s->table_worker)
                s->cache = ep_unwind_cache_free(s->cache);
        return NULL;
}

/* ---- event loop ---- */

static void complete_detect(EpUnwindService *s, Job *j) {
        const EpRuntimeDetection *d = &j->detection;
        char hex[2 * EP_FILE_ID_SIZE + 1];
        int r;

        ep_file_id_to_hex(j->file_id, hex);
        if (d->error < 0) {
                const char *name = ep_runtime_detect_error_name(d);

                if (name && streq(name, EP_ERROR_BAD_FILE))
                        ep_sym_stats_error(s->sym_stats, "Runtime detection of file %s: %s", hex, d->what);
                log_debug("Runtime detection of file %s: %s (%s)", hex, d->what, strerror(-d->error));
        } else if (d->runtime[0])
                log_debug("File %s is a %s runtime.", hex, d->runtime);
        r = ep_runtime_detect_reply(j->msg, j->file_id, d);
        if (r < 0)
                log_debug_errno(r, "Could not answer DetectRuntime: %m");
}

static void complete(EpUnwindService *s, Job *j) {
        const char *name = NULL;
        int r;

        if (j->detect) {
                complete_detect(s, j);
                return;
        }

        s->stats.tables += j->delta.tables;
        s->stats.cache_hits += j->delta.cache_hits;
        s->stats.cache_misses += j->delta.cache_misses;
        s->stats.extract_errors += j->delta.extract_errors;
        s->stats.extract_nsec += j->delta.extract_nsec;
        if (j->cache_bytes_known)
                s->stats.cache_bytes = j->delta.cache_bytes;
        s->stats.queued--;

        if (j->error >= 0) {
                r = sd_bus_reply_method_return(j->msg, "h", j->memfd);
                if (r < 0)
                        log_debug_errno(r, "Could not answer GetUnwindTable: %m");
                return;
        }

        if (j->error == -EPROTONOSUPPORT || j->error == -ENODATA)
                name = EP_ERROR_NO_UNWIND_INFO;
        else if (ep_sandbox_error_is_file(j->error))
                /* -ETIME too: asked again, it would take as long, holding up every table queued behind it */
                name = EP_ERROR_BAD_FILE;

        char hex[2 * EP_FILE_ID_SIZE + 1];
        for (size_t i = 0; i < EP_FILE_ID_SIZE; i++)
                snprintf(hex + 2 * i, 3, "%02x", j->file_id[i]);
        const char *what = j->error == -ESTALE  ? "the descriptor's file ID is not the one given"
                           : j->error == -ETIME ? "the extraction used up its CPU time limit"
                                                : strerror(-j->error);
        if (name && j->error != -EPROTONOSUPPORT && j->error != -ENODATA)
                ep_sym_stats_error(s->sym_stats, "Unwind table of file %s: %s", hex, what);
        log_debug("No unwind table for file %s: %s", hex, what);

        if (name)
                r = sd_bus_reply_method_errorf(j->msg, name, "File %s: %s", hex, what);
        else
                r = sd_bus_reply_method_errnof(j->msg, -j->error, "File %s: %m", hex);
        if (r < 0)
                log_debug_errno(r, "Could not answer GetUnwindTable: %m");
}

static int on_done(sd_event_source *source, int fd, uint32_t revents, void *userdata) {
        EpUnwindService *s = userdata;
        uint64_t n;
        Job *list;

        (void) !read(s->done_fd, &n, sizeof n);

        pthread_mutex_lock(&s->lock);
        list = s->done.head;
        queue_init(&s->done);
        pthread_mutex_unlock(&s->lock);

        while (list) {
                Job *j = list;
                list = j->next;
                complete(s, j);
                job_free(j);
        }
        return 0;
}

/* Both methods take (h file, ay file_id) from root (the loader). */
static int queue_job(EpUnwindService *s, sd_bus_message *msg, bool detect, sd_bus_error *error) {
        const void *id;
        size_t id_len;
        int fd, r;

        /* The bus policy restricts this too; the loader is root. */
        r = ep_bus_check_caller_uid(msg, error, UID_INVALID,
                                    detect ? "ask what runtime a file is" : "ask for unwind tables");
        if (r < 0)
                return r;

        r = sd_bus_message_read(msg, "h", &fd);
        if (r < 0)
                return r;
        r = sd_bus_message_read_array(msg, 'y', &id, &id_len);
        if (r < 0)
                return r;
        if (id_len != EP_FILE_ID_SIZE)
                return sd_bus_error_setf(error, SD_BUS_ERROR_INVALID_ARGS, "A file ID has %d bytes, not %zu",
                                         EP_FILE_ID_SIZE, id_len);

        Job *j = calloc(1, sizeof(Job));
        if (!j)
                return -ENOMEM;
        j->detect = detect;
        j->memfd = -EBADF;
        memcpy(j->file_id, id, EP_FILE_ID_SIZE);
        j->fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        if (j->fd < 0) {
                r = -errno;
                free(j);
                return r;
        }
        j->msg = sd_bus_message_ref(msg);
        if (!detect)
                s->stats.queued++;

        Worker *w = detect ? &s->detect_worker : &s->table_worker;
        pthread_mutex_lock(&s->lock);
        queue_push(&w->pending, j);
        pthread_cond_signal(&w->wake);
        pthread_mutex_unlock(&s->lock);
        return 1;
}

int ep_unwind_service_handle(EpUnwindService *s, sd_bus_message *msg, sd_bus_error *error) {
        return queue_job(s, msg, false, error);
}

int ep_unwind_service_handle_detect(EpUnwindService *s, sd_bus_message *msg, sd_bus_error *error) {
        return queue_job(s, msg, true, error);
}

const EpUnwindStats *ep_unwind_service_stats(const EpUnwindService *s) {
        return &s->stats;
}

static void worker_init(EpUnwindService *s, Worker *w) {
        w->service = s;
        pthread_cond_init(&w->wake, NULL);
        queue_init(&w->pending);
}

static int worker_start(Worker *w) {
        int r = -pthread_create(&w->thread, NULL, worker_main, w);

        if (r < 0)
                return r;
        w->started = true;
        return 0;
}

/* After stop was set: joins the thread and drops the calls it did not take. */
static void worker_done(Worker *w) {
        Job *j;

        if (w->started)
                pthread_join(w->thread, NULL);
        while ((j = queue_pop(&w->pending)))
                job_free(j);
        pthread_cond_destroy(&w->wake);
}

EpUnwindService *ep_unwind_service_free(EpUnwindService *s) {
        Job *j;

        if (!s)
                return NULL;

        pthread_mutex_lock(&s->lock);
        s->stop = true;
        pthread_cond_signal(&s->table_worker.wake);
        pthread_cond_signal(&s->detect_worker.wake);
        pthread_mutex_unlock(&s->lock);
        worker_done(&s->table_worker);
        worker_done(&s->detect_worker);
        while ((j = queue_pop(&s->done)))
                job_free(j);

        sd_event_source_disable_unref(s->done_source);
        (void) close_nointr(s->done_fd);
        pthread_mutex_destroy(&s->lock);
        free(s->cache_dir);
        free(s->debug_root);
        free(s);
        return NULL;
}

int ep_unwind_service_new(sd_event *event, const EpUnwindServiceConfig *config, EpSymStats *sym_stats,
                          EpUnwindService **ret) {
        _cleanup_(ep_unwind_service_freep) EpUnwindService *s = NULL;
        int r;

        s = calloc(1, sizeof(EpUnwindService));
        if (!s)
                return -ENOMEM;
        s->done_fd = -EBADF;
        s->sym_stats = sym_stats;
        pthread_mutex_init(&s->lock, NULL);
        queue_init(&s->done);
        worker_init(s, &s->table_worker);
        worker_init(s, &s->detect_worker);

        if (config && config->cache_dir && config->cache_dir[0]) {
                s->cache_dir = strdup(config->cache_dir);
                if (!s->cache_dir)
                        return -ENOMEM;
        }
        s->cache_max = config && config->cache_max_bytes ? config->cache_max_bytes : EP_UNWIND_CACHE_DEFAULT_MAX;
        if (config && config->debug_root) {
                s->debug_root = strdup(config->debug_root);
                if (!s->debug_root)
                        return -ENOMEM;
                s->options.debug_root = s->debug_root;
        }

        s->done_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (s->done_fd < 0)
                return -errno;
        r = sd_event_add_io(event, &s->done_source, s->done_fd, EPOLLIN, on_done, s);
        if (r < 0)
                return r;

        /* libelf's version is process-wide state: set it before any thread parses. */
        (void) elf_version(EV_CURRENT);

        r = worker_start(&s->table_worker);
        if (r >= 0)
                r = worker_start(&s->detect_worker);
        if (r < 0)
                return r;

        *ret = TAKE_PTR(s);
        return 0;
}

/* ---- properties ---- */

const char *const ep_unwind_property_names[EP_UNWIND_PROPERTIES] = {
        "UnwindTables", "UnwindCacheHits", "UnwindCacheMisses", "UnwindExtractErrors", "UnwindExtractNsec",
        "UnwindCacheBytes", "UnwindQueue",
};

static uint64_t stat_value(const EpUnwindStats *u, size_t i) {
        const uint64_t v[EP_UNWIND_PROPERTIES] = {
                u->tables, u->cache_hits, u->cache_misses, u->extract_errors, u->extract_nsec, u->cache_bytes,
                u->queued,
        };
        return v[i];
}

uint64_t ep_unwind_property(const EpUnwindService *s, const char *name) {
        if (!s)
                return 0;
        for (size_t i = 0; i < EP_UNWIND_PROPERTIES; i++)
                if (streq(name, ep_unwind_property_names[i]))
                        return stat_value(&s->stats, i);
        return 0;
}

size_t ep_unwind_properties_changed(const EpUnwindStats *now, const EpUnwindStats *was, const char **names) {
        size_t n = 0;

        for (size_t i = 0; i < EP_UNWIND_PROPERTIES; i++)
                if (stat_value(now, i) != stat_value(was, i))
                        names[n++] = ep_unwind_property_names[i];
        return n;
}
