/* SPDX-License-Identifier: MIT */
#pragma once

/* Decodes the collector → exporter export ring (common/wire.h, EP_MSG_EXP_*) into interval
 * models. The ring carries one BEGIN..END group per finished interval; every record is
 * validated (lengths, string sizes, kinds, references defined before use, END matching BEGIN).
 * A group with any malformed record is dropped whole and counted; records outside a group
 * (e.g. the tail of a group whose start a previous exporter consumed) are skipped and count
 * as one dropped group. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hashmap.h"
#include "profile-model.h"

/* Limits on what one group may hold (beyond them the group is dropped, not the daemon). */
#define EXP_MAX_PATH 4096
#define EXP_MAX_FUNCTION 65536
#define EXP_MAX_NAME 256          /* comm, thread names, container IDs */
#define EXP_MAX_LINES 1024        /* inline depth of one frame */
#define EXP_MAX_GROUP_BYTES (512u << 20)

typedef struct ExpIntake {
        ExpInterval *cur; /* group being assembled */
        bool skipping;    /* inside a dropped group: ignore records until the next BEGIN */
        uint64_t group_bytes;
        EpHashmap *frame_refs; /* u32 frame_ref → u32 frame index */
        EpHashmap *frame_keys; /* FrameKey → u32 frame index: one per kind/file/addr, but per-process kinds */
        EpHashmap *stack_refs; /* u32 stack_ref → u32 stack index */
        EpHashmap *pids;       /* u32 pid → u32 process index */

        uint64_t groups_done;    /* complete, valid groups handed out */
        uint64_t groups_dropped; /* malformed or partial groups */
        uint64_t records_skipped;
        bool logged;             /* the first drop was logged at warning level */
        char last_error[256];    /* why the last group was dropped */
} ExpIntake;

int exp_intake_new(ExpIntake **ret);
ExpIntake *exp_intake_free(ExpIntake *in);
DEFINE_TRIVIAL_CLEANUP_FUNC(ExpIntake *, exp_intake_free);

/* Feeds one ring record. Returns 1 with the finished interval in *ret_done (the caller owns
 * it), 0 when more records are needed, or a negative errno when the group in progress was
 * dropped just now (-EBADMSG: malformed, -ENOMEM; counted in groups_dropped, reason in
 * last_error). Never fails in a way that needs the caller to do more than log. */
int exp_intake_feed(ExpIntake *in, uint16_t type, const void *payload, size_t size,
                    ExpInterval **ret_done);

/* Forgets a group in progress without counting it (the ring went away). */
void exp_intake_reset(ExpIntake *in);
