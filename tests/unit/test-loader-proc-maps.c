/* SPDX-License-Identifier: MIT */
/* Unit tests of the loader's /proc parsing and its per-process mapping cache (no root). */

#include <assert.h>
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>

#include "daemon.h"
#include "hashmap.h"
#include "proc-maps.h"
#include "proc-parse.h"

static int failures;

#define CHECK(cond)                                                                   \
        do {                                                                          \
                if (!(cond)) {                                                        \
                        fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
                        failures++;                                                   \
                }                                                                     \
        } while (0)

static void test_maps_line(void) {
        char l1[] = "55d0c8a00000-55d0c8a02000 r-xp 00001000 fd:01 1311 /usr/bin/prog with space\n";
        char l2[] = "7ffd4b5f2000-7ffd4b5f4000 r-xp 00000000 00:00 0                          [vdso]";
        char l3[] = "7f0000000000-7f0000001000 rw-s 00000000 00:05 42 /memfd:jit (deleted)";
        char l4[] = "7f0000000000-7f0000001000 rwxp 00000000 00:00 0 ";
        char bad1[] = "7f0000000000 r-xp 00000000 00:00 0";
        char bad2[] = "zz-7f r-xp 00000000 00:00 0";
        char bad3[] = "2000-1000 r-xp 00000000 00:00 0";
        char bad4[] = "1000-2000 r-xp 00000000 00:00";
        char bad5[] = "1000-2000 r-";
        EpMapsLine m;

        CHECK(ep_parse_maps_line(l1, &m) == 0);
        CHECK(m.start == 0x55d0c8a00000 && m.end == 0x55d0c8a02000 && m.pgoff == 0x1000);
        CHECK(m.dev_major == 0xfd && m.dev_minor == 1 && m.inode == 1311);
        CHECK(m.read && !m.write && m.exec && !m.shared);
        CHECK(strcmp(m.path, "/usr/bin/prog with space") == 0);
        CHECK(ep_maps_line_is_file(&m));

        CHECK(ep_parse_maps_line(l2, &m) == 0);
        CHECK(strcmp(m.path, "[vdso]") == 0 && m.inode == 0 && !ep_maps_line_is_file(&m));

        CHECK(ep_parse_maps_line(l3, &m) == 0);
        CHECK(m.shared && m.write && !m.exec && m.inode == 42);
        CHECK(strcmp(m.path, "/memfd:jit (deleted)") == 0 && ep_maps_line_is_file(&m));

        CHECK(ep_parse_maps_line(l4, &m) == 0);
        CHECK(m.path[0] == 0 && !ep_maps_line_is_file(&m));

        CHECK(ep_parse_maps_line(bad1, &m) == -EINVAL);
        CHECK(ep_parse_maps_line(bad2, &m) == -EINVAL);
        CHECK(ep_parse_maps_line(bad3, &m) == -EINVAL);
        CHECK(ep_parse_maps_line(bad4, &m) == -EINVAL);
        CHECK(ep_parse_maps_line(bad5, &m) == -EINVAL);
}

static void test_stat(void) {
        const char *s = "1234 (a (weird) name) S 1 1234 1234 0 -1 4194560 100 0 0 0 5 6 0 0 20 0 1 0 "
                        "987654 1000000 200 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0\n";
        uint64_t t = 0;

        CHECK(ep_parse_stat_starttime(s, &t) == 0);
        CHECK(t == 987654);
        CHECK(ep_parse_stat_starttime("1 (x) S 1 2 3", &t) == -EINVAL);
        CHECK(ep_parse_stat_starttime("no paren", &t) == -EINVAL);
}

static void test_container_id(void) {
        const char *id = "4f1bc8a3d2e94b0e9c7a5d3f2e1b0c9a8f7e6d5c4b3a29180706f5e4d3c2b1a0";
        char buf[512], ret[65];

        snprintf(buf, sizeof buf, "12:cpu,cpuacct:/docker/%s\n0::/system.slice/docker-%s.scope\n", id, id);
        ep_parse_container_id(buf, ret);
        CHECK(strcmp(ret, id) == 0);

        snprintf(buf, sizeof buf, "0::/kubepods/burstable/pod1234/cri-containerd-%s.scope\n", id);
        ep_parse_container_id(buf, ret);
        CHECK(strcmp(ret, id) == 0);

        ep_parse_container_id("0::/user.slice/user-0.slice/session-1.scope\n", ret);
        CHECK(ret[0] == 0);
        /* 65 hex digits is not an ID */
        snprintf(buf, sizeof buf, "0::/x/%sa\n", id);
        ep_parse_container_id(buf, ret);
        CHECK(ret[0] == 0);
}

static void test_cpu_list(void) {
        bool cpus[16];

        CHECK(ep_parse_cpu_list("0-1\n", cpus, 16) == 2 && cpus[0] && cpus[1] && !cpus[2]);
        CHECK(ep_parse_cpu_list("0,2-4,7", cpus, 16) == 5 && cpus[3] && !cpus[5] && cpus[7]);
        CHECK(ep_parse_cpu_list("0-31", cpus, 16) == 16);
        CHECK(ep_parse_cpu_list("3-1", cpus, 16) == -EINVAL);
        CHECK(ep_parse_cpu_list("a", cpus, 16) == -EINVAL);
}

/* A file "identity" derived from the path, so tests need no real files. */
static int identify_calls, slow_probes;
/* Open descriptors of this process: the pins the table holds, among them. */
static unsigned open_fds(void) {
        DIR *d = opendir("/proc/self/fd");
        unsigned n = 0;

        assert(d);
        while (readdir(d))
                n++;
        closedir(d);
        return n;
}

static int fake_identify(pid_t pid, const EpMapsLine *m, void *userdata, EpFileIdentity *ret_ident,
                         int *ret_pin) {
        uint64_t h = ep_hash_bytes(m->path, strlen(m->path));

        identify_calls++;
        if (strstr(m->path, "unreadable"))
                return -EACCES;
        if (strstr(m->path, "sleepy"))
                usleep(1000); /* at least 1 ms: 200 of them take longer than a read's budget */
        if (strstr(m->path, "slow") && slow_probes > 0) {
                slow_probes--;
                return -ETIMEDOUT;
        }
        *ret_ident = (EpFileIdentity) { .size = 4096, .system = true };
        /* "(deleted)" copies of a file have the same content, hence the same ID */
        if (strstr(m->path, "libsame"))
                h = 42;
        memcpy(ret_ident->id, &h, sizeof h);
        memcpy(ret_ident->htlhash, &h, sizeof h);
        *ret_pin = open("/", O_PATH | O_CLOEXEC);
        return *ret_pin >= 0 ? 0 : -errno;
}

static const char maps_text[] =
        "55d0c8a00000-55d0c8a01000 r--p 00000000 fd:01 100 /usr/bin/prog\n"
        "55d0c8a01000-55d0c8a03000 r-xp 00001000 fd:01 100 /usr/bin/prog\n"
        "55d0c8a03000-55d0c8a04000 r--p 00003000 fd:01 100 /usr/bin/prog\n"
        "55d0ca000000-55d0ca021000 rw-p 00000000 00:00 0 [heap]\n"
        "7f1000000000-7f1000001000 rwxp 00000000 00:00 0 \n"
        "7f1000100000-7f1000128000 r--p 00000000 fd:01 200 /usr/lib/libc.so.6\n"
        "7f1000128000-7f100029d000 r-xp 00028000 fd:01 200 /usr/lib/libc.so.6\n"
        "7f1000300000-7f1000301000 r-xp 00000000 fd:01 300 /opt/libsame.so\n"
        "7f1000400000-7f1000401000 r-xp 00000000 fd:02 301 /opt/libsame.so (deleted)\n"
        "7f1000500000-7f1000501000 r-xp 00000000 fd:01 400 /opt/unreadable.so\n"
        "this line is garbage\n"
        "7ffd4b5f2000-7ffd4b5f4000 r-xp 00000000 00:00 0 [vdso]\n"
        "ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0 [vsyscall]\n";

/* Loads text as p's /proc/PID/maps. */
static void load_maps(EpProcTable *t, EpProcess *p, const char *text) {
        FILE *f = fmemopen((void *) text, strlen(text), "r");

        assert(f);
        CHECK(ep_process_load_maps(t, p, f) == 0);
        fclose(f);
}

static void test_mapping_cache(void) {
        _cleanup_(ep_proc_table_freep) EpProcTable *t = NULL;
        const EpMapping *m;
        EpProcess *p;
        uint32_t prog_key, libc_key;
        unsigned fds = open_fds();

        CHECK(ep_proc_table_new("/nonexistent-proc", 0, &t) == 0);
        ep_proc_table_set_identify(t, fake_identify, NULL);

        /* A pid that cannot be read is still tracked (its samples are kept). */
        CHECK(ep_proc_table_add(t, 4242, &p) == 0);
        CHECK(p->gone && p->n_mappings == 0);
        CHECK(ep_proc_table_get(t, 4242) == p);
        CHECK(ep_proc_table_n_processes(t) == 1);

        load_maps(t, p, maps_text);

        /* executable mappings only: prog, anon rwx, libc, libsame x2, unreadable, vdso, vsyscall */
        CHECK(p->n_mappings == 8);
        /* identify once per (dev, inode); the two libsame inodes share one file ID */
        CHECK(identify_calls == 5);
        CHECK(ep_proc_table_n_files(t) == 3);
        CHECK(open_fds() == fds + 4); /* each inode identified held (prog, libc, both libsame) */

        m = ep_process_find_mapping(p, 0x55d0c8a01234);
        CHECK(m && m->file_key != 0);
        prog_key = m ? m->file_key : 0;
        CHECK(m && 0x55d0c8a01234 - m->start + m->pgoff == 0x1234);
        CHECK(ep_proc_table_file(t, prog_key) && strcmp(ep_proc_table_file(t, prog_key)->path, "/usr/bin/prog") == 0);

        m = ep_process_find_mapping(p, 0x7f1000128000);
        CHECK(m && m->file_key != 0 && m->file_key != prog_key && m->pgoff == 0x28000);
        libc_key = m ? m->file_key : 0;
        CHECK(libc_key != prog_key);

        CHECK(ep_process_find_mapping(p, 0x55d0c8a00fff) == NULL); /* r--p: not executable */
        CHECK(ep_process_find_mapping(p, 0x55d0c8a03000) == NULL); /* end is exclusive */
        m = ep_process_find_mapping(p, 0x7f1000000010);           /* anonymous rwx (JIT) */
        CHECK(m && m->file_key == 0);
        m = ep_process_find_mapping(p, 0x7ffd4b5f2100);           /* vdso: no file */
        CHECK(m && m->file_key == 0);
        m = ep_process_find_mapping(p, 0x7f1000500000);           /* cannot be opened */
        CHECK(m && m->file_key == 0);

        {
                const EpMapping *a = ep_process_find_mapping(p, 0x7f1000300000);
                const EpMapping *b = ep_process_find_mapping(p, 0x7f1000400000);
                CHECK(a && b && a->file_key && a->file_key == b->file_key);
        }
        CHECK(ep_process_find_mapping(p, 0x1000) == NULL);
        CHECK(ep_process_find_mapping(p, 0xfffffffffffff000) == NULL);

        /* A second process mapping the same files reuses the keys without identifying again. */
        CHECK(ep_proc_table_add(t, 4243, &p) == 0);
        load_maps(t, p, maps_text);
        CHECK(identify_calls == 6); /* only the unreadable one is retried */
        m = ep_process_find_mapping(p, 0x55d0c8a01000);
        CHECK(m && m->file_key == prog_key);
        CHECK(ep_proc_table_n_files(t) == 3);

        {
                uint8_t id[EP_FILE_ID_SIZE];
                memcpy(id, ep_proc_table_file(t, libc_key)->id, sizeof id);
                CHECK(ep_proc_table_find_file_id(t, id) == libc_key);
                id[0] ^= 1;
                CHECK(ep_proc_table_find_file_id(t, id) == 0);
        }

        ep_proc_table_remove(t, 4242);
        CHECK(ep_proc_table_get(t, 4242) == NULL);
        CHECK(ep_proc_table_n_processes(t) == 1);

        /* While one process still maps them, the inodes keep their keys. */
        CHECK(ep_proc_table_add(t, 4244, &p) == 0);
        load_maps(t, p, maps_text);
        CHECK(identify_calls == 7); /* the unreadable one again, nothing else */

        /* Once no process maps an inode, its number may belong to another file the next time it
         * is seen (a library deleted, a new file given its inode): it is identified anew. */
        ep_proc_table_remove(t, 4243);
        ep_proc_table_remove(t, 4244);
        CHECK(ep_proc_table_add(t, 4245, &p) == 0);
        load_maps(t, p, maps_text);
        CHECK(identify_calls == 12);
        m = ep_process_find_mapping(p, 0x55d0c8a01000);
        CHECK(m && m->file_key == prog_key); /* the same content: the same file */

        /* A process whose mappings change lets go of the inodes it no longer maps. */
        load_maps(t, p, "");
        CHECK(p->n_mappings == 0);
        load_maps(t, p, maps_text);
        CHECK(identify_calls == 17);

        /* An exited process lets go of its inodes at once (its mappings stay for the traces in
         * flight), and only once: forgetting it later takes nothing from another's. */
        {
                EpProcess *q;

                CHECK(ep_proc_table_add(t, 4246, &q) == 0);
                load_maps(t, q, maps_text);
                CHECK(identify_calls == 18); /* the unreadable one */
                ep_process_release_inodes(t, p);
                ep_process_release_inodes(t, p);
                CHECK(p->n_mappings == 8);
                ep_proc_table_remove(t, 4245);
                CHECK(ep_proc_table_add(t, 4247, &p) == 0);
                load_maps(t, p, maps_text);
                CHECK(identify_calls == 19); /* 4246 holds the others */
                ep_process_release_inodes(t, q);
                ep_process_release_inodes(t, p);
                CHECK(open_fds() == fds); /* no mapping holds any: every inode let go */
                CHECK(ep_proc_table_add(t, 4248, &p) == 0);
                load_maps(t, p, maps_text);
                CHECK(identify_calls == 24);
        }

        /* Inodes still held when the table goes are let go with it. */
        t = ep_proc_table_free(t);
        CHECK(open_fds() == fds);
}

/* A file whose probe timed out is not taken as unidentifiable: the process says it has one to
 * identify yet, and the next read of its mappings identifies it (a definite failure, an
 * unreadable file, is not counted). */
static void test_identify_passing_failure(void) {
        _cleanup_(ep_proc_table_freep) EpProcTable *t = NULL;
        static const char text[] =
                "7f1000500000-7f1000501000 r-xp 00000000 fd:01 400 /opt/unreadable.so\n"
                "7f1000600000-7f1000601000 r-xp 00000000 fd:01 500 /opt/slow.so\n";
        const EpMapping *m;
        EpProcess *p;

        CHECK(ep_proc_table_new("/nonexistent-proc", 0, &t) == 0);
        ep_proc_table_set_identify(t, fake_identify, NULL);
        CHECK(ep_proc_table_add(t, 4300, &p) == 0);

        slow_probes = 2;
        load_maps(t, p, text);
        m = ep_process_find_mapping(p, 0x7f1000600000);
        CHECK(m && m->file_key == 0 && p->unidentified == 1);
        load_maps(t, p, text);
        CHECK(p->unidentified == 1); /* still timing out */
        load_maps(t, p, text);
        m = ep_process_find_mapping(p, 0x7f1000600000);
        CHECK(m && m->file_key != 0 && p->unidentified == 0);
        CHECK(ep_proc_table_file(t, m->file_key) && strcmp(ep_proc_table_file(t, m->file_key)->path, "/opt/slow.so") == 0);
}

/* A process that maps many new files is identified over several reads: each read spends at
 * most EP_IDENTIFY_BUDGET_NS identifying (and at least one file), the rest are left for the
 * next, which is not backed off (identify_deferred), until every file is identified. */
static void test_identify_budget(void) {
        _cleanup_(ep_proc_table_freep) EpProcTable *t = NULL;
        _cleanup_free_ char *text = NULL;
        size_t size = 0;
        FILE *f = open_memstream(&text, &size);
        unsigned reads = 0, before;
        EpProcess *p;

        assert(f);
        for (unsigned i = 0; i < 200; i++)
                fprintf(f, "7f%04x000000-7f%04x001000 r-xp 00000000 fd:01 %u /opt/sleepy%u.so\n", i, i, 7000 + i, i);
        fclose(f);
        CHECK(ep_proc_table_new("/nonexistent-proc", 0, &t) == 0);
        ep_proc_table_set_identify(t, fake_identify, NULL);
        CHECK(ep_proc_table_add(t, 4500, &p) == 0);

        load_maps(t, p, text);
        reads++;
        CHECK(p->unidentified > 0 && p->unidentified < 200 && p->identify_deferred);
        while (p->unidentified > 0 && reads < 200) {
                before = p->unidentified;
                load_maps(t, p, text);
                reads++;
                CHECK(p->unidentified < before);
        }
        CHECK(p->unidentified == 0 && !p->identify_deferred);
        CHECK(reads > 1);
        for (unsigned i = 0; i < 200; i++)
                CHECK(ep_process_find_mapping(p, 0x7f0000000000ULL + ((uint64_t) i << 24))->file_key != 0);
}

/* A user other than root gets its share of identified (pinned) files: further mappings of its
 * processes stay unidentified, definitely (not retried as passing), counted; root's are not
 * counted; a share let go is taken again by the next read. */
static void test_user_share_of_pins(void) {
        _cleanup_(ep_proc_table_freep) EpProcTable *t = NULL;
        static const char text[] =
                "7f1000100000-7f1000101000 r-xp 00000000 fd:01 601 /home/u/a.so\n"
                "7f1000200000-7f1000201000 r-xp 00000000 fd:01 602 /home/u/b.so\n"
                "7f1000300000-7f1000301000 r-xp 00000000 fd:01 603 /home/u/c.so\n";
        unsigned fds = open_fds();
        EpProcess *user, *root;

        CHECK(ep_proc_table_new("/nonexistent-proc", 0, &t) == 0);
        ep_proc_table_set_identify(t, fake_identify, NULL);
        ep_proc_table_set_max_user_pins(t, 2);

        CHECK(ep_proc_table_add(t, 4400, &user) == 0);
        user->uid = 1000;
        load_maps(t, user, text);
        CHECK(ep_process_find_mapping(user, 0x7f1000100000)->file_key != 0);
        CHECK(ep_process_find_mapping(user, 0x7f1000200000)->file_key != 0);
        CHECK(ep_process_find_mapping(user, 0x7f1000300000)->file_key == 0);
        CHECK(user->unidentified == 0); /* a refusal, not a passing failure */
        CHECK(ep_proc_table_identify_refusals(t) == 1);
        CHECK(open_fds() == fds + 2);

        /* Root's process maps the third one: identified, not counted against anyone. */
        CHECK(ep_proc_table_add(t, 4401, &root) == 0);
        root->uid = 0;
        load_maps(t, root, text);
        CHECK(ep_process_find_mapping(root, 0x7f1000300000)->file_key != 0);
        CHECK(open_fds() == fds + 3);

        /* The user's process goes: its share is free again, and another of its processes gets
         * what root's holds (known) and what it lets go. */
        ep_proc_table_remove(t, 4400);
        ep_proc_table_remove(t, 4401);
        CHECK(open_fds() == fds);
        CHECK(ep_proc_table_add(t, 4402, &user) == 0);
        user->uid = 1000;
        load_maps(t, user, text);
        CHECK(ep_process_find_mapping(user, 0x7f1000100000)->file_key != 0);
        CHECK(ep_process_find_mapping(user, 0x7f1000300000)->file_key == 0);
        CHECK(ep_proc_table_identify_refusals(t) == 2);
}

static uint32_t kept_key, forgotten;

static bool keep_one(uint32_t key, void *userdata) {
        return key == kept_key;
}

static void count_forgotten(uint32_t key, void *userdata) {
        forgotten++;
}

/* Files no process maps are forgotten after the grace (and what used() claims is kept); a file
 * seen again gets a key no file had. */
static void test_files_pruned(void) {
        _cleanup_(ep_proc_table_freep) EpProcTable *t = NULL;
        static const char text[] =
                "7f1000100000-7f1000101000 r-xp 00000000 fd:01 701 /opt/a.so\n"
                "7f1000200000-7f1000201000 r-xp 00000000 fd:01 702 /opt/b.so\n";
        const uint64_t grace = 60 * NSEC_PER_SEC;
        uint32_t a, b;
        EpProcess *p;
        uint64_t now;

        CHECK(ep_proc_table_new("/nonexistent-proc", 0, &t) == 0);
        ep_proc_table_set_identify(t, fake_identify, NULL);
        CHECK(ep_proc_table_add(t, 4500, &p) == 0);
        load_maps(t, p, text);
        a = ep_process_find_mapping(p, 0x7f1000100000)->file_key;
        b = ep_process_find_mapping(p, 0x7f1000200000)->file_key;
        CHECK(a != 0 && b != 0 && ep_proc_table_n_files(t) == 2);
        now = ep_now_ns(CLOCK_MONOTONIC);

        /* Mapped: kept, however long. */
        CHECK(ep_proc_table_prune_files(t, now + 10 * grace, grace, keep_one, count_forgotten, NULL) == 0);
        ep_proc_table_remove(t, 4500);

        /* Unmapped, within the grace since it was last seen used: kept. */
        CHECK(ep_proc_table_prune_files(t, now + 10 * grace + grace / 2, grace, keep_one, count_forgotten, NULL) == 0);
        /* Past it: forgotten, but for the one used() claims. */
        kept_key = b;
        CHECK(ep_proc_table_prune_files(t, now + 12 * grace, grace, keep_one, count_forgotten, NULL) == 1);
        CHECK(forgotten == 1 && ep_proc_table_file(t, a) == NULL && ep_proc_table_file(t, b) != NULL);
        CHECK(ep_proc_table_n_files(t) == 1);

        /* Mapped again: a new key for a. */
        CHECK(ep_proc_table_add(t, 4501, &p) == 0);
        load_maps(t, p, text);
        CHECK(ep_process_find_mapping(p, 0x7f1000100000)->file_key != a);
        CHECK(ep_process_find_mapping(p, 0x7f1000100000)->file_key != 0);
        CHECK(ep_process_find_mapping(p, 0x7f1000200000)->file_key == b);
        CHECK(ep_proc_table_n_files(t) == 2);
}

static void test_status_ids(void) {
        EpStatusIds ids;

        /* A comm may hold anything but a newline: it cannot fake a line. */
        CHECK(ep_parse_status_ids("Name:\tTgid: 1\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4242\n"
                                  "Ngid:\t0\nPid:\t4243\nPPid:\t1\nUid:\t1000\t0\t0\t0\nGid:\t100\t100\t100\t100\n",
                                  &ids) == 0);
        CHECK(ids.tgid == 4242 && ids.uid == 1000 && ids.euid == 0);
        CHECK(ep_parse_status_ids("Tgid:\t7\n", &ids) == -EINVAL);
        CHECK(ep_parse_status_ids("Tgid:\t7\nUid:\t1000\n", &ids) == -EINVAL);
        CHECK(ep_parse_status_ids("Tgid:\t-7\nUid:\t1\t1\t1\t1\n", &ids) == -EINVAL);
        CHECK(ep_parse_status_ids("Tgid:\t99999999999999999999999\nUid:\t1\t1\t1\t1\n", &ids) == -EINVAL);
        CHECK(ep_parse_status_ids("XTgid:\t7\nUid:\t1\t1\t1\t1\n", &ids) == -EINVAL);
        CHECK(ep_parse_status_ids("", &ids) == -EINVAL);
}

int main(void) {
        test_maps_line();
        test_stat();
        test_status_ids();
        test_container_id();
        test_cpu_list();
        test_mapping_cache();
        test_identify_passing_failure();
        test_identify_budget();
        test_user_share_of_pins();
        test_files_pruned();
        if (failures) {
                fprintf(stderr, "%d check(s) failed\n", failures);
                return 1;
        }
        printf("ok\n");
        return 0;
}
