/* SPDX-License-Identifier: MIT */

/* Who names each frame kind: the one place a new runtime's resolve-<rt>.c is registered
 * (docs/ARCHITECTURE.md, "How to add a runtime"). A kind without a row (unwind stop
 * markers) has nothing to name. */

#include "resolver-internal.h"

const EpResolverKind ep_resolvers[_EP_FRAME_KIND_MAX] = {
        [EP_FRAME_NATIVE] = { ep_resolve_native, NULL, ep_resolve_go_free },
        [EP_FRAME_KERNEL] = { ep_resolve_kernel, ep_resolve_kernel_source_changed, ep_resolve_kernel_free },
        [EP_FRAME_UNMAPPED] = { ep_resolve_jit, ep_resolve_jit_source_changed, ep_resolve_jit_free },
        [EP_FRAME_CPYTHON] = { ep_resolve_python, ep_resolve_python_source_changed, ep_resolve_python_free },
};
