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

#define ERROR_NO_SUCH_FILE "org.ebpfprofiler.Error.NoSuchFile"

/* How each caller was found (EP_UNWIND_STEP_*), property UnwindSteps. */
static const char *const step_names[_EP_UNWIND_STEP_MAX] = {
        [EP_UNWIND_STEP_NONE] = NULL,
        [EP_UNWIND_STEP_TABLE] = "table",
        [EP_UNWIND_STEP_PLT] = "plt",
        [EP_UNWIND_STEP_SIGNAL] = "signal-frame",
        [EP_UNWIND_STEP_FP] = "frame-pointer",
};

static void read_counters(const Loader *l, uint64_t c[EP_BPF_CNT_MAX]) {
        if (ep_bpf_read_counters(l->bpf, c) < 0)
                memset(c, 0, EP_BPF_CNT_MAX * sizeof *c);
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

static int method_open_trace_ring(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Loader *l = userdata;
        uint64_t discarded;
        int r;

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

static int method_open_file(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        Loader *l = userdata;
        char hex[2 * EP_FILE_ID_SIZE + 1];
        _cleanup_close_ int fd = -EBADF;
        const void *id;
        size_t size;
        uint32_t key;
        int r;

        r = sd_bus_message_read_array(m, 'y', &id, &size);
        if (r < 0)
                return r;
        if (size != EP_FILE_ID_SIZE)
                return sd_bus_error_setf(error, SD_BUS_ERROR_INVALID_ARGS, "A file ID is %d bytes, got %zu.",
                                         EP_FILE_ID_SIZE, size);
        ep_file_id_to_hex(id, hex);
        key = ep_proc_table_find_file_id(l->procs, id);
        fd = key ? ep_proc_table_open_file(l->procs, key) : -ENOENT;
        if (fd < 0)
                return sd_bus_error_setf(error, ERROR_NO_SUCH_FILE,
                                         "No running process maps a file with ID %s any more.", hex);
        return sd_bus_reply_method_return(m, "h", fd);
}

static int method_open_kallsyms(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        _cleanup_close_ int fd = open("/proc/kallsyms", O_RDONLY | O_CLOEXEC | O_NOCTTY);

        if (fd < 0)
                return sd_bus_error_set_errnof(error, errno, "Cannot open /proc/kallsyms: %m");
        return sd_bus_reply_method_return(m, "h", fd);
}

static int method_open_kernel_modules(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        _cleanup_close_ int fd = open("/proc/modules", O_RDONLY | O_CLOEXEC | O_NOCTTY);

        if (fd < 0 && errno == ENOENT)
                return sd_bus_error_setf(error, ERROR_NO_SUCH_FILE,
                                         "This kernel has no loadable modules (no /proc/modules).");
        if (fd < 0)
                return sd_bus_error_set_errnof(error, errno, "Cannot open /proc/modules: %m");
        return sd_bus_reply_method_return(m, "h", fd);
}

static int method_list_bpf_programs(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        _cleanup_free_ EpBpfFunc *funcs = NULL;
        sd_bus_message *reply = NULL;
        size_t n = 0;
        int r;

        /* Extents the symbolizer needs because kallsyms has no sizes (bpf-programs.h). */
        r = ep_bpf_programs_list(&funcs, &n);
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

static int method_open_perf_map(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        _cleanup_close_ int fd = -EBADF;
        uint32_t pid;
        int r;

        r = sd_bus_message_read(m, "u", &pid);
        if (r < 0)
                return r;
        if (pid == 0 || pid > INT32_MAX)
                return sd_bus_error_setf(error, SD_BUS_ERROR_INVALID_ARGS, "Invalid pid %" PRIu32 ".", pid);
        fd = ep_open_perf_map((pid_t) pid);
        if (fd == -ENOENT || fd == -ESRCH)
                return sd_bus_error_setf(error, ERROR_NO_SUCH_FILE, "Process %" PRIu32 " has no perf map.", pid);
        if (fd == -EPERM)
                return sd_bus_error_setf(error, SD_BUS_ERROR_ACCESS_DENIED,
                                         "The perf map of process %" PRIu32 " is not a regular file owned by "
                                         "its user, or is reached through a symbolic link.", pid);
        if (fd < 0)
                return sd_bus_error_set_errnof(error, -fd, "Cannot open the perf map of process %" PRIu32 ": %m",
                                               pid);
        return sd_bus_reply_method_return(m, "h", fd);
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
        if (streq(property, "LoaderUnwinds"))
                return sd_bus_message_append(reply, "t", l->user_unwinds);
        if (streq(property, "DeferredSamples"))
                return sd_bus_message_append(reply, "t", l->deferred_total);
        if (streq(property, "DeferredExpired"))
                return sd_bus_message_append(reply, "t", l->deferred_expired);
        if (streq(property, "TablesLoaded") || streq(property, "TableBytes") || streq(property, "TableRequests") ||
            streq(property, "TableErrors") || streq(property, "PendingTables") || streq(property, "UnwindRules") ||
            streq(property, "FramePointerFiles")) {
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
        return sd_bus_error_setf(error, SD_BUS_ERROR_UNKNOWN_PROPERTY, "Unknown property %s", property);
}

static const sd_bus_vtable loader_vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_METHOD("OpenTraceRing", "", "hh", method_open_trace_ring, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD("OpenFile", "ay", "h", method_open_file, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD("OpenKallsyms", "", "h", method_open_kallsyms, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD("OpenKernelModules", "", "h", method_open_kernel_modules, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD("OpenPerfMap", "u", "h", method_open_perf_map, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD("ListBpfPrograms", "", "a(ttus)", method_list_bpf_programs, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD("SetFrequency", "u", "", method_set_frequency, 0),
        SD_BUS_PROPERTY("Version", "s", property_get, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_PROPERTY("Frequency", "u", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("CPUs", "u", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("Samples", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("LostSamples", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("RingFullDrops", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("TracesSent", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("UnwindStops", "a{st}", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("Processes", "u", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("Files", "u", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("UnwindSteps", "a{st}", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("UnknownProcessSamples", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("ForkInherited", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("MappingOverflows", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("StackCopies", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("LoaderUnwinds", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("DeferredSamples", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("DeferredExpired", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("TablesLoaded", "u", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("TableBytes", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("TableRequests", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("TableErrors", "t", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("PendingTables", "u", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("FramePointerFiles", "u", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("UnwindRules", "u", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("CollectorAttached", "b", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("LastError", "s", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_VTABLE_END,
};

int loader_bus_publish(Loader *l) {
        return ep_daemon_publish(&l->daemon, EP_BUS_LOADER, EP_PATH_LOADER, EP_IFACE_LOADER, loader_vtable, l);
}

/* Emits PropertiesChanged for the statistics when any of them moved since the last call. */
void loader_bus_emit_changes(Loader *l) {
        uint64_t c[EP_BPF_CNT_MAX], now[ELEMENTSOF(l->published)];
        uint64_t stops = 0, steps = 0;
        EpTablesStats ts;

        read_counters(l, c);
        ep_tables_stats(l->tables, &ts);
        for (int i = 0; i < _EP_STOP_MAX; i++)
                stops = stops * 31 + c[EP_BPF_CNT_STOP_BASE + i];
        for (int i = 0; i < _EP_UNWIND_STEP_MAX; i++)
                steps = steps * 31 + c[EP_BPF_CNT_STEP_BASE + i];
        now[0] = c[EP_BPF_CNT_SAMPLES];
        now[1] = c[EP_BPF_CNT_RINGBUF_FULL];
        now[2] = ep_ring_records_dropped(l->ring);
        now[3] = l->traces_sent;
        now[4] = stops;
        now[5] = ep_proc_table_n_processes(l->procs) << 32 | ep_proc_table_n_files(l->procs);
        now[6] = loader_collector_attached(l);
        now[7] = l->last_error ? ep_hash_bytes(l->last_error, strlen(l->last_error)) : 0;
        now[8] = steps ^ c[EP_BPF_CNT_UNKNOWN_PROCESS] << 1 ^ c[EP_BPF_CNT_FORK_INHERITED] << 2;
        now[9] = (uint64_t) ts.loaded << 32 | ts.pending;
        now[10] = ts.bytes ^ ts.requests << 20 ^ ts.errors << 40 ^ (uint64_t) ts.rules << 48 ^ ts.fp_only;
        now[11] = l->mapping_overflows ^ l->stack_copies << 8 ^ l->user_unwinds << 24 ^ l->deferred_total << 40 ^
                  l->deferred_expired << 56;
        if (memcmp(now, l->published, sizeof now) == 0)
                return;
        memcpy(l->published, now, sizeof now);
        ep_daemon_properties_changed(&l->daemon, "Samples", "LostSamples", "RingFullDrops", "TracesSent",
                                     "UnwindStops", "Processes", "Files", "CollectorAttached", "LastError",
                                     "UnwindSteps", "UnknownProcessSamples", "ForkInherited", "MappingOverflows",
                                     "StackCopies", "LoaderUnwinds", "DeferredSamples", "DeferredExpired",
                                     "TablesLoaded", "TableBytes", "TableRequests", "TableErrors", "PendingTables",
                                     "FramePointerFiles", "UnwindRules", NULL);
}
