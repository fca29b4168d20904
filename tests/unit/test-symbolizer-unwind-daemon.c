/* SPDX-License-Identifier: MIT */
/* Symbolizer1.GetUnwindTable end to end on a private dbus-daemon (skipped without
 * dbus-daemon): this process plays the loader.
 *   - the answer is a sealed memfd holding a valid table for the file;
 *   - the second call is a cache hit; so is the first call after a restart (same cache dir);
 *   - errors: a file ID that is not the descriptor's, a file that is not ELF (BadFile), a file
 *     ID of the wrong length (InvalidArgs);
 *   - the Unwind* properties count, and the daemon keeps serving other calls meanwhile;
 *   - Symbolizer1.DetectRuntime: "" for a program, "cpython" with facts the loader accepts for a
 *     libpython (when one is installed), BadFile and InvalidArgs; answered while an extraction
 *     is held (its sandbox stopped). */

#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <systemd/sd-bus.h>
#include <time.h>

#include "bus.h"
#include "runtime-facts.h"
#include "test-private-bus.h"
#include "test-symbolizer-unwind-util.h"

static pid_t bus_pid = -1, sym_pid = -1, held_pid = -1; /* held_pid: a sandbox this test stopped */
static char workdir[] = "/tmp/test-symbolizer-unwind-daemon-XXXXXX";
static char cache_dir[300];

static void cleanup(void) {
        char path[400];

        if (held_pid > 0)
                kill(held_pid, SIGKILL);
        if (sym_pid > 0)
                kill(sym_pid, SIGKILL);
        if (bus_pid > 0)
                kill(bus_pid, SIGTERM);
        snprintf(path, sizeof path, "%s/bus.sock", workdir);
        unlink(path);
        const char *files[] = { "unwind-tables.db", "unwind-tables.db-wal", "unwind-tables.db-shm",
                                "symbols.db", "symbols.db-wal", "symbols.db-shm" };
        for (size_t i = 0; i < ELEMENTSOF(files); i++) {
                snprintf(path, sizeof path, "%s/%s", cache_dir, files[i]);
                unlink(path);
        }
        rmdir(cache_dir);
        rmdir(workdir);
}

static bool name_has_owner(sd_bus *bus, const char *name) {
        sd_bus_message *reply = NULL;
        int has = 0;

        if (sd_bus_call_method(bus, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                               "NameHasOwner", NULL, &reply, "s", name) < 0)
                return false;
        (void) sd_bus_message_read(reply, "b", &has);
        sd_bus_message_unref(reply);
        return has;
}

static void start_symbolizer(sd_bus *bus, const char *symbolizer) {
        char arg[400];

        snprintf(arg, sizeof arg, "--cache-dir=%s", cache_dir);
        sym_pid = fork();
        CHECK(sym_pid >= 0);
        if (sym_pid == 0) {
                execl(symbolizer, symbolizer, "--log-level=debug", arg, (char *) NULL);
                _exit(127);
        }
        ASSERT_EVENTUALLY(name_has_owner(bus, EP_BUS_SYMBOLIZER), 30, "%s has no owner (symbolizer pid %d)",
                          EP_BUS_SYMBOLIZER, (int) sym_pid);
}

static void stop_symbolizer(void) {
        int status;

        CHECK(kill(sym_pid, SIGTERM) == 0);
        CHECK(waitpid(sym_pid, &status, 0) == sym_pid);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        sym_pid = -1;
}

static uint64_t get_t(sd_bus *bus, const char *name) {
        uint64_t v = 0;
        CHECK(sd_bus_get_property_trivial(bus, EP_BUS_SYMBOLIZER, EP_PATH_SYMBOLIZER, EP_IFACE_SYMBOLIZER, name, NULL,
                                          't', &v) >= 0);
        return v;
}

/* Calls GetUnwindTable; returns the table fd (ours), or -1 with the error name in ret_error. */
static int get_table(sd_bus *bus, const char *path, const uint8_t *id, size_t id_len, char *ret_error,
                     size_t error_size) {
        _cleanup_(sd_bus_error_free) sd_bus_error error = SD_BUS_ERROR_NULL;
        sd_bus_message *m = NULL, *reply = NULL;
        int fd = open(path, O_RDONLY | O_CLOEXEC), table = -1, r;

        CHECK(fd >= 0);
        CHECK(sd_bus_message_new_method_call(bus, &m, EP_BUS_SYMBOLIZER, EP_PATH_SYMBOLIZER, EP_IFACE_SYMBOLIZER,
                                             "GetUnwindTable") >= 0);
        CHECK(sd_bus_message_append(m, "h", fd) >= 0);
        CHECK(sd_bus_message_append_array(m, 'y', id, id_len) >= 0);
        r = sd_bus_call(bus, m, 30 * 1000000ULL, &error, &reply);
        if (r < 0)
                snprintf(ret_error, error_size, "%s", error.name ?: strerror(-r));
        else {
                int t;
                CHECK(sd_bus_message_read(reply, "h", &t) >= 0);
                table = fcntl(t, F_DUPFD_CLOEXEC, 3);
                CHECK(table >= 0);
        }
        sd_bus_message_unref(m);
        sd_bus_message_unref(reply);
        close(fd);
        return table;
}

/* The table behind the fd: sealed, read-only for us too, and valid. */
static void check_table(int fd, const uint8_t id[EP_FILE_ID_SIZE]) {
        struct stat st;
        int seals = fcntl(fd, F_GET_SEALS);

        CHECK(seals >= 0);
        CHECK((seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL)) ==
              (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL));
        CHECK(fstat(fd, &st) == 0 && st.st_size > 0);
        void *p = mmap(NULL, (size_t) st.st_size, PROT_READ, MAP_SHARED, fd, 0);
        CHECK(p != MAP_FAILED);
        CHECK_INT(ep_unwind_table_validate(p, (size_t) st.st_size), 0);
        CHECK(memcmp(ep_unwind_table_header(p)->file_id, id, EP_FILE_ID_SIZE) == 0);
        CHECK(ep_unwind_table_header(p)->n_entries > 10);
        /* Writable mappings are refused. */
        CHECK(mmap(NULL, (size_t) st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED);
        munmap(p, (size_t) st.st_size);
}

/* Calls DetectRuntime; returns 0 with the runtime and facts, or -1 with the error name. */
static int detect_runtime(sd_bus *bus, const char *path, const uint8_t *id, size_t id_len, char *ret_runtime,
                          size_t runtime_size, EpCPythonFacts *ret_facts, size_t *ret_facts_size, char *ret_error,
                          size_t error_size) {
        _cleanup_(sd_bus_error_free) sd_bus_error error = SD_BUS_ERROR_NULL;
        sd_bus_message *m = NULL, *reply = NULL;
        int fd = open(path, O_RDONLY | O_CLOEXEC), r;

        CHECK(fd >= 0);
        CHECK(sd_bus_message_new_method_call(bus, &m, EP_BUS_SYMBOLIZER, EP_PATH_SYMBOLIZER, EP_IFACE_SYMBOLIZER,
                                             "DetectRuntime") >= 0);
        CHECK(sd_bus_message_append(m, "h", fd) >= 0);
        CHECK(sd_bus_message_append_array(m, 'y', id, id_len) >= 0);
        r = sd_bus_call(bus, m, 30 * 1000000ULL, &error, &reply);
        if (r < 0)
                snprintf(ret_error, error_size, "%s", error.name ?: strerror(-r));
        else {
                const char *runtime;
                const void *facts;
                size_t size;

                CHECK(sd_bus_message_read(reply, "s", &runtime) >= 0);
                CHECK(sd_bus_message_read_array(reply, 'y', &facts, &size) >= 0);
                snprintf(ret_runtime, runtime_size, "%s", runtime);
                *ret_facts_size = size;
                memcpy(ret_facts, facts, MIN(size, sizeof *ret_facts));
        }
        sd_bus_message_unref(m);
        sd_bus_message_unref(reply);
        close(fd);
        return r < 0 ? -1 : 0;
}

static void check_detect_runtime(sd_bus *bus, const char *prog, const uint8_t id[EP_FILE_ID_SIZE]) {
        static const char *const libpythons[] = {
                "/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0",
                "/root/.pyenv/versions/3.12.1/lib/libpython3.12.so.1.0",
        };
        uint8_t wrong[EP_FILE_ID_SIZE] = { 0x42 };
        char runtime[64], err[256];
        EpCPythonFacts facts, checked;
        size_t size = 0;

        CHECK_INT(detect_runtime(bus, prog, id, EP_FILE_ID_SIZE, runtime, sizeof runtime, &facts, &size, err,
                                 sizeof err),
                  0);
        CHECK_STR(runtime, "");
        CHECK_INT(size, 0);
        CHECK_INT(detect_runtime(bus, prog, wrong, sizeof wrong, runtime, sizeof runtime, &facts, &size, err,
                                 sizeof err),
                  -1);
        CHECK_STR(err, "org.ebpfprofiler.Error.BadFile");
        CHECK_INT(detect_runtime(bus, prog, id, 5, runtime, sizeof runtime, &facts, &size, err, sizeof err), -1);
        CHECK_STR(err, "org.freedesktop.DBus.Error.InvalidArgs");

        for (size_t i = 0; i < ELEMENTSOF(libpythons); i++) {
                uint8_t pid[EP_FILE_ID_SIZE];
                int fd = open(libpythons[i], O_RDONLY | O_CLOEXEC);

                if (fd < 0)
                        continue;
                CHECK_INT(ep_file_id_from_fd(fd, pid, NULL), 0);
                close(fd);
                CHECK_INT(detect_runtime(bus, libpythons[i], pid, sizeof pid, runtime, sizeof runtime, &facts, &size,
                                         err, sizeof err),
                          0);
                CHECK_STR(runtime, EP_RUNTIME_CPYTHON);
                CHECK_INT(size, sizeof facts);
                CHECK_INT(ep_cpython_facts_validate(&facts, size, &checked), 0);
                CHECK_INT(checked.major, 3);
                printf("DetectRuntime(%s): cpython %u.%u\n", libpythons[i], checked.major, checked.minor);
        }
}

/* The symbolizer's child with the given state letter ('\0': any), or 0: the sandbox of the
 * extraction in progress, when one is. */
static pid_t symbolizer_child(char state) {
        DIR *d = opendir("/proc");
        struct dirent *de;
        pid_t found = 0;

        CHECK(d);
        while (!found && (de = readdir(d))) {
                char path[300], buf[512];
                const char *end;
                int ppid = 0;
                char s = 0;
                FILE *f;

                if (de->d_name[0] < '1' || de->d_name[0] > '9')
                        continue;
                snprintf(path, sizeof path, "/proc/%s/stat", de->d_name);
                f = fopen(path, "re");
                if (!f)
                        continue;
                buf[0] = '\0';
                (void) !fgets(buf, sizeof buf, f);
                fclose(f);
                end = strrchr(buf, ')'); /* the name in parentheses may hold anything */
                if (end && sscanf(end + 1, " %c %d", &s, &ppid) == 2 && ppid == sym_pid && (!state || s == state))
                        found = (pid_t) atoi(de->d_name);
        }
        closedir(d);
        return found;
}

static int on_big_reply(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        int *state = userdata;
        *state = sd_bus_message_is_method_error(m, NULL) ? -1 : 1;
        return 0;
}

/* Extraction of a big library runs on the worker: a property read during it is answered
 * first. (Were the loop blocked, the table's reply would already be queued when the property
 * reply arrives.) Needs a library that takes a while; skipped without one. */
/* Handles one bus message, or waits up to 100 ms for one. */
static void bus_step(sd_bus *bus) {
        if (sd_bus_process(bus, NULL) <= 0)
                (void) sd_bus_wait(bus, 100000);
}

static void check_not_blocking(sd_bus *bus, const char *big) {
        sd_bus_message *m = NULL;
        sd_bus_slot *slot = NULL;
        uint8_t id[EP_FILE_ID_SIZE];
        int state = 0, fd;

        fd = open(big, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
                TEST_SKIP_PART("no %s: the responsiveness check does not run", big);
                return;
        }
        CHECK_INT(ep_file_id_from_fd(fd, id, NULL), 0);
        CHECK(sd_bus_message_new_method_call(bus, &m, EP_BUS_SYMBOLIZER, EP_PATH_SYMBOLIZER, EP_IFACE_SYMBOLIZER,
                                             "GetUnwindTable") >= 0);
        CHECK(sd_bus_message_append(m, "h", fd) >= 0);
        CHECK(sd_bus_message_append_array(m, 'y', id, sizeof id) >= 0);
        CHECK(sd_bus_call_async(bus, &slot, m, on_big_reply, &state, 60 * 1000000ULL) >= 0);
        close(fd);

        (void) get_t(bus, "UnwindTables");
        while (sd_bus_process(bus, NULL) > 0)
                ;
        CHECK_INT(state, 0);

        ASSERT_EVENTUALLY((bus_step(bus), state != 0), 60, "no reply to GetUnwindTable(%s)", big);
        CHECK_INT(state, 1);
        sd_bus_slot_unref(slot);
        sd_bus_message_unref(m);
}

/* Sends GetUnwindTable(path) and stops the sandbox of its extraction (SIGSTOP) while it runs:
 * true with the table worker held until *ret_child gets SIGCONT, the reply to come into
 * *state; false when the extraction ended before it could be stopped (*state then set). */
static bool hold_extraction(sd_bus *bus, const char *path, int *state, sd_bus_slot **ret_slot, pid_t *ret_child) {
        sd_bus_message *m = NULL;
        uint8_t id[EP_FILE_ID_SIZE];
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        pid_t child = 0;

        CHECK(fd >= 0);
        CHECK_INT(ep_file_id_from_fd(fd, id, NULL), 0);
        CHECK(sd_bus_message_new_method_call(bus, &m, EP_BUS_SYMBOLIZER, EP_PATH_SYMBOLIZER, EP_IFACE_SYMBOLIZER,
                                             "GetUnwindTable") >= 0);
        CHECK(sd_bus_message_append(m, "h", fd) >= 0);
        CHECK(sd_bus_message_append_array(m, 'y', id, sizeof id) >= 0);
        CHECK(sd_bus_call_async(bus, ret_slot, m, on_big_reply, state, 120 * 1000000ULL) >= 0);
        sd_bus_message_unref(m);
        close(fd);

        /* Either the sandbox shows up, or the reply comes first (a fast machine, a small file). */
        ASSERT_EVENTUALLY(({
                                  while (sd_bus_process(bus, NULL) > 0)
                                          ;
                                  child = symbolizer_child('\0');
                                  child > 0 || *state != 0;
                          }),
                          120, "no sandbox and no reply for GetUnwindTable(%s)", path);
        if (child <= 0 || kill(child, SIGSTOP) < 0)
                return false;
        /* Stopped, or it had exited already: then the reply is on its way. */
        ASSERT_EVENTUALLY(symbolizer_child('T') == child || symbolizer_child('\0') != child, 30,
                          "sandbox %d neither stopped nor gone", (int) child);
        if (symbolizer_child('T') != child)
                return false;
        *ret_child = held_pid = child;
        return true;
}

/* DetectRuntime does not wait for an extraction: with the sandbox of an extraction stopped, so
 * that the table worker is held for as long as this test says, a detection is still answered;
 * the table comes once the sandbox goes on. (Python frames of a process wait for its
 * detection; on a first start every table is extracted, some for seconds.) */
static void check_detect_while_extracting(sd_bus *bus, const char *prog, const uint8_t prog_id[EP_FILE_ID_SIZE]) {
        /* Not libLLVM-15: check_not_blocking() needs its table not cached yet. */
        static const char *const big[] = {
                "/usr/lib/x86_64-linux-gnu/libLLVM-14.so.1",
                "/usr/bin/x86_64-linux-gnu-lto-dump-12",
                "/usr/bin/node",
        };
        char runtime[64], err[256];
        EpCPythonFacts facts;
        size_t size = 0;

        for (size_t i = 0; i < ELEMENTSOF(big); i++) {
                sd_bus_slot *slot = NULL;
                pid_t child = 0;
                int state = 0;

                if (access(big[i], R_OK) < 0)
                        continue;
                if (!hold_extraction(bus, big[i], &state, &slot, &child)) {
                        ASSERT_EVENTUALLY((bus_step(bus), state != 0), 120, "no reply to GetUnwindTable(%s)", big[i]);
                        sd_bus_slot_unref(slot);
                        continue;
                }
                CHECK_INT(detect_runtime(bus, prog, prog_id, EP_FILE_ID_SIZE, runtime, sizeof runtime, &facts,
                                         &size, err, sizeof err),
                          0);
                CHECK_STR(runtime, "");
                while (sd_bus_process(bus, NULL) > 0)
                        ;
                CHECK_INT(state, 0); /* the extraction is still stopped */
                CHECK(kill(child, SIGCONT) == 0);
                held_pid = -1;
                ASSERT_EVENTUALLY((bus_step(bus), state != 0), 120, "no reply to GetUnwindTable(%s)", big[i]);
                CHECK_INT(state, 1);
                sd_bus_slot_unref(slot);
                printf("DetectRuntime answered while the extraction of %s was stopped\n", big[i]);
                return;
        }
        TEST_SKIP_PART("no extraction could be stopped while it ran (no big file, or each ended first)");
}

int main(void) {
        const char *symbolizer = test_env("SYM_TEST_SYMBOLIZER"), *prog = test_env("UNW_PROG_OMIT");
        char address[512] = "", err[256], text[512];
        uint8_t id[EP_FILE_ID_SIZE], wrong[EP_FILE_ID_SIZE] = { 0x42 };
        sd_bus *bus = NULL;
        int fd;

        if (access("/usr/bin/dbus-daemon", X_OK) < 0) {
                fprintf(stderr, "dbus-daemon not installed, skipping\n");
                return 77;
        }
        fd = open(prog, O_RDONLY | O_CLOEXEC);
        CHECK(fd >= 0);
        CHECK_INT(ep_file_id_from_fd(fd, id, NULL), 0);
        close(fd);

        CHECK(mkdtemp(workdir));
        snprintf(cache_dir, sizeof cache_dir, "%s/cache", workdir); /* the daemon creates it */
        atexit(cleanup);

        bus_pid = test_private_bus_start(workdir, address, sizeof address);
        CHECK(bus_pid > 0);
        CHECK(setenv("DBUS_SYSTEM_BUS_ADDRESS", address, 1) == 0);
        CHECK(sd_bus_open_system(&bus) >= 0);

        start_symbolizer(bus, symbolizer);

        /* First call: extracted. */
        fd = get_table(bus, prog, id, sizeof id, err, sizeof err);
        if (fd < 0)
                TEST_FAIL("GetUnwindTable: %s", err);
        check_table(fd, id);
        close(fd);
        CHECK_INT(get_t(bus, "UnwindTables"), 1);
        CHECK_INT(get_t(bus, "UnwindCacheMisses"), 1);
        CHECK_INT(get_t(bus, "UnwindCacheHits"), 0);
        CHECK(get_t(bus, "UnwindExtractNsec") > 0);
        CHECK(get_t(bus, "UnwindCacheBytes") > 0);
        CHECK_INT(get_t(bus, "UnwindQueue"), 0); /* answered: no longer queued */

        /* Second call: from the cache. */
        fd = get_table(bus, prog, id, sizeof id, err, sizeof err);
        CHECK(fd >= 0);
        check_table(fd, id);
        close(fd);
        CHECK_INT(get_t(bus, "UnwindCacheHits"), 1);
        CHECK_INT(get_t(bus, "UnwindCacheMisses"), 1);

        /* Errors. */
        CHECK(get_table(bus, prog, wrong, sizeof wrong, err, sizeof err) < 0);
        CHECK_STR(err, "org.ebpfprofiler.Error.BadFile");
        CHECK(get_table(bus, prog, id, 5, err, sizeof err) < 0);
        CHECK_STR(err, "org.freedesktop.DBus.Error.InvalidArgs");
        {
                char text_path[400];
                snprintf(text_path, sizeof text_path, "%s/not-elf", workdir);
                int t = open(text_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
                CHECK(t >= 0);
                snprintf(text, sizeof text, "this is not an ELF file, it only has some words in it\n");
                CHECK(write(t, text, strlen(text)) == (ssize_t) strlen(text));
                close(t);
                uint8_t tid[EP_FILE_ID_SIZE];
                t = open(text_path, O_RDONLY | O_CLOEXEC);
                CHECK_INT(ep_file_id_from_fd(t, tid, NULL), 0);
                close(t);
                CHECK(get_table(bus, text_path, tid, sizeof tid, err, sizeof err) < 0);
                CHECK_STR(err, "org.ebpfprofiler.Error.BadFile");
                unlink(text_path);
        }
        CHECK_INT(get_t(bus, "UnwindExtractErrors"), 2);
        CHECK_INT(get_t(bus, "UnwindTables"), 2);

        /* Runtime detection touches no table counter. */
        check_detect_runtime(bus, prog, id);
        CHECK_INT(get_t(bus, "UnwindTables"), 2);
        CHECK_INT(get_t(bus, "UnwindQueue"), 0);

        check_detect_while_extracting(bus, prog, id);
        check_not_blocking(bus, "/usr/lib/x86_64-linux-gnu/libLLVM-15.so.1");

        /* A restart reuses the cache: no extraction at all. */
        stop_symbolizer();
        start_symbolizer(bus, symbolizer);
        fd = get_table(bus, prog, id, sizeof id, err, sizeof err);
        CHECK(fd >= 0);
        check_table(fd, id);
        close(fd);
        CHECK_INT(get_t(bus, "UnwindCacheHits"), 1);
        CHECK_INT(get_t(bus, "UnwindCacheMisses"), 0);
        CHECK_INT(get_t(bus, "UnwindExtractNsec"), 0);

        stop_symbolizer();
        sd_bus_flush_close_unref(bus);
        TEST_DONE("symbolizer-unwind-daemon");
}
