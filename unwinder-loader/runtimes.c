/* SPDX-License-Identifier: MIT */

/* The loader's seam for interpreter runtimes (docs/ARCHITECTURE.md, "Interpreter runtimes: the
 * seams"): process-tracker.c and main.c call these, and only these call a runtime's own file.
 * A runtime's loader part recognises it in a process's mapped files and writes (and deletes)
 * the process's entry in that runtime's BPF map (bpf/NAME.bpf.h). A second runtime adds one call
 * to each function below. */

#include "loader.h"

void loader_runtimes_track(Loader *l, EpProcess *p) {
        loader_track_python(l, p); /* python-procs.c */
}

void loader_runtimes_untrack(Loader *l, EpProcess *p, bool delete_bpf_entry) {
        loader_untrack_python(l, p, delete_bpf_entry);
}

bool loader_runtimes_is_interp_loop(Loader *l, const EpProcess *p, uint64_t pc) {
        return loader_python_is_eval_loop(l, p, pc);
}

void loader_runtimes_free(Loader *l) {
        loader_python_free(l);
}
