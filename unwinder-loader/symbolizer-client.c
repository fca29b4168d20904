/* SPDX-License-Identifier: MIT */
#include <inttypes.h>
#include <sys/stat.h>
#include <time.h>

#include "bus.h"
#include "log.h"
#include "symbolizer-client.h"
#include "unwind-table.h"

#define MAX_IN_FLIGHT 4
/* Extracting the table of a very large binary the first time takes a while. */
#define CALL_TIMEOUT_USEC (120 * USEC_PER_SEC)

typedef struct Request {
        EpSymClient *client;
        sd_bus_slot *slot;
        uint32_t key;
        uint8_t id[EP_FILE_ID_SIZE];
        uint64_t sent_ns; /* CLOCK_MONOTONIC */
        struct Request *next;
} Request;

struct EpSymClient {
        EpDaemon *daemon;
        EpTables *tables;
        EpProcTable *procs;
        EpPeerWatch *watch;
        Request *in_flight; /* list */
        unsigned n_in_flight;
        bool unsupported_logged;
};

int ep_read_table_fd(int fd, void **ret, size_t *ret_size) {
        const size_t max = ep_unwind_table_size(EP_UNWIND_TABLE_MAX_RULES, EP_UNWIND_TABLE_MAX_ENTRIES);
        _cleanup_free_ void *buf = NULL;
        struct stat st;
        size_t size, done = 0;

        if (fstat(fd, &st) < 0)
                return -errno;
        if (!S_ISREG(st.st_mode) || st.st_size < (off_t) sizeof(EpUnwindTableHeader))
                return -EBADMSG;
        if ((uint64_t) st.st_size > max)
                return -EFBIG;
        size = (size_t) st.st_size;
        buf = aligned_alloc(8, ALIGN8(size));
        if (!buf)
                return -ENOMEM;
        while (done < size) {
                ssize_t k = pread(fd, (uint8_t *) buf + done, size - done, (off_t) done);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (k == 0)
                        return -EBADMSG; /* shrunk under us */
                done += (size_t) k;
        }
        *ret = TAKE_PTR(buf);
        *ret_size = size;
        return 0;
}

static void request_free(Request *q) {
        EpSymClient *c = q->client;

        for (Request **pp = &c->in_flight; *pp; pp = &(*pp)->next)
                if (*pp == q) {
                        *pp = q->next;
                        break;
                }
        c->n_in_flight--;
        sd_bus_slot_unref(q->slot);
        free(q);
}

static int classify_error(EpSymClient *c, const sd_bus_error *e) {
        if (sd_bus_error_has_name(e, EP_ERROR_NO_UNWIND_INFO))
                return EP_TABLE_NO_CFI;
        if (sd_bus_error_has_name(e, EP_ERROR_BAD_FILE))
                return EP_TABLE_BAD_FILE;
        if (sd_bus_error_has_name(e, SD_BUS_ERROR_UNKNOWN_METHOD) ||
            sd_bus_error_has_name(e, SD_BUS_ERROR_UNKNOWN_INTERFACE) ||
            sd_bus_error_has_name(e, SD_BUS_ERROR_UNKNOWN_OBJECT)) {
                if (!c->unsupported_logged) {
                        c->unsupported_logged = true;
                        log_warning("The symbolizer does not serve unwind tables (%s); native frames take "
                                    "frame-pointer steps until a symbolizer that does is started.", e->message);
                }
                return EP_TABLE_UNSUPPORTED;
        }
        return EP_TABLE_RETRY; /* gone, timed out, out of memory, ... */
}

static int on_reply(sd_bus_message *m, void *userdata, sd_bus_error *ret_error) {
        Request *q = userdata;
        EpSymClient *c = q->client;
        _cleanup_free_ void *blob = NULL;
        size_t size = 0;
        int fd, r, result;

        if (sd_bus_message_is_method_error(m, NULL)) {
                const sd_bus_error *e = sd_bus_message_get_error(m);
                result = classify_error(c, e);
                log_debug("GetUnwindTable for file %u: %s: %s", q->key, e->name, e->message ?: "");
        } else {
                r = sd_bus_message_read(m, "h", &fd);
                if (r >= 0)
                        r = ep_read_table_fd(fd, &blob, &size); /* fd belongs to the message */
                if (r < 0) {
                        log_debug_errno(r, "Unusable GetUnwindTable answer for file %u: %m", q->key);
                        result = EP_TABLE_BAD_FILE;
                } else {
                        EpFile *f = ep_proc_table_file(c->procs, q->key);

                        result = EP_TABLE_OK;
                        log_debug("Unwind table of file %u (%s): %zu bytes after %" PRIu64 " ms.", q->key,
                                  f && f->path ? f->path : "?", size,
                                  (uint64_t) ((ep_now_ns(CLOCK_MONOTONIC) - q->sent_ns) / NSEC_PER_MSEC));
                }
        }
        ep_tables_request_done(c->tables, q->key, q->id, result, blob, size);
        request_free(q);
        ep_symclient_kick(c);
        return 0;
}

static int send_request(EpSymClient *c, uint32_t key) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *m = NULL;
        _cleanup_close_ int fd = -EBADF;
        EpFile *f = ep_proc_table_file(c->procs, key);
        Request *q;
        int r;

        if (!f)
                return -ENOENT;
        fd = ep_proc_table_open_file(c->procs, key);
        if (fd < 0)
                return fd;
        q = calloc(1, sizeof *q);
        if (!q)
                return -ENOMEM;
        q->client = c;
        q->key = key;
        q->sent_ns = ep_now_ns(CLOCK_MONOTONIC);
        memcpy(q->id, f->id, EP_FILE_ID_SIZE);

        r = sd_bus_message_new_method_call(c->daemon->bus, &m, EP_BUS_SYMBOLIZER, EP_PATH_SYMBOLIZER,
                                           EP_IFACE_SYMBOLIZER, "GetUnwindTable");
        if (r >= 0)
                r = sd_bus_message_append(m, "h", fd);
        if (r >= 0)
                r = sd_bus_message_append_array(m, 'y', f->id, EP_FILE_ID_SIZE);
        if (r >= 0)
                r = sd_bus_call_async(c->daemon->bus, &q->slot, m, on_reply, q, CALL_TIMEOUT_USEC);
        if (r < 0) {
                free(q);
                return r;
        }
        q->next = c->in_flight;
        c->in_flight = q;
        c->n_in_flight++;
        return 0;
}

void ep_symclient_kick(void *userdata) {
        EpSymClient *c = userdata;
        uint32_t key;

        if (!c || !c->watch || !ep_peer_watch_present(c->watch))
                return;
        while (c->n_in_flight < MAX_IN_FLIGHT && ep_tables_next_request(c->tables, &key)) {
                int r = send_request(c, key);
                if (r < 0) {
                        /* No live process maps it any more (asked again when one does), or the
                         * bus refused (try again later). */
                        log_debug_errno(r, "Cannot ask for the unwind table of file %u: %m", key);
                        ep_tables_request_done(c->tables, key, NULL,
                                               r == -ENOENT ? EP_TABLE_UNAVAILABLE : EP_TABLE_RETRY, NULL, 0);
                }
        }
}

unsigned ep_symclient_in_flight(const EpSymClient *c) {
        return c->n_in_flight;
}

static int on_peer(EpPeerWatch *w, bool present, void *userdata) {
        EpSymClient *c = userdata;

        if (!present)
                return 0; /* calls in flight fail on their own and are retried */
        c->unsupported_logged = false;
        ep_tables_retry_now(c->tables); /* also re-queues files the old one could not serve */
        ep_symclient_kick(c);
        return 0;
}

EpSymClient *ep_symclient_free(EpSymClient *c) {
        if (!c)
                return NULL;
        while (c->in_flight)
                request_free(c->in_flight);
        ep_tables_set_kick(c->tables, NULL, NULL);
        ep_peer_watch_free(c->watch);
        free(c);
        return NULL;
}

int ep_symclient_new(EpDaemon *d, EpTables *tables, EpProcTable *procs, EpSymClient **ret) {
        _cleanup_(ep_symclient_freep) EpSymClient *c = NULL;
        int r;

        c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        c->daemon = d;
        c->tables = tables;
        c->procs = procs;
        ep_tables_set_kick(tables, ep_symclient_kick, c);
        r = ep_peer_watch(d, EP_BUS_SYMBOLIZER, on_peer, c, &c->watch);
        if (r < 0) {
                ep_tables_set_kick(tables, NULL, NULL);
                return r;
        }
        *ret = TAKE_PTR(c);
        return 0;
}
