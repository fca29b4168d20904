/* SPDX-License-Identifier: MIT */

/* The BPF side's view of processes: proc_mappings (pid → sorted file mappings with their BPF
 * file numbers, bpf/profiler.h) kept in step with the loader's mapping cache (proc-maps.c), and
 * the table references (tables.c) of the files each process maps.
 *
 * Who writes proc_mappings: this file, whenever a process's mappings were (re-)read; the BPF
 * program itself deletes a pid's entry on exec and exit and copies the parent's entry to a
 * forked child. So a process the loader has not synchronised yet is simply absent, and its
 * frames take frame-pointer steps until it is. */

#include <bpf/bpf.h>
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>

#include "log.h"
#include "loader.h"
#include "proc-parse.h"

static int cmp_u32(const void *a, const void *b) {
        uint32_t x = *(const uint32_t *) a, y = *(const uint32_t *) b;
        return x < y ? -1 : x > y;
}

/* The distinct file keys p maps, sorted. */
static int mapped_files(const EpProcess *p, uint32_t **ret, size_t *ret_n) {
        _cleanup_free_ uint32_t *v = NULL;
        size_t n = 0;

        if (p->n_mappings > 0) {
                v = malloc(p->n_mappings * sizeof *v);
                if (!v)
                        return -ENOMEM;
        }
        for (size_t i = 0; i < p->n_mappings; i++)
                if (p->mappings[i].file_key != 0)
                        v[n++] = p->mappings[i].file_key;
        if (n > 1)
                qsort(v, n, sizeof *v, cmp_u32);
        {
                size_t w = 0;
                for (size_t i = 0; i < n; i++)
                        if (w == 0 || v[w - 1] != v[i])
                                v[w++] = v[i];
                n = w;
        }
        *ret = TAKE_PTR(v);
        *ret_n = n;
        return 0;
}

static uint32_t slot_of(const uint32_t *keys, const uint32_t *slots, size_t n, uint32_t key) {
        const uint32_t *k = bsearch(&key, keys, n, sizeof *keys, cmp_u32);
        return k ? slots[k - keys] : 0;
}

void loader_track_process(Loader *l, EpProcess *p) {
        _cleanup_free_ uint32_t *keys = NULL, *slots = NULL;
        struct ep_bpf_proc *v = l->proc_scratch;
        uint32_t pid = (uint32_t) p->pid;
        size_t n_keys = 0;
        uint32_t n = 0;
        LOG_CONTEXT_PID(p->pid);

        if (p->pid <= 0 || !l->tables)
                return;
        /* In step, unless a file of it found every slot taken and one was freed since. */
        if (p->synced_gen == p->maps_gen && !(p->slotless && p->slot_epoch != ep_tables_slot_epoch(l->tables)))
                return;
        if (mapped_files(p, &keys, &n_keys) < 0)
                return;
        if (n_keys > 0) {
                slots = calloc(n_keys, sizeof *slots);
                if (!slots)
                        return;
        }

        /* References on the new set first, then off the old one: a file in both never drops
         * to zero users on the way. */
        p->slotless = false;
        p->slot_epoch = ep_tables_slot_epoch(l->tables);
        for (size_t i = 0; i < n_keys; i++) {
                slots[i] = ep_tables_ref(l->tables, keys[i], p->uid);
                p->slotless = p->slotless || slots[i] == 0;
        }
        for (size_t i = 0; i < p->n_held; i++)
                ep_tables_unref(l->tables, p->held_files[i]);
        free(p->held_files);
        p->held_files = TAKE_PTR(keys);
        p->n_held = n_keys;

        for (size_t i = 0; i < p->n_mappings; i++) {
                const EpMapping *m = &p->mappings[i];
                uint32_t slot;

                if (m->file_key == 0)
                        continue; /* anonymous or unidentified: frame-pointer steps */
                slot = slot_of(p->held_files, slots, p->n_held, m->file_key);
                if (slot == 0)
                        continue;
                if (n == EP_BPF_MAX_MAPPINGS) {
                        if (l->mapping_overflows++ == 0)
                                log_notice("Process %d maps more than %u executable file mappings; frames in "
                                           "the others take frame-pointer steps (see MappingOverflows).",
                                           (int) p->pid, EP_BPF_MAX_MAPPINGS);
                        break;
                }
                v->m[n++] = (struct ep_bpf_mapping) {
                        .start = m->start,
                        .bias = m->start - m->pgoff,
                        .size = (uint32_t) MIN(m->end - m->start, (uint64_t) UINT32_MAX),
                        .file_num = slot,
                };
        }
        v->n = n;
        v->owner = pid;

        if (bpf_map_update_elem(l->maps.proc_mappings, &pid, v, BPF_ANY) < 0) {
                if (l->bpf_sync_errors++ == 0)
                        log_warning_errno(errno, "Cannot write the mappings of process %d to BPF (%m); its "
                                                 "frames take frame-pointer steps.", (int) p->pid);
                return;
        }
        p->synced_gen = p->maps_gen;
        p->synced_boot_ns = ep_now_ns(CLOCK_BOOTTIME);
        loader_runtimes_track(l, p);
}

void loader_retrack_runtimes(Loader *l, uint32_t file_key) {
        size_t state = 0;
        EpProcess *p;

        while (ep_proc_table_iterate(l->procs, &state, &p)) {
                /* Only processes whose mappings are in BPF: the others are tracked when they
                 * are written. held_files is their sorted set of file keys. */
                if (p->pid <= 0 || p->exit_boot_ns || p->synced_gen == 0)
                        continue;
                if (!bsearch(&file_key, p->held_files, p->n_held, sizeof file_key, cmp_u32))
                        continue;
                loader_runtimes_track(l, p);
        }
}

void loader_untrack_process(EpProcess *p, void *userdata) {
        Loader *l = userdata;
        uint32_t pid = (uint32_t) p->pid;

        for (size_t i = 0; i < p->n_held; i++)
                ep_tables_unref(l->tables, p->held_files[i]);
        free(p->held_files);
        p->held_files = NULL;
        p->n_held = 0;
        /* An exit the BPF side saw already removed the entry, and the pid may belong to a new
         * process by now (given its parent's mappings at fork): leave it alone then. Unless we
         * wrote the entry after that exit (the process read while it was exiting): nothing
         * else removes it, and a new process given the pid would keep it (the fork hook does
         * not overwrite an entry). */
        bool ours = p->synced_gen != 0 && (!p->exit_boot_ns || p->synced_boot_ns >= p->exit_boot_ns);

        if (ours)
                (void) bpf_map_delete_elem(l->maps.proc_mappings, &pid);
        loader_runtimes_untrack(l, p, ours);
        p->synced_gen = 0;
}

void loader_process_dead(Loader *l, EpProcess *p) {
        uint32_t pid = (uint32_t) p->pid;

        /* Found dead without the BPF side's exit event (lost): its entry may still be there. */
        if (p->synced_gen != 0)
                (void) bpf_map_delete_elem(l->maps.proc_mappings, &pid);
        loader_runtimes_untrack(l, p, true);
        p->synced_gen = 0;
}

void loader_process_exec(Loader *l, EpProcess *p) {
        uint32_t pid = (uint32_t) p->pid;

        /* The BPF side deleted the entries at the exec. An entry there now we wrote after it,
         * from the old image's mappings (the only ones we read): nothing else removes it (the
         * runtimes' entries too, also written when a file's runtime became known). */
        (void) bpf_map_delete_elem(l->maps.proc_mappings, &pid);
        /* Until the new image is read: OpenProcessMemory must not answer the old runtime. */
        loader_runtimes_untrack(l, p, true);
        p->synced_gen = 0;
}

/* A sealed memfd holding a copy of our own vDSO (the same image as every 64-bit process's). */
static int vdso_copy(void) {
        _cleanup_fclose_ FILE *f = fopen("/proc/self/maps", "re");
        _cleanup_free_ char *line = NULL;
        _cleanup_close_ int fd = -EBADF;
        size_t cap = 0;

        if (!f)
                return -errno;
        while (getline(&line, &cap, f) > 0) {
                EpMapsLine m;
                size_t size;

                if (ep_parse_maps_line(line, &m) < 0 || !streq(m.path, "[vdso]"))
                        continue;
                size = (size_t) (m.end - m.start);
                if (size == 0 || size > (1u << 20))
                        return -EBADMSG;
                fd = memfd_create("[vdso]", MFD_CLOEXEC | MFD_ALLOW_SEALING);
                if (fd < 0)
                        return -errno;
                if (write(fd, (const void *) (uintptr_t) m.start, size) != (ssize_t) size)
                        return -EIO;
                if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0)
                        return -errno;
                /* A memfd is created writable by all (mode 0777): only root's, it is a
                 * system file (file-id.h), named by its htlhash across restarts. */
                if (fchmod(fd, 0444) < 0)
                        return -errno;
                return TAKE_FD(fd);
        }
        return -ENOENT;
}

void loader_setup_vdso(Loader *l) {
        _cleanup_close_ int fd = vdso_copy();
        int r = fd;

        if (fd >= 0)
                r = ep_proc_table_set_vdso(l->procs, fd);
        if (r < 0)
                log_notice_errno(r, "No copy of the vDSO (%m): frames in it take frame-pointer steps.");
}

int loader_scan_processes(Loader *l) {
        DIR *d = opendir("/proc");
        size_t files_before = ep_proc_table_n_files(l->procs);
        unsigned n = 0;
        uint64_t start = ep_now_ns(CLOCK_MONOTONIC);
        struct dirent *de;

        if (!d)
                return log_error_errno(errno, "Cannot read /proc: %m");
        while ((de = readdir(d))) {
                uint64_t pid;
                EpProcess *p;

                if (ep_parse_uint(de->d_name, 1, INT32_MAX, &pid) < 0)
                        continue;
                if (ep_proc_table_get(l->procs, (pid_t) pid))
                        continue;
                if (ep_proc_table_add(l->procs, (pid_t) pid, &p) < 0) {
                        closedir(d);
                        return log_error_errno(ENOMEM, "Out of memory while scanning /proc.");
                }
                if (p->n_mappings == 0) {
                        /* A kernel thread, or gone already: nothing to unwind. */
                        ep_proc_table_remove(l->procs, (pid_t) pid);
                        continue;
                }
                loader_track_process(l, p);
                n++;
        }
        closedir(d);
        log_info("Tracking %u processes mapping %zu files (scan of /proc took %" PRIu64 " ms).", n,
                 ep_proc_table_n_files(l->procs) - files_before, (uint64_t) ((ep_now_ns(CLOCK_MONOTONIC) - start) / NSEC_PER_MSEC));
        return 0;
}

/* A file no process maps keeps its key this long: traces of it may still be in flight, and its
 * table unloads after its own delay (tables.c), which keeps the file meanwhile. */
#define FILE_FORGET_NS (60 * NSEC_PER_SEC)

static bool file_has_table(uint32_t key, void *userdata) {
        Loader *l = userdata;
        EpTableInfo info;

        return l->tables && ep_tables_file_info(l->tables, key, &info) >= 0;
}

static void file_forgotten(uint32_t key, void *userdata) {
        loader_runtimes_forget_file(userdata, key);
}

void loader_prune_files(Loader *l, uint64_t now) {
        size_t n = ep_proc_table_prune_files(l->procs, now, FILE_FORGET_NS, file_has_table, file_forgotten, l);

        if (n > 0)
                log_debug("Forgot %zu files no process maps (%zu known).", n, ep_proc_table_n_files(l->procs));
}
