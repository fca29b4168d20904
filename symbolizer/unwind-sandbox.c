/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "macro.h"
#include "unwind-sandbox.h"

/* What the child writes at the start of the shared memfd; the blob follows. */
typedef struct SandboxResult {
        int32_t error; /* 0 or negative errno from the extraction */
        uint32_t flags;
        uint64_t size;
        EpUnwindExtractStats stats;
} SandboxResult;

typedef struct Extraction {
        int fd;
        const uint8_t *file_id;
        const EpUnwindExtractOptions *options;
} Extraction;

static int child_extract(void *userdata, int out) {
        const Extraction *x = userdata;
        SandboxResult res = {};
        void *blob = NULL;
        size_t size = 0;
        int r;

        res.error = ep_unwind_extract_full(x->fd, x->file_id, NULL, x->options, &blob, &size, &res.flags, &res.stats);
        res.size = res.error < 0 ? 0 : size;
        r = ep_sandbox_write(out, &res, sizeof res);
        if (r >= 0 && res.size)
                r = ep_sandbox_write(out, blob, size);
        return r;
}

int ep_unwind_extract_sandboxed(int fd, const uint8_t file_id[EP_FILE_ID_SIZE],
                                const EpUnwindExtractOptions *options, const EpUnwindSandboxLimits *limits,
                                void **ret_blob, size_t *ret_size, uint32_t *ret_flags,
                                EpUnwindExtractStats *ret_stats) {
        Extraction x = { .fd = fd, .file_id = file_id, .options = options };
        _cleanup_close_ int out = -EBADF;
        _cleanup_free_ void *blob = NULL;
        SandboxResult res;

        out = ep_sandbox_run("ep-extract", fd, child_extract, &x, limits);
        if (out < 0)
                return out;

        if (pread(out, &res, sizeof res, 0) != (ssize_t) sizeof res)
                return -EIO;
        if (res.error < 0)
                return res.error;
        if (res.size == 0 || res.size > (1ULL << 32))
                return -EIO;
        blob = malloc(res.size);
        if (!blob)
                return -ENOMEM;
        if (pread(out, blob, res.size, sizeof res) != (ssize_t) res.size)
                return -EIO;

        *ret_blob = TAKE_PTR(blob);
        *ret_size = res.size;
        *ret_flags = res.flags;
        if (ret_stats)
                *ret_stats = res.stats;
        return 0;
}
