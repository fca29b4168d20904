/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <libiberty/demangle.h>

#include "demangle.h"
#include "macro.h"

static bool looks_mangled(const char *name) {
        /* Itanium C++ and Rust legacy start with _Z, Rust v0 with _R; some platforms add
         * one more underscore. Checking first keeps plain C names away from the demangler. */
        if (name[0] == '_' && name[1] == '_')
                name++;
        return name[0] == '_' && (name[1] == 'Z' || name[1] == 'R');
}

int ep_demangle(const char *name, char **ret) {
        char *out = NULL;

        if (looks_mangled(name) && strnlen(name, EP_DEMANGLE_INPUT_MAX + 1) <= EP_DEMANGLE_INPUT_MAX) {
                /* Auto style: libiberty tries Rust (legacy and v0) before C++, and without
                 * DMGL_VERBOSE leaves the legacy hash out. Forcing DMGL_RUST would make it
                 * refuse C++ names. */
                out = cplus_demangle(name, DMGL_PARAMS | DMGL_ANSI);
                if (out && strlen(out) > EP_DEMANGLE_OUTPUT_MAX)
                        out[EP_DEMANGLE_OUTPUT_MAX] = 0;
                if (out && !*out) {
                        free(out);
                        out = NULL;
                }
        }
        if (out) {
                *ret = out;
                return 1;
        }

        out = strdup(name);
        if (!out)
                return -ENOMEM;
        *ret = out;
        return 0;
}

int ep_demangle_in_place(char **name) {
        char *d = NULL;
        int r;

        if (!*name)
                return 0;
        r = ep_demangle(*name, &d);
        if (r < 0)
                return r;
        free(*name);
        *name = d;
        return 0;
}
