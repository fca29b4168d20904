/* SPDX-License-Identifier: MIT */
/* libFuzzer target: arbitrary bytes as a file the loader checks for a CPython runtime
 * (unwinder-loader/python-detect.c). The loader runs as root and the files are the profiled
 * processes', so detection must survive any input: no crash, no sanitizer report, no leak.
 * When the input is detected, the layout lookup runs too, and what detection returns must be
 * consistent (a version it has a layout for, an eval-loop range that is not empty). Built with
 * clang by symbolizer/meson.build; seeds in corpus-python-detect/ (small shared objects that
 * export the symbols a runtime has, for 3.6, 3.11 and 3.13). */

#include <stdint.h>
#include <stdlib.h>

#include "fuzz-util.h"
#include "python-detect.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static int fd = -1;
        EpPyRuntime rt;
        EpPyLayout layout;

        fuzz_memfd_fill(&fd, "fuzz-python-detect", data, size);
        /* The name gives the version when the file does not. */
        if (ep_py_detect_fd(fd, "libpython3.11.so.1.0", &rt) > 0) {
                if (rt.major != 3 || rt.n_eval == 0 || rt.eval[0].start >= rt.eval[0].end)
                        abort();
                (void) ep_py_detect_layout(fd, &rt, &layout);
        }
        return 0;
}
