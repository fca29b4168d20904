/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>

#include "bus.h"
#include "loader-client.h"
#include "log.h"


struct EpLoaderClient {
        EpDaemon *daemon;
        EpPeerWatch *watch;
        ep_loader_changed_t changed;
        void *userdata;
};

static int peer_handler(EpPeerWatch *w, bool present, void *userdata) {
        EpLoaderClient *c = userdata;

        if (c->changed)
                c->changed(present, c->userdata);
        return 0;
}

int ep_loader_client_new(EpDaemon *d, ep_loader_changed_t changed, void *userdata, EpLoaderClient **ret) {
        _cleanup_(ep_loader_client_freep) EpLoaderClient *c = NULL;
        int r;

        c = calloc(1, sizeof(EpLoaderClient));
        if (!c)
                return -ENOMEM;
        c->daemon = d;
        c->changed = changed;
        c->userdata = userdata;

        r = ep_peer_watch(d, EP_BUS_LOADER, peer_handler, c, &c->watch);
        if (r < 0)
                return r;

        *ret = TAKE_PTR(c);
        return 0;
}

EpLoaderClient *ep_loader_client_free(EpLoaderClient *c) {
        if (!c)
                return NULL;
        ep_peer_watch_free(c->watch);
        free(c);
        return NULL;
}

bool ep_loader_client_present(const EpLoaderClient *c) {
        return c->watch && ep_peer_watch_present(c->watch);
}

static int map_error(const sd_bus_error *e, int r) {
        if (sd_bus_error_has_name(e, EP_ERROR_NO_SUCH_FILE))
                return -ENOENT;
        if (sd_bus_error_has_name(e, EP_ERROR_NO_RUNTIME))
                return -ENOMEDIUM;
        if (sd_bus_error_has_name(e, SD_BUS_ERROR_ACCESS_DENIED))
                return -EPERM;
        if (sd_bus_error_has_names(e, SD_BUS_ERROR_SERVICE_UNKNOWN, SD_BUS_ERROR_NAME_HAS_NO_OWNER,
                                   SD_BUS_ERROR_UNKNOWN_METHOD, SD_BUS_ERROR_UNKNOWN_OBJECT))
                return -ENXIO;
        if (sd_bus_error_has_names(e, SD_BUS_ERROR_TIMEOUT, SD_BUS_ERROR_NO_REPLY) || r == -ETIMEDOUT)
                return -ETIMEDOUT;
        /* Anything else (the loader out of descriptors or memory, the bus dropping us) says
         * nothing about the file: a passing failure, asked again (ep_error_passing()).
         * Not -EIO, which callers read as "a broken file". */
        return -EAGAIN;
}

/* Sends m, reads one 'h' from the reply and returns our own copy of it. */
static int call_for_fd(EpLoaderClient *c, sd_bus_message *m, const char *what) {
        _cleanup_(sd_bus_error_free) sd_bus_error error = SD_BUS_ERROR_NULL;
        sd_bus_message *reply = NULL;
        int r, fd;

        r = sd_bus_call(c->daemon->bus, m, EP_LOADER_CALL_TIMEOUT_USEC, &error, &reply);
        if (r < 0) {
                int e = map_error(&error, r);
                if (e != -ENOENT)
                        log_debug_errno(r, "Loader call %s failed: %s", what, error.message ?: "");
                return e;
        }

        r = sd_bus_message_read(reply, "h", &fd);
        if (r >= 0) {
                fd = fcntl(fd, F_DUPFD_CLOEXEC, 3); /* the message owns the one it carried */
                r = fd < 0 ? -errno : fd;
        }
        sd_bus_message_unref(reply);
        if (r < 0) {
                log_debug_errno(r, "Bad reply to %s: %m", what);
                return -EBADMSG;
        }
        return r;
}

int ep_loader_client_open_file(EpLoaderClient *c, const uint8_t file_id[EP_FILE_ID_SIZE]) {
        sd_bus_message *m = NULL;
        int r;

        if (!ep_loader_client_present(c))
                return -ENXIO;

        r = sd_bus_message_new_method_call(c->daemon->bus, &m, EP_BUS_LOADER, EP_PATH_LOADER,
                                           EP_IFACE_LOADER, "OpenFile");
        if (r >= 0)
                r = sd_bus_message_append_array(m, 'y', file_id, EP_FILE_ID_SIZE);
        if (r >= 0)
                r = call_for_fd(c, m, "OpenFile");
        sd_bus_message_unref(m);
        return r;
}

int ep_loader_client_open_kallsyms(EpLoaderClient *c) {
        sd_bus_message *m = NULL;
        int r;

        if (!ep_loader_client_present(c))
                return -ENXIO;

        r = sd_bus_message_new_method_call(c->daemon->bus, &m, EP_BUS_LOADER, EP_PATH_LOADER,
                                           EP_IFACE_LOADER, "OpenKallsyms");
        if (r >= 0)
                r = call_for_fd(c, m, "OpenKallsyms");
        sd_bus_message_unref(m);
        return r;
}

int ep_loader_client_open_kernel_modules(EpLoaderClient *c) {
        sd_bus_message *m = NULL;
        int r;

        if (!ep_loader_client_present(c))
                return -ENXIO;

        r = sd_bus_message_new_method_call(c->daemon->bus, &m, EP_BUS_LOADER, EP_PATH_LOADER,
                                           EP_IFACE_LOADER, "OpenKernelModules");
        if (r >= 0)
                r = call_for_fd(c, m, "OpenKernelModules");
        sd_bus_message_unref(m);
        return r;
}

int ep_loader_client_open_perf_map(EpLoaderClient *c, uint32_t pid) {
        sd_bus_message *m = NULL;
        int r;

        if (!ep_loader_client_present(c))
                return -ENXIO;

        r = sd_bus_message_new_method_call(c->daemon->bus, &m, EP_BUS_LOADER, EP_PATH_LOADER,
                                           EP_IFACE_LOADER, "OpenPerfMap");
        if (r >= 0)
                r = sd_bus_message_append(m, "u", pid);
        if (r >= 0)
                r = call_for_fd(c, m, "OpenPerfMap");
        sd_bus_message_unref(m);
        return r;
}

int ep_loader_client_open_process_memory(EpLoaderClient *c, uint32_t pid, char *runtime, size_t runtime_size,
                                         uint32_t *ret_version) {
        _cleanup_(sd_bus_error_free) sd_bus_error error = SD_BUS_ERROR_NULL;
        sd_bus_message *m = NULL, *reply = NULL;
        const char *rt = NULL;
        uint32_t version = 0;
        int r, fd = -EBADF;

        if (runtime_size > 0)
                runtime[0] = '\0';
        *ret_version = 0;
        if (!ep_loader_client_present(c))
                return -ENXIO;

        r = sd_bus_message_new_method_call(c->daemon->bus, &m, EP_BUS_LOADER, EP_PATH_LOADER, EP_IFACE_LOADER,
                                           "OpenProcessMemory");
        if (r >= 0)
                r = sd_bus_message_append(m, "u", pid);
        if (r >= 0)
                r = sd_bus_call(c->daemon->bus, m, EP_LOADER_CALL_TIMEOUT_USEC, &error, &reply);
        sd_bus_message_unref(m);
        if (r < 0) {
                int e = map_error(&error, r);
                if (e != -ENOENT && e != -ENOMEDIUM)
                        log_debug_errno(r, "Loader call OpenProcessMemory failed: %s", error.message ?: "");
                return e;
        }

        r = sd_bus_message_read(reply, "hsu", &fd, &rt, &version);
        if (r >= 0) {
                fd = fcntl(fd, F_DUPFD_CLOEXEC, 3); /* the message owns the one it carried */
                r = fd < 0 ? -errno : fd;
        }
        if (r >= 0) {
                snprintf(runtime, runtime_size, "%s", rt);
                *ret_version = version;
        }
        sd_bus_message_unref(reply);
        if (r < 0) {
                log_debug_errno(r, "Bad reply to OpenProcessMemory: %m");
                return -EBADMSG;
        }
        return fd;
}

/* Reads the a(ttus) of ListBpfPrograms, refusing malformed entries (no length, wrapping) and
 * stopping at the bound. */
static int read_bpf_programs(sd_bus_message *reply, EpBpfProgram **ret, size_t *ret_n) {
        _cleanup_free_ EpBpfProgram *progs = NULL;
        size_t n = 0, cap = 0;
        int r;

        r = sd_bus_message_enter_container(reply, 'a', "(ttus)");
        if (r < 0)
                return r;
        for (;;) {
                uint64_t start, length;
                uint32_t id;
                const char *name;

                r = sd_bus_message_read(reply, "(ttus)", &start, &length, &id, &name);
                if (r < 0)
                        return r;
                if (r == 0)
                        break;
                if (length == 0 || start + length < start)
                        continue;
                if (n >= EP_LOADER_BPF_PROGRAMS_MAX)
                        break;
                if (n == cap) {
                        size_t ncap = MAX(cap * 2, (size_t) 64);
                        EpBpfProgram *p = reallocarray(progs, ncap, sizeof *p);
                        if (!p)
                                return -ENOMEM;
                        progs = p;
                        cap = ncap;
                }
                progs[n] = (EpBpfProgram) { .start = start, .length = length, .id = id };
                snprintf(progs[n].name, sizeof progs[n].name, "%s", name);
                n++;
        }
        *ret = TAKE_PTR(progs);
        *ret_n = n;
        return 0;
}

int ep_loader_client_list_bpf_programs(EpLoaderClient *c, EpBpfProgram **ret, size_t *ret_n) {
        _cleanup_(sd_bus_error_free) sd_bus_error error = SD_BUS_ERROR_NULL;
        sd_bus_message *m = NULL, *reply = NULL;
        int r;

        *ret = NULL;
        *ret_n = 0;
        if (!ep_loader_client_present(c))
                return -ENXIO;

        r = sd_bus_message_new_method_call(c->daemon->bus, &m, EP_BUS_LOADER, EP_PATH_LOADER, EP_IFACE_LOADER,
                                           "ListBpfPrograms");
        if (r >= 0)
                r = sd_bus_call(c->daemon->bus, m, EP_LOADER_CALL_TIMEOUT_USEC, &error, &reply);
        sd_bus_message_unref(m);
        if (r < 0) {
                int e = map_error(&error, r);
                log_debug_errno(r, "Loader call ListBpfPrograms failed: %s", error.message ?: "");
                return e;
        }
        r = read_bpf_programs(reply, ret, ret_n);
        sd_bus_message_unref(reply);
        if (r < 0) {
                log_debug_errno(r, "Bad reply to ListBpfPrograms: %m");
                return r == -ENOMEM ? r : -EIO;
        }
        return 0;
}

static int source_open_file(void *userdata, const uint8_t file_id[EP_FILE_ID_SIZE]) {
        return ep_loader_client_open_file(userdata, file_id);
}

static int source_open_kallsyms(void *userdata) {
        return ep_loader_client_open_kallsyms(userdata);
}

static int source_open_kernel_modules(void *userdata) {
        return ep_loader_client_open_kernel_modules(userdata);
}

static int source_open_perf_map(void *userdata, uint32_t pid) {
        return ep_loader_client_open_perf_map(userdata, pid);
}

static int source_open_process_memory(void *userdata, uint32_t pid, char *runtime, size_t runtime_size,
                                      uint32_t *ret_version) {
        return ep_loader_client_open_process_memory(userdata, pid, runtime, runtime_size, ret_version);
}

static int source_list_bpf_programs(void *userdata, EpBpfProgram **ret, size_t *ret_n) {
        return ep_loader_client_list_bpf_programs(userdata, ret, ret_n);
}

EpFileSource ep_loader_client_source(EpLoaderClient *c) {
        return (EpFileSource) {
                .open_file = source_open_file,
                .open_kallsyms = source_open_kallsyms,
                .open_kernel_modules = source_open_kernel_modules,
                .open_perf_map = source_open_perf_map,
                .list_bpf_programs = source_list_bpf_programs,
                .open_process_memory = source_open_process_memory,
                .userdata = c,
        };
}
