/* SPDX-License-Identifier: MIT */

/* The org.ebpfprofiler.Loader1 object (docs/ARCHITECTURE.md). Access control is the D-Bus
 * policy's job (units/org.ebpfprofiler.conf): the methods the unprivileged daemons call are
 * marked unprivileged here; SetFrequency keeps sd-bus's own check (root) as well. */

#include <fcntl.h>
#include <inttypes.h>

#include "bpf-programs.h"
#include "bus.h"
#include "config.h"
#include "file-id.h"
#include "hashmap.h"
#include "jit-map-open.h"
#include "log.h"
#include "loader.h"
#include "native-unwind.h"
#include "stop-reason.h"


/* How each caller was found (EP_UNWIND_STEP_*), property UnwindSteps. */
static const char *const step_names[_EP_UNWIND_STEP_MAX] = {
        [EP_UNWIND_STEP_NONE] = NULL,
        [EP_UNWIND_STEP_TABLE] = "table",
        [EP_UNWIND_STEP_PLT] = "plt",
        [EP_UNWIND_STEP_SIGNAL] = "signal-frame",
        [EP_UNWIND_STEP_FP] = "frame-pointer",
};

/* One read serves all the properties of one emission or GetAll. */
#define COUNTERS_FRESH_NS (50 * NSEC_PER_MSEC)

static void read_counters(Loader *l, uint64_t c[EP_BPF_CNT_MAX]) {
        uint64_t now = ep_now_ns(CLOCK_MONOTONIC);

        if (l->counters_read_ns == 0 || now - l->counters_read_ns >= COUNTERS_FRESH_NS) {
                int r = ep_bpf_read_counters(l->bpf, l->counters);

                if (r < 0) {
                        log_once_errno(LOG_WARNING, r, "Cannot read the BPF counters, they read as 0: %m");
                        memset(l->counters, 0, sizeof l->counters);
                }
                l->counters_read_ns = now;
        }
        memcpy(c, l->counters, sizeof l->counters);
}

static int consumer_gone(sd_bus_track *t, void *userdata) {
        Loader *l = userdata;

        log_info("The trace ring's consumer left the bus; not producing traces until the next "
                 "OpenTraceRing.");
        l->consumer = sd_bus_track_unref(l->consumer);
        l->ring_active = false;
        loader_bus_emit_changes(l);
        return 0;
}

/* Descriptors opened with root's reach go only to root and the daemon that needs them (the bus
 * policy says so too): the trace ring to the collector, files, memory and kernel symbols to the
 * symbolizer. */
static int check_collector(sd_bus_message *m, void *userdata, sd_bus_error *error, const char *what) {
        Loader *l = userdata;

        return ep_bus_check_caller_uid(m, error, l->collector_uid, what);
}

static int check_symbolizer(sd_bus_message *m, void *userdata, sd_bus_error *error, const char *what) {
        Loader *l = userdata;

        return ep_bus_check_caller_uid(m, error, l->symbolizer_uid, what);
}

static int method_open_trace_ring(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Loader *l = userdata;
        uint64_t discarded;
        int r;

        r = check_collector(m, userdata, error, "open the trace ring");
        if (r < 0)
                return r;

        discarded = ep_ring_reset(l->ring);
        loader_ring_reset(l);

        l->consumer = sd_bus_track_unref(l->consumer);
        r = sd_bus_track_new(sd_bus_message_get_bus(m), &l->consumer, consumer_gone, l);
        if (r >= 0)
                r = sd_bus_track_add_sender(l->consumer, m);
        if (r < 0)
                log_warning_errno(r, "Cannot track the trace ring's consumer: %m");

        log_info("Trace ring handed to %s (%" PRIu64 " unread records discarded).",
                 sd_bus_message_get_sender(m) ?: "?", discarded);
        return sd_bus_reply_method_return(m, "hh", ep_ring_memfd(l->ring), ep_ring_eventfd(l->ring));
}

static int method_drain(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Loader *l = userdata;
        int r;

        r = check_collector(m, userdata, error, "drain the samples");
        if (r < 0)
                return r;
        loader_drain(l);
        return sd_bus_reply_method_return(m, "");
}

static int method_open_file(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Loader *l = userdata;
        char hex[2 * EP_FILE_ID_SIZE + 1];
        _cleanup_close_ int fd = -EBADF;
        const void *id;
        size_t size;
        uint32_t key;
        int r;

        r = check_symbolizer(m, userdata, error, "open mapped files");
        if (r < 0)
                return r;

        r = sd_bus_message_read_array(m, 'y', &id, &size);
        if (r < 0)
                return r;
        if (size != EP_FILE_ID_SIZE)
                return sd_bus_error_setf(error, SD_BUS_ERROR_INVALID_ARGS, "A file ID is %d bytes, got %zu.",
                                         EP_FILE_ID_SIZE, size);
        ep_file_id_to_hex(id, hex);
        key = ep_proc_table_find_file_id(l->procs, id);
        fd = key ? ep_proc_table_open_file(l->procs, key) : -ENOENT;
        if (fd == -ENOENT)
                return sd_bus_error_setf(error, EP_ERROR_NO_SUCH_FILE,
                                         "No running process maps a file with ID %s any more.", hex);
        if (fd < 0) /* out of descriptors or memory: the caller asks again */
                return sd_bus_error_set_errnof(error, fd, "Cannot open the file with ID %s now: %m", hex);
        return sd_bus_reply_method_return(m, "h", fd);
}

/* Replies with a descriptor of a /proc file opened with the loader's credentials (real
 * addresses), for a caller check_symbolizer() admits; no_file_message for ENOENT when given. */
static int reply_proc_file(sd_bus_message *m, void *userdata, sd_bus_error *error, const char *path,
                           const char *no_file_message) {
        _cleanup_close_ int fd = -EBADF;
        char what[64];
        int r;

        snprintf(what, sizeof what, "open %s", path);
        r = check_symbolizer(m, userdata, error, what);
        if (r < 0)
                return r;
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0 && errno == ENOENT && no_file_message)
                return sd_bus_error_set(error, EP_ERROR_NO_SUCH_FILE, no_file_message);
        if (fd < 0)
                return sd_bus_error_set_errnof(error, errno, "Cannot open %s: %m", path);
        return sd_bus_reply_method_return(m, "h", fd);
}

static int method_open_kallsyms(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        return reply_proc_file(m, userdata, error, "/proc/kallsyms", NULL);
}

static int method_open_kernel_modules(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        return reply_proc_file(m, userdata, error, "/proc/modules",
                               "This kernel has no loadable modules (no /proc/modules).");
}

static int method_list_bpf_programs(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        _cleanup_free_ EpBpfFunc *funcs = NULL;
        sd_bus_message *reply = NULL;
        Loader *l = userdata;
        size_t n = 0;
        int r;

        r = check_symbolizer(m, userdata, error, "list BPF programs");
        if (r < 0)
                return r;

        /* Extents the symbolizer needs because kallsyms has no sizes (bpf-programs.h). */
        r = ep_bpf_programs_list(l->bpf_lister, &funcs, &n);
        if (r < 0)
                return sd_bus_error_set_errnof(error, r, "Cannot list the loaded BPF programs: %m");
        r = sd_bus_message_new_method_return(m, &reply);
        if (r >= 0)
                r = sd_bus_message_open_container(reply, 'a', "(ttus)");
        for (size_t i = 0; r >= 0 && i < n; i++)
                r = sd_bus_message_append(reply, "(ttus)", funcs[i].start, (uint64_t) funcs[i].length,
                                          funcs[i].prog_id, funcs[i].name);
        if (r >= 0)
                r = sd_bus_message_close_container(reply);
        if (r >= 0)
                r = sd_bus_send(NULL, reply, NULL);
        sd_bus_message_unref(reply);
        return r;
}

static int append_table(sd_bus_message *reply, Loader *l, uint32_t key) {
        EpFile *f = ep_proc_table_file(l->procs, key);
        EpTableInfo info;

        if (ep_tables_file_info(l->tables, key, &info) < 0)
                return 0;
        return sd_bus_message_append(reply, "(sstbtu)", f && f->path ? f->path : "", info.state,
                                     info.state_ns / NSEC_PER_USEC, info.waited_for, info.bytes, info.attempts);
}

/* Why a process is not unwound yet, or since when: the state of each file's table. */
static int method_list_tables(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        _cleanup_(sd_bus_message_unrefp) sd_bus_message *reply = NULL;
        Loader *l = userdata;
        EpProcess *p = NULL;
        uint32_t pid;
        int r;

        /* Which files every process maps: no daemon needs that, an administrator does. */
        r = ep_bus_check_caller_uid(m, error, UID_INVALID, "list the unwind tables");
        if (r < 0)
                return r;
        r = sd_bus_message_read(m, "u", &pid);
        if (r < 0)
                return r;
        if (pid != 0) {
                p = ep_proc_table_get(l->procs, (pid_t) pid);
                if (!p)
                        return sd_bus_error_setf(error, SD_BUS_ERROR_INVALID_ARGS,
                                                 "Process %" PRIu32 " is not known to the loader.", pid);
        }

        r = sd_bus_message_new_method_return(m, &reply);
        if (r >= 0)
                r = sd_bus_message_open_container(reply, 'a', "(sstbtu)");
        if (p)
                for (size_t i = 0; r >= 0 && i < p->n_held; i++)
                        r = append_table(reply, l, p->held_files[i]);
        else {
                size_t state = 0;
                uint32_t key;
                while (r >= 0 && ep_tables_iterate(l->tables, &state, &key))
                        r = append_table(reply, l, key);
        }
        if (r >= 0)
                r = sd_bus_message_close_container(reply);
        if (r < 0)
                return r;
        return sd_bus_send(NULL, reply, NULL);
}

/* The pid argument of a method, a valid one. */
static int read_pid(sd_bus_message *m, sd_bus_error *error, uint32_t *ret_pid) {
        int r = sd_bus_message_read(m, "u", ret_pid);

        if (r < 0)
                return r;
        if (*ret_pid == 0 || *ret_pid > INT32_MAX)
                return sd_bus_error_setf(error, SD_BUS_ERROR_INVALID_ARGS, "Invalid pid %" PRIu32 ".", *ret_pid);
        return 0;
}

static int method_open_perf_map(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        _cleanup_close_ int fd = -EBADF;
        uint32_t pid;
        int r;

        r = check_symbolizer(m, userdata, error, "open perf maps");
        if (r < 0)
                return r;

        r = read_pid(m, error, &pid);
        if (r < 0)
                return r;
        fd = ep_open_perf_map((pid_t) pid);
        if (fd == -ENOENT || fd == -ESRCH)
                return sd_bus_error_setf(error, EP_ERROR_NO_SUCH_FILE, "Process %" PRIu32 " has no perf map.", pid);
        if (fd == -EPERM)
                return sd_bus_error_setf(error, SD_BUS_ERROR_ACCESS_DENIED,
                                         "The perf map of process %" PRIu32 " is not a regular file owned by "
                                         "its user, or is reached through a symbolic link.", pid);
        if (fd < 0)
                return sd_bus_error_set_errnof(error, -fd, "Cannot open the perf map of process %" PRIu32 ": %m",
                                               pid);
        return sd_bus_reply_method_return(m, "h", fd);
}

/* Whether pid owns the name of another daemon of the profiler. Asked of the bus (a call each),
 * so only about a process the loader would hand the memory of otherwise: one that runs a
 * runtime, which no daemon of ours does. */
static bool is_our_daemon(sd_bus *bus, pid_t pid) {
        static const char *const names[] = { EP_BUS_SYMBOLIZER, EP_BUS_COLLECTOR, EP_BUS_EXPORTER };

        for (size_t i = 0; i < ELEMENTSOF(names); i++) {
                _cleanup_(sd_bus_creds_unrefp) sd_bus_creds *creds = NULL;
                pid_t owner;

                if (sd_bus_get_name_creds(bus, names[i], SD_BUS_CREDS_PID, &creds) >= 0 &&
                    sd_bus_creds_get_pid(creds, &owner) >= 0 && owner == pid)
                        return true;
        }
        return false;
}

/* A read-only descriptor of a process's memory (for the symbolizer to read a runtime's
 * objects), and the runtime the loader found in it; refused for any other process
 * (process-memory.c). */
static int method_open_process_memory(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Loader *l = userdata;
        LoaderProcessMemory mem;
        uint32_t pid;
        int r;

        r = check_symbolizer(m, userdata, error, "open process memory");
        if (r < 0)
                return r;
        r = read_pid(m, error, &pid);
        if (r < 0)
                return r;
        r = loader_open_process_memory(l, (pid_t) pid, &mem);
        if (r >= 0 && is_our_daemon(sd_bus_message_get_bus(m), (pid_t) pid)) {
                (void) close(mem.fd);
                r = -EPERM;
        }
        switch (r) {
        case 0: {
                _cleanup_close_ int fd = mem.fd;
                return sd_bus_reply_method_return(m, "hsu", fd, mem.runtime->name, (uint32_t) mem.runtime_version);
        }
        case -ESRCH:
                return sd_bus_error_setf(error, EP_ERROR_NO_SUCH_FILE, "There is no process %" PRIu32 ".", pid);
        case -EAGAIN:
                return sd_bus_error_setf(error, EP_ERROR_NOT_YET, "What process %" PRIu32 " runs is not known yet.",
                                         pid);
        case -ENOMEDIUM:
                return sd_bus_error_setf(error, EP_ERROR_NO_RUNTIME, "Process %" PRIu32 " runs no runtime.", pid);
        case -EPERM:
                l->memory_refusals++;
                return sd_bus_error_setf(error, SD_BUS_ERROR_ACCESS_DENIED,
                                         "The memory of process %" PRIu32 " is not the symbolizer's to read: "
                                         "a daemon of the profiler, or not dumpable.", pid);
        default:
                return sd_bus_error_set_errnof(error, r, "Cannot open the memory of process %" PRIu32 ": %m", pid);
        }
}

static int method_set_frequency(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Loader *l = userdata;
        uint32_t hz;
        int r;

        r = sd_bus_message_read(m, "u", &hz);
        if (r < 0)
                return r;
        if (hz < 1 || hz > LOADER_FREQUENCY_MAX)
                return sd_bus_error_setf(error, SD_BUS_ERROR_INVALID_ARGS,
                                         "The frequency must be 1..%u Hz, got %u.", LOADER_FREQUENCY_MAX, hz);
        if (hz != l->frequency) {
                r = ep_bpf_start_sampling(l->bpf, hz);
                if (r < 0) {
                        loader_set_error(l, "SetFrequency(%u) failed: %s", hz, strerror(-r));
                        return sd_bus_error_set_errnof(error, r, "Cannot re-open the perf events: %m");
                }
                log_info("Sampling frequency changed from %u to %u Hz.", l->frequency, hz);
                l->frequency = hz;
                ep_daemon_properties_changed(&l->daemon, "Frequency", "CPUs", NULL);
        }
        return sd_bus_reply_method_return(m, NULL);
}

static int property_get(sd_bus *bus, const char *path, const char *interface, const char *property,
                        sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        Loader *l = userdata;
        uint64_t c[EP_BPF_CNT_MAX];

        if (streq(property, "Version"))
                return sd_bus_message_append(reply, "s", EP_VERSION);
        if (streq(property, "Frequency"))
                return sd_bus_message_append(reply, "u", l->frequency);
        if (streq(property, "CPUs"))
                return sd_bus_message_append(reply, "u", ep_bpf_n_cpus(l->bpf));
        if (streq(property, "RingFullDrops"))
                return sd_bus_message_append(reply, "t", ep_ring_records_dropped(l->ring));
        if (streq(property, "FileProbeTimeouts"))
                return sd_bus_message_append(reply, "t", ep_proc_table_probe_timeouts(l->procs));
        if (streq(property, "FileIdentityRefusals"))
                return sd_bus_message_append(reply, "t", ep_proc_table_identify_refusals(l->procs));
        if (streq(property, "MemoryRefusals"))
                return sd_bus_message_append(reply, "t", l->memory_refusals);
        if (streq(property, "RingPeerErrors"))
                return sd_bus_message_append(reply, "t", ep_ring_peer_errors(l->ring));
        if (streq(property, "TracesSent"))
                return sd_bus_message_append(reply, "t", l->traces_sent);
        if (streq(property, "Processes"))
                return sd_bus_message_append(reply, "u", (uint32_t) ep_proc_table_n_processes(l->procs));
        if (streq(property, "Files"))
                return sd_bus_message_append(reply, "u", (uint32_t) ep_proc_table_n_files(l->procs));
        if (streq(property, "MappingOverflows"))
                return sd_bus_message_append(reply, "t", l->mapping_overflows);
        if (streq(property, "StackCopies"))
                return sd_bus_message_append(reply, "t", l->stack_copies);
        if (streq(property, "TracesConvertedBefore"))
                return sd_bus_message_append(reply, "t", trace_cache_stats(l->trace_cache).hits);
        if (streq(property, "ParentImageSamples"))
                return sd_bus_message_append(reply, "t", l->inherited_images);
        if (streq(property, "LoaderUnwinds"))
                return sd_bus_message_append(reply, "t", l->user_unwinds);
        if (streq(property, "DeferredSamples"))
                return sd_bus_message_append(reply, "t", l->deferred_total);
        if (streq(property, "DeferredExpired"))
                return sd_bus_message_append(reply, "t", l->deferred_expired);
        if (streq(property, "WaitingSamples"))
                return sd_bus_message_append(reply, "u", (uint32_t) l->n_deferred);
        if (streq(property, "TablesLoaded") || streq(property, "TableBytes") || streq(property, "TableRequests") ||
            streq(property, "TableErrors") || streq(property, "PendingTables") || streq(property, "UnwindRules") ||
            streq(property, "FramePointerFiles") || streq(property, "FileSlotRefusals")) {
                EpTablesStats ts;
                ep_tables_stats(l->tables, &ts);
                if (streq(property, "TablesLoaded"))
                        return sd_bus_message_append(reply, "u", ts.loaded);
                if (streq(property, "TableBytes"))
                        return sd_bus_message_append(reply, "t", ts.bytes);
                if (streq(property, "TableRequests"))
                        return sd_bus_message_append(reply, "t", ts.requests);
                if (streq(property, "TableErrors"))
                        return sd_bus_message_append(reply, "t", ts.errors);
                if (streq(property, "PendingTables"))
                        return sd_bus_message_append(reply, "u", ts.pending);
                if (streq(property, "FramePointerFiles"))
                        return sd_bus_message_append(reply, "u", ts.fp_only);
                if (streq(property, "FileSlotRefusals"))
                        return sd_bus_message_append(reply, "t", ts.no_slot + ts.user_full);
                return sd_bus_message_append(reply, "u", ts.rules);
        }
        if (streq(property, "CollectorAttached"))
                return sd_bus_message_append(reply, "b", loader_collector_attached(l));
        if (streq(property, "LastError"))
                return sd_bus_message_append(reply, "s", l->last_error ?: "");

        read_counters(l, c);
        if (streq(property, "Samples"))
                return sd_bus_message_append(reply, "t", c[EP_BPF_CNT_SAMPLES]);
        if (streq(property, "LostSamples"))
                return sd_bus_message_append(reply, "t", c[EP_BPF_CNT_RINGBUF_FULL]);
        if (streq(property, "UnwindStops")) {
                int r = sd_bus_message_open_container(reply, 'a', "{st}");
                for (int i = 0; r >= 0 && i < _EP_STOP_MAX; i++)
                        r = sd_bus_message_append(reply, "{st}", ep_stop_reason_name(i), c[EP_BPF_CNT_STOP_BASE + i]);
                if (r >= 0)
                        r = sd_bus_message_close_container(reply);
                return r;
        }
        if (streq(property, "UnwindSteps")) {
                int r = sd_bus_message_open_container(reply, 'a', "{st}");
                for (int i = 0; r >= 0 && i < _EP_UNWIND_STEP_MAX; i++)
                        if (step_names[i])
                                r = sd_bus_message_append(reply, "{st}", step_names[i], c[EP_BPF_CNT_STEP_BASE + i]);
                if (r >= 0)
                        r = sd_bus_message_close_container(reply);
                return r;
        }
        if (streq(property, "UnknownProcessSamples"))
                return sd_bus_message_append(reply, "t", c[EP_BPF_CNT_UNKNOWN_PROCESS]);
        if (streq(property, "ForkInherited"))
                return sd_bus_message_append(reply, "t", c[EP_BPF_CNT_FORK_INHERITED]);
        if (streq(property, "OtherNamespaceSamples"))
                return sd_bus_message_append(reply, "t", c[EP_BPF_CNT_OTHER_PID_NS]);
        const LoaderRuntime *rt = loader_runtime_by_counters(property);
        if (rt) {
                LoaderCounter rc[LOADER_RUNTIME_COUNTERS_MAX];
                size_t n = rt->counters(l, c, rc);
                int r = sd_bus_message_open_container(reply, 'a', "{st}");
                for (size_t i = 0; r >= 0 && i < n; i++)
                        r = sd_bus_message_append(reply, "{st}", rc[i].name, rc[i].value);
                if (r >= 0)
                        r = sd_bus_message_close_container(reply);
                return r;
        }
        return sd_bus_error_setf(error, SD_BUS_ERROR_UNKNOWN_PROPERTY, "Unknown property %s", property);
}

static const sd_bus_vtable loader_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_METHOD_WITH_ARGS("OpenTraceRing", SD_BUS_NO_ARGS, SD_BUS_RESULT("h", ring, "h", eventfd),
                                method_open_trace_ring, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Drain", SD_BUS_NO_ARGS, SD_BUS_NO_RESULT, method_drain, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("OpenFile", SD_BUS_ARGS("ay", file_id), SD_BUS_RESULT("h", fd), method_open_file,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("OpenKallsyms", SD_BUS_NO_ARGS, SD_BUS_RESULT("h", fd), method_open_kallsyms,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("OpenKernelModules", SD_BUS_NO_ARGS, SD_BUS_RESULT("h", fd),
                                method_open_kernel_modules, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("OpenPerfMap", SD_BUS_ARGS("u", pid), SD_BUS_RESULT("h", fd), method_open_perf_map,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("OpenProcessMemory", SD_BUS_ARGS("u", pid),
                                SD_BUS_RESULT("h", mem, "s", runtime, "u", runtime_version),
                                method_open_process_memory, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("ListBpfPrograms", SD_BUS_NO_ARGS, SD_BUS_RESULT("a(ttus)", functions),
                                method_list_bpf_programs, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("ListTables", SD_BUS_ARGS("u", pid),
                                SD_BUS_RESULT("a(sstbtu)", tables), method_list_tables, SD_BUS_VTABLE_UNPRIVILEGED),
        /* Not unprivileged: sd-bus lets only callers with the loader's UID (root) or
         * CAP_SYS_ADMIN through, whatever the policy says. */
        SD_BUS_METHOD_WITH_ARGS("SetFrequency", SD_BUS_ARGS("u", hz), SD_BUS_NO_RESULT, method_set_frequency, 0),
        SD_BUS_PROPERTY("Version", "s", property_get, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_PROPERTY("Frequency", "u", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("CPUs", "u", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("Samples", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("LostSamples", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("RingFullDrops", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("RingPeerErrors", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("MemoryRefusals", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("FileProbeTimeouts", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("FileIdentityRefusals", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("TracesSent", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("UnwindStops", "a{st}", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("Processes", "u", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("Files", "u", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("UnwindSteps", "a{st}", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("UnknownProcessSamples", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("ForkInherited", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("OtherNamespaceSamples", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("PythonCounters", "a{st}", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("MappingOverflows", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("StackCopies", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("TracesConvertedBefore", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("LoaderUnwinds", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("ParentImageSamples", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("DeferredSamples", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("DeferredExpired", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("WaitingSamples", "u", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("TablesLoaded", "u", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("TableBytes", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("TableRequests", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("TableErrors", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("PendingTables", "u", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("FramePointerFiles", "u", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("UnwindRules", "u", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("FileSlotRefusals", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("CollectorAttached", "b", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("LastError", "s", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_VTABLE_END,
};

int loader_bus_publish(Loader *l) {
        return ep_daemon_publish(&l->daemon, EP_BUS_LOADER, EP_PATH_LOADER, EP_IFACE_LOADER, loader_vtable, l);
}

/* Hash of some counters: a group of properties changed when its hash did. */
static uint64_t hash_values(const uint64_t *v, size_t n) {
        return ep_hash_bytes(v, n * sizeof *v);
}

/* Emits PropertiesChanged for the statistics that moved since the last call (the status timer
 * calls it every couple of seconds, so fast counters are announced in batches). Frequency and
 * CPUs are announced by SetFrequency itself. Each entry of l->published stands for a group of
 * properties: the exact value, or a hash of the group's values. */
void loader_bus_emit_changes(Loader *l) {
        static const char *const groups[][8] = {
                { "Samples" },
                { "LostSamples" },
                { "RingFullDrops", "RingPeerErrors", "MemoryRefusals", "FileProbeTimeouts", "FileIdentityRefusals" },
                { "TracesSent" },
                { "UnwindStops" },
                { "Processes", "Files" },
                { "CollectorAttached" },
                { "LastError" },
                { "UnwindSteps", "UnknownProcessSamples", "ForkInherited", "OtherNamespaceSamples",
                  "PythonCounters" },
                { "TablesLoaded", "PendingTables" },
                { "TableBytes", "TableRequests", "TableErrors", "UnwindRules", "FramePointerFiles",
                  "FileSlotRefusals" },
                { "MappingOverflows", "StackCopies", "LoaderUnwinds", "ParentImageSamples", "DeferredSamples",
                  "DeferredExpired", "WaitingSamples", "TracesConvertedBefore" },
        };
        uint64_t c[EP_BPF_CNT_MAX], now[ELEMENTSOF(l->published)];
        const char *names[64];
        size_t n = 0;
        EpTablesStats ts;

        _Static_assert(ELEMENTSOF(groups) == ELEMENTSOF(((Loader *) 0)->published), "one group per slot");
        if (!l->daemon.object_path)
                return; /* not on the bus yet */
        read_counters(l, c);
        ep_tables_stats(l->tables, &ts);
        now[0] = c[EP_BPF_CNT_SAMPLES];
        now[1] = c[EP_BPF_CNT_RINGBUF_FULL];
        now[2] = hash_values((const uint64_t[]) { ep_ring_records_dropped(l->ring), ep_ring_peer_errors(l->ring),
                                                  l->memory_refusals, ep_proc_table_probe_timeouts(l->procs) }, 4);
        now[3] = l->traces_sent;
        now[4] = hash_values(c + EP_BPF_CNT_STOP_BASE, _EP_STOP_MAX);
        now[5] = hash_values((const uint64_t[]) { ep_proc_table_n_processes(l->procs),
                                                  ep_proc_table_n_files(l->procs) }, 2);
        now[6] = loader_collector_attached(l);
        now[7] = l->last_error ? ep_hash_bytes(l->last_error, strlen(l->last_error)) : 0;
        now[8] = hash_values((const uint64_t[]) { hash_values(c + EP_BPF_CNT_STEP_BASE, _EP_UNWIND_STEP_MAX),
                                                  c[EP_BPF_CNT_UNKNOWN_PROCESS], c[EP_BPF_CNT_FORK_INHERITED],
                                                  c[EP_BPF_CNT_OTHER_PID_NS],
                                                  loader_runtimes_counters_hash(l, c) }, 5);
        now[9] = (uint64_t) ts.loaded << 32 | ts.pending;
        now[10] = hash_values((const uint64_t[]) { ts.bytes, ts.requests, ts.errors, ts.rules, ts.fp_only,
                                                   ts.no_slot + ts.user_full }, 6);
        now[11] = hash_values((const uint64_t[]) { l->mapping_overflows, l->stack_copies, l->user_unwinds,
                                                   l->inherited_images, l->deferred_total, l->deferred_expired,
                                                   l->n_deferred, trace_cache_stats(l->trace_cache).hits }, 8);

        for (size_t g = 0; g < ELEMENTSOF(groups); g++) {
                if (now[g] == l->published[g])
                        continue;
                for (size_t i = 0; i < ELEMENTSOF(groups[g]) && groups[g][i]; i++)
                        names[n++] = groups[g][i];
        }
        names[n] = NULL;
        if (n == 0)
                return;
        memcpy(l->published, now, sizeof now);
        (void) sd_bus_emit_properties_changed_strv(l->daemon.bus, EP_PATH_LOADER, EP_IFACE_LOADER, (char **) names);
}
