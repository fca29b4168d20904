/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <gelf.h>
#include <libelf.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "file-id.h"
#include "log.h"
#include "macro.h"
#include "python-detect.h"
#include "runtime-detect.h"
#include "sandbox.h"
#include "unwind-service.h"

/* Detection reads symbol tables and .rodata (bounded by the file's size); a valid file takes
 * milliseconds. */
#define DETECT_MEMORY (512ULL << 20)
#define DETECT_CPU_USEC (10 * USEC_PER_SEC)
#define DETECT_TIMEOUT_USEC (120 * USEC_PER_SEC)

DEFINE_TRIVIAL_CLEANUP_FUNC(Elf *, elf_end);

/* Records the failure in *d; returns error. */
static int fail(EpRuntimeDetection *d, int error, bool unusable, const char *format, ...) _printf_(4, 5);
static int fail(EpRuntimeDetection *d, int error, bool unusable, const char *format, ...) {
        va_list ap;

        d->error = error;
        d->unusable = unusable;
        d->runtime[0] = '\0';
        va_start(ap, format);
        vsnprintf(d->what, sizeof d->what, format, ap);
        va_end(ap);
        return error;
}

/* The PT_LOAD segments, for the loader's load bias. */
static int read_segments(int fd, EpCPythonFacts *f) {
        _cleanup_(elf_endp) Elf *elf = NULL;
        size_t n;

        (void) elf_version(EV_CURRENT);
        elf = elf_begin(fd, ELF_C_READ, NULL);
        if (!elf || elf_getphdrnum(elf, &n) < 0)
                return -EBADMSG;
        for (size_t i = 0; i < n; i++) {
                GElf_Phdr ph;

                if (!gelf_getphdr(elf, (int) i, &ph))
                        return -EBADMSG;
                if (ph.p_type != PT_LOAD)
                        continue;
                if (f->n_segments == EP_CPYTHON_FACTS_MAX_SEGMENTS)
                        return -E2BIG;
                f->segments[f->n_segments++] = (EpFactsSegment) {
                        .offset = ph.p_offset,
                        .vaddr = ph.p_vaddr,
                        .filesz = ph.p_filesz,
                        .memsz = ph.p_memsz,
                };
        }
        return f->n_segments > 0 ? 0 : -EBADMSG;
}

static int detect_cpython(int fd, const EpPyRuntime *rt, EpRuntimeDetection *d) {
        EpCPythonFacts *f = &d->facts, copy;
        EpPyLayout layout;
        int r;

        r = ep_py_detect_layout(fd, rt, &layout);
        if (r < 0)
                return fail(d, r, true, "CPython %u.%u: no usable layout (%s)", rt->major, rt->minor, strerror(-r));

        ep_cpython_facts_init(f);
        f->major = rt->major;
        f->minor = rt->minor;
        f->micro = rt->micro == EP_PY_MICRO_UNKNOWN ? EP_CPYTHON_MICRO_UNKNOWN : rt->micro;
        f->layout_source = r > 0 ? EP_CPYTHON_LAYOUT_DEBUG_OFFSETS : EP_CPYTHON_LAYOUT_TABLE;
        if (rt->minor == 6)
                f->interp_head_addr = rt->interp_head_addr;
        else {
                f->runtime_addr = rt->runtime_addr;
                f->runtime_size = rt->runtime_size;
        }
        f->n_eval = MIN(rt->n_eval, EP_CPYTHON_FACTS_MAX_EVAL);
        for (uint32_t i = 0; i < f->n_eval; i++)
                f->eval[i] = (EpFactsRange) { .start = rt->eval[i].start, .end = rt->eval[i].end };

        r = read_segments(fd, f);
        if (r < 0)
                return fail(d, r, true, "CPython %u.%u: unusable program headers (%s)", rt->major, rt->minor,
                            strerror(-r));
        /* What the loader would refuse is refused here, with a reason. */
        r = ep_cpython_facts_validate(f, sizeof *f, &copy);
        if (r < 0)
                return fail(d, r, true, "CPython %u.%u: symbols or segments out of bounds (%s)", rt->major,
                            rt->minor, strerror(-r));
        strcpy(d->runtime, EP_RUNTIME_CPYTHON);
        return 0;
}

int ep_runtime_detect_fd(int fd, const char *name, EpRuntimeDetection *ret) {
        EpPyRuntime rt;
        int r;

        *ret = (EpRuntimeDetection) {};
        r = ep_py_detect_fd(fd, name, &rt);
        if (r == 0)
                return 0; /* not a runtime (not ELF, not x86-64, no eval loop) */
        if (r == -ENODATA)
                return fail(ret, r, true, "a CPython runtime whose version or thread-state symbols cannot be found");
        if (r < 0)
                return fail(ret, r, false, "unreadable as ELF (%s)", strerror(-r));
        return detect_cpython(fd, &rt, ret);
}

typedef struct Detection {
        int fd;
        const char *name;
} Detection;

static int child_detect(void *userdata, int out) {
        const Detection *x = userdata;
        EpRuntimeDetection d;

        (void) ep_runtime_detect_fd(x->fd, x->name, &d);
        return ep_sandbox_write(out, &d, sizeof d);
}

int ep_runtime_detect_sandboxed(int fd, const uint8_t file_id[EP_FILE_ID_SIZE], EpRuntimeDetection *ret) {
        const EpSandboxLimits limits = {
                .memory_bytes = DETECT_MEMORY,
                .cpu_usec = DETECT_CPU_USEC,
                .timeout_usec = DETECT_TIMEOUT_USEC,
        };
        uint8_t actual[EP_FILE_ID_SIZE];
        char link[64], path[PATH_MAX];
        _cleanup_close_ int out = -EBADF;
        Detection x = { .fd = fd };
        ssize_t n;
        int r;

        *ret = (EpRuntimeDetection) {};
        r = ep_file_id_from_fd(fd, actual, NULL);
        if (r < 0)
                return fail(ret, r == -ENOMEM ? r : -EIO, false, "unreadable (%s)", strerror(-r));
        if (memcmp(actual, file_id, EP_FILE_ID_SIZE) != 0)
                return fail(ret, -ESTALE, false, "the descriptor's file ID is not the one given");

        /* The name helps with the version of files that do not say (no Py_Version, no SONAME). */
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        n = readlink(link, path, sizeof path - 1);
        if (n > 0) {
                path[n] = '\0';
                x.name = path;
        }

        out = ep_sandbox_run("ep-detect", fd, child_detect, &x, &limits);
        if (out == -ETIME)
                return fail(ret, out, false, "the detection used up its CPU time");
        if (out == -E2BIG)
                return fail(ret, out, false, "the detection crashed or used up its memory");
        if (out < 0)
                return fail(ret, out, false, "the detection could not run (%s)", strerror(-out));
        if (pread(out, ret, sizeof *ret, 0) != (ssize_t) sizeof *ret)
                return fail(ret, -EIO, false, "the detection gave no answer");

        /* The child ran our code, but on a hostile file: keep the answer well-formed. */
        ret->runtime[sizeof ret->runtime - 1] = '\0';
        ret->what[sizeof ret->what - 1] = '\0';
        if (ret->error > 0 || (ret->error == 0 && ret->runtime[0] && !streq(ret->runtime, EP_RUNTIME_CPYTHON)))
                return fail(ret, -EIO, false, "the detection gave a malformed answer");
        return ret->error;
}

const char *ep_runtime_detect_error_name(const EpRuntimeDetection *d) {
        if (d->error >= 0)
                return NULL;
        if (d->unusable)
                return EP_ERROR_UNUSABLE_RUNTIME;
        /* NULL: transient (out of memory, out of wall-clock time, ...) */
        return ep_sandbox_error_is_file(d->error) ? EP_ERROR_BAD_FILE : NULL;
}

int ep_runtime_detect_reply(sd_bus_message *call, const uint8_t file_id[EP_FILE_ID_SIZE], const EpRuntimeDetection *d) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        char hex[2 * EP_FILE_ID_SIZE + 1];
        const char *name;
        int r;

        if (d->error == 0) {
                bool found = d->runtime[0] != '\0';

                r = sd_bus_message_new_method_return(call, &reply);
                if (r >= 0)
                        r = sd_bus_message_append(reply, "s", d->runtime);
                if (r >= 0)
                        r = sd_bus_message_append_array(reply, 'y', &d->facts, found ? sizeof d->facts : 0);
                if (r >= 0)
                        r = sd_bus_send(NULL, reply, NULL);
                return r;
        }

        ep_file_id_to_hex(file_id, hex);
        name = ep_runtime_detect_error_name(d);
        if (name)
                return sd_bus_reply_method_errorf(call, name, "File %s: %s", hex, d->what);
        return sd_bus_reply_method_errnof(call, -d->error, "File %s: %s: %m", hex, d->what);
}
