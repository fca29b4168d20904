/* SPDX-License-Identifier: MIT */
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>

#include "daemon.h"
#include "file-id.h"
#include "file-probe.h"
#include "hashmap.h"
#include "log.h"
#include "passing-error.h"
#include "proc-maps.h"

typedef struct InodeKey {
        uint64_t dev, ino;
} InodeKey;

/* What an inode was identified as, while a mapping of a tracked process maps it. The entry
 * holds the inode (pin, an O_PATH descriptor): an inode number is given to another file only
 * once the inode is freed, which it is not while pinned, so a new file is never taken for one
 * whose number it got. Without the pin, a process that unmapped the file and was not looked at
 * since (its mappings are read again only when a sample needs that) would leave the entry to
 * the next file made with that number. The pin goes with the entry's last user. */
typedef struct InodeEntry {
        uint32_t file_key;
        uint32_t users; /* mappings of tracked processes */
        int pin;
        uid_t charged; /* the user whose share holds the pin (0: none, root's) */
} InodeEntry;

struct EpProcTable {
        char *proc_root;
        EpFileProber *prober; /* opens and identifies mapped files off the loop */
        uint64_t boot_to_realtime_ns; /* CLOCK_REALTIME - CLOCK_BOOTTIME */
        uint64_t tick_ns;
        EpHashmap *procs;  /* pid_t → EpProcess * */
        EpHashmap *inodes; /* InodeKey → InodeEntry */
        /* uid_t → uint32_t: the inodes pinned for a non-root user's mappings, at most
         * max_user_pins each, so that one user's thousands of files cannot take every
         * descriptor the loader may open (root's files are not counted). */
        EpHashmap *user_pins;
        unsigned max_user_pins;
        uint64_t identify_refusals;
        EpHashmap *ids;    /* file ID → uint32_t file_key */
        EpHashmap *files;  /* uint32_t key → EpFile * */
        uint32_t last_key; /* keys are not given twice (a consumer may still know an old one) */
        ep_file_identify_t identify;
        void *identify_userdata;
        ep_process_forget_t forget;
        void *forget_userdata;
        /* The vDSO as a file (a sealed memfd holding the loader's own copy): every 64-bit
         * process maps the same image. */
        int vdso_fd;
        uint32_t vdso_key;
        uint64_t vdso_size;
};

static int identify_by_proc(pid_t pid, const EpMapsLine *m, void *userdata, EpFileIdentity *ret_ident,
                            int *ret_pin);

/* Hash map values are stored unaligned: copy them in and out. */
static void *load_ptr(const void *v) {
        void *p;
        memcpy(&p, v, sizeof p);
        return p;
}

static uint32_t load_u32(const void *v) {
        uint32_t x;
        memcpy(&x, v, sizeof x);
        return x;
}

static EpFile *file_free(EpFile *f) {
        if (f) {
                free(f->path);
                free(f);
        }
        return NULL;
}
DEFINE_TRIVIAL_CLEANUP_FUNC(EpFile *, file_free);

int ep_proc_table_new(const char *proc_root, uint64_t realtime_minus_boottime_ns, EpProcTable **ret) {
        _cleanup_(ep_proc_table_freep) EpProcTable *t = NULL;
        long hz = sysconf(_SC_CLK_TCK);

        t = calloc(1, sizeof *t);
        if (!t)
                return -ENOMEM;
        t->proc_root = strdup(proc_root ?: "/proc");
        t->procs = ep_hashmap_new(sizeof(pid_t), sizeof(EpProcess *));
        t->inodes = ep_hashmap_new(sizeof(InodeKey), sizeof(InodeEntry));
        t->user_pins = ep_hashmap_new(sizeof(uid_t), sizeof(uint32_t));
        t->ids = ep_hashmap_new(EP_FILE_ID_SIZE, sizeof(uint32_t));
        t->files = ep_hashmap_new(sizeof(uint32_t), sizeof(EpFile *));
        if (!t->proc_root || !t->procs || !t->inodes || !t->user_pins || !t->ids || !t->files ||
            ep_file_prober_new(&t->prober) < 0)
                return -ENOMEM;
        t->max_user_pins = EP_PROC_TABLE_USER_PINS_DEFAULT;
        t->boot_to_realtime_ns = realtime_minus_boottime_ns;
        t->tick_ns = NSEC_PER_SEC / (uint64_t) (hz > 0 ? hz : 100);
        t->identify = identify_by_proc;
        t->identify_userdata = t;
        t->vdso_fd = -EBADF;
        *ret = TAKE_PTR(t);
        return 0;
}

/* The inodes of mappings v[0..n) get one user more (delta 1) or less (-1); an inode with no
 * user left is forgotten, and let go. */
static void inodes_use(EpProcTable *t, const EpMapping *v, size_t n, int delta) {
        for (size_t i = 0; i < n; i++) {
                InodeKey ik = { .dev = v[i].dev, .ino = v[i].ino };
                void *slot;
                InodeEntry e;

                if (v[i].ino == 0 || v[i].file_key == 0 || !(slot = ep_hashmap_get(t->inodes, &ik)))
                        continue;
                memcpy(&e, slot, sizeof e);
                e.users += (uint32_t) delta;
                if (e.users == 0) {
                        (void) ep_hashmap_remove(t->inodes, &ik, NULL);
                        (void) close_nointr(e.pin);
                        if (e.charged != 0)
                                (void) ep_hashmap_count_add(t->user_pins, &e.charged, -1);
                } else
                        memcpy(slot, &e, sizeof e);
        }
}

/* The entries file_key_for() made for mappings v[0..n) that no process holds: those of a read
 * of the mappings that failed part way. */
static void inodes_drop_unused(EpProcTable *t, const EpMapping *v, size_t n) {
        inodes_use(t, v, n, 1);
        inodes_use(t, v, n, -1);
}

void ep_process_release_inodes(EpProcTable *t, EpProcess *p) {
        if (p->inodes_released)
                return;
        inodes_use(t, p->mappings, p->n_mappings, -1);
        p->inodes_released = true;
}

static EpProcess *process_free(EpProcTable *t, EpProcess *p) {
        if (!p)
                return NULL;
        ep_process_release_inodes(t, p);
        free(p->exe);
        free(p->mappings);
        free(p->held_files);
        free(p);
        return NULL;
}

EpProcTable *ep_proc_table_free(EpProcTable *t) {
        size_t state = 0;
        EpProcess *p;

        if (!t)
                return NULL;
        while (t->procs && ep_proc_table_iterate(t, &state, &p))
                process_free(t, p);
        ep_hashmap_free(t->procs);
        if (t->inodes) {
                const void *k;
                void *v;

                state = 0;
                while (ep_hashmap_iterate(t->inodes, &state, &k, &v)) {
                        InodeEntry e;

                        memcpy(&e, v, sizeof e);
                        (void) close_nointr(e.pin);
                }
        }
        ep_hashmap_free(t->inodes);
        ep_hashmap_free(t->user_pins);
        ep_hashmap_free(t->ids);
        if (t->files) {
                const void *k;
                void *v;

                state = 0;
                while (ep_hashmap_iterate(t->files, &state, &k, &v))
                        file_free(load_ptr(v));
                ep_hashmap_free(t->files);
        }
        (void) close_nointr(t->vdso_fd);
        free(t->proc_root);
        ep_file_prober_free(t->prober);
        free(t);
        return NULL;
}

void ep_proc_table_set_identify(EpProcTable *t, ep_file_identify_t identify, void *userdata) {
        t->identify = identify;
        t->identify_userdata = userdata;
}

void ep_proc_table_set_forget(EpProcTable *t, ep_process_forget_t forget, void *userdata) {
        t->forget = forget;
        t->forget_userdata = userdata;
}

EpProcess *ep_proc_table_get(EpProcTable *t, pid_t pid) {
        const void *v = ep_hashmap_get(t->procs, &pid);
        return v ? load_ptr(v) : NULL;
}

bool ep_proc_table_iterate(EpProcTable *t, size_t *state, EpProcess **ret) {
        const void *key;
        void *value;

        if (!ep_hashmap_iterate(t->procs, state, &key, &value))
                return false;
        *ret = load_ptr(value);
        return true;
}

size_t ep_proc_table_n_processes(const EpProcTable *t) {
        return ep_hashmap_size(t->procs);
}

EpFile *ep_proc_table_file(EpProcTable *t, uint32_t key) {
        const void *v = ep_hashmap_get(t->files, &key);
        return v ? load_ptr(v) : NULL;
}

uint64_t ep_proc_table_probe_timeouts(const EpProcTable *t) {
        return ep_file_prober_timeouts(t->prober);
}

size_t ep_proc_table_n_files(const EpProcTable *t) {
        return ep_hashmap_size(t->files);
}

/* Marks the files p maps as used at now. */
static void files_mark_used(EpProcTable *t, const EpProcess *p, uint64_t now) {
        for (size_t i = 0; i < p->n_mappings; i++) {
                EpFile *f = p->mappings[i].file_key ? ep_proc_table_file(t, p->mappings[i].file_key) : NULL;

                if (f)
                        f->used_ns = now;
        }
}

size_t ep_proc_table_prune_files(EpProcTable *t, uint64_t now, uint64_t grace_ns, ep_file_used_t used,
                                 ep_file_forget_t forget, void *userdata) {
        _cleanup_free_ uint32_t *old = NULL;
        size_t state = 0, n = 0, removed = 0;
        const void *k;
        void *v;
        EpProcess *p;

        while (ep_proc_table_iterate(t, &state, &p))
                files_mark_used(t, p, now);
        old = malloc(MAX(ep_hashmap_size(t->files), (size_t) 1) * sizeof *old);
        if (!old)
                return 0; /* next time */
        state = 0;
        while (ep_hashmap_iterate(t->files, &state, &k, &v)) {
                EpFile *f = load_ptr(v);

                if (f->key == t->vdso_key || (used && used(f->key, userdata)))
                        f->used_ns = now;
                else if (now - f->used_ns >= grace_ns)
                        old[n++] = f->key;
        }
        for (size_t i = 0; i < n; i++) { /* removed after the walk, which a removal would upset */
                EpFile *f = ep_proc_table_file(t, old[i]);

                if (forget)
                        forget(f->key, userdata);
                (void) ep_hashmap_remove(t->ids, f->id, NULL);
                (void) ep_hashmap_remove(t->files, &old[i], NULL);
                file_free(f);
                removed++;
        }
        return removed;
}

void ep_proc_table_set_max_user_pins(EpProcTable *t, unsigned max) {
        t->max_user_pins = max;
}

uint64_t ep_proc_table_identify_refusals(const EpProcTable *t) {
        return t->identify_refusals;
}

uint32_t ep_proc_table_find_file_id(EpProcTable *t, const uint8_t id[EP_FILE_ID_SIZE]) {
        const void *v = ep_hashmap_get(t->ids, id);
        return v ? load_u32(v) : 0;
}

/* ---- /proc reading ---- */

static int proc_path(const EpProcTable *t, pid_t pid, const char *what, char *buf, size_t size) {
        int n = snprintf(buf, size, "%s/%d/%s", t->proc_root, (int) pid, what);
        return n < 0 || (size_t) n >= size ? -ENAMETOOLONG : 0;
}

/* Reads a small /proc file into a NUL-terminated heap buffer (at most max bytes). */
static int read_small_file(const char *path, size_t max, char **ret) {
        _cleanup_close_ int fd = -EBADF;
        _cleanup_free_ char *buf = NULL;
        size_t size = 0, cap = 4096;

        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return -errno;
        buf = malloc(cap);
        if (!buf)
                return -ENOMEM;
        for (;;) {
                ssize_t k;
                if (size + 1 >= cap) {
                        if (cap >= max)
                                break;
                        char *nb = realloc(buf, cap * 2);
                        if (!nb)
                                return -ENOMEM;
                        buf = nb;
                        cap *= 2;
                }
                k = read(fd, buf + size, cap - size - 1);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (k == 0)
                        break;
                size += k;
        }
        buf[size] = 0;
        *ret = TAKE_PTR(buf);
        return 0;
}

/* The real user of pid, which a process cannot hide by making itself non-dumpable (the owner
 * of /proc/PID would then say root); (uid_t) -1 when unknown. */
static uid_t read_real_uid(EpProcTable *t, pid_t pid) {
        _cleanup_free_ char *status = NULL;
        char path[PATH_MAX];
        EpStatusIds ids;

        if (proc_path(t, pid, "status", path, sizeof path) < 0 || read_small_file(path, 4096, &status) < 0 ||
            ep_parse_status_ids(status, &ids) < 0 || ids.uid < 0 || ids.uid >= UINT32_MAX)
                return (uid_t) -1;
        return (uid_t) ids.uid;
}

static int read_metadata(EpProcTable *t, EpProcess *p, bool *ret_changed) {
        _cleanup_free_ char *stat = NULL, *comm = NULL, *cgroup = NULL;
        char path[PATH_MAX], exe[PATH_MAX], container_id[65];
        uint64_t ticks;
        ssize_t n;
        int r;

        *ret_changed = false;
        r = proc_path(t, p->pid, "stat", path, sizeof path);
        if (r >= 0)
                r = read_small_file(path, 4096, &stat);
        if (r >= 0)
                r = ep_parse_stat_starttime(stat, &ticks);
        if (r < 0)
                return r;
        if (p->start_ticks != ticks) {
                *ret_changed = true;
                p->start_ticks = ticks;
                p->start_time_ns = t->boot_to_realtime_ns + ticks * t->tick_ns;
                p->uid = (uid_t) -1; /* another process: read below */
        }
        /* Once per process, not per re-read of its mappings: its share of the tables is
         * counted against its user. */
        if (p->uid == (uid_t) -1)
                p->uid = read_real_uid(t, p->pid);

        if (proc_path(t, p->pid, "comm", path, sizeof path) >= 0 && read_small_file(path, 64, &comm) >= 0) {
                comm[strcspn(comm, "\n")] = 0;
                if (strncmp(p->comm, comm, sizeof p->comm - 1) != 0) {
                        *ret_changed = true;
                        snprintf(p->comm, sizeof p->comm, "%s", comm);
                }
        }

        exe[0] = 0;
        if (proc_path(t, p->pid, "exe", path, sizeof path) >= 0) {
                n = readlink(path, exe, sizeof exe - 1);
                exe[n > 0 ? n : 0] = 0;
        }
        if (!p->exe || !streq(p->exe, exe)) {
                char *e = strdup(exe);
                if (!e)
                        return -ENOMEM;
                free(p->exe);
                p->exe = e;
                *ret_changed = true;
        }

        container_id[0] = 0;
        if (proc_path(t, p->pid, "cgroup", path, sizeof path) >= 0 &&
            read_small_file(path, 64 * 1024, &cgroup) >= 0)
                ep_parse_container_id(cgroup, container_id);
        if (!streq(container_id, p->container_id)) {
                memcpy(p->container_id, container_id, sizeof container_id);
                *ret_changed = true;
        }
        return 0;
}

/* ---- files ---- */

/* The file of pid's mapping [start, end): /proc/PID/map_files names the mapped inode itself,
 * never the path the process mapped it from (the process can put a FIFO, a symlink or a file
 * of a FUSE mount it serves there). No fallback to that path: a mapping that is gone has
 * nothing to identify. Opened and read off the loop, within a time limit (file-probe.h).
 * map_files needs CAP_CHECKPOINT_RESTORE (or CAP_SYS_ADMIN): docs/systemd.md. */
static int map_files_path(const EpProcTable *t, pid_t pid, uint64_t start, uint64_t end, char path[static PATH_MAX]) {
        int n = snprintf(path, PATH_MAX, "%s/%d/map_files/%" PRIx64 "-%" PRIx64, t->proc_root, (int) pid, start, end);

        return n < 0 || n >= PATH_MAX ? -ENAMETOOLONG : 0;
}

/* That file (on dev) opened for reading, and identified. */
static int probe_mapping(const EpProcTable *t, pid_t pid, uint64_t start, uint64_t end, dev_t dev, int *ret_fd,
                         uint8_t ret_id[EP_FILE_ID_SIZE]) {
        EpFileIdentity ident;
        char path[PATH_MAX];
        int r = map_files_path(t, pid, start, end, path);

        if (r < 0)
                return r;
        r = ep_file_probe(t->prober, path, dev, ret_fd, &ident);
        if (r < 0)
                return r;
        memcpy(ret_id, ident.id, EP_FILE_ID_SIZE);
        return 0;
}

static int identify_by_proc(pid_t pid, const EpMapsLine *m, void *userdata, EpFileIdentity *ret_ident,
                            int *ret_pin) {
        EpProcTable *t = userdata;
        char path[PATH_MAX];
        int r = map_files_path(t, pid, m->start, m->end, path);

        return r < 0 ? r
                     : ep_file_probe_pin(t->prober, path, makedev(m->dev_major, m->dev_minor), ret_pin, ret_ident);
}

/* A key no file has had (0 is none): after 2^32 files, one not in use. */
static uint32_t next_key(EpProcTable *t) {
        do
                t->last_key++;
        while (t->last_key == 0 || ep_hashmap_get(t->files, &t->last_key));
        return t->last_key;
}

static int file_add(EpProcTable *t, const EpFileIdentity *ident, dev_t dev, const char *path, uint32_t *ret_key) {
        _cleanup_(file_freep) EpFile *f = NULL;
        void *id_slot, *slot;
        uint32_t key;
        int r;

        f = calloc(1, sizeof *f);
        if (!f)
                return -ENOMEM;
        *f = (EpFile) { .size = ident->size, .dev = dev, .used_ns = ep_now_ns(CLOCK_MONOTONIC), .path = strdup(path) };
        memcpy(f->id, ident->id, EP_FILE_ID_SIZE);
        memcpy(f->htlhash, ident->htlhash, EP_FILE_ID_SIZE);
        if (!f->path)
                return -ENOMEM;
        key = next_key(t);
        r = ep_hashmap_put(t->files, &key, &slot);
        if (r < 0)
                return r;
        r = ep_hashmap_put(t->ids, ident->id, &id_slot);
        if (r < 0) {
                (void) ep_hashmap_remove(t->files, &key, NULL);
                return r;
        }
        f->key = key;
        memcpy(id_slot, &key, sizeof key);
        memcpy(slot, &f, sizeof f); /* still valid: only the other map was written since */
        TAKE_PTR(f);
        *ret_key = key;
        return 0;
}

/* The file_key of the file a mapping of p maps in *ret_key: 0 when it cannot be identified.
 * Returns the failure to identify it, which when passing (ep_error_passing()) says to try
 * again; -EDQUOT: p's user holds its share of pinned inodes (the mapping is looked at again
 * when its mappings are read again); -EAGAIN: a new file, and the read's time to identify
 * files is spent. *identify_until_ns (0 until the read's first identification, which sets it)
 * ends that time: a read identifies one new file at least, however long it took to get there. */
static int file_key_for(EpProcTable *t, const EpProcess *p, const EpMapsLine *m, uint64_t *identify_until_ns,
                        uint32_t *ret_key) {
        InodeKey ik = { .dev = makedev(m->dev_major, m->dev_minor), .ino = m->inode };
        _cleanup_close_ int pin = -EBADF;
        EpFileIdentity ident;
        bool charged;
        uint32_t key;
        void *slot;
        int r;

        slot = ep_hashmap_get(t->inodes, &ik);
        if (slot) {
                *ret_key = load_u32(slot); /* InodeEntry.file_key comes first */
                return 0;
        }
        LOG_CONTEXT_PID(p->pid);
        LOG_CONTEXT_FILE(m->path);

        if (p->uid != 0 && ep_hashmap_count(t->user_pins, &p->uid) >= t->max_user_pins) {
                if (t->identify_refusals++ == 0)
                        log_warning("User %u has %u mapped files identified, its share: further files of its "
                                    "processes stay unidentified (no tables or symbols) until some are let go "
                                    "(see FileIdentityRefusals).", (unsigned) p->uid, t->max_user_pins);
                return -EDQUOT;
        }
        if (*identify_until_ns == 0)
                *identify_until_ns = ep_now_ns(CLOCK_MONOTONIC) + EP_IDENTIFY_BUDGET_NS;
        else if (ep_now_ns(CLOCK_MONOTONIC) >= *identify_until_ns)
                return -EAGAIN;
        r = t->identify(p->pid, m, t->identify_userdata, &ident, &pin);
        if (r < 0) {
                log_debug_errno(r, "Cannot identify %s mapped by %d: %m", m->path, (int) p->pid);
                return r;
        }
        key = ep_proc_table_find_file_id(t, ident.id);
        if (key == 0) {
                r = file_add(t, &ident, ik.dev, m->path, &key);
                if (r < 0)
                        return r;
        }
        /* Not remembered when out of memory: the next read identifies it again. Its mapping
         * uses the entry next (load_maps). */
        charged = p->uid == 0 || ep_hashmap_count_add(t->user_pins, &p->uid, 1) >= 0;
        if (charged && ep_hashmap_put(t->inodes, &ik, &slot) >= 0)
                memcpy(slot, &(InodeEntry) { .file_key = key, .pin = TAKE_FD(pin), .charged = p->uid },
                       sizeof(InodeEntry));
        else if (charged && p->uid != 0)
                (void) ep_hashmap_count_add(t->user_pins, &p->uid, -1); /* counted, but not remembered */
        *ret_key = key;
        return 0;
}

/* The vDSO's file key for its mapping, 0 for anything else (or a vDSO of another size: a
 * 32-bit process's). */
static uint32_t vdso_key_for(const EpProcTable *t, const EpMapsLine *m) {
        if (t->vdso_key == 0 || !streq(m->path, "[vdso]") || m->pgoff != 0 || m->end - m->start != t->vdso_size)
                return 0;
        return t->vdso_key;
}

int ep_proc_table_set_vdso(EpProcTable *t, int fd) {
        EpFileIdentity ident;
        uint32_t key;
        int r;

        if (t->vdso_key != 0)
                return -EEXIST;
        r = ep_file_identify(fd, &ident);
        if (r < 0)
                return r;
        key = ep_proc_table_find_file_id(t, ident.id);
        if (key == 0) {
                r = file_add(t, &ident, 0, "[vdso]", &key);
                if (r < 0)
                        return r;
        }
        t->vdso_fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        if (t->vdso_fd < 0)
                return -errno;
        t->vdso_key = key;
        t->vdso_size = ident.size;
        return 0;
}

static bool mappings_equal(const EpMapping *a, size_t na, const EpMapping *b, size_t nb) {
        if (na != nb)
                return false;
        for (size_t i = 0; i < na; i++)
                if (a[i].start != b[i].start || a[i].end != b[i].end || a[i].pgoff != b[i].pgoff ||
                    a[i].file_key != b[i].file_key)
                        return false;
        return true;
}

int ep_process_load_maps(EpProcTable *t, EpProcess *p, FILE *maps) {
        _cleanup_free_ char *line = NULL;
        _cleanup_free_ EpMapping *v = NULL;
        size_t n = 0, cap = 0, line_cap = 0;
        uint64_t identify_until_ns = 0;
        unsigned unidentified = 0;
        bool deferred = false;

        while (getline(&line, &line_cap, maps) > 0) {
                EpMapsLine m;

                if (ep_parse_maps_line(line, &m) < 0) {
                        log_debug("Unparsable line in maps of %d: %s", (int) p->pid, line);
                        continue;
                }
                if (!m.exec)
                        continue;
                if (n == cap) {
                        size_t nc = cap ? cap * 2 : 32;
                        EpMapping *nv = realloc(v, nc * sizeof *nv);
                        if (!nv) {
                                inodes_drop_unused(t, v, n);
                                return -ENOMEM;
                        }
                        v = nv;
                        cap = nc;
                }
                v[n] = (EpMapping) { .start = m.start, .end = m.end, .pgoff = m.pgoff };
                if (ep_maps_line_is_file(&m)) {
                        v[n].dev = makedev(m.dev_major, m.dev_minor);
                        v[n].ino = m.inode;
                        int r = file_key_for(t, p, &m, &identify_until_ns, &v[n].file_key);

                        if (ep_error_passing(r)) {
                                unidentified++;
                                deferred = deferred || r == -EAGAIN; /* time, not the file */
                        }
                } else
                        v[n].file_key = vdso_key_for(t, &m);
                n++;
        }
        if (ferror(maps)) {
                inodes_drop_unused(t, v, n);
                return -EIO;
        }
        if (!mappings_equal(v, n, p->mappings, p->n_mappings))
                p->maps_gen++;
        inodes_use(t, v, n, 1); /* the new set first: an inode in both never has no user */
        ep_process_release_inodes(t, p);
        p->inodes_released = false;
        free(p->mappings);
        p->mappings = TAKE_PTR(v);
        p->n_mappings = n;
        p->unidentified = unidentified;
        p->identify_deferred = deferred;
        return 0;
}

static int read_maps(EpProcTable *t, EpProcess *p) {
        char path[PATH_MAX];
        _cleanup_fclose_ FILE *f = NULL;
        int r;

        r = proc_path(t, p->pid, "maps", path, sizeof path);
        if (r < 0)
                return r;
        f = fopen(path, "re");
        if (!f)
                return -errno;
        return ep_process_load_maps(t, p, f);
}

int ep_process_refresh(EpProcTable *t, EpProcess *p) {
        bool changed = false;
        int r;
        LOG_CONTEXT_PID(p->pid);

        p->maps_read_ns = ep_now_ns(CLOCK_MONOTONIC);
        p->maps_read_boot_ns = ep_now_ns(CLOCK_BOOTTIME);
        p->maps_stale = false;
        r = read_metadata(t, p, &changed);
        if (r >= 0)
                r = read_maps(t, p);
        if (r < 0) {
                /* Exited (or a kernel thread's empty maps): keep what we had for traces in flight. */
                if (!p->gone)
                        log_debug_errno(r, "Cannot read /proc/%d: %m", (int) p->pid);
                p->gone = true;
                p->unidentified = 0; /* nothing left to identify */
                ep_process_release_inodes(t, p);
                return 0;
        }
        p->gone = false;
        return changed;
}

int ep_proc_table_add(EpProcTable *t, pid_t pid, EpProcess **ret) {
        EpProcess *p;
        void *slot;
        int r;

        p = calloc(1, sizeof *p);
        if (!p)
                return -ENOMEM;
        p->pid = pid;
        r = ep_hashmap_put(t->procs, &pid, &slot);
        if (r < 0) {
                process_free(t, p);
                return r;
        }
        if (r == 0) { /* replaces a stale entry */
                EpProcess *old = load_ptr(slot);
                if (t->forget)
                        t->forget(old, t->forget_userdata);
                process_free(t, old);
        }
        memcpy(slot, &p, sizeof p);
        if (pid != 0)
                (void) ep_process_refresh(t, p);
        else {
                p->gone = true;
                snprintf(p->comm, sizeof p->comm, "swapper");
        }
        *ret = p;
        return 0;
}

void ep_proc_table_remove(EpProcTable *t, pid_t pid) {
        EpProcess *p;

        if (ep_hashmap_remove(t->procs, &pid, &p) > 0) {
                if (t->forget)
                        t->forget(p, t->forget_userdata);
                process_free(t, p);
        }
}

const EpMapping *ep_process_find_mapping(const EpProcess *p, uint64_t addr) {
        size_t lo = 0, hi = p->n_mappings;

        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                const EpMapping *m = &p->mappings[mid];
                if (addr < m->start)
                        hi = mid;
                else if (addr >= m->end)
                        lo = mid + 1;
                else
                        return m;
        }
        return NULL;
}

int ep_proc_table_open_file(EpProcTable *t, uint32_t key) {
        EpFile *f = ep_proc_table_file(t, key);
        int passing = 0;
        size_t state = 0;
        EpProcess *p;
        int r;

        if (!f)
                return -ENOENT;
        if (key == t->vdso_key) {
                int fd = fcntl(t->vdso_fd, F_DUPFD_CLOEXEC, 3);
                return fd >= 0 ? fd : -errno;
        }
        while (ep_proc_table_iterate(t, &state, &p)) {
                if (p->gone || p->exit_boot_ns)
                        continue;
                for (size_t i = 0; i < p->n_mappings; i++) {
                        const EpMapping *m = &p->mappings[i];
                        uint8_t id[EP_FILE_ID_SIZE];
                        _cleanup_close_ int fd = -EBADF;

                        if (m->file_key != key)
                                continue;
                        r = probe_mapping(t, p->pid, m->start, m->end, f->dev, &fd, id);
                        if (r < 0) {
                                if (ep_error_passing(r)) /* not the file's fault: ask again */
                                        passing = r;
                                continue;
                        }
                        /* The pid or the mapping may have been reused since: check it is the file. */
                        if (memcmp(id, f->id, EP_FILE_ID_SIZE) != 0)
                                continue;
                        return TAKE_FD(fd);
                }
        }
        return passing ?: -ENOENT;
}
