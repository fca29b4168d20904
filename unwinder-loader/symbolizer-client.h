/* SPDX-License-Identifier: MIT */
#pragma once

/* Asks the symbolizer for unwind tables: org.ebpfprofiler.Symbolizer1.GetUnwindTable(h file,
 * ay file_id) → (h table), a sealed memfd holding the blob of common/unwind-table.h; errors
 * org.ebpfprofiler.Error.NoUnwindInfo (no CFI) and org.ebpfprofiler.Error.BadFile.
 *
 * Calls are asynchronous (sampling never waits for the symbolizer), at most a few at a time;
 * requests come from the queue of tables.c and answers go back to it. While the symbolizer is
 * not on the bus, requests wait; when it (re)appears, waiting requests are sent. */

#include "daemon.h"
#include "macro.h"
#include "proc-maps.h"
#include "tables.h"

#define EP_ERROR_NO_UNWIND_INFO "org.ebpfprofiler.Error.NoUnwindInfo"
#define EP_ERROR_BAD_FILE "org.ebpfprofiler.Error.BadFile"

typedef struct EpSymClient EpSymClient;

int ep_symclient_new(EpDaemon *d, EpTables *tables, EpProcTable *procs, EpSymClient **ret);
EpSymClient *ep_symclient_free(EpSymClient *c);
DEFINE_TRIVIAL_CLEANUP_FUNC(EpSymClient *, ep_symclient_free);

/* Sends queued requests while fewer than the maximum are in flight. */
void ep_symclient_kick(void *userdata);
unsigned ep_symclient_in_flight(const EpSymClient *c);

/* Reads a table blob from a descriptor into an 8-byte aligned buffer (a private copy: the
 * peer cannot change it after it was validated). -EFBIG beyond the largest valid table. */
int ep_read_table_fd(int fd, void **ret, size_t *ret_size);
