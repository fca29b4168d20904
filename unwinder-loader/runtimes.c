/* SPDX-License-Identifier: MIT */

/* The loader's seam for interpreter runtimes (docs/ARCHITECTURE.md, "How to add a runtime"):
 * process-tracker.c, trace-convert.c, loader-bus.c and main.c call these, and only these call
 * a runtime's own file. A runtime's loader part recognises it in a process's mapped files and
 * writes (and deletes) the process's entry in that runtime's BPF map (bpf/NAME.bpf.h). */

#include "loader.h"
#include "macro.h"

/* Every runtime, tried in this order: a process runs the first that recognises it. */
static const LoaderRuntime *const runtimes[] = {
        &loader_runtime_cpython,
};

void loader_runtimes_track(Loader *l, EpProcess *p) {
        const LoaderRuntime *found = NULL;
        uint16_t version = 0;

        for (size_t i = 0; i < ELEMENTSOF(runtimes); i++) {
                uint16_t v = runtimes[i]->track(l, p, p->runtime == runtimes[i]);

                if (v && !found) {
                        found = runtimes[i];
                        version = v;
                }
        }
        p->runtime = found;
        p->runtime_version = version;
}

void loader_runtimes_untrack(Loader *l, EpProcess *p, bool delete_bpf_entry) {
        if (p->runtime)
                p->runtime->untrack(l, p, delete_bpf_entry);
        p->runtime = NULL;
        p->runtime_version = 0;
}

bool loader_runtimes_is_interp_loop(Loader *l, const EpProcess *p, uint64_t pc) {
        return p->runtime && p->runtime->is_interp_loop(l, p, pc);
}

bool loader_runtimes_detecting(Loader *l, const EpProcess *p) {
        if (p->synced_gen != p->maps_gen)
                return true; /* tracked once they are written (loader_track_process()) */
        for (size_t i = 0; i < ELEMENTSOF(runtimes); i++)
                if (runtimes[i]->detecting(l, p))
                        return true;
        return false;
}

const LoaderRuntime *loader_runtime_by_counters(const char *property) {
        for (size_t i = 0; i < ELEMENTSOF(runtimes); i++)
                if (streq(runtimes[i]->counters_property, property))
                        return runtimes[i];
        return NULL;
}

uint64_t loader_runtimes_counters_hash(Loader *l, const uint64_t *bpf) {
        uint64_t h = 0;

        for (size_t i = 0; i < ELEMENTSOF(runtimes); i++) {
                LoaderCounter c[LOADER_RUNTIME_COUNTERS_MAX];
                size_t n = runtimes[i]->counters(l, bpf, c);

                for (size_t j = 0; j < n; j++)
                        h = h * 0x100000001b3ULL ^ c[j].value;
        }
        return h;
}

void loader_runtimes_forget_file(Loader *l, uint32_t key) {
        for (size_t i = 0; i < ELEMENTSOF(runtimes); i++)
                runtimes[i]->forget_file(l, key);
}

void loader_runtimes_free(Loader *l) {
        for (size_t i = 0; i < ELEMENTSOF(runtimes); i++)
                runtimes[i]->free(l);
}
