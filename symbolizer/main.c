/* SPDX-License-Identifier: MIT */
/* ebpf-profiler-symbolizer: names native and kernel frames for the collector. It holds no
 * privilege; the files it reads are descriptors the loader hands it. */

#include <getopt.h>
#include <inttypes.h>
#include <pwd.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bus.h"
#include "config.h"
#include "daemon.h"
#include "debug-file.h"
#include "loader-client.h"
#include "log.h"
#include "native-worker.h"
#include "privileges.h"
#include "resolve-kernel.h"
#include "resolve-jit.h"
#include "resolve-cpython.h"
#include "resolver.h"
#include "session.h"
#include "stats.h"
#include "symbol-cache.h"
#include "unwind-service.h"

#define IDENT "ebpf-profiler-symbolizer"
#define PROPERTIES_PERIOD_USEC (2 * USEC_PER_SEC)
/* How often the files answered without their debug file look for it again: a debug package
 * installed while the profiler runs names their frames within this long. */
#define DEBUG_RECHECK_USEC (10 * USEC_PER_SEC)

static const char *arg_collector_user = EP_COLLECTOR_USER;
static const char *arg_cache_dir = EP_CACHE_DIR;
static uint64_t arg_cache_max_size = EP_UNWIND_CACHE_DEFAULT_MAX;
static uint64_t arg_symbol_cache_max_size = EP_SYMBOL_CACHE_DEFAULT_MAX;
static bool arg_native_worker = false;

typedef struct Manager {
        EpDaemon daemon;
        EpSymStats stats;
        EpResolver *resolver;
        EpNativeWorker *native_worker; /* the resolver's */
        EpLoaderClient *loader;
        EpSession *session;
        EpUnwindService *unwind;
        EpSymbolCache *symbol_cache; /* NULL: answers are not persisted */
        sd_event_source *props_timer;
        sd_event_source *debug_timer;
        uid_t collector_uid; /* besides root, who may open a session; UID_INVALID: none */

        /* What PropertiesChanged last announced. */
        EpSymStats published;
        EpUnwindStats published_unwind;
        uint32_t published_cache_entries, published_files_open;
        uint32_t published_kernel_symbols;
        uint64_t published_kernel_reloads;
        uint64_t published_persisted_entries, published_persisted_invalidated;
        EpJitStats published_jit;
        EpPyStats published_python;
        uint64_t published_go_malformed;
} Manager;

static void manager_done(Manager *m) {
        m->unwind = ep_unwind_service_free(m->unwind);
        m->props_timer = sd_event_source_disable_unref(m->props_timer);
        m->debug_timer = sd_event_source_disable_unref(m->debug_timer);
        m->session = ep_session_free(m->session);
        m->loader = ep_loader_client_free(m->loader);
        m->resolver = ep_resolver_free(m->resolver);
        m->native_worker = ep_native_worker_free(m->native_worker);
        m->symbol_cache = ep_symbol_cache_free(m->symbol_cache); /* after the resolver: it writes the queue */
        ep_daemon_done(&m->daemon);
}

/* ---- D-Bus ---- */

static int method_open_session(sd_bus_message *msg, void *userdata, sd_bus_error *error) {
        Manager *m = userdata;
        EpSession *s = NULL;
        int r;

        /* The bus policy already restricts this; the rings are ours to give, so check too. */
        r = ep_bus_check_caller_uid(msg, error, m->collector_uid, "open a session");
        if (r < 0)
                return r;

        r = ep_session_new(m->daemon.event, m->resolver, &m->stats, &s);
        if (r < 0) {
                log_error_errno(r, "Failed to create a session: %m");
                return sd_bus_error_set_errnof(error, r, "Cannot create the session rings: %m");
        }

        r = sd_bus_reply_method_return(msg, "hhhh", ep_session_request_memfd(s), ep_session_request_eventfd(s),
                                       ep_session_response_memfd(s), ep_session_response_eventfd(s));
        if (r < 0) {
                ep_session_free(s);
                return r;
        }

        if (m->session)
                log_info("A new session replaces the previous one.");
        ep_session_free(m->session);
        m->session = s;
        log_debug("Session opened.");
        return 1;
}

static int prop_version(sd_bus *bus, const char *path, const char *interface, const char *property,
                        sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        return sd_bus_message_append(reply, "s", EP_VERSION);
}

static int prop_last_error(sd_bus *bus, const char *path, const char *interface, const char *property,
                           sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        Manager *m = userdata;
        return sd_bus_message_append(reply, "s", m->stats.last_error);
}

static int prop_cache_entries(sd_bus *bus, const char *path, const char *interface, const char *property,
                              sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        Manager *m = userdata;
        return sd_bus_message_append(reply, "u", m->resolver ? ep_resolver_cache_entries(m->resolver) : 0);
}

static int prop_files_open(sd_bus *bus, const char *path, const char *interface, const char *property,
                           sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        Manager *m = userdata;
        return sd_bus_message_append(reply, "u", m->resolver ? ep_resolver_files_open(m->resolver) : 0);
}

static EpSymbolCacheInfo persisted_info(Manager *m) {
        EpSymbolCacheInfo info = {};

        if (m->symbol_cache)
                ep_symbol_cache_info(m->symbol_cache, &info);
        return info;
}

static int prop_persisted(sd_bus *bus, const char *path, const char *interface, const char *property,
                          sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        EpSymbolCacheInfo info = persisted_info(userdata);

        return sd_bus_message_append(reply, "t",
                                     streq(property, "PersistedEntries") ? info.entries : info.invalidated_files);
}

/* Kernel symbols (resolve-kernel.c). Read on first use, so they mean something before any
 * kernel frame was asked for. */
static int prop_kernel(sd_bus *bus, const char *path, const char *interface, const char *property,
                       sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        static const uint8_t none[1];
        Manager *m = userdata;
        const uint8_t *id;
        size_t n;
        int r;

        ep_resolver_kernel_load(m->resolver);
        if (streq(property, "KernelSymbols"))
                return sd_bus_message_append(reply, "u", ep_resolver_kernel_symbols(m->resolver));
        if (streq(property, "KernelReloads"))
                return sd_bus_message_append(reply, "t", ep_resolver_kernel_reloads(m->resolver));
        if (streq(property, "KernelBuildId")) {
                n = ep_resolver_kernel_build_id(m->resolver, &id);
                return sd_bus_message_append_array(reply, 'y', n > 0 ? id : none, n);
        }

        /* KernelModules: (name, size, GNU build ID). Every local user may read it: no load
         * address, which would undo the kernel's address randomisation for them. */
        const EpKmodules *mods = ep_resolver_kernel_modules(m->resolver);
        r = sd_bus_message_open_container(reply, 'a', "(stay)");
        for (size_t i = 0; r >= 0 && i < ep_kmodules_count(mods); i++) {
                const EpKmodule *k = ep_kmodules_get(mods, i);
                r = sd_bus_message_open_container(reply, 'r', "stay");
                if (r >= 0)
                        r = sd_bus_message_append(reply, "st", k->name, k->size);
                if (r >= 0)
                        r = sd_bus_message_append_array(reply, 'y', k->build_id_size > 0 ? k->build_id : none,
                                                        k->build_id_size);
                if (r >= 0)
                        r = sd_bus_message_close_container(reply);
        }
        return r < 0 ? r : sd_bus_message_close_container(reply);
}

/* Perf maps (resolve-jit.c) and Go tables (resolve-go.c). */
static int prop_jit(sd_bus *bus, const char *path, const char *interface, const char *property,
                    sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        Manager *m = userdata;
        EpJitStats j;
        int r;

        if (streq(property, "GoTablesMalformed"))
                return sd_bus_message_append(reply, "t", ep_resolver_go_malformed(m->resolver));
        ep_resolver_jit_stats(m->resolver, &j);
        if (streq(property, "PerfMaps"))
                return sd_bus_message_append(reply, "u", j.processes);

        /* PerfMapCounters */
        r = sd_bus_message_open_container(reply, 'a', "{st}");
        if (r >= 0)
                r = sd_bus_message_append(reply, "{st}{st}{st}{st}{st}{st}{st}{st}{st}", "opened", j.maps_opened,
                                          "missing", j.maps_missing, "refused", j.maps_refused, "reads",
                                          j.reads, "lines-malformed", j.lines_malformed, "lines-dropped",
                                          j.lines_dropped, "evictions", j.evictions, "entries", j.entries,
                                          "bytes", j.memory);
        return r < 0 ? r : sd_bus_message_close_container(reply);
}

/* CPython frames (resolve-cpython.c). */
static int prop_python(sd_bus *bus, const char *path, const char *interface, const char *property,
                       sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        Manager *m = userdata;
        EpPyStats p;
        int r;

        ep_resolver_python_stats(m->resolver, &p);
        r = sd_bus_message_open_container(reply, 'a', "{st}");
        if (r >= 0)
                r = sd_bus_message_append(reply, "{st}{st}{st}{st}{st}{st}{st}{st}{st}{st}{st}{st}{st}{st}",
                                          "processes", (uint64_t) p.processes, "opened", p.processes_opened,
                                          "not-python", p.not_python, "unsupported", p.unsupported,
                                          "images-gone", p.images_gone,
                                          "lookups", p.lookups, "code-hits", p.code_hits,
                                          "code-decoded", p.code_decoded, "invalid-code", p.invalid_code,
                                          "read-errors", p.read_errors, "bad-line-tables", p.bad_line_tables,
                                          "evictions", p.evictions, "code-objects", (uint64_t) p.code_objects,
                                          "bytes", p.code_bytes);
        return r < 0 ? r : sd_bus_message_close_container(reply);
}

static int method_get_unwind_table(sd_bus_message *msg, void *userdata, sd_bus_error *error) {
        Manager *m = userdata;
        return ep_unwind_service_handle(m->unwind, msg, error);
}

static int method_detect_runtime(sd_bus_message *msg, void *userdata, sd_bus_error *error) {
        Manager *m = userdata;
        return ep_unwind_service_handle_detect(m->unwind, msg, error);
}

static int prop_unwind(sd_bus *bus, const char *path, const char *interface, const char *property,
                       sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        Manager *m = userdata;
        return sd_bus_message_append(reply, "t", ep_unwind_property(m->unwind, property));
}

#define UNWIND_PROPERTY(name) \
        SD_BUS_PROPERTY(name, "t", prop_unwind, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE)

#define STAT_PROPERTY(name, field)                                                         \
        SD_BUS_PROPERTY(name, "t", NULL, offsetof(Manager, stats.field), \
                        SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE)

static const sd_bus_vtable symbolizer_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_METHOD_WITH_ARGS("OpenSession", SD_BUS_NO_ARGS,
                                SD_BUS_RESULT("h", req_ring, "h", req_eventfd, "h", resp_ring, "h", resp_eventfd),
                                method_open_session, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("GetUnwindTable", SD_BUS_ARGS("h", file, "ay", file_id), SD_BUS_RESULT("h", table),
                                method_get_unwind_table, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("DetectRuntime", SD_BUS_ARGS("h", file, "ay", file_id),
                                SD_BUS_RESULT("s", runtime, "ay", facts), method_detect_runtime,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_PROPERTY("Version", "s", prop_version, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        STAT_PROPERTY("Requests", requests),
        STAT_PROPERTY("Resolved", resolved),
        STAT_PROPERTY("NotFound", not_found),
        STAT_PROPERTY("FileErrors", file_errors),
        STAT_PROPERTY("RetryAnswers", retry_answers),
        SD_BUS_PROPERTY("CacheEntries", "u", prop_cache_entries, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        STAT_PROPERTY("CacheHits", cache_hits),
        STAT_PROPERTY("PersistedHits", persisted_hits),
        SD_BUS_PROPERTY("PersistedEntries", "t", prop_persisted, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("PersistedInvalidated", "t", prop_persisted, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("FilesOpen", "u", prop_files_open, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        STAT_PROPERTY("BadRequests", bad_requests),
        STAT_PROPERTY("ResponseDrops", response_drops),
        STAT_PROPERTY("DebugFilesAppeared", debug_files_appeared),
        UNWIND_PROPERTY("UnwindTables"),
        UNWIND_PROPERTY("UnwindCacheHits"),
        UNWIND_PROPERTY("UnwindCacheMisses"),
        UNWIND_PROPERTY("UnwindExtractErrors"),
        UNWIND_PROPERTY("UnwindExtractNsec"),
        UNWIND_PROPERTY("UnwindCacheBytes"),
        UNWIND_PROPERTY("UnwindQueue"),
        SD_BUS_PROPERTY("KernelSymbols", "u", prop_kernel, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("KernelModules", "a(stay)", prop_kernel, 0, SD_BUS_VTABLE_PROPERTY_EMITS_INVALIDATION),
        SD_BUS_PROPERTY("KernelReloads", "t", prop_kernel, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("KernelBuildId", "ay", prop_kernel, 0, SD_BUS_VTABLE_PROPERTY_EMITS_INVALIDATION),
        SD_BUS_PROPERTY("PerfMaps", "u", prop_jit, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("PerfMapCounters", "a{st}", prop_jit, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("GoTablesMalformed", "t", prop_jit, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("PythonCounters", "a{st}", prop_python, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("LastError", "s", prop_last_error, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_VTABLE_END,
};

/* The kernel tables were read (again): announce them apart from the counters. */
static void kernel_properties_changed(Manager *m) {
        uint32_t symbols = ep_resolver_kernel_symbols(m->resolver);
        uint64_t reloads = ep_resolver_kernel_reloads(m->resolver);

        if (symbols == m->published_kernel_symbols && reloads == m->published_kernel_reloads)
                return;
        (void) sd_bus_emit_properties_changed(m->daemon.bus, EP_PATH_SYMBOLIZER, EP_IFACE_SYMBOLIZER,
                                              "KernelSymbols", "KernelModules", "KernelReloads",
                                              "KernelBuildId", NULL);
        m->published_kernel_symbols = symbols;
        m->published_kernel_reloads = reloads;
}

static int on_properties_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        Manager *m = userdata;
        const EpSymStats *now = &m->stats, *was = &m->published;
        uint32_t entries = ep_resolver_cache_entries(m->resolver), files = ep_resolver_files_open(m->resolver);
        EpSymbolCacheInfo persisted = persisted_info(m);
        const EpUnwindStats *unwind = ep_unwind_service_stats(m->unwind);
        const char *names[21 + EP_UNWIND_PROPERTIES];
        uint64_t go_malformed = ep_resolver_go_malformed(m->resolver);
        EpJitStats jit;
        EpPyStats python;
        size_t n = 0;

#define CHANGED(name, field)                      \
        if (now->field != was->field)             \
                names[n++] = name
        CHANGED("Requests", requests);
        CHANGED("Resolved", resolved);
        CHANGED("NotFound", not_found);
        CHANGED("FileErrors", file_errors);
        CHANGED("RetryAnswers", retry_answers);
        CHANGED("CacheHits", cache_hits);
        CHANGED("PersistedHits", persisted_hits);
        CHANGED("BadRequests", bad_requests);
        CHANGED("ResponseDrops", response_drops);
        CHANGED("DebugFilesAppeared", debug_files_appeared);
#undef CHANGED
        if (entries != m->published_cache_entries)
                names[n++] = "CacheEntries";
        if (persisted.entries != m->published_persisted_entries)
                names[n++] = "PersistedEntries";
        if (persisted.invalidated_files != m->published_persisted_invalidated)
                names[n++] = "PersistedInvalidated";
        if (files != m->published_files_open)
                names[n++] = "FilesOpen";
        if (!streq(now->last_error, was->last_error))
                names[n++] = "LastError";
        ep_resolver_jit_stats(m->resolver, &jit);
        if (jit.processes != m->published_jit.processes)
                names[n++] = "PerfMaps";
        if (memcmp(&jit, &m->published_jit, sizeof jit) != 0)
                names[n++] = "PerfMapCounters";
        if (go_malformed != m->published_go_malformed)
                names[n++] = "GoTablesMalformed";
        ep_resolver_python_stats(m->resolver, &python);
        if (memcmp(&python, &m->published_python, sizeof python) != 0)
                names[n++] = "PythonCounters";
        n += ep_unwind_properties_changed(unwind, &m->published_unwind, names + n);
        names[n] = NULL;

        if (n > 0) {
                (void) sd_bus_emit_properties_changed_strv(m->daemon.bus, EP_PATH_SYMBOLIZER,
                                                           EP_IFACE_SYMBOLIZER, (char **) names);
                m->published = m->stats;
                m->published_unwind = *unwind;
                m->published_cache_entries = entries;
                m->published_files_open = files;
                m->published_persisted_entries = persisted.entries;
                m->published_persisted_invalidated = persisted.invalidated_files;
                m->published_jit = jit;
                m->published_go_malformed = go_malformed;
                m->published_python = python;
                ep_daemon_status(&m->daemon, "%" PRIu64 " requests, %" PRIu64 " resolved, %u files open",
                                 now->requests, now->resolved, files);
        }

        kernel_properties_changed(m);
        (void) sd_event_source_set_time_relative(s, PROPERTIES_PERIOD_USEC);
        return 0;
}

static void on_file_changed(const uint8_t file_id[EP_FILE_ID_SIZE], void *userdata) {
        Manager *m = userdata;

        /* Without a session, nobody holds answers to correct: a new one asks afresh. */
        if (m->session)
                ep_session_file_changed(m->session, file_id);
}

static int on_debug_timer(sd_event_source *s, uint64_t usec, void *userdata) {
        Manager *m = userdata;

        (void) ep_resolver_recheck_debug_files(m->resolver, on_file_changed, m);
        (void) sd_event_source_set_time_relative(s, DEBUG_RECHECK_USEC);
        return 0;
}

/* Not fatal: without it, a restart starts cold. */
static void open_symbol_cache(Manager *m) {
        int r;

        if (!arg_cache_dir || !*arg_cache_dir)
                return;
        r = ep_symbol_cache_open(arg_cache_dir, arg_symbol_cache_max_size, m->daemon.event, &m->symbol_cache);
        if (r == -EACCES || r == -EPERM) {
                const struct passwd *pw = getpwuid(geteuid());
                /* Typically a database another user (root) created there: say how to repair it. */
                log_warning_errno(r, "Cannot open the symbol cache in %s, symbols are not kept across restarts: %m. "
                                  "Its files must belong to the user the symbolizer runs as: "
                                  "chown -R %s %s (or delete the files in it), then restart the symbolizer.",
                                  arg_cache_dir, pw ? pw->pw_name : "<this user>", arg_cache_dir);
                return;
        }
        if (r < 0) {
                log_warning_errno(r, "Cannot open the symbol cache in %s, symbols are not kept across restarts: %m",
                                  arg_cache_dir);
                return;
        }
        log_info("Symbol cache: %s (%" PRIu64 " entries)", ep_symbol_cache_path(m->symbol_cache),
                 persisted_info(m).entries);
        ep_resolver_set_symbol_cache(m->resolver, m->symbol_cache);
}

static void on_loader_changed(bool present, void *userdata) {
        Manager *m = userdata;

        if (present && m->resolver)
                ep_resolver_source_changed(m->resolver);
}

/* ---- the native worker ---- */

/* This program again (native-worker.h), with the debug roots and log level it was given. */
static int native_worker_new(const EpFileSource *source, EpSymStats *stats, EpNativeWorker **ret) {
        const char *const *roots = ep_debug_roots();
        char *argv[4 + EP_DEBUG_ROOTS_MAX] = { (char *) program_invocation_short_name, (char *) "--native-worker" };
        size_t n = 2, first_root;
        int r;

        if (log_get_max_level() >= LOG_DEBUG)
                argv[n++] = (char *) "--log-level=debug";
        first_root = n;
        for (size_t i = 0; roots[i] && i < EP_DEBUG_ROOTS_MAX; i++)
                if (asprintf(&argv[n++], "--debug-dir=%s", roots[i]) < 0) {
                        argv[--n] = NULL;
                        r = -ENOMEM;
                        goto finish;
                }
        r = ep_native_worker_new("/proc/self/exe", argv, source, stats, ret);
finish:
        for (size_t i = first_root; i < n; i++)
                free(argv[i]);
        return r;
}

/* ---- command line ---- */

static void help(void) {
        printf("%s [OPTIONS...]\n\n"
               "Names native and kernel frames for the ebpf-profiler collector.\n"
               "Serves %s on the system bus (or $DBUS_SYSTEM_BUS_ADDRESS).\n\n"
               "  -h --help              Show this help\n"
               "     --version           Show the version\n"
               "     --log-level=LEVEL   debug, info, notice, warning, err (default: info)\n"
               "     --user=NAME         When started as root, switch to this user (the service\n"
               "                         uses %s); all capabilities are dropped either way\n"
               "     --collector-user=NAME\n"
               "                         The collector's user: only it and root may open a\n"
               "                         session (default: %s)\n"
               "     --cache-dir=DIR     Keep extracted unwind tables and symbols in DIR\n"
               "                         (default: %s;\n"
               "                         \"\" for none)\n"
               "     --cache-max-size=SIZE\n"
               "                         Bound of that cache, bytes or with K/M/G (default: 256M)\n"
               "     --symbol-cache-max-size=SIZE\n"
               "                         Bound of the symbols kept in the same directory\n"
               "                         (default: 64M)\n"
               "     --debug-dir=DIR     Look for separate debug files under DIR (by build ID,\n"
               "                         DIR/.build-id/xx/rest.debug, and by .gnu_debuglink);\n"
               "                         repeatable or a colon list (default: %s)\n"
               "     --native-worker     Internal: serve the symbolizer as its native worker on\n"
               "                         descriptor 3 (the symbolizer starts it)\n",
               program_invocation_short_name, EP_BUS_SYMBOLIZER, EP_SYMBOLIZER_USER, EP_COLLECTOR_USER, EP_CACHE_DIR, EP_DEBUG_ROOT);
}

enum {
        ARG_VERSION = 0x100,
        ARG_LOG_LEVEL,
        ARG_USER,
        ARG_COLLECTOR_USER,
        ARG_CACHE_DIR,
        ARG_CACHE_MAX_SIZE,
        ARG_SYMBOL_CACHE_MAX_SIZE,
        ARG_DEBUG_DIR,
        ARG_NATIVE_WORKER,
};

/* "123", "64K", "256M", "1G" (binary multiples). */
static int parse_size(const char *s, uint64_t *ret) {
        char *end = NULL;
        unsigned long long v;
        unsigned shift = 0;

        errno = 0;
        v = strtoull(s, &end, 10);
        if (errno != 0 || end == s || s[0] == '-')
                return -EINVAL;
        if (*end == 'K' || *end == 'k')
                shift = 10;
        else if (*end == 'M' || *end == 'm')
                shift = 20;
        else if (*end == 'G' || *end == 'g')
                shift = 30;
        if (shift > 0)
                end++;
        if (*end != 0 || v == 0 || v > (UINT64_MAX >> shift))
                return -EINVAL;
        *ret = (uint64_t) v << shift;
        return 0;
}

static int parse_argv(int argc, char *argv[], const char **ret_user) {
        static const struct option options[] = {
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, ARG_VERSION },
                { "log-level", required_argument, NULL, ARG_LOG_LEVEL },
                { "user", required_argument, NULL, ARG_USER },
                { "collector-user", required_argument, NULL, ARG_COLLECTOR_USER },
                { "cache-dir", required_argument, NULL, ARG_CACHE_DIR },
                { "cache-max-size", required_argument, NULL, ARG_CACHE_MAX_SIZE },
                { "symbol-cache-max-size", required_argument, NULL, ARG_SYMBOL_CACHE_MAX_SIZE },
                { "debug-dir", required_argument, NULL, ARG_DEBUG_DIR },
                { "native-worker", no_argument, NULL, ARG_NATIVE_WORKER },
                {},
        };
        int c, level;

        while ((c = getopt_long(argc, argv, "h", options, NULL)) >= 0)
                switch (c) {
                case 'h':
                        help();
                        return 0;
                case ARG_VERSION:
                        printf("%s %s\n", IDENT, EP_VERSION);
                        return 0;
                case ARG_LOG_LEVEL:
                        level = log_parse_level(optarg);
                        if (level < 0) {
                                fprintf(stderr, "%s: invalid log level '%s' (debug, info, notice, warning, err)\n",
                                        program_invocation_short_name, optarg);
                                return -EINVAL;
                        }
                        log_set_max_level(level);
                        break;
                case ARG_USER:
                        *ret_user = optarg;
                        break;
                case ARG_COLLECTOR_USER:
                        arg_collector_user = optarg;
                        break;
                case ARG_CACHE_DIR:
                        arg_cache_dir = optarg;
                        break;
                case ARG_CACHE_MAX_SIZE:
                        if (parse_size(optarg, &arg_cache_max_size) < 0) {
                                fprintf(stderr, "%s: invalid cache size '%s'\n", program_invocation_short_name,
                                        optarg);
                                return -EINVAL;
                        }
                        break;
                case ARG_SYMBOL_CACHE_MAX_SIZE:
                        if (parse_size(optarg, &arg_symbol_cache_max_size) < 0) {
                                fprintf(stderr, "%s: invalid symbol cache size '%s'\n",
                                        program_invocation_short_name, optarg);
                                return -EINVAL;
                        }
                        break;
                case ARG_DEBUG_DIR:
                        if (ep_debug_roots_add(optarg) < 0) {
                                fprintf(stderr, "%s: invalid --debug-dir '%s' (at most %d directories)\n",
                                        program_invocation_short_name, optarg, EP_DEBUG_ROOTS_MAX);
                                return -EINVAL;
                        }
                        break;
                case ARG_NATIVE_WORKER:
                        arg_native_worker = true;
                        break;
                case '?':
                        /* getopt printed what was wrong. */
                        fprintf(stderr, "Try '%s --help'.\n", program_invocation_short_name);
                        return -EINVAL;
                default:
                        return -EINVAL;
                }

        if (optind < argc) {
                fprintf(stderr, "%s: unexpected argument '%s'\nTry '%s --help'.\n", program_invocation_short_name,
                        argv[optind], program_invocation_short_name);
                return -EINVAL;
        }
        return 1;
}

int main(int argc, char *argv[]) {
        Manager m = {};
        const char *user = NULL;
        int r, level;

        log_setup(IDENT);
        r = parse_argv(argc, argv, &user);
        if (r <= 0)
                return r < 0 ? 2 : EXIT_SUCCESS;
        level = log_get_max_level();

        r = ep_drop_privileges(user);
        if (r < 0)
                return EXIT_FAILURE;
        if (arg_native_worker)
                return ep_native_worker_main(3);

        r = ep_daemon_setup(&m.daemon, IDENT);
        if (r < 0)
                goto finish;
        ep_daemon_drop_exporter_environment(&m.daemon);
        m.collector_uid = ep_peer_user_uid(arg_collector_user, "--collector-user");
        log_set_max_level(level); /* the command line wins over the environment */

        r = ep_loader_client_new(&m.daemon, on_loader_changed, &m, &m.loader);
        if (r < 0)
                goto finish;

        EpFileSource source = ep_loader_client_source(m.loader);
        EpResolverConfig config = EP_RESOLVER_CONFIG_DEFAULT;
        r = ep_resolver_new(&source, &config, &m.stats, &m.resolver);
        if (r >= 0)
                r = native_worker_new(&source, &m.stats, &m.native_worker);
        if (r < 0) {
                log_error_errno(r, "Failed to set up the resolver: %m");
                goto finish;
        }
        EpNativeParser parser = ep_native_worker_parser(m.native_worker);
        ep_resolver_set_native_parser(m.resolver, &parser);

        open_symbol_cache(&m);

        EpUnwindServiceConfig unwind_config = {
                .cache_dir = arg_cache_dir,
                .cache_max_bytes = arg_cache_max_size,
                .debug_root = ep_debug_roots()[0], /* unwind tables look under one root */
        };
        r = ep_unwind_service_new(m.daemon.event, &unwind_config, &m.stats, &m.unwind);
        if (r < 0) {
                log_error_errno(r, "Failed to set up unwind table extraction: %m");
                goto finish;
        }

        r = sd_event_add_time_relative(m.daemon.event, &m.props_timer, CLOCK_MONOTONIC, PROPERTIES_PERIOD_USEC,
                                       PROPERTIES_PERIOD_USEC / 4, on_properties_timer, &m);
        if (r >= 0)
                r = sd_event_source_set_enabled(m.props_timer, SD_EVENT_ON);
        if (r < 0) {
                log_error_errno(r, "Failed to set up the properties timer: %m");
                goto finish;
        }

        r = sd_event_add_time_relative(m.daemon.event, &m.debug_timer, CLOCK_MONOTONIC, DEBUG_RECHECK_USEC,
                                       DEBUG_RECHECK_USEC / 4, on_debug_timer, &m);
        if (r >= 0)
                r = sd_event_source_set_priority(m.debug_timer, EP_SESSION_PRIORITY);
        if (r >= 0)
                r = sd_event_source_set_enabled(m.debug_timer, SD_EVENT_ON);
        if (r < 0) {
                log_error_errno(r, "Failed to set up the debug file timer: %m");
                goto finish;
        }

        r = ep_daemon_publish(&m.daemon, EP_BUS_SYMBOLIZER, EP_PATH_SYMBOLIZER, EP_IFACE_SYMBOLIZER,
                              symbolizer_vtable, &m);
        if (r < 0)
                goto finish;

        r = ep_daemon_run(&m.daemon);

finish:
        manager_done(&m);
        return r < 0 ? EXIT_FAILURE : r;
}
