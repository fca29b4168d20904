/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "elf-symbols.h"
#include "native-worker-wire.h"

void ep_native_answer_done(EpNativeAnswer *a) {
        ep_sym_result_done(&a->result);
        ep_symbol_file_record_done(&a->record);
        free(a->state.last_error);
        *a = (EpNativeAnswer) {};
}

void ep_native_info_done(EpNativeInfo *i) {
        free(i->state.last_error);
        *i = (EpNativeInfo) {};
}

static bool has_file_id(uint8_t type) {
        return type == EP_NATIVE_SYMBOLIZE || type == EP_NATIVE_FILE_INFO || type == EP_NATIVE_FORGET ||
               type == EP_NATIVE_NEED_FILE;
}

void ep_native_put_request(EpWriter *w, const EpNativeRequest *req) {
        ep_put_u8(w, req->type);
        if (has_file_id(req->type))
                ep_put_bytes(w, req->file_id, EP_FILE_ID_SIZE);
        if (req->type == EP_NATIVE_SYMBOLIZE) {
                ep_put_u64(w, req->addr);
                ep_put_u8(w, req->flags);
                ep_put_strn(w, req->path, EP_NATIVE_STR_MAX);
        }
}

void ep_native_put_file(EpWriter *w, int error) {
        ep_put_u8(w, EP_NATIVE_FILE);
        ep_put_u32(w, (uint32_t) -error);
}

static void put_state(EpWriter *w, const EpNativeWorkerState *s) {
        ep_put_u32(w, s->files_open);
        ep_put_u64(w, s->go_malformed);
        ep_put_strn(w, s->last_error, EP_NATIVE_STR_MAX);
}

void ep_native_put_answer(EpWriter *w, const EpNativeAnswer *a) {
        const EpSymResult *res = &a->result;
        uint16_t n = (uint16_t) MIN((size_t) res->n_lines, (size_t) EP_NATIVE_LINES_MAX);

        ep_put_u8(w, EP_NATIVE_ANSWER);
        ep_put_u8(w, res->status);
        ep_put_u64(w, res->elf_addr);
        ep_put_u8(w, a->cacheable);
        ep_put_strn(w, res->module, EP_NATIVE_STR_MAX);
        ep_put_u16(w, n);
        for (uint16_t i = 0; i < n; i++) {
                ep_put_strn(w, res->lines[i].function, EP_NATIVE_STR_MAX);
                ep_put_strn(w, res->lines[i].file, EP_NATIVE_STR_MAX);
                ep_put_u32(w, res->lines[i].line);
        }
        ep_put_u8(w, a->has_record);
        if (a->has_record) {
                ep_put_blob(w, a->record.build_id, MIN(a->record.build_id_len, (size_t) EP_BUILD_ID_MAX));
                ep_put_strn(w, a->record.debuglink, EP_NATIVE_STR_MAX);
                ep_put_strn(w, a->record.path, EP_NATIVE_STR_MAX);
                ep_put_strn(w, a->record.debug, EP_NATIVE_STR_MAX);
        }
        put_state(w, &a->state);
}

void ep_native_put_info(EpWriter *w, const EpNativeInfo *i) {
        ep_put_u8(w, EP_NATIVE_INFO);
        ep_put_u8(w, i->info.status);
        ep_put_blob(w, i->info.ids.gnu, MIN(i->info.ids.gnu_len, (size_t) EP_BUILD_ID_MAX));
        ep_put_strn(w, i->info.ids.go, EP_GO_BUILD_ID_MAX);
        put_state(w, &i->state);
}

/* A string that must be there (possibly empty): false on a bad message or out of memory,
 * which *oom tells apart. */
static bool get_str(EpReader *rd, size_t max, char **ret, bool *oom) {
        char *s = ep_get_str(rd, max);
        if (!s) {
                *oom = *oom || !rd->error;
                rd->error = true;
                return false;
        }
        *ret = s;
        return true;
}

/* ... and one where "" means none (NULL). */
static bool get_optional_str(EpReader *rd, size_t max, char **ret, bool *oom) {
        char *s = NULL;
        if (!get_str(rd, max, &s, oom))
                return false;
        if (!*s) {
                free(s);
                s = NULL;
        }
        *ret = s;
        return true;
}

static int reader_end(EpReader *rd, bool oom) {
        if (oom)
                return -ENOMEM;
        return ep_reader_done(rd) ? 0 : -EBADMSG;
}

int ep_native_get_request(const void *msg, size_t size, EpNativeRequest *ret) {
        EpNativeRequest req = {};
        EpReader rd;
        bool oom = false;
        int k;

        ep_reader_init(&rd, msg, size);
        req.type = ep_get_u8(&rd);
        if (!has_file_id(req.type) && req.type != EP_NATIVE_SOURCE_CHANGED && req.type != EP_NATIVE_DONE)
                return -EBADMSG;
        if (has_file_id(req.type))
                ep_get_bytes(&rd, req.file_id, EP_FILE_ID_SIZE);
        if (req.type == EP_NATIVE_SYMBOLIZE) {
                req.addr = ep_get_u64(&rd);
                req.flags = ep_get_u8(&rd);
                (void) get_optional_str(&rd, EP_NATIVE_STR_MAX, &req.path, &oom);
        }
        k = reader_end(&rd, oom);
        if (k < 0) {
                free(req.path);
                return k;
        }
        *ret = req;
        return 0;
}

int ep_native_get_file(const void *msg, size_t size, int *ret_error) {
        EpReader rd;

        ep_reader_init(&rd, msg, size);
        if (ep_get_u8(&rd) != EP_NATIVE_FILE)
                return -EBADMSG;
        uint32_t error = ep_get_u32(&rd);
        if (!ep_reader_done(&rd) || error > 4095)
                return -EBADMSG;
        *ret_error = -(int) error;
        return 0;
}

static void get_state(EpReader *rd, EpNativeWorkerState *s, bool *oom) {
        s->files_open = ep_get_u32(rd);
        s->go_malformed = ep_get_u64(rd);
        (void) get_str(rd, EP_NATIVE_STR_MAX, &s->last_error, oom);
}

static bool get_lines(EpReader *rd, EpSymResult *res, bool *oom) {
        uint16_t n = ep_get_u16(rd);

        if (rd->error || n > EP_NATIVE_LINES_MAX)
                return false;
        if (n == 0)
                return true;
        res->lines = calloc(n, sizeof *res->lines);
        if (!res->lines) {
                *oom = true;
                return false;
        }
        for (uint16_t i = 0; i < n; i++) {
                EpSymLine *l = &res->lines[i];
                res->n_lines = (uint16_t) (i + 1); /* freed with the result from here on */
                if (!get_str(rd, EP_NATIVE_STR_MAX, &l->function, oom) ||
                    !get_str(rd, EP_NATIVE_STR_MAX, &l->file, oom))
                        return false;
                l->line = ep_get_u32(rd);
        }
        return !rd->error;
}

static bool get_record(EpReader *rd, EpSymbolFileRecord *rec, bool *oom) {
        size_t n;
        const void *id = ep_get_blob(rd, EP_BUILD_ID_MAX, &n);

        if (rd->error)
                return false;
        memcpy(rec->build_id, id, n);
        rec->build_id_len = n;
        return get_optional_str(rd, EP_NATIVE_STR_MAX, &rec->debuglink, oom) &&
               get_optional_str(rd, EP_NATIVE_STR_MAX, &rec->path, oom) &&
               get_str(rd, EP_NATIVE_STR_MAX, &rec->debug, oom) && rec->debug[0];
}

int ep_native_get_answer(const void *msg, size_t size, EpNativeAnswer *ret) {
        EpNativeAnswer a = {};
        EpReader rd;
        bool oom = false;
        int k;

        ep_reader_init(&rd, msg, size);
        if (ep_get_u8(&rd) != EP_NATIVE_ANSWER)
                return -EBADMSG;
        a.result.status = ep_get_u8(&rd);
        a.result.elf_addr = ep_get_u64(&rd);
        uint8_t cacheable = ep_get_u8(&rd);
        a.cacheable = cacheable == 1;
        bool ok = a.result.status < _EP_SYM_STATUS_MAX && cacheable <= 1 &&
                  get_str(&rd, EP_NATIVE_STR_MAX, &a.result.module, &oom) && get_lines(&rd, &a.result, &oom);
        /* An answer that names a frame has a function; one that does not, no lines. */
        ok = ok && (a.result.status == EP_SYM_OK) == (a.result.n_lines > 0);
        if (ok) {
                uint8_t has_record = ep_get_u8(&rd);
                a.has_record = has_record == 1;
                ok = has_record <= 1 && (!a.has_record || get_record(&rd, &a.record, &oom));
        }
        if (ok)
                get_state(&rd, &a.state, &oom);
        k = ok ? reader_end(&rd, oom) : oom ? -ENOMEM : -EBADMSG;
        if (k < 0) {
                ep_native_answer_done(&a);
                return k;
        }
        *ret = a;
        return 0;
}

int ep_native_get_info(const void *msg, size_t size, EpNativeInfo *ret) {
        EpNativeInfo i = {};
        EpReader rd;
        bool oom = false;
        size_t n;
        int k;

        ep_reader_init(&rd, msg, size);
        if (ep_get_u8(&rd) != EP_NATIVE_INFO)
                return -EBADMSG;
        i.info.status = ep_get_u8(&rd);
        const void *gnu = ep_get_blob(&rd, EP_BUILD_ID_MAX, &n);
        if (!rd.error) {
                memcpy(i.info.ids.gnu, gnu, n);
                i.info.ids.gnu_len = n;
        }
        const void *go = ep_get_blob(&rd, EP_GO_BUILD_ID_MAX, &n);
        if (!rd.error && !memchr(go, 0, n)) {
                memcpy(i.info.ids.go, go, n);
                i.info.ids.go[n] = 0;
        } else
                rd.error = true;
        if (i.info.status >= _EP_SYM_STATUS_MAX)
                rd.error = true;
        if (!rd.error)
                get_state(&rd, &i.state, &oom);
        k = reader_end(&rd, oom);
        if (k < 0) {
                ep_native_info_done(&i);
                return k;
        }
        *ret = i;
        return 0;
}

/* ---- the stream ---- */

int ep_native_send(int sock, const EpWriter *w, int fd) {
        if (w->overflow || w->size > EP_NATIVE_MSG_MAX)
                return -EMSGSIZE;
        uint32_t len = (uint32_t) w->size;
        struct iovec iov[2] = { { &len, sizeof len }, { w->data, w->size } };
        union {
                struct cmsghdr h;
                uint8_t buf[CMSG_SPACE(sizeof(int))];
        } control = {};
        struct msghdr mh = { .msg_iov = iov, .msg_iovlen = 2 };

        if (fd >= 0) {
                mh.msg_control = control.buf;
                mh.msg_controllen = sizeof control.buf;
                struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
                c->cmsg_level = SOL_SOCKET;
                c->cmsg_type = SCM_RIGHTS;
                c->cmsg_len = CMSG_LEN(sizeof(int));
                memcpy(CMSG_DATA(c), &fd, sizeof fd);
        }
        /* The descriptor goes with the first bytes; the rest follows as the peer reads. */
        size_t total = sizeof len + w->size, sent = 0;
        while (sent < total) {
                ssize_t k = sendmsg(sock, &mh, MSG_NOSIGNAL);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                sent += (size_t) k;
                mh.msg_control = NULL;
                mh.msg_controllen = 0;
                /* Skip what went. */
                size_t skip = (size_t) k;
                while (mh.msg_iovlen > 0 && skip >= mh.msg_iov[0].iov_len) {
                        skip -= mh.msg_iov[0].iov_len;
                        mh.msg_iov++;
                        mh.msg_iovlen--;
                }
                if (mh.msg_iovlen > 0) {
                        mh.msg_iov[0].iov_base = (uint8_t *) mh.msg_iov[0].iov_base + skip;
                        mh.msg_iov[0].iov_len -= skip;
                }
        }
        return 0;
}

static int wait_readable(int sock, int timeout_ms) {
        struct pollfd p = { .fd = sock, .events = POLLIN };
        int k;

        do
                k = poll(&p, 1, timeout_ms);
        while (k < 0 && errno == EINTR);
        if (k < 0)
                return -errno;
        return k == 0 ? -ETIMEDOUT : 0;
}

/* Reads exactly n bytes, waiting first_timeout_ms for the first: -ETIMEDOUT or -ECONNRESET
 * when nothing came, -EBADMSG when the rest did not. A descriptor that comes along goes to *fd
 * (a second one is an error). */
static int read_exact(int sock, void *p, size_t n, int *fd, int first_timeout_ms) {
        size_t got = 0;
        int k;

        while (got < n) {
                k = wait_readable(sock, got == 0 ? first_timeout_ms : EP_NATIVE_STALL_MS);
                if (k == -ETIMEDOUT && got > 0)
                        return -EBADMSG; /* stalled within the message */
                if (k < 0)
                        return k;
                union {
                        struct cmsghdr h;
                        uint8_t buf[CMSG_SPACE(sizeof(int))];
                } control;
                struct iovec iov = { (uint8_t *) p + got, n - got };
                struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                                     .msg_controllen = sizeof control.buf };
                ssize_t r = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
                if (r < 0) {
                        if (errno == EINTR || errno == EAGAIN)
                                continue;
                        return -errno;
                }
                for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
                        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
                                continue;
                        size_t n_fds = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                        int got_fds[1];
                        memcpy(got_fds, CMSG_DATA(c), sizeof got_fds);
                        if (n_fds != 1 || *fd >= 0) {
                                for (size_t i = 0; i < MIN(n_fds, (size_t) 1); i++)
                                        close(got_fds[i]);
                                return -EBADMSG;
                        }
                        *fd = got_fds[0];
                }
                if (mh.msg_flags & MSG_CTRUNC)
                        return -EBADMSG;
                if (r == 0)
                        return got == 0 ? -ECONNRESET : -EBADMSG;
                got += (size_t) r;
        }
        return 0;
}

int ep_native_recv(int sock, uint8_t **buf, size_t *ret_size, int *ret_fd, int timeout_ms) {
        _cleanup_close_ int fd = -EBADF;
        uint32_t len;
        int k;

        k = read_exact(sock, &len, sizeof len, &fd, timeout_ms);
        if (k < 0)
                return k;
        if (len == 0 || len > EP_NATIVE_MSG_MAX)
                return -EBADMSG;
        uint8_t *p = realloc(*buf, len);
        if (!p)
                return -ENOMEM;
        *buf = p;
        k = read_exact(sock, p, len, &fd, EP_NATIVE_STALL_MS);
        if (k < 0)
                return k == -ETIMEDOUT || k == -ECONNRESET ? -EBADMSG : k;
        *ret_size = len;
        *ret_fd = TAKE_FD(fd);
        return 0;
}
