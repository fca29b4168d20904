/* SPDX-License-Identifier: MIT */
/* libFuzzer target: arbitrary bytes as the export ring's records, which the exporter (the least
 * privileged daemon, holding the backend's credentials) reads from the collector: BEGIN,
 * PROCESS, FRAME, STACK, SAMPLE and END groups (common/wire.h). The input is a sequence of
 * records, each a u16 type (taken modulo the group's record types), a u16 length and that many
 * bytes (fuzz_next_record()). A group that is malformed is dropped and counted (groups_dropped); one that completes
 * is an interval whose every index must be in range. Any crash, sanitizer report or leak is a
 * bug. Built with clang by tests/fuzz/meson.build; seeds in corpus-export-intake/. */

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "export-intake.h"
#include "fuzz-util.h"
#include "wire.h"

#define RECORD_TYPES (EP_MSG_EXP_END - EP_MSG_EXP_BEGIN + 1)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* What the encoder relies on: every stack's frames and every sample's stack exist. */
static void check_interval(const ExpInterval *iv) {
        for (size_t i = 0; i < iv->n_stacks; i++)
                for (size_t j = 0; j < iv->stacks[i].n_frames; j++)
                        if (iv->stacks[i].frames[j] >= iv->n_frames)
                                abort();
        for (size_t i = 0; i < iv->n_samples; i++)
                if (iv->samples[i].stack >= iv->n_stacks)
                        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        ExpIntake *in = NULL;

        if (exp_intake_new(&in) < 0)
                abort();
        for (;;) {
                ExpInterval *iv = NULL;
                uint16_t type, len;
                void *payload;
                int r;

                if (!fuzz_next_record(&data, &size, &type, &payload, &len))
                        break;
                r = exp_intake_feed(in, (uint16_t) (EP_MSG_EXP_BEGIN + type % RECORD_TYPES), payload, len, &iv);
                free(payload);
                if (r < 0 && r != -ENOMEM && r != -EBADMSG)
                        abort();
                if (iv) {
                        check_interval(iv);
                        exp_interval_free(iv);
                }
        }
        exp_intake_free(in);
        return 0;
}
