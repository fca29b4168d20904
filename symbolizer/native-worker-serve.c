/* SPDX-License-Identifier: MIT */
/* The native worker's side (native-worker.h): a resolver of its own, whose files come from the
 * symbolizer over the socket, answering one request at a time. */

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "log.h"
#include "native-worker.h"
#include "resolver-internal.h"
#include "sandbox-filter.h"

struct EpNativeServe {
        int sock;
        EpResolver *resolver;
        EpSymStats stats; /* its last_error goes with the next answer */
        EpWriter w;
        uint8_t *buf;
};

/* The resolver's file source: the symbolizer opens the file (through the loader) and passes it. */
static int ask_for_file(void *userdata, const uint8_t file_id[EP_FILE_ID_SIZE]) {
        EpNativeServe *s = userdata;
        EpNativeRequest need = { .type = EP_NATIVE_NEED_FILE };
        size_t size;
        int fd = -EBADF, error, k;

        memcpy(need.file_id, file_id, EP_FILE_ID_SIZE);
        ep_writer_reset(&s->w);
        ep_native_put_request(&s->w, &need);
        k = ep_native_send(s->sock, &s->w, -1);
        if (k >= 0)
                k = ep_native_recv(s->sock, &s->buf, &size, &fd, -1);
        if (k >= 0)
                k = ep_native_get_file(s->buf, size, &error);
        if (k < 0) {
                /* The symbolizer is gone or broke the protocol: nobody to answer. */
                log_debug_errno(k, "Native worker: no file from the symbolizer, exiting: %m");
                _exit(EXIT_FAILURE);
        }
        if (error < 0 || fd < 0) {
                if (fd >= 0)
                        close(fd);
                return error < 0 ? error : -EBADMSG;
        }
        return fd;
}

EpNativeServe *ep_native_serve_free(EpNativeServe *s) {
        if (!s)
                return NULL;
        ep_resolver_free(s->resolver);
        ep_writer_done(&s->w);
        free(s->buf);
        free(s);
        return NULL;
}

DEFINE_TRIVIAL_CLEANUP_FUNC(EpNativeServe *, ep_native_serve_free);

int ep_native_serve_new(int sock, EpNativeServe **ret) {
        _cleanup_(ep_native_serve_freep) EpNativeServe *s = calloc(1, sizeof *s);
        int k;

        if (!s)
                return -ENOMEM;
        s->sock = sock;
        ep_writer_init_dynamic(&s->w);
        EpFileSource source = { .open_file = ask_for_file, .userdata = s };
        EpResolverConfig config = EP_RESOLVER_CONFIG_DEFAULT;
        config.max_results = 1; /* the symbolizer caches results; the worker keeps files */
        k = ep_resolver_new(&source, &config, &s->stats, &s->resolver);
        if (k < 0)
                return k;
        *ret = TAKE_PTR(s);
        return 0;
}

static void take_state(EpNativeServe *s, EpNativeWorkerState *ret) {
        *ret = (EpNativeWorkerState) {
                .files_open = ep_resolver_files_open(s->resolver),
                .go_malformed = ep_resolver_go_malformed(s->resolver),
                .last_error = s->stats.last_error,
        };
}

static int send_answer(EpNativeServe *s, const EpSymRequest *req) {
        _cleanup_(ep_native_answer_done) EpNativeAnswer a = {};
        int k;

        k = ep_native_answer(s->resolver, req, &a);
        if (k < 0)
                return k;
        take_state(s, &a.state);
        ep_writer_reset(&s->w);
        ep_native_put_answer(&s->w, &a);
        a.state.last_error = NULL; /* ours */
        s->stats.last_error[0] = 0;
        return ep_native_send(s->sock, &s->w, -1);
}

static int send_info(EpNativeServe *s, const uint8_t file_id[EP_FILE_ID_SIZE]) {
        EpNativeInfo i = {};
        int k;

        k = ep_resolver_file_info(s->resolver, file_id, &i.info);
        if (k < 0)
                return k;
        take_state(s, &i.state);
        ep_writer_reset(&s->w);
        ep_native_put_info(&s->w, &i);
        s->stats.last_error[0] = 0;
        return ep_native_send(s->sock, &s->w, -1);
}

int ep_native_serve_one(EpNativeServe *s, const EpNativeRequest *req) {
        EpNativeRequest done = { .type = EP_NATIVE_DONE };

        switch (req->type) {
        case EP_NATIVE_SYMBOLIZE: {
                EpSymRequest sym = { .kind = EP_FRAME_NATIVE, .flags = req->flags, .addr = req->addr, .path = req->path };
                memcpy(sym.file_id, req->file_id, EP_FILE_ID_SIZE);
                return send_answer(s, &sym);
        }
        case EP_NATIVE_FILE_INFO:
                return send_info(s, req->file_id);
        case EP_NATIVE_FORGET:
                ep_resolver_forget_file(s->resolver, req->file_id);
                break;
        case EP_NATIVE_SOURCE_CHANGED:
                ep_resolver_source_changed(s->resolver);
                break;
        case EP_NATIVE_DONE: /* not a request: the greeting, sent as it is */
                break;
        default:
                return -EBADMSG;
        }
        ep_writer_reset(&s->w);
        ep_native_put_request(&s->w, &done);
        return ep_native_send(s->sock, &s->w, -1);
}

/* What the worker may do from here on: not dumpable (no core dump with a file's bytes in it,
 * no other process of its user reading its memory; exec made it dumpable again), and the
 * sandbox's filter. */
static int limit_self(void) {
        if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
                return -errno;
        (void) prctl(PR_SET_NAME, "ep-native");
        return ep_sandbox_filter_install(getpid());
}

int ep_native_worker_main(int sock) {
        _cleanup_(ep_native_serve_freep) EpNativeServe *s = NULL;
        _cleanup_free_ uint8_t *buf = NULL;
        int k;

        k = limit_self();
        if (k < 0) {
                log_error_errno(k, "Native worker: cannot limit itself: %m");
                return EXIT_FAILURE;
        }
        k = ep_native_serve_new(sock, &s);
        if (k >= 0) /* ready */
                k = ep_native_serve_one(s, &(EpNativeRequest) { .type = EP_NATIVE_DONE });
        if (k < 0) {
                log_error_errno(k, "Native worker: cannot set up: %m");
                return EXIT_FAILURE;
        }
        for (;;) {
                EpNativeRequest req = {};
                size_t size;
                int fd = -EBADF;

                k = ep_native_recv(sock, &buf, &size, &fd, -1);
                if (k == -ECONNRESET)
                        return EXIT_SUCCESS; /* the symbolizer closed: done */
                if (fd >= 0)
                        close(fd); /* none is expected here */
                if (k >= 0)
                        k = ep_native_get_request(buf, size, &req);
                if (k >= 0)
                        k = ep_native_serve_one(s, &req);
                free(req.path);
                if (k < 0) {
                        log_error_errno(k, "Native worker: %m");
                        return EXIT_FAILURE;
                }
        }
}
