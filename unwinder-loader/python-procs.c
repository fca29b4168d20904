/* SPDX-License-Identifier: MIT */

/* The BPF side's view of CPython processes (bpf/cpython.h, py_procs): for a process that maps
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

void loader_python_free(Loader *l) {
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

bool loader_python_is_eval_loop(Loader *l, const EpProcess *p, uint64_t pc) {
        const EpMapping *m;
        const PyFile *pf;
        uint64_t bias;

        if (p->py_version == 0)
                return false;
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

void loader_track_python(Loader *l, EpProcess *p) {
        uint32_t pid = (uint32_t) p->pid;
        struct ep_bpf_py_proc e;

        if (l->maps.py_procs < 0)
                return;
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
                        return;
                }
                if (p->py_version != e.version)
                        log_debug("Process %d runs CPython %u.%u.", (int) p->pid, e.version >> 8, e.version & 0xff);
                p->py_version = e.version;
                return;
        }
        if (p->py_version != 0) {
                (void) bpf_map_delete_elem(l->maps.py_procs, &pid);
                p->py_version = 0;
        }
}

void loader_untrack_python(Loader *l, EpProcess *p, bool delete_bpf_entry) {
        uint32_t pid = (uint32_t) p->pid;

        if (delete_bpf_entry && p->py_version != 0 && l->maps.py_procs >= 0)
                (void) bpf_map_delete_elem(l->maps.py_procs, &pid);
        p->py_version = 0;
}

size_t loader_python_processes(Loader *l) {
        size_t state = 0, n = 0;
        EpProcess *p;

        while (ep_proc_table_iterate(l->procs, &state, &p))
                if (p->py_version && !p->exit_boot_ns)
                        n++;
        return n;
}
