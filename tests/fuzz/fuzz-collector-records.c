/* SPDX-License-Identifier: MIT */
/* libFuzzer target: arbitrary bytes as the records the collector reads from other daemons,
 * into a fresh collector (no store) per input: the loader's trace ring (traces, file and
 * process announcements, exits) and the symbolizer's response ring (frame and file answers,
 * file-changed notices). The input is a sequence of records, each a u16 type (below 16: the
 * trace ring's, else the response ring's), a u16 length and that many bytes. Any crash,
 * sanitizer report or leak is a bug; a record that is refused is counted in decode_errors, and
 * nothing else may fail but an allocation. Built with clang by tests/fuzz/meson.build; seeds in
 * corpus-collector-records/. */

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "collector.h"
#include "fuzz-util.h"

#define TRACE_RING_TYPES 16 /* wire.h: EP_MSG_SYM_REQUEST is the first of the symbolizer's */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        Collector c;

        if (collector_init(&c) < 0)
                abort();
        for (;;) {
                uint64_t errors = c.decode_errors;
                uint16_t type, len;
                void *payload;
                int r;

                if (!fuzz_next_record(&data, &size, &type, &payload, &len))
                        break;
                r = type < TRACE_RING_TYPES ? collector_intake(&c, type, payload, len)
                                            : collector_sym_apply(&c, type, payload, len);
                free(payload);
                if (r < 0 && r != -ENOMEM && !(r == -EBADMSG && c.decode_errors > errors))
                        abort();
        }
        collector_done(&c);
        return 0;
}
