/* SPDX-License-Identifier: MIT */
#pragma once

/* What the symbolizer tells the collector about one frame, and how far along a frame or file
 * is on its way through the symbolizer. Shared by the in-memory tables and the store. */

#include <stdint.h>
#include <stdlib.h>

typedef struct SymLine {
        char *function;
        char *file;
        uint32_t line;
} SymLine;

static inline void sym_lines_free(SymLine *lines, size_t n) {
        for (size_t i = 0; i < n; i++) {
                free(lines[i].function);
                free(lines[i].file);
        }
        free(lines);
}

typedef enum SymState {
        SYM_STATE_NONE = 0,  /* never asked (UNMAPPED/ABORT frames: nothing to ask) */
        SYM_STATE_QUEUED,    /* waiting to be written to the request ring */
        SYM_STATE_REQUESTED, /* in the request ring or being worked on */
        SYM_STATE_DONE,      /* a response was applied */
        SYM_STATE_RETRY,     /* answered EP_SYM_RETRY: asked again when its retry is due */
} SymState;

/* Asked and not answered yet: what a closing interval waits for (briefly). */
static inline int sym_state_in_flight(uint8_t s) {
        return s == SYM_STATE_QUEUED || s == SYM_STATE_REQUESTED;
}

/* Waiting for an answer and not given up on: in flight, or waiting for a retry. A frame asked
 * again (its file's answers changed) keeps its last answer meanwhile. */
static inline int sym_state_pending(uint8_t s) {
        return sym_state_in_flight(s) || s == SYM_STATE_RETRY;
}
