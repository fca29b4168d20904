/* SPDX-License-Identifier: MIT */

/* CPython's loader part (registered in runtimes.c): the BPF side's view of CPython processes
 * (bpf/cpython.h, py_procs): for a process that maps
 * a CPython runtime (python-detect.c), where its interpreter list and eval loop are, at the
 * process's addresses, and the layout offsets the BPF walk reads (the entry is made by
 * python-entry.c, which the replay tests share). Each file is examined once (cached by file
 * key); only files whose name contains "python" are examined (an interpreter linked statically
 * into a program of another name is not recognised). */

#include <bpf/bpf.h>
#include <inttypes.h>

#include "hashmap.h"
#include "log.h"
#include "loader.h"
#include "python-entry.h"

/* What one file is. */
typedef struct PyFile {
        int state; /* 1: a CPython runtime; -1: not one (or unusable) */
        EpPyFile file;
} PyFile;

static void detect_file(Loader *l, uint32_t key, const char *path, PyFile *pf) {
        _cleanup_close_ int fd = -EBADF;
        EpPyFileStep failed;
        int r;
        LOG_CONTEXT_FILE(path);

        pf->state = -1;
        fd = ep_proc_table_open_file(l->procs, key);
        if (fd < 0) {
                log_debug_errno(fd, "Cannot open %s to look for CPython: %m", path);
                return;
        }
        r = ep_py_file_examine(fd, path, &pf->file, &failed);
        if (r == 0)
                return;
        if (r < 0) {
                l->py_detect_errors++;
                if (failed == EP_PY_FILE_DETECT)
                        log_notice_errno(r, "%s looks like CPython but cannot be used for Python frames: %m", path);
                else if (failed == EP_PY_FILE_LAYOUT)
                        log_notice_errno(r, "CPython %u.%u in %s: no usable layout, no Python frames (%m).",
                                         pf->file.rt.major, pf->file.rt.minor, path);
                return;
        }
        l->py_runtimes++;
        log_info("CPython %u.%u in %s: Python frames on.", pf->file.rt.major, pf->file.rt.minor, path);
        pf->state = 1;
}

/* The file's entry if it was examined already (a runtime or not), else NULL. */
static const PyFile *examined_file(Loader *l, uint32_t key) {
        void *slot = l->py_files ? ep_hashmap_get(l->py_files, &key) : NULL;
        PyFile *pf;

        if (!slot)
                return NULL;
        memcpy(&pf, slot, sizeof pf);
        return pf;
}

static const PyFile *py_file(Loader *l, uint32_t key) {
        EpFile *f = ep_proc_table_file(l->procs, key);
        const PyFile *known = examined_file(l, key);
        void *slot;
        PyFile *pf;

        if (known)
                return known->state > 0 ? known : NULL;
        if (!f || !ep_py_file_name_says_python(f->path))
                return NULL;
        if (!l->py_files) {
                l->py_files = ep_hashmap_new(sizeof(uint32_t), sizeof(PyFile *));
                if (!l->py_files)
                        return NULL;
        }
        pf = calloc(1, sizeof *pf);
        if (!pf)
                return NULL;
        detect_file(l, key, f->path, pf);
        if (ep_hashmap_put(l->py_files, &key, &slot) < 0) {
                free(pf);
                return NULL;
        }
        memcpy(slot, &pf, sizeof pf);
        return pf->state > 0 ? pf : NULL;
}

static void cpython_free(Loader *l) {
        size_t state = 0;
        const void *k;
        void *v;

        if (!l->py_files)
                return;
        while (ep_hashmap_iterate(l->py_files, &state, &k, &v)) {
                PyFile *pf;
                memcpy(&pf, v, sizeof pf);
                free(pf);
        }
        l->py_files = ep_hashmap_free(l->py_files);
}

static bool cpython_is_eval_loop(Loader *l, const EpProcess *p, uint64_t pc) {
        const EpMapping *m;
        const PyFile *pf;
        uint64_t bias;

        m = ep_process_find_mapping(p, pc);
        if (!m || m->file_key == 0)
                return false;
        pf = examined_file(l, m->file_key);
        if (!pf || pf->state <= 0 || !ep_py_file_load_bias(&pf->file, m->start, m->pgoff, &bias))
                return false;
        for (unsigned i = 0; i < pf->file.rt.n_eval; i++)
                if (pc - bias >= pf->file.rt.eval[i].start && pc - bias < pf->file.rt.eval[i].end)
                        return true;
        return false;
}

static uint16_t cpython_track(Loader *l, EpProcess *p, bool had_entry) {
        uint32_t pid = (uint32_t) p->pid;
        struct ep_bpf_py_proc e;

        if (l->maps.py_procs < 0)
                return 0;
        for (size_t i = 0; i < p->n_mappings; i++) {
                const EpMapping *m = &p->mappings[i];
                const PyFile *pf;

                if (m->file_key == 0)
                        continue;
                pf = py_file(l, m->file_key);
                if (!pf || !ep_py_file_entry(&pf->file, m->start, m->pgoff, &e))
                        continue;
                if (bpf_map_update_elem(l->maps.py_procs, &pid, &e, BPF_ANY) < 0) {
                        if (l->bpf_sync_errors++ == 0)
                                log_warning_errno(errno, "Cannot write the CPython entry of process %d to BPF: %m",
                                                  (int) p->pid);
                        break;
                }
                if (!had_entry || p->runtime_version != e.version)
                        log_debug("Process %d runs CPython %u.%u.", (int) p->pid, e.version >> 8, e.version & 0xff);
                return e.version;
        }
        if (had_entry)
                (void) bpf_map_delete_elem(l->maps.py_procs, &pid);
        return 0;
}

static void cpython_untrack(Loader *l, EpProcess *p, bool delete_bpf_entry) {
        uint32_t pid = (uint32_t) p->pid;

        if (delete_bpf_entry && l->maps.py_procs >= 0)
                (void) bpf_map_delete_elem(l->maps.py_procs, &pid);
}

static size_t live_processes(Loader *l) {
        size_t state = 0, n = 0;
        EpProcess *p;

        while (ep_proc_table_iterate(l->procs, &state, &p))
                if (p->runtime == &loader_runtime_cpython && !p->exit_boot_ns)
                        n++;
        return n;
}

/* The BPF walk's counters (EP_BPF_PY_*), then the loader's: property PythonCounters. */
static const char *const bpf_counter_names[_EP_BPF_PY_MAX] = {
        [EP_BPF_PY_SAMPLES] = "samples",
        [EP_BPF_PY_FRAMES] = "frames",
        [EP_BPF_PY_ACTIVATIONS] = "eval-frames",
        [EP_BPF_PY_THREAD_NOT_FOUND] = "thread-not-found",
        [EP_BPF_PY_READ_FAILED] = "read-failed",
        [EP_BPF_PY_NO_FRAME] = "no-frame",
        [EP_BPF_PY_TRUNCATED] = "truncated",
        [EP_BPF_PY_UNPLACED] = "unplaced",
};

static size_t cpython_counters(Loader *l, const uint64_t *bpf, LoaderCounter ret[static LOADER_RUNTIME_COUNTERS_MAX]) {
        size_t n = 0;

        for (size_t i = 0; i < _EP_BPF_PY_MAX; i++)
                ret[n++] = (LoaderCounter) { bpf_counter_names[i], bpf[EP_BPF_CNT_PY_BASE + i] };
        ret[n++] = (LoaderCounter) { "no-program", bpf[EP_BPF_CNT_RUNTIME_NO_PROGRAM] };
        ret[n++] = (LoaderCounter) { "frames-sent", l->interp_frames_sent };
        ret[n++] = (LoaderCounter) { "placed-by-loader", l->interp_spliced };
        ret[n++] = (LoaderCounter) { "unplaced-dropped", l->interp_unplaced_dropped };
        ret[n++] = (LoaderCounter) { "frames-orphaned", l->interp_orphaned };
        ret[n++] = (LoaderCounter) { "processes", live_processes(l) };
        ret[n++] = (LoaderCounter) { "runtimes", l->py_runtimes };
        ret[n++] = (LoaderCounter) { "runtime-errors", l->py_detect_errors };
        return n;
}
_Static_assert(_EP_BPF_PY_MAX + 8 <= LOADER_RUNTIME_COUNTERS_MAX, "PythonCounters do not fit");

/* The code object's address, then the byte offset of its instruction (bpf/cpython.h); an
 * offset before the first instruction (3.11/3.12 at the start) is the first. */
static uint64_t cpython_frame_addr(uint64_t code, int64_t offset) {
        return EP_FRAME_CPYTHON_ADDR(code, (uint64_t) (offset < 0 ? 0 : offset));
}

const LoaderRuntime loader_runtime_cpython = {
        .name = "cpython",
        .counters_property = "PythonCounters",
        .frame_kind = EP_FRAME_CPYTHON,
        .track = cpython_track,
        .untrack = cpython_untrack,
        .is_interp_loop = cpython_is_eval_loop,
        .frame_addr = cpython_frame_addr,
        .counters = cpython_counters,
        .free = cpython_free,
};
