/* SPDX-License-Identifier: MIT */
/* Kernel frames: a kernel address named from /proc/kallsyms (descriptor from the loader). */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kallsyms.h"
#include "log.h"
#include "resolver-internal.h"

#define KALLSYMS_RETRY_NS (5 * NSEC_PER_SEC) /* after a failed read of kallsyms */

struct ResolverKernel {
        EpKallsyms *kallsyms;
        uint64_t loaded_ns, failed_ns;
};

static ResolverKernel *kernel_state(EpResolver *r) {
        if (!r->kernel)
                r->kernel = calloc(1, sizeof(ResolverKernel));
        return r->kernel;
}

void ep_resolve_kernel_free(EpResolver *r) {
        if (!r->kernel)
                return;
        ep_kallsyms_free(r->kernel->kallsyms);
        free(r->kernel);
        r->kernel = NULL;
}

void ep_resolve_kernel_source_changed(EpResolver *r) {
        if (r->kernel)
                r->kernel->failed_ns = 0;
}

static int load_kallsyms(EpResolver *r, ResolverKernel *kr) {
        _cleanup_close_ int fd = -EBADF;
        EpKallsyms *k = NULL;
        uint64_t now = ep_resolver_now_ns();
        int e;

        fd = r->source.open_kallsyms(r->source.userdata);
        if (fd < 0) {
                if (fd != -ENXIO)
                        kr->failed_ns = now;
                return fd;
        }

        e = ep_kallsyms_parse_fd(fd, &k);
        if (e < 0) {
                kr->failed_ns = now;
                if (e == -EPERM)
                        ep_sym_stats_error(r->stats, "kallsyms addresses are hidden (kptr_restrict)");
                else
                        ep_sym_stats_error(r->stats, "kallsyms: %s", strerror(-e));
                return log_warning_errno(e, "Failed to read kallsyms: %m");
        }

        bool reload = kr->kallsyms != NULL;
        ep_kallsyms_free(kr->kallsyms);
        kr->kallsyms = k;
        kr->loaded_ns = now;
        kr->failed_ns = 0;
        if (reload)
                ep_resolver_drop_results(r, EP_FRAME_KERNEL); /* modules may have moved */
        log_debug("Read %zu kernel text symbols, %zu modules.", ep_kallsyms_count(k), ep_kallsyms_modules(k));
        return 0;
}

int ep_resolve_kernel(EpResolver *r, const EpSymRequest *req, EpSymResult *out, bool *ret_cacheable) {
        const char *name, *module;
        uint64_t now = ep_resolver_now_ns();
        ResolverKernel *kr;
        int k;

        *ret_cacheable = false;
        kr = kernel_state(r);
        if (!kr)
                return -ENOMEM;

        if (!kr->kallsyms && (kr->failed_ns == 0 || now - kr->failed_ns >= KALLSYMS_RETRY_NS))
                (void) load_kallsyms(r, kr);
        if (!kr->kallsyms)
                return ep_resolver_result_set(out, EP_SYM_NO_FILE, req->addr, "", NULL);

        uint64_t lookup = (req->flags & EP_FRAME_FLAG_RETURN_ADDRESS) && req->addr > 0 ? req->addr - 1 : req->addr;

        k = ep_kallsyms_lookup(kr->kallsyms, lookup, &name, &module, NULL);
        if (k < 0 && now - kr->loaded_ns >= r->config.kallsyms_refresh_ns &&
            (kr->failed_ns == 0 || now - kr->failed_ns >= KALLSYMS_RETRY_NS) &&
            load_kallsyms(r, kr) >= 0)
                k = ep_kallsyms_lookup(kr->kallsyms, lookup, &name, &module, NULL);
        if (k < 0)
                /* Not cached: a module loaded later may cover it after the next refresh. */
                return ep_resolver_result_set(out, EP_SYM_NOT_FOUND, req->addr, "", NULL);

        char *copy = strdup(name);
        if (!copy)
                return -ENOMEM;
        *ret_cacheable = true;
        return ep_resolver_result_set(out, EP_SYM_OK, req->addr, module, copy);
}
