/* SPDX-License-Identifier: MIT */
/* libFuzzer target: arbitrary bytes as a file the symbolizer checks for a CPython runtime for
 * the loader (Symbolizer1.DetectRuntime: symbolizer/runtime-detect.c over python-detect.c).
 * The files are the profiled processes', so detection must survive any input: no crash, no
 * sanitizer report, no leak (in production it runs in the sandbox as well, but a crash there
 * still costs every CPython process its Python frames). When the input is detected, what
 * detection returns must be consistent (a version it has a layout for, an eval-loop range that
 * is not empty), and the facts it would send must pass the loader's validation
 * (common/runtime-facts.c). Built with clang by tests/fuzz/meson.build; seeds in
 * corpus-python-detect/ (small shared objects that export the symbols a runtime has, for 3.6,
 * 3.11 and 3.13). */

#include <stdint.h>
#include <stdlib.h>

#include "fuzz-util.h"
#include "macro.h"
#include "python-detect.h"
#include "runtime-detect.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static int fd = -1;
        EpRuntimeDetection d;
        EpCPythonFacts facts;
        EpPyRuntime rt;
        EpPyLayout layout;

        fuzz_memfd_fill(&fd, "fuzz-python-detect", data, size);
        /* The name gives the version when the file does not. */
        if (ep_py_detect_fd(fd, "libpython3.11.so.1.0", &rt) > 0) {
                if (rt.major != 3 || rt.n_eval == 0 || rt.eval[0].start >= rt.eval[0].end)
                        abort();
                (void) ep_py_detect_layout(fd, &rt, &layout);
        }

        /* What DetectRuntime answers. */
        if (ep_runtime_detect_fd(fd, "libpython3.11.so.1.0", &d) == 0 && d.runtime[0]) {
                if (!streq(d.runtime, EP_RUNTIME_CPYTHON) ||
                    ep_cpython_facts_validate(&d.facts, sizeof d.facts, &facts) < 0)
                        abort();
        } else if (d.runtime[0] || (d.error < 0 && !d.what[0]))
                abort(); /* an error always says why, and names no runtime */
        return 0;
}
