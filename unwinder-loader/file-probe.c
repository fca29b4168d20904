/* SPDX-License-Identifier: MIT */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "file-probe.h"
#include "log.h"

#define PROBE_STACK_SIZE (256u * 1024u)

typedef struct StuckDevice {
        dev_t dev;
        unsigned n;
} StuckDevice;

struct EpFileProber {
        pthread_mutex_t lock;
        unsigned refs; /* the owner's, and one per probe not ended */
        ep_file_probe_work_t work;
        StuckDevice stuck[EP_FILE_PROBE_STUCK_MAX];
        unsigned n_stuck; /* probes abandoned and still running */
        uint64_t timeouts;
};

typedef struct Probe {
        pthread_mutex_t lock;
        pthread_cond_t cond;
        unsigned refs; /* the waiter's and the thread's */
        bool started, done, abandoned;
        bool stuck;        /* abandoned while it ran: its device is stuck until it ends */
        uint64_t started_ns; /* CLOCK_MONOTONIC: when its thread began the work */
        EpFileProber *prober;
        dev_t dev;
        EpFileProbeFlags flags;
        int error;
        EpFileProbeResult result;
        char path[];
} Probe;

/* An O_PATH descriptor of the file fd is open on (the inode itself, whatever its path is now). */
static int reopen_as_path(int fd) {
        char self[64];
        int pin;

        snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
        pin = open(self, O_PATH | O_CLOEXEC);
        return pin >= 0 ? pin : -errno;
}

/* The regular file at path, non-blocking while it is opened (in case it is no longer the
 * regular file stat() saw), then blocking again for whoever reads it. */
static int probe_work(const char *path, EpFileProbeFlags flags, EpFileProbeResult *ret) {
        _cleanup_close_ int fd = -EBADF;
        struct stat st;
        int r;

        if (stat(path, &st) < 0) /* before the open, which would call a device's driver */
                return -errno;
        if (!S_ISREG(st.st_mode))
                return -EBADFD;
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        if (fd < 0)
                return -errno;
        if (fstat(fd, &st) < 0)
                return -errno;
        if (!S_ISREG(st.st_mode))
                return -EBADFD;
        if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) < 0)
                return -errno;
        if (flags & EP_FILE_PROBE_IDENTIFY) {
                r = ep_file_identify(fd, &ret->ident);
                if (r < 0)
                        return r;
        }
        if (flags & EP_FILE_PROBE_PIN) {
                r = reopen_as_path(fd);
                if (r < 0)
                        return r;
                ret->fd = r; /* the readable one is closed here, on the probe's thread */
                return 0;
        }
        ret->fd = TAKE_FD(fd);
        return 0;
}

int ep_file_prober_new(EpFileProber **ret) {
        EpFileProber *p = calloc(1, sizeof *p);

        if (!p)
                return -ENOMEM;
        pthread_mutex_init(&p->lock, NULL);
        p->refs = 1;
        p->work = probe_work;
        *ret = p;
        return 0;
}

static void prober_unref(EpFileProber *p) {
        bool last;

        pthread_mutex_lock(&p->lock);
        last = --p->refs == 0;
        pthread_mutex_unlock(&p->lock);
        if (!last)
                return;
        pthread_mutex_destroy(&p->lock);
        free(p);
}

EpFileProber *ep_file_prober_free(EpFileProber *p) {
        if (p)
                prober_unref(p);
        return NULL;
}

void ep_file_prober_set_work(EpFileProber *p, ep_file_probe_work_t work) {
        p->work = work;
}

/* Under p->lock: the entry of dev among the stuck devices, or NULL. */
static StuckDevice *stuck_device(EpFileProber *p, dev_t dev) {
        for (unsigned i = 0; i < EP_FILE_PROBE_STUCK_MAX; i++)
                if (p->stuck[i].n > 0 && p->stuck[i].dev == dev)
                        return &p->stuck[i];
        return NULL;
}

static bool prober_refuses(EpFileProber *p, dev_t dev) {
        bool refused;

        pthread_mutex_lock(&p->lock);
        refused = p->n_stuck >= EP_FILE_PROBE_STUCK_MAX || stuck_device(p, dev);
        pthread_mutex_unlock(&p->lock);
        return refused;
}

static void prober_stick(EpFileProber *p, dev_t dev) {
        StuckDevice *d;

        pthread_mutex_lock(&p->lock);
        d = stuck_device(p, dev);
        for (unsigned i = 0; !d && i < EP_FILE_PROBE_STUCK_MAX; i++)
                if (p->stuck[i].n == 0)
                        d = &p->stuck[i];
        if (d) { /* there is room: n_stuck < EP_FILE_PROBE_STUCK_MAX (prober_refuses()) */
                d->dev = dev;
                d->n++;
        }
        p->n_stuck++;
        p->timeouts++;
        pthread_mutex_unlock(&p->lock);
}

static void prober_unstick(EpFileProber *p, dev_t dev) {
        StuckDevice *d;

        pthread_mutex_lock(&p->lock);
        d = stuck_device(p, dev);
        if (d)
                d->n--;
        p->n_stuck--;
        pthread_mutex_unlock(&p->lock);
}

static void probe_unref(Probe *j) {
        bool last;

        pthread_mutex_lock(&j->lock);
        last = --j->refs == 0;
        pthread_mutex_unlock(&j->lock);
        if (!last)
                return;
        if (j->done && j->result.fd >= 0)
                (void) close(j->result.fd); /* not taken by the waiter */
        prober_unref(j->prober);
        pthread_cond_destroy(&j->cond);
        pthread_mutex_destroy(&j->lock);
        free(j);
}

static void *probe_thread(void *userdata) {
        Probe *j = userdata;
        EpFileProbeResult result = { .fd = -EBADF };
        int r;

        pthread_mutex_lock(&j->lock);
        if (j->abandoned) { /* given up before it could start: nothing to do */
                pthread_mutex_unlock(&j->lock);
                probe_unref(j);
                return NULL;
        }
        j->started = true;
        j->started_ns = ep_clock_ns(CLOCK_MONOTONIC);
        pthread_mutex_unlock(&j->lock);

        r = j->prober->work(j->path, j->flags, &result);

        pthread_mutex_lock(&j->lock);
        if (j->abandoned) {
                if (r >= 0)
                        (void) close(result.fd);
                if (j->stuck)
                        prober_unstick(j->prober, j->dev);
        } else {
                j->error = r;
                j->result = result;
                j->done = true;
                pthread_cond_signal(&j->cond);
        }
        pthread_mutex_unlock(&j->lock);
        probe_unref(j);
        return NULL;
}

/* A detached thread running j, with every signal blocked (the loop reads them from a
 * signalfd) and a small stack. */
static int probe_start(Probe *j) {
        sigset_t all, saved;
        pthread_attr_t attr;
        pthread_t thread;
        int r;

        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attr, PROBE_STACK_SIZE);
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &saved);
        r = pthread_create(&thread, &attr, probe_thread, j);
        pthread_sigmask(SIG_SETMASK, &saved, NULL);
        pthread_attr_destroy(&attr);
        return -r;
}

static Probe *probe_new(EpFileProber *p, const char *path, dev_t dev, EpFileProbeFlags flags) {
        size_t len = strlen(path);
        pthread_condattr_t attr;
        Probe *j = calloc(1, sizeof *j + len + 1);

        if (!j)
                return NULL;
        pthread_mutex_init(&j->lock, NULL);
        pthread_condattr_init(&attr);
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
        pthread_cond_init(&j->cond, &attr);
        pthread_condattr_destroy(&attr);
        j->refs = 2;
        j->prober = p;
        j->dev = dev;
        j->flags = flags;
        j->result.fd = -EBADF;
        memcpy(j->path, path, len + 1);
        pthread_mutex_lock(&p->lock);
        p->refs++;
        pthread_mutex_unlock(&p->lock);
        return j;
}

/* Waits until j is done or until deadline_ns (CLOCK_MONOTONIC); with j->lock held. */
static void probe_wait_until(Probe *j, uint64_t deadline_ns) {
        struct timespec deadline = {
                .tv_sec = (time_t) (deadline_ns / NSEC_PER_SEC),
                .tv_nsec = (long) (deadline_ns % NSEC_PER_SEC),
        };

        while (!j->done)
                if (pthread_cond_timedwait(&j->cond, &j->lock, &deadline) == ETIMEDOUT)
                        break;
}

/* Waits until j is done, giving its work EP_FILE_PROBE_WAIT_MS from when it started; with
 * j->lock held. A thread a loaded machine has not run yet says nothing of the file: the wait
 * for its start is bounded by the same time, and ends the probe without taking the device
 * for stuck. */
static void probe_wait(Probe *j) {
        const uint64_t budget = EP_FILE_PROBE_WAIT_MS * NSEC_PER_MSEC;

        probe_wait_until(j, ep_clock_ns(CLOCK_MONOTONIC) + budget);
        if (!j->done && j->started)
                probe_wait_until(j, j->started_ns + budget);
}

static int probe(EpFileProber *p, const char *path, dev_t dev, EpFileProbeFlags flags, int *ret_fd,
                 EpFileIdentity *ret_ident) {
        Probe *j;
        int r;

        if (prober_refuses(p, dev))
                return -ETIMEDOUT;
        j = probe_new(p, path, dev, flags);
        if (!j)
                return -ENOMEM;
        r = probe_start(j);
        if (r < 0) {
                j->refs = 1; /* no thread */
                probe_unref(j);
                return r;
        }

        pthread_mutex_lock(&j->lock);
        probe_wait(j);
        if (!j->done && !j->started) {
                j->abandoned = true;
                pthread_mutex_unlock(&j->lock);
                log_debug("The probe of %s did not start in %u ms (a loaded machine): asked again later.", path,
                          EP_FILE_PROBE_WAIT_MS);
                probe_unref(j);
                return -EAGAIN;
        }
        if (!j->done) {
                j->abandoned = true;
                j->stuck = true;
                prober_stick(p, dev);
                pthread_mutex_unlock(&j->lock);
                log_notice("Opening or reading %s took longer than %u ms: left to a thread of its own, and files "
                           "of its device (%u:%u) are not looked at until it ends.", path, EP_FILE_PROBE_WAIT_MS,
                           major(dev), minor(dev));
                probe_unref(j);
                return -ETIMEDOUT;
        }
        r = j->error;
        if (r >= 0) {
                if (ret_ident)
                        *ret_ident = j->result.ident;
                if (ret_fd)
                        *ret_fd = TAKE_FD(j->result.fd);
        }
        pthread_mutex_unlock(&j->lock);
        probe_unref(j);
        return r;
}

uint64_t ep_file_prober_timeouts(const EpFileProber *p) {
        return p->timeouts; /* written by the waiter's thread only (prober_stick()) */
}

unsigned ep_file_prober_stuck(EpFileProber *p) {
        unsigned n;

        pthread_mutex_lock(&p->lock);
        n = p->n_stuck;
        pthread_mutex_unlock(&p->lock);
        return n;
}

int ep_file_probe(EpFileProber *p, const char *path, dev_t dev, int *ret_fd, EpFileIdentity *ret_ident) {
        return probe(p, path, dev, ret_ident ? EP_FILE_PROBE_IDENTIFY : 0, ret_fd, ret_ident);
}

int ep_file_probe_pin(EpFileProber *p, const char *path, dev_t dev, int *ret_pin, EpFileIdentity *ret_ident) {
        assert(ret_pin && ret_ident);
        return probe(p, path, dev, EP_FILE_PROBE_IDENTIFY | EP_FILE_PROBE_PIN, ret_pin, ret_ident);
}
