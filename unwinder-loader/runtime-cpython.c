/* SPDX-License-Identifier: MIT */

/* CPython's loader part (registered in runtimes.c): the BPF side's view of CPython processes
 * (bpf/cpython.h, py_procs): for a process that maps a CPython runtime, where its interpreter
 * list and eval loop are, at the process's addresses, and the layout offsets the BPF walk
 * reads. Whether a file is a runtime, and where those are in it, the symbolizer finds out
 * (Symbolizer1.DetectRuntime, asked through symbolizer-client.c): the loader parses no ELF
 * file itself, and checks every field of the answer (common/runtime-facts.h). The layout comes
 * from the loader's own table for the version. Each file is asked about once (cached by file
 * key); only files whose name contains "python" are (an interpreter linked statically into a
 * program of another name is not recognised). Until the answer comes, a process's samples
 * have native frames only; when it comes, every process mapping the file is tracked again. */

#include <bpf/bpf.h>
#include <inttypes.h>

#include "hashmap.h"
#include "log.h"
#include "loader.h"
#include "python-entry.h"

/* What one file is. */
typedef enum PyFileState {
        PY_FILE_ASKING,  /* DetectRuntime asked, no answer yet */
        PY_FILE_RUNTIME, /* a usable CPython runtime */
        PY_FILE_NOT,     /* not one, or not usable */
} PyFileState;

typedef struct PyFile {
        PyFileState state;
        EpCPythonFacts facts;  /* PY_FILE_RUNTIME: validated */
        EpPyLayout layout;     /* PY_FILE_RUNTIME: the table's, for facts.major.minor */
} PyFile;

/* The file's entry if it was asked about already (answered or not), else NULL. */
static PyFile *examined_file(Loader *l, uint32_t key) {
        void *slot = l->py_files ? ep_hashmap_get(l->py_files, &key) : NULL;
        PyFile *pf;

        if (!slot)
                return NULL;
        memcpy(&pf, slot, sizeof pf);
        return pf;
}

static void forget_file(Loader *l, uint32_t key) {
        PyFile *pf = examined_file(l, key);

        if (!pf)
                return;
        (void) ep_hashmap_remove(l->py_files, &key, NULL);
        free(pf);
}

/* The symbolizer's answer: it says what the file is, the loader decides whether to believe it. */
static void on_detected(uint32_t key, const EpDetectAnswer *a, void *userdata) {
        Loader *l = userdata;
        PyFile *pf = examined_file(l, key);
        EpFile *f = ep_proc_table_file(l->procs, key);
        const char *path = f && f->path ? f->path : "a file";
        int r;
        LOG_CONTEXT_FILE(f ? f->path : NULL);

        if (!pf || pf->state != PY_FILE_ASKING)
                return;
        switch (a->result) {
        case EP_DETECT_UNAVAILABLE:
                forget_file(l, key); /* asked again when a process maps it */
                return;
        case EP_DETECT_GAVE_UP:
                pf->state = PY_FILE_NOT;
                l->py_detect_errors++;
                /* The symbolizer's words: bounded, it is less trusted than we are. */
                log_notice("Cannot learn from the symbolizer whether %s is a CPython runtime (%.200s): no "
                           "Python frames for it.", path, a->error ?: "no answer");
                return;
        case EP_DETECT_REFUSED:
                pf->state = PY_FILE_NOT;
                l->py_detect_errors++;
                log_notice("%s looks like CPython but cannot be used for Python frames: %.200s", path,
                           a->error ?: "refused");
                return;
        case EP_DETECT_ANSWERED:
                break;
        }

        pf->state = PY_FILE_NOT;
        if (!a->runtime || !streq(a->runtime, EP_RUNTIME_CPYTHON)) {
                /* Not a runtime, or one this loader does not walk: nothing to check. */
                if (a->size != 0 && a->runtime && !a->runtime[0]) {
                        l->py_detect_errors++;
                        log_warning("The symbolizer's answer about %s is malformed (facts without a runtime): "
                                    "ignored.", path);
                }
                return;
        }
        r = ep_cpython_facts_validate(a->facts, a->size, &pf->facts);
        if (r >= 0)
                r = ep_py_layout_for_version(pf->facts.major, pf->facts.minor, &pf->layout);
        if (r < 0) {
                l->py_detect_errors++;
                log_warning_errno(r, "The symbolizer's facts about the CPython runtime %s are malformed (%m): "
                                     "no Python frames for it.", path);
                return;
        }
        pf->state = PY_FILE_RUNTIME;
        l->py_runtimes++;
        log_info("CPython %u.%u in %s: Python frames on.", pf->facts.major, pf->facts.minor, path);
        loader_retrack_runtimes(l, key);
}

/* The file's entry if it is a usable runtime; else NULL, after asking the symbolizer about a
 * file not asked about yet. */
static const PyFile *py_file(Loader *l, uint32_t key) {
        EpFile *f = ep_proc_table_file(l->procs, key);
        const PyFile *known = examined_file(l, key);
        void *slot;
        PyFile *pf;

        if (known)
                return known->state == PY_FILE_RUNTIME ? known : NULL;
        if (!f || !ep_py_name_says_python(f->path) || !l->symclient)
                return NULL;
        if (!l->py_files) {
                l->py_files = ep_hashmap_new(sizeof(uint32_t), sizeof(PyFile *));
                if (!l->py_files)
                        return NULL;
        }
        pf = calloc(1, sizeof *pf);
        if (!pf)
                return NULL;
        pf->state = PY_FILE_ASKING;
        if (ep_hashmap_put(l->py_files, &key, &slot) < 0) {
                free(pf);
                return NULL;
        }
        memcpy(slot, &pf, sizeof pf);
        if (ep_symclient_detect(l->symclient, key, on_detected, l) < 0)
                forget_file(l, key); /* asked again the next time */
        return NULL;
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
        const EpMapping *m = ep_process_find_mapping(p, pc);
        const PyFile *pf;

        if (!m || m->file_key == 0)
                return false;
        pf = examined_file(l, m->file_key);
        return pf && pf->state == PY_FILE_RUNTIME && ep_py_facts_in_eval_loop(&pf->facts, m->start, m->pgoff, pc);
}

static bool cpython_detecting(Loader *l, const EpProcess *p) {
        for (size_t i = 0; i < p->n_mappings; i++) {
                const PyFile *pf = p->mappings[i].file_key ? examined_file(l, p->mappings[i].file_key) : NULL;

                if (pf && pf->state == PY_FILE_ASKING)
                        return true;
        }
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
                if (!pf || !ep_py_facts_entry(&pf->facts, &pf->layout, m->start, m->pgoff, &e))
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
        .name = EP_RUNTIME_CPYTHON,
        .counters_property = "PythonCounters",
        .frame_kind = EP_FRAME_CPYTHON,
        .track = cpython_track,
        .untrack = cpython_untrack,
        .detecting = cpython_detecting,
        .is_interp_loop = cpython_is_eval_loop,
        .frame_addr = cpython_frame_addr,
        .counters = cpython_counters,
        .forget_file = forget_file,
        .free = cpython_free,
};
