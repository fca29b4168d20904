/* SPDX-License-Identifier: MIT */
/* libFuzzer target: what the native worker sends the symbolizer (symbolizer/native-worker-wire.c).
 * The worker parses crafted files and may be taken over by one, so the symbolizer reads its
 * messages as hostile input: the input is fed to the stream reader (lengths, stalls, an early
 * end) and decoded as each message the symbolizer accepts (an answer, file information, a file
 * request). What decodes must encode back to the same message, which then decodes to the same
 * again. Any crash, hang, leak or sanitizer report is a bug. Built with clang by
 * tests/fuzz/meson.build; seeds in corpus-native-worker/. */

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "native-worker-wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The stream: every whole message the reader takes from data, until it refuses or data ends. */
static void read_stream(const uint8_t *data, size_t size) {
        uint8_t *buf = NULL;
        int sv[2];

        if (size > 65536 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
                return;
        if (write(sv[1], data, size) != (ssize_t) size)
                abort();
        close(sv[1]); /* a message cut short ends at once, no stall */
        for (;;) {
                size_t n;
                int fd = -EBADF;
                int k = ep_native_recv(sv[0], &buf, &n, &fd, 0);
                if (fd >= 0)
                        abort(); /* none was sent */
                if (k < 0)
                        break;
                if (n == 0 || n > EP_NATIVE_MSG_MAX)
                        abort();
        }
        free(buf);
        close(sv[0]);
}

static void check_answer_roundtrip(const EpNativeAnswer *a) {
        EpNativeAnswer b = {};
        EpWriter w;

        ep_writer_init_dynamic(&w);
        ep_native_put_answer(&w, a);
        if (w.overflow || ep_native_get_answer(w.data, w.size, &b) < 0)
                abort();
        if (b.result.status != a->result.status || b.result.n_lines != a->result.n_lines ||
            b.cacheable != a->cacheable || b.has_record != a->has_record ||
            strcmp(b.result.module, a->result.module) != 0)
                abort();
        for (uint16_t i = 0; i < a->result.n_lines; i++)
                if (strcmp(a->result.lines[i].function, b.result.lines[i].function) != 0 ||
                    a->result.lines[i].line != b.result.lines[i].line)
                        abort();
        ep_native_answer_done(&b);
        ep_writer_done(&w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        EpNativeAnswer a = {};
        EpNativeInfo info = {};
        EpNativeRequest req = {};
        int error;

        read_stream(data, size);
        if (ep_native_get_answer(data, size, &a) == 0) {
                check_answer_roundtrip(&a);
                ep_native_answer_done(&a);
        }
        if (ep_native_get_info(data, size, &info) == 0)
                ep_native_info_done(&info);
        if (ep_native_get_request(data, size, &req) == 0)
                free(req.path);
        (void) ep_native_get_file(data, size, &error);
        return 0;
}
