/* SPDX-License-Identifier: MIT */
/* Kernel frames: a kernel address named from /proc/kallsyms and /proc/modules (descriptors from
 * the loader) and build IDs from sysfs (world-readable, read directly).
 *
 * What a frame gets:
 *   - a vmlinux symbol: module "", cached;
 *   - a module symbol: the module's name, cached until the tables change;
 *   - an address in a module's range that none of its symbols covers: "[NAME]+0xOFFSET" (from
 *     the module's base, the start of its text, which is what an offline tool with the module's
 *     debug file and the build ID of KernelModules needs), module NAME, cached like a symbol;
 *   - a BPF program ([bpf]) or other kernel-generated code ([__builtin__ftrace], ...): the
 *     kallsyms name and tag, never cached here, because a program can be unloaded and its
 *     address reused by another one within seconds; the lookup is a binary search, and a table
 *     older than dynamic_max_age_ns is re-read first;
 *   - BPF code the kernel lists nowhere (classic BPF filters: seccomp, SO_ATTACH_FILTER; they
 *     have no program ID and are not in kallsyms): kallsyms has no sizes, so on its own it would
 *     name such code after the program placed before it. The loader's list of programs
 *     (ListBpfPrograms) gives each JIT-compiled function's exact extent: an address past the end
 *     of the program kallsyms found, and inside no other listed program, is UNLISTED_NAME,
 *     module "bpf", not cached. A listed program kallsyms lacks gets the loader's name for it.
 *
 * Reloads: vmlinux's text never changes, so a miss there re-reads only every
 * kallsyms_refresh_ns (60 s). A miss anywhere else (module area, BPF programs) re-reads after
 * dynamic_refresh_ns (2 s): the code it hit may have appeared since the last read. A module hit
 * re-checks /proc/modules (a few lines) every modules_check_ns and re-reads everything if the
 * set or layout changed. Every read that changes the tables drops the cached kernel results.
 * The program extents are read with kallsyms, so the same policy refreshes them; an address
 * in no listed program counts as a miss outside vmlinux. */

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "kallsyms.h"
#include "kmodules.h"
#include "log.h"
#include "resolve-kernel.h"
#include "resolver-internal.h"

/* What a sample in BPF code no program list has is called: almost always a classic BPF filter
 * (the caller frame tells which: __seccomp_filter, sk_filter_trim_cap, ...). */
#define UNLISTED_NAME "[bpf] unlisted program"
/* x86-64: the end of the module area (MODULES_END, arch/x86/include/asm/pgtable_64_types.h);
 * the fixmap and vsyscall page follow. */
#define EP_KERNEL_MODULES_END UINT64_C(0xffffffffff000000)

struct ResolverKernel {
        EpKernelPolicy policy;
        EpKallsyms *kallsyms;
        EpKmodules *modules;
        uint64_t text_start, text_end; /* vmlinux's text */
        uint8_t build_id[EP_KMODULE_BUILD_ID_MAX];
        size_t build_id_size;
        bool no_modules; /* the kernel has none (CONFIG_MODULES=n): do not ask again */
        EpBpfProgram *progs; /* BPF functions, sorted by start; NULL when none could be listed */
        size_t n_progs;
        bool have_progs; /* the list is as fresh as kallsyms (else BPF names are kallsyms' only) */
        uint64_t loaded_ns, failed_ns, modules_checked_ns;
        int load_error; /* why the last read of kallsyms failed (0: it did not) */
        uint64_t reloads;
};

typedef enum HitKind {
        HIT_NONE,
        HIT_VMLINUX,
        HIT_MODULE,       /* a symbol of a loadable module */
        HIT_MODULE_RANGE, /* inside a module, no symbol of it covers the address */
        HIT_DYNAMIC,      /* BPF programs and other code the kernel generates */
        HIT_BPF_LISTED,   /* in a listed BPF function kallsyms does not name */
        HIT_BPF_UNLISTED, /* past the end of the BPF program kallsyms found, in no listed one */
} HitKind;

typedef struct Hit {
        HitKind kind;
        const char *name, *module;
        uint64_t sym; /* the kallsyms symbol's address */
        const EpKmodule *range;
} Hit;

static ResolverKernel *kernel_state(EpResolver *r) {
        if (!r->kernel) {
                r->kernel = calloc(1, sizeof(ResolverKernel));
                if (r->kernel)
                        r->kernel->policy = EP_KERNEL_POLICY_DEFAULT;
        }
        return r->kernel;
}

void ep_resolve_kernel_free(EpResolver *r) {
        if (!r->kernel)
                return;
        ep_kallsyms_free(r->kernel->kallsyms);
        ep_kmodules_free(r->kernel->modules);
        free(r->kernel->progs);
        free(r->kernel);
        r->kernel = NULL;
}

void ep_resolve_kernel_source_changed(EpResolver *r) {
        if (r->kernel)
                r->kernel->failed_ns = 0;
}

int ep_resolver_kernel_set_policy(EpResolver *r, const EpKernelPolicy *policy) {
        ResolverKernel *kr = kernel_state(r);
        if (!kr)
                return -ENOMEM;
        kr->policy = *policy;
        return 0;
}

static bool retry_allowed(const ResolverKernel *kr, uint64_t now) {
        return kr->failed_ns == 0 || now - kr->failed_ns >= kr->policy.retry_ns;
}

/* Code the kernel generates at run time, named in kallsyms under a pseudo-module. */
static bool dynamic_module(const char *module) {
        return streq(module, "bpf") || startswith(module, "__builtin__");
}

/* The module table, or -ENOENT when the kernel has no modules. A table without addresses
 * (-EPERM) or a loader that cannot be asked (-ENXIO) is an error the caller works around. */
static int read_modules(EpResolver *r, EpKmodules **ret) {
        _cleanup_close_ int fd = -EBADF;
        int e;

        fd = r->source.open_kernel_modules ? r->source.open_kernel_modules(r->source.userdata) : -ENXIO;
        if (fd < 0)
                return fd;
        e = ep_kmodules_parse_fd(fd, ret);
        if (e < 0)
                return log_once_errno(LOG_WARNING, e, "Failed to read the kernel module table: %m");
        return 0;
}

/* Modules as of now: a fresh table, or NULL to keep the previous one because the table
 * cannot be read right now (module frames stay named while the loader is away), or an empty
 * one (none loaded, none possible, never read). */
static int current_modules(EpResolver *r, ResolverKernel *kr, EpKmodules **ret) {
        int e;

        *ret = NULL;
        if (!kr->no_modules) {
                e = read_modules(r, ret);
                if (e >= 0) {
                        ep_kmodules_read_build_ids(*ret, kr->policy.sysfs_root);
                        return 0;
                }
                if (e == -ENOENT) {
                        log_debug("This kernel has no loadable modules.");
                        kr->no_modules = true;
                } else {
                        if (e == -EPERM)
                                ep_sym_stats_error(r->stats, "module addresses are hidden (kptr_restrict)");
                        if (kr->modules)
                                return 0;
                }
        }
        return ep_kmodules_new_empty(ret);
}

static int program_compare(const void *a, const void *b) {
        const EpBpfProgram *x = a, *y = b;
        return x->start < y->start ? -1 : x->start > y->start;
}

/* The BPF function extents, read right after kallsyms so both describe about the same moment.
 * Without them (a loader without ListBpfPrograms, an error) BPF code is named from kallsyms
 * alone, as before: stale extents could cut a program that replaced another one short. */
static void load_programs(EpResolver *r, ResolverKernel *kr) {
        EpBpfProgram *progs = NULL;
        size_t n = 0;
        int e;

        free(kr->progs);
        kr->progs = NULL;
        kr->n_progs = 0;
        kr->have_progs = false;

        e = r->source.list_bpf_programs ? r->source.list_bpf_programs(r->source.userdata, &progs, &n) : -ENXIO;
        if (e < 0) {
                if (e != -ENXIO)
                        log_once_errno(LOG_WARNING, e, "Failed to list the loaded BPF programs, naming BPF "
                                       "code from kallsyms alone: %m");
                return;
        }
        if (n > 1)
                qsort(progs, n, sizeof *progs, program_compare);
        kr->progs = progs;
        kr->n_progs = n;
        kr->have_progs = true;
}

static int load_tables(EpResolver *r, ResolverKernel *kr) {
        _cleanup_(ep_kallsyms_freep) EpKallsyms *k = NULL;
        _cleanup_(ep_kmodules_freep) EpKmodules *m = NULL;
        _cleanup_close_ int fd = -EBADF;
        uint64_t now = ep_resolver_now_ns();
        int e;

        fd = r->source.open_kallsyms ? r->source.open_kallsyms(r->source.userdata) : -ENXIO;
        if (fd < 0) {
                if (fd != -ENXIO)
                        kr->failed_ns = now;
                kr->load_error = fd;
                return fd;
        }

        e = ep_kallsyms_parse_fd(fd, &k);
        if (e < 0) {
                kr->failed_ns = now;
                kr->load_error = e;
                if (e == -EPERM)
                        ep_sym_stats_error(r->stats, "kallsyms addresses are hidden (kptr_restrict)");
                else
                        ep_sym_stats_error(r->stats, "kallsyms: %s", strerror(-e));
                return log_warning_errno(e, "Failed to read kallsyms: %m");
        }

        e = current_modules(r, kr, &m);
        if (e < 0)
                return e;

        if (kr->build_id_size == 0) {
                /* vmlinux does not change under us: read once. */
                e = ep_kernel_read_build_id(kr->policy.sysfs_root, kr->build_id);
                if (e > 0)
                        kr->build_id_size = (size_t) e;
                else
                        log_once_errno(LOG_DEBUG, e, "No build ID for vmlinux: %m");
        }

        bool first = kr->kallsyms == NULL;
        bool changed = !ep_kallsyms_same(kr->kallsyms, k) || (m && !ep_kmodules_same_layout(kr->modules, m));

        ep_kallsyms_free(kr->kallsyms);
        kr->kallsyms = TAKE_PTR(k);
        if (m) {
                ep_kmodules_free(kr->modules);
                kr->modules = TAKE_PTR(m);
        }
        if (ep_kallsyms_text_range(kr->kallsyms, &kr->text_start, &kr->text_end) < 0)
                kr->text_start = kr->text_end = 0;
        load_programs(r, kr);
        kr->loaded_ns = kr->modules_checked_ns = now;
        kr->failed_ns = 0;
        kr->load_error = 0;
        if (!first) {
                kr->reloads++;
                if (changed)
                        ep_resolver_drop_results(r, EP_FRAME_KERNEL); /* code came, went or moved */
        }
        log_debug("Read %zu kernel text symbols, %zu modules in kallsyms, %zu in the module table, %zu BPF "
                  "functions%s.",
                  ep_kallsyms_count(kr->kallsyms), ep_kallsyms_modules(kr->kallsyms),
                  ep_kmodules_count(kr->modules), kr->n_progs, first ? "" : changed ? " (changed)" : " (unchanged)");
        return 0;
}

/* Reads everything again, if the last read is at least min_age old and no read failed just
 * now. Returns true when the tables were read. */
static bool reload_if_older(EpResolver *r, ResolverKernel *kr, uint64_t now, uint64_t min_age) {
        /* now may predate a read made earlier in the same request (the first one): fresh. */
        if (now < kr->loaded_ns || now - kr->loaded_ns < min_age || !retry_allowed(kr, now))
                return false;
        return load_tables(r, kr) >= 0;
}

/* The listed BPF function whose extent holds addr, or NULL. */
static const EpBpfProgram *find_program(const ResolverKernel *kr, uint64_t addr) {
        size_t lo = 0, hi = kr->n_progs;

        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (kr->progs[mid].start <= addr)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        if (lo == 0)
                return NULL;
        const EpBpfProgram *p = &kr->progs[lo - 1];
        return addr - p->start < p->length ? p : NULL;
}

/* Is there a listed function starting exactly at addr (so we know where it ends)? */
static bool program_starts_at(const ResolverKernel *kr, uint64_t addr) {
        const EpBpfProgram *p = find_program(kr, addr);
        return p && p->start == addr;
}

/* Corrects a kallsyms (or module range) answer with the program extents, which are exact. */
static void apply_bpf_extents(const ResolverKernel *kr, uint64_t addr, Hit *hit) {
        if (!kr->have_progs)
                return;

        const EpBpfProgram *p = find_program(kr, addr);
        if (p) {
                /* A kallsyms symbol inside this function (its own, or something finer) names it
                 * best; one before it belongs to other code (BPF programs share the module area
                 * with modules), and so does a module range, which is approximate. */
                bool symbol = hit->kind == HIT_DYNAMIC || hit->kind == HIT_MODULE || hit->kind == HIT_VMLINUX;
                if (symbol && hit->sym >= p->start)
                        return;
                *hit = (Hit) { .kind = HIT_BPF_LISTED, .name = p->name, .module = "bpf", .sym = p->start };
                return;
        }
        /* kallsyms found a program whose end we know, and addr is past it. A symbol we have no
         * extent for (a trampoline, the XDP dispatcher, a program loaded since the listing) keeps
         * its name: there is nothing to bound it with. */
        if (hit->kind == HIT_DYNAMIC && program_starts_at(kr, hit->sym))
                *hit = (Hit) { .kind = HIT_BPF_UNLISTED, .name = UNLISTED_NAME, .module = "bpf", .sym = hit->sym };
        /* Nothing at all: code in the module area (where the kernel puts modules and BPF code)
         * with no kallsyms symbol close enough below it and in no module's range. The kernel
         * lists all code there in kallsyms but classic BPF filters, which it JIT-compiles there
         * too: a filter placed below every listed program, or far past the last one. */
        if (hit->kind == HIT_NONE && kr->text_end != 0 && addr >= kr->text_end && addr < EP_KERNEL_MODULES_END)
                *hit = (Hit) { .kind = HIT_BPF_UNLISTED, .name = UNLISTED_NAME, .module = "bpf", .sym = addr };
}

static void lookup(const ResolverKernel *kr, uint64_t addr, Hit *ret) {
        const char *name = NULL, *module = NULL;
        uint64_t sym = 0;
        int k;

        *ret = (Hit) { .kind = HIT_NONE };
        k = ep_kallsyms_lookup(kr->kallsyms, addr, &name, &module, &sym);
        const EpKmodule *range = ep_kmodules_find(kr->modules, addr);

        /* The module's range wins over a symbol that starts before the module: that symbol's
         * code ended somewhere before (kallsyms has no sizes). A symbol inside the range that
         * belongs to something else (ranges are approximate) is believed. */
        if (range && (k < 0 || (sym < range->start && !streq(module, range->name)))) {
                *ret = (Hit) { .kind = HIT_MODULE_RANGE, .module = range->name, .range = range };
                return;
        }
        if (k >= 0) {
                ret->name = name;
                ret->module = module;
                ret->sym = sym;
                ret->kind = module[0] == 0 ? HIT_VMLINUX : dynamic_module(module) ? HIT_DYNAMIC : HIT_MODULE;
        }
        apply_bpf_extents(kr, addr, ret);
}

/* A module hit: is the module table still the one we read? A changed layout re-reads all. */
static bool modules_changed(EpResolver *r, ResolverKernel *kr, uint64_t now) {
        _cleanup_(ep_kmodules_freep) EpKmodules *m = NULL;

        if (kr->no_modules || now < kr->modules_checked_ns ||
            now - kr->modules_checked_ns < kr->policy.modules_check_ns)
                return false;
        kr->modules_checked_ns = now;
        if (read_modules(r, &m) < 0)
                return false;
        return !ep_kmodules_same_layout(kr->modules, m);
}

static bool in_vmlinux_text(const ResolverKernel *kr, uint64_t addr) {
        return addr >= kr->text_start && addr < kr->text_end;
}

int ep_resolve_kernel(EpResolver *r, const EpSymRequest *req, EpSymResult *out, bool *ret_cacheable) {
        uint64_t now = ep_resolver_now_ns();
        ResolverKernel *kr;
        Hit hit;

        *ret_cacheable = false;
        kr = kernel_state(r);
        if (!kr)
                return -ENOMEM;

        if (!kr->kallsyms && retry_allowed(kr, now))
                (void) load_tables(r, kr);
        if (!kr->kallsyms)
                /* No table: a loader that is away or slow is asked again later (RETRY). */
                return ep_resolver_result_set(out, ep_resolver_missing_status(kr->load_error), req->addr, "",
                                              NULL);

        uint64_t addr = (req->flags & EP_FRAME_FLAG_RETURN_ADDRESS) && req->addr > 0 ? req->addr - 1 : req->addr;

        lookup(kr, addr, &hit);
        switch (hit.kind) {
        case HIT_NONE:
        case HIT_BPF_UNLISTED:
                /* Not in the tables: newer tables may have it. Outside vmlinux's text that is
                 * likely (a module or program loaded since), inside it is not. */
                if (reload_if_older(r, kr, now,
                                    in_vmlinux_text(kr, addr) ? r->config.kallsyms_refresh_ns
                                                              : kr->policy.dynamic_refresh_ns))
                        lookup(kr, addr, &hit);
                break;
        case HIT_DYNAMIC:
        case HIT_BPF_LISTED:
                /* The program we found may be gone and another one in its place. */
                if (reload_if_older(r, kr, now, kr->policy.dynamic_max_age_ns))
                        lookup(kr, addr, &hit);
                break;
        case HIT_MODULE:
        case HIT_MODULE_RANGE:
                if (modules_changed(r, kr, now) && reload_if_older(r, kr, now, 0))
                        lookup(kr, addr, &hit);
                break;
        case HIT_VMLINUX:
                break;
        }

        switch (hit.kind) {
        case HIT_NONE:
                /* Not cached: the next reload may name it. */
                return ep_resolver_result_set(out, EP_SYM_NOT_FOUND, req->addr, "", NULL);
        case HIT_MODULE_RANGE: {
                char *name = NULL;
                if (asprintf(&name, "[%s]+0x%" PRIx64, hit.range->name, addr - hit.range->start) < 0)
                        return -ENOMEM;
                *ret_cacheable = true;
                return ep_resolver_result_set(out, EP_SYM_OK, req->addr, hit.range->name, name);
        }
        default: {
                char *copy = NULL;
                if (hit.kind == HIT_BPF_LISTED && hit.name[0] == 0) {
                        const EpBpfProgram *p = find_program(kr, addr);
                        if (asprintf(&copy, "bpf_prog_%" PRIu32, p ? p->id : 0) < 0)
                                copy = NULL;
                } else
                        copy = strdup(hit.name);
                if (!copy)
                        return -ENOMEM;
                /* Dropped with the tables when they change; BPF programs not cached at all. */
                *ret_cacheable = hit.kind == HIT_VMLINUX || hit.kind == HIT_MODULE;
                return ep_resolver_result_set(out, EP_SYM_OK, req->addr, hit.module, copy);
        }
        }
}

/* ---- what the D-Bus properties show ---- */

void ep_resolver_kernel_load(EpResolver *r) {
        ResolverKernel *kr = kernel_state(r);

        if (kr && !kr->kallsyms && retry_allowed(kr, ep_resolver_now_ns()))
                (void) load_tables(r, kr);
}

uint32_t ep_resolver_kernel_symbols(EpResolver *r) {
        return r->kernel && r->kernel->kallsyms ? (uint32_t) ep_kallsyms_count(r->kernel->kallsyms) : 0;
}

uint64_t ep_resolver_kernel_reloads(EpResolver *r) {
        return r->kernel ? r->kernel->reloads : 0;
}

const EpKmodules *ep_resolver_kernel_modules(EpResolver *r) {
        return r->kernel ? r->kernel->modules : NULL;
}

size_t ep_resolver_kernel_build_id(EpResolver *r, const uint8_t **ret) {
        *ret = r->kernel ? r->kernel->build_id : NULL;
        return r->kernel ? r->kernel->build_id_size : 0;
}
