/* SPDX-License-Identifier: MIT */
/* A symbolizer session driven through its real rings, as the collector drives it: requests in,
 * responses out, malformed records counted and skipped, requests answered file by file, and
 * backpressure: with nobody reading responses the session stops taking requests instead of
 * losing answers, then catches up. */

#include <fcntl.h>
#include <unistd.h>

#include "resolver.h"
#include "session.h"
#include "shm-ring.h"
#include "test-util.h"
#include "wire-buf.h"
#include "wire-sym.h"

static const char *target;
static uint64_t beta_offset;
static unsigned opens[3];

/* Files 1 and 2 are the test target (two files to the resolver); any other is missing. */
static int fake_open_file(void *userdata, const uint8_t id[EP_FILE_ID_SIZE]) {
        if (id[0] != 1 && id[0] != 2)
                return -ENOENT;
        opens[id[0]]++;
        int fd = open(target, O_RDONLY | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

static int fake_open_kallsyms(void *userdata) {
        return -ENXIO; /* as with the loader absent */
}

static void push_sym_request(EpRing *req, uint64_t cookie, uint8_t kind, uint8_t file, uint64_t addr, uint8_t flags) {
        uint8_t buf[256], id[EP_FILE_ID_SIZE] = { file };
        EpWriter w;

        EpSymRequestMsg m = { .cookie = cookie, .kind = kind, .addr = addr, .flags = flags,
                              .path = "/usr/bin/whatever" };
        memcpy(m.file_id, id, sizeof id);
        ep_writer_init(&w, buf, sizeof buf);
        ep_put_sym_request(&w, &m);
        CHECK(!w.overflow);
        CHECK_INT(ep_ring_push(req, EP_MSG_SYM_REQUEST, buf, (uint32_t) w.size), 0);
}

static bool try_push_sym_request(EpRing *req, uint64_t cookie, uint64_t addr) {
        uint8_t buf[256], id[EP_FILE_ID_SIZE] = { 1 };
        EpWriter w;

        EpSymRequestMsg m = { .cookie = cookie, .kind = EP_FRAME_NATIVE, .addr = addr };
        memcpy(m.file_id, id, sizeof id);
        ep_writer_init(&w, buf, sizeof buf);
        ep_put_sym_request(&w, &m);
        return ep_ring_push(req, EP_MSG_SYM_REQUEST, buf, (uint32_t) w.size) == 0;
}

typedef struct Response {
        uint16_t type;
        uint64_t cookie;
        uint8_t status;
        uint64_t elf_addr;
        char module[64];
        uint16_t n_lines;
        char function[128];
        size_t build_id_len;
        char go_build_id[128];
        uint8_t file_id[EP_FILE_ID_SIZE]; /* EP_MSG_SYM_FILE_CHANGED */
} Response;

static int pop_response(EpRing *resp, Response *ret) {
        EpRingRecord h;
        const void *p;
        EpReader rd;
        int r = ep_ring_peek(resp, &h, &p);

        CHECK(r >= 0);
        if (r == 0)
                return 0;

        *ret = (Response) { .type = h.type };
        ep_reader_init(&rd, p, h.len);
        if (h.type == EP_MSG_SYM_FILE_CHANGED) {
                ep_get_bytes(&rd, ret->file_id, sizeof ret->file_id);
                CHECK(ep_reader_done(&rd));
                ep_ring_consume(resp);
                return 1;
        }
        ret->cookie = ep_get_u64(&rd);
        ret->status = ep_get_u8(&rd);
        if (h.type == EP_MSG_SYM_RESPONSE) {
                ret->elf_addr = ep_get_u64(&rd);
                _cleanup_free_ char *module = ep_get_str(&rd, 63);
                ret->n_lines = ep_get_u16(&rd);
                for (uint16_t i = 0; i < ret->n_lines; i++) {
                        _cleanup_free_ char *fn = ep_get_str(&rd, 127);
                        free(ep_get_str(&rd, 127)); /* the file */
                        (void) ep_get_u32(&rd);
                        if (i == 0 && fn)
                                snprintf(ret->function, sizeof ret->function, "%s", fn);
                }
                if (module)
                        snprintf(ret->module, sizeof ret->module, "%s", module);
        } else {
                CHECK_INT(h.type, EP_MSG_SYM_FILE_RESPONSE);
                (void) ep_get_blob(&rd, EP_BUILD_ID_MAX, &ret->build_id_len);
                _cleanup_free_ char *go = ep_get_str(&rd, 127);
                if (go)
                        snprintf(ret->go_build_id, sizeof ret->go_build_id, "%s", go);
        }
        CHECK(ep_reader_done(&rd));
        ep_ring_consume(resp);
        return 1;
}

/* A session over a fresh resolver, and the client's ends of its rings. */
static void open_session(const EpFileSource *src, const EpResolverConfig *config, EpSymStats *stats,
                         EpResolver **ret_resolver, EpSession **ret_session, EpRing **ret_req, EpRing **ret_resp) {
        CHECK_INT(ep_resolver_new(src, config, stats, ret_resolver), 0);
        CHECK_INT(ep_session_new(NULL, *ret_resolver, stats, ret_session), 0);
        CHECK_INT(ep_ring_attach(ep_session_request_memfd(*ret_session), ep_session_request_eventfd(*ret_session),
                                 ret_req), 0);
        CHECK_INT(ep_ring_attach(ep_session_response_memfd(*ret_session), ep_session_response_eventfd(*ret_session),
                                 ret_resp), 0);
}

/* Requests that alternate between two files are answered file by file, each file in arrival
 * order, so a resolver that keeps one file open opens each once, not once per request. */
static void test_file_order(const EpFileSource *src) {
        EpResolverConfig config = EP_RESOLVER_CONFIG_DEFAULT;
        _cleanup_(ep_resolver_freep) EpResolver *resolver = NULL;
        _cleanup_(ep_session_freep) EpSession *s = NULL;
        _cleanup_ring_ EpRing *req = NULL, *resp = NULL;
        EpSymStats stats = {};
        Response r;

        config.max_files = 1;
        open_session(src, &config, &stats, &resolver, &s, &req, &resp);

        opens[1] = opens[2] = 0;
        for (uint64_t i = 0; i < 10; i++) /* cookie 300 + i: file 1 for even i, file 2 for odd */
                push_sym_request(req, 300 + i, EP_FRAME_NATIVE, 1 + i % 2, beta_offset + i / 2, 0);
        CHECK_INT(ep_session_process(s), 10);

        static const uint64_t order[] = { 300, 302, 304, 306, 308, 301, 303, 305, 307, 309 };
        for (unsigned i = 0; i < ELEMENTSOF(order); i++) {
                CHECK_INT(pop_response(resp, &r), 1);
                CHECK_U64(r.cookie, order[i]);
                CHECK_STR(r.function, "sym_test_beta");
        }
        CHECK_INT(pop_response(resp, &r), 0);
        CHECK_INT(opens[1], 1);
        CHECK_INT(opens[2], 1);
        CHECK_INT(stats.resolved, 10);
}

int main(void) {
        EpFileSource src = { .open_file = fake_open_file, .open_kallsyms = fake_open_kallsyms };
        _cleanup_(ep_resolver_freep) EpResolver *resolver = NULL;
        _cleanup_(ep_session_freep) EpSession *s = NULL;
        _cleanup_ring_ EpRing *req = NULL, *resp = NULL;
        EpSymStats stats = {};
        Response r;

        target = test_env("SYM_TEST_TARGET");
        beta_offset = test_target_offset(target, "sym_test_beta");

        open_session(&src, NULL, &stats, &resolver, &s, &req, &resp);

        /* One of each. */
        push_sym_request(req, 101, EP_FRAME_NATIVE, 1, beta_offset + 2, 0);
        push_sym_request(req, 102, EP_FRAME_NATIVE, 9, 0x1000, 0);          /* no such file */
        push_sym_request(req, 103, EP_FRAME_KERNEL, 0, 0xffffffff81000000, 0); /* no kallsyms */
        uint8_t junk[5] = { 1, 2, 3, 4, 5 };
        CHECK_INT(ep_ring_push(req, EP_MSG_SYM_REQUEST, junk, sizeof junk), 0); /* truncated */
        CHECK_INT(ep_ring_push(req, 999, junk, sizeof junk), 0);                 /* unknown type */
        {
                uint8_t buf[128], id[EP_FILE_ID_SIZE] = { 1 };
                EpWriter w;
                ep_writer_init(&w, buf, sizeof buf);
                ep_put_u64(&w, 104);
                ep_put_bytes(&w, id, sizeof id);
                ep_put_str(&w, "/path");
                CHECK_INT(ep_ring_push(req, EP_MSG_SYM_FILE_REQUEST, buf, (uint32_t) w.size), 0);
        }
        push_sym_request(req, 105, EP_FRAME_NATIVE, 1, beta_offset + 2, 0); /* cached */

        CHECK_INT(ep_session_process(s), 7);
        CHECK_INT(ep_session_process(s), 0);

        /* Answers come file by file (the kernel's, with no file, first); cookies say which. */
        Response got[5];
        for (unsigned i = 0; i < ELEMENTSOF(got); i++)
                CHECK_INT(pop_response(resp, &got[i]), 1);
        CHECK_INT(pop_response(resp, &r), 0);
        static const uint64_t order[] = { 103, 101, 104, 105, 102 };
        for (unsigned i = 0; i < ELEMENTSOF(order); i++)
                CHECK_U64(got[i].cookie, order[i]);

        r = got[1];
        CHECK_INT(r.type, EP_MSG_SYM_RESPONSE);
        CHECK_INT(r.status, EP_SYM_OK);
        CHECK_INT(r.n_lines, 1);
        CHECK_STR(r.function, "sym_test_beta");
        CHECK_STR(r.module, "");
        CHECK(r.elf_addr != 0);

        r = got[4];
        CHECK_INT(r.status, EP_SYM_NO_FILE);
        CHECK_INT(r.n_lines, 0);

        /* kallsyms from a loader that is away: a passing failure, asked again later */
        CHECK_INT(got[0].status, EP_SYM_RETRY);

        r = got[2];
        CHECK_INT(r.type, EP_MSG_SYM_FILE_RESPONSE);
        CHECK_INT(r.status, EP_SYM_OK);
        CHECK_INT(r.build_id_len, 20);
        CHECK_STR(r.go_build_id, "test-go-build-id");

        CHECK_STR(got[3].function, "sym_test_beta");

        CHECK_INT(stats.requests, 5);
        CHECK_INT(stats.bad_requests, 2);
        CHECK_INT(stats.resolved, 2);
        CHECK_INT(stats.cache_hits, 1);
        CHECK_INT(stats.file_errors, 1);
        CHECK_INT(stats.retry_answers, 1);

        /* Out of time, a turn ends after the request that crossed the budget; the rest wait
         * for the next turn, in order. */
        ep_session_set_budget(s, 0);
        for (uint64_t c = 201; c <= 203; c++)
                push_sym_request(req, c, EP_FRAME_NATIVE, 1, beta_offset + 2, 0);
        for (uint64_t c = 201; c <= 203; c++) {
                CHECK_INT(ep_session_process(s), 1);
                CHECK_INT(pop_response(resp, &r), 1);
                CHECK_U64(r.cookie, c);
                CHECK_STR(r.function, "sym_test_beta");
        }
        CHECK_INT(ep_session_process(s), 0);
        ep_session_set_budget(s, EP_SESSION_BUDGET_USEC);

        test_file_order(&src);

        /* Backpressure: nobody reads responses until the session stops taking requests. */
        enum { N = 60000 };
        static bool seen[N];
        uint64_t sent = 0, received = 0, requests_before = stats.requests;
        int n;

        for (;;) {
                while (sent < N && try_push_sym_request(req, sent, beta_offset + sent % 30))
                        sent++;
                n = ep_session_process(s);
                CHECK(n >= 0);
                if (n == 0)
                        break;
        }
        printf("stalled after %" PRIu64 " requests sent, %zu answers waiting in the backlog, %zu bytes in the response ring\n",
               sent, ep_session_backlog(s), ep_ring_bytes_used(resp));
        CHECK_INT(ep_session_backlog(s), EP_SESSION_BACKLOG);
        CHECK(ep_ring_bytes_used(req) > 0); /* requests wait where they are */
        CHECK_INT(stats.response_drops, 0);

        /* A file's answers changed: the word comes after every answer already given (they
         * were computed before), before the answers to requests still waiting. */
        const uint8_t changed[EP_FILE_ID_SIZE] = { 1, 0xc4 };
        uint64_t answered_before_change = stats.requests - requests_before;
        bool change_seen = false;
        ep_session_file_changed(s, changed);
        CHECK_INT(ep_session_backlog(s), EP_SESSION_BACKLOG + 1);

        /* The client catches up: everything is answered exactly once. */
        unsigned rounds = 0;
        while (received < N) {
                while (pop_response(resp, &r) == 1) {
                        if (r.type == EP_MSG_SYM_FILE_CHANGED) {
                                CHECK(!change_seen);
                                CHECK(memcmp(r.file_id, changed, sizeof changed) == 0);
                                CHECK_U64(received, answered_before_change);
                                change_seen = true;
                                continue;
                        }
                        CHECK(r.cookie < N);
                        CHECK(!seen[r.cookie]);
                        seen[r.cookie] = true;
                        CHECK_STR(r.function, "sym_test_beta");
                        received++;
                }
                while (sent < N && try_push_sym_request(req, sent, beta_offset + sent % 30))
                        sent++;
                CHECK(ep_session_process(s) >= 0);
                CHECK(++rounds < 100000);
        }
        CHECK(change_seen);
        CHECK_INT(stats.response_drops, 0);
        CHECK_INT(ep_session_backlog(s), 0);
        CHECK_INT(ep_ring_records_dropped(resp), 0);
        printf("%" PRIu64 " answers received in %u rounds, %" PRIu64 " cache hits\n", received, rounds,
               stats.cache_hits);

        TEST_DONE("test-symbolizer-session");
}
