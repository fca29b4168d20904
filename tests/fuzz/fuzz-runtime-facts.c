/* SPDX-License-Identifier: MIT */
/* libFuzzer target: arbitrary bytes as the CPython facts blob the symbolizer answers
 * DetectRuntime with, through what the loader does with one: validation, then for facts that
 * pass, the py_procs entry for a mapping (start and file offset from the input's last 16
 * bytes) with the version's layout, the load bias and the eval-loop test. Any crash or
 * sanitizer report is a bug; valid facts have a built-in layout, and where the mapping is one
 * of their segments each eval loop part starts inside the eval loop. Built with clang by
 * tests/fuzz/meson.build; seeds in corpus-runtime-facts/ (blobs of the CPython versions on
 * the machine). */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "python-entry.h"
#include "python-layout.h"
#include "runtime-facts.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        struct ep_bpf_py_proc entry;
        EpCPythonFacts f;
        EpPyLayout layout;
        uint64_t start = 0x7f0000000000, pgoff = 0, bias;

        if (size >= sizeof f + 2 * sizeof(uint64_t)) {
                memcpy(&start, data + sizeof f, sizeof start);
                memcpy(&pgoff, data + sizeof f + sizeof start, sizeof pgoff);
                size = sizeof f;
        }
        if (ep_cpython_facts_validate(data, size, &f) < 0)
                return 0;
        if (ep_py_layout_for_version(f.major, f.minor, &layout) < 0)
                abort(); /* validation refuses versions without a built-in layout */
        (void) ep_cpython_facts_interp_head(&f, &layout);
        if (ep_py_facts_load_bias(&f, start, pgoff, &bias)) {
                for (uint32_t i = 0; i < f.n_eval; i++)
                        if (!ep_py_facts_in_eval_loop(&f, start, pgoff, f.eval[i].start + bias))
                                abort();
        }
        (void) ep_py_facts_entry(&f, &layout, start, pgoff, &entry);
        return 0;
}
