/* SPDX-License-Identifier: MIT */
/* The two records answers travel in: a frame's result (resolver.h) and what a file's answers
 * were computed with (symbol-cache.h). Apart from the code that makes them, so that their
 * readers (the native worker's wire, its fuzzer) need nothing else. */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "resolver.h"
#include "symbol-cache.h"

void ep_sym_result_done(EpSymResult *res) {
        if (!res)
                return;
        for (uint16_t i = 0; i < res->n_lines; i++) {
                free(res->lines[i].function);
                free(res->lines[i].file);
        }
        free(res->lines);
        free(res->module);
        *res = (EpSymResult) {};
}

void ep_symbol_file_record_done(EpSymbolFileRecord *rec) {
        if (!rec)
                return;
        free(rec->debuglink);
        free(rec->path);
        free(rec->debug);
        *rec = (EpSymbolFileRecord) {};
}

int ep_symbol_file_record_copy(const EpSymbolFileRecord *rec, EpSymbolFileRecord *ret) {
        EpSymbolFileRecord c = {
                .build_id_len = rec->build_id_len,
                .debuglink = rec->debuglink ? strdup(rec->debuglink) : NULL,
                .path = rec->path ? strdup(rec->path) : NULL,
                .debug = rec->debug ? strdup(rec->debug) : NULL,
        };
        memcpy(c.build_id, rec->build_id, sizeof c.build_id);
        if ((rec->debuglink && !c.debuglink) || (rec->path && !c.path) || (rec->debug && !c.debug)) {
                ep_symbol_file_record_done(&c);
                return -ENOMEM;
        }
        *ret = c;
        return 0;
}
