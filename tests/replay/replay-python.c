/* SPDX-License-Identifier: MIT */
/* The BPF sampler's CPython frame walk (bpf/cpython-walk.h) compiled as ordinary C, with its
 * hooks over a core dump.
 *
 * The per-process input the BPF walk reads from py_procs (struct ep_bpf_py_proc) is made by the
 * daemons' own code from the core's mapped files: each file whose name says python is examined
 * by the symbolizer's detection (ep_runtime_detect_fd, what DetectRuntime runs), its facts
 * checked as the loader checks them, and the first mapping that gives an entry
 * (ep_py_facts_entry, with the mapping's start and file offset) is the process's, as
 * unwinder-loader/runtime-cpython.c does with /proc/PID/maps. */
#include <inttypes.h>

#include "replay.h"

#include "python-entry.h"
#include "runtime-detect.h"

/* ---- the hooks of bpf/cpython-walk.h: reads from the core, counters as BPF keeps them ---- */

typedef struct ReplayPyHooks {
        EpCore *core;
        uint64_t counters[_EP_BPF_PY_MAX];
} ReplayPyHooks;

#define EP_PY_CTX ReplayPyHooks *

static inline int ep_py_read(ReplayPyHooks *h, void *dst, __u32 size, __u64 addr) {
        return ep_core_read(h->core, addr, dst, size);
}

static inline void ep_py_count(ReplayPyHooks *h, __u32 counter) {
        if (counter < _EP_BPF_PY_MAX)
                h->counters[counter]++;
}

static inline void ep_py_loop(__u32 n, long (*callback)(__u64 index, void *data), void *data) {
        for (__u64 i = 0; i < n; i++)
                if (callback(i, data) != 0)
                        break;
}

#include "cpython-walk.h"

struct ReplayPython {
        ReplayPyHooks hooks;
        const ReplayModule *module; /* the runtime the entry was made from */
        EpCPythonFacts file;
        struct ep_bpf_py_proc proc;
        struct py_walk walk; /* the walk of the thread being unwound */
};

void replay_python_free(ReplayPython *py) {
        free(py);
}

/* What detection and the loader make of a file: 1 with *ret filled (a usable runtime, the
 * facts checked as the loader checks them, *ret_layout the loader's for the version), 0 (not a
 * runtime), < 0 (a runtime that cannot be used). */
static int examine(const ReplayModule *m, EpCPythonFacts *ret, EpPyLayout *ret_layout) {
        _cleanup_free_ EpRuntimeDetection *d = calloc(1, sizeof *d);
        int r;

        if (!d)
                return -ENOMEM;
        r = ep_runtime_detect_fd(m->fd, m->path, d);
        if (r < 0) {
                fprintf(stderr, "ep-replay: %s: CPython not usable: %s (%s)\n", m->path, d->what, strerror(-r));
                return r;
        }
        if (!streq(d->runtime, EP_RUNTIME_CPYTHON))
                return 0;
        r = ep_cpython_facts_validate(&d->facts, sizeof d->facts, ret);
        if (r >= 0)
                r = ep_py_layout_for_version(ret->major, ret->minor, ret_layout);
        if (r < 0)
                fprintf(stderr, "ep-replay: %s: the facts about it do not pass the loader's checks: %s\n", m->path,
                        strerror(-r));
        return r < 0 ? r : 1;
}

/* The py_procs entry for the mapping reg, when its file is a usable runtime; each file is
 * examined once (*examined: 0 not yet, 1 a runtime in *file, -1 not one). */
static bool region_entry(const ReplayRegion *reg, int *examined, EpCPythonFacts *file, EpPyLayout *layout,
                         struct ep_bpf_py_proc *ret) {
        if (*examined == 0) {
                *examined = -1;
                if (!ep_py_name_says_python(reg->module->path) || examine(reg->module, file, layout) <= 0)
                        return false;
                *examined = 1;
        }
        return *examined > 0 && ep_py_facts_entry(file, layout, reg->start, reg->offset, ret);
}

int replay_python_load(ReplayProcess *p) {
        _cleanup_free_ int *examined = NULL;
        _cleanup_free_ EpCPythonFacts *files = NULL;
        _cleanup_free_ EpPyLayout *layouts = NULL;
        ReplayPython *py;

        examined = calloc(p->n_modules ?: 1, sizeof *examined);
        files = calloc(p->n_modules ?: 1, sizeof *files);
        layouts = calloc(p->n_modules ?: 1, sizeof *layouts);
        if (!examined || !files || !layouts)
                return -ENOMEM;
        for (size_t i = 0; i < p->n_regions; i++) {
                const ReplayRegion *reg = &p->regions[i];
                struct ep_bpf_py_proc proc;
                size_t k = 0;

                while (k < p->n_modules && p->modules[k] != reg->module)
                        k++;
                if (k == p->n_modules || !region_entry(reg, &examined[k], &files[k], &layouts[k], &proc))
                        continue;
                py = calloc(1, sizeof *py);
                if (!py)
                        return -ENOMEM;
                *py = (ReplayPython) { .hooks.core = p->core, .module = reg->module, .file = files[k], .proc = proc };
                p->python = py;
                return 0;
        }
        return 0; /* no CPython runtime: native frames only */
}

void replay_python_print(const ReplayPython *py) {
        const EpCPythonFacts *rt = &py->file;

        printf("# cpython %u.%u", rt->major, rt->minor);
        if (rt->micro != EP_CPYTHON_MICRO_UNKNOWN)
                printf(".%u", rt->micro);
        printf(" %s interp_head 0x%" PRIx64 " eval [0x%" PRIx64 ", 0x%" PRIx64 ") [0x%" PRIx64 ", 0x%" PRIx64 ")\n",
               py->module->path, (uint64_t) py->proc.interp_head, (uint64_t) py->proc.eval_start[0],
               (uint64_t) py->proc.eval_end[0], (uint64_t) py->proc.eval_start[1], (uint64_t) py->proc.eval_end[1]);
}

void replay_python_print_counters(const ReplayPython *py) {
        printf("# cpython counters (EP_BPF_PY_*):");
        for (size_t i = 0; i < _EP_BPF_PY_MAX; i++)
                printf(" %" PRIu64, py->hooks.counters[i]);
        printf("\n");
}

bool replay_python_start(ReplayPython *py, const EpCoreThread *t) {
        uint64_t fsbase = t->regs[EP_CORE_FS_BASE];

        if (fsbase == 0) { /* as BPF: no thread pointer, no thread state to find */
                py->walk.state = PY_WALK_OFF;
                return false;
        }
        ep_py_walk_start(&py->walk, &py->proc, fsbase);
        return true;
}

size_t replay_python_frames(ReplayPython *py, uint64_t lookup, ReplayFrame *frames, size_t max) {
        struct py_frame_out out = {};
        size_t n = 0;

        if (!ep_py_enter(&py->hooks, &py->walk, lookup))
                return 0;
        while (n < max && ep_py_next(&py->hooks, &py->walk, &out) == 1)
                frames[n++] = (ReplayFrame) { .pc = out.code, .python = true, .offset = out.offset };
        return n;
}

size_t replay_python_unplaced(ReplayPython *py, const EpCoreThread *t, ReplayFrame *frames, size_t max) {
        struct py_frame_out out = {};
        size_t n = 0;

        if (!replay_python_start(py, t))
                return 0;
        /* As BPF's second bpf_loop: at most twice as many calls as frames. */
        for (size_t i = 0; i < 2 * EP_BPF_PY_MAX_FRAMES && n < max; i++) {
                __u32 first = 0;
                int r = ep_py_next_unplaced(&py->hooks, &py->walk, &out, &first);

                if (r < 0)
                        break;
                if (r == 1)
                        frames[n++] = (ReplayFrame) {
                                .pc = out.code, .python = true, .offset = out.offset, .activation = first,
                        };
        }
        return n;
}
