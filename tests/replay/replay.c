/* SPDX-License-Identifier: MIT */
/* ep-replay: the native unwinder (and the CPython walk) run over a core dump, as ordinary C.
 *
 *   ep-replay unwind CORE        every thread's frames, innermost first; with CPython mapped,
 *                                its frames too, where the BPF sampler puts them
 *   ep-replay list-files CORE    the mapped files with their file IDs
 *   ep-replay symbolize CORE     names for "PC R|E" lines on stdin (R: return address,
 *                                E: exact PC), one line out per line in; used to name the
 *                                frames a reference unwinder (gdb) found in the same core
 *   ep-replay name FILE          names for "FILE_OFFSET R|E" lines on stdin, one line out per
 *                                line in (the end-to-end tests name the store's frames of
 *                                libc internals through libc's debug file with it)
 *
 * Frame lines of `unwind`: "PC R|E MODULE+OFFSET NAME"; NAME is "[unknown] MODULE" when no
 * symbol covers the address and "[unmapped]" outside every mapping. A CPython frame is
 * "CODE P cpython+OFFSET [python code CODE]": its code object's address and the instruction's
 * byte offset (decimal, may be negative: bpf/cpython.h). After a thread's frames,
 * "# unplaced TID CODE OFFSET first|next" lines give its Python frames as BPF sends them when
 * the native walk stops short (before any eval loop). Symbols come from
 * .symtab, else .dynsym, of the mapped file, or from its separate debug file found by build
 * ID under $EP_REPLAY_DEBUG_ROOT (default /usr/lib/debug). */
#include <elf.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "file-id.h"
#include "replay.h"

#include "unwind-extract.h"
#include "unwind-table.h"

static ReplayModule *module_free(ReplayModule *m) {
        if (!m)
                return NULL;
        free(m->path);
        free(m->basename);
        if (m->fd >= 0)
                close(m->fd);
        ep_elf_free(m->elf);
        ep_elf_free(m->debug);
        free(m->table);
        free(m);
        return NULL;
}
DEFINE_TRIVIAL_CLEANUP_FUNC(ReplayModule *, module_free);

static void process_done(ReplayProcess *p) {
        for (size_t i = 0; i < p->n_modules; i++)
                module_free(p->modules[i]);
        free(p->modules);
        free(p->regions);
        replay_lookup_free(p->lookup);
        replay_python_free(p->python);
        ep_core_free(p->core);
        *p = (ReplayProcess) {};
}

const ReplayRegion *replay_region_at(const ReplayProcess *p, uint64_t addr) {
        size_t lo = 0, hi = p->n_regions;

        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (addr < p->regions[mid].start)
                        hi = mid;
                else if (addr >= p->regions[mid].end)
                        lo = mid + 1;
                else
                        return &p->regions[mid];
        }
        return NULL;
}

/* The separate debug file of a module: DEBUG_ROOT/.build-id/xx/yyyy.debug. */
static void open_debug_file(ReplayModule *m) {
        const char *root = getenv("EP_REPLAY_DEBUG_ROOT") ?: "/usr/lib/debug";
        char hex[2 * EP_BUILD_ID_MAX + 1], path[4096];
        EpBuildIds ids;
        int fd;

        if (!m->elf || ep_elf_build_ids(m->elf, &ids) < 0 || ids.gnu_len < 2)
                return;
        ep_hex_encode(ids.gnu, ids.gnu_len, hex);
        snprintf(path, sizeof path, "%s/.build-id/%.2s/%s.debug", root, hex, hex + 2);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return;
        if (ep_elf_open(fd, &m->debug) < 0)
                m->debug = NULL;
}

static void load_table(ReplayModule *m) {
        void *blob = NULL;
        size_t size = 0;
        uint32_t flags = 0;
        int r;

        r = ep_unwind_extract(m->fd, m->file_id, m->path, &blob, &size, &flags);
        if (r >= 0 && ep_unwind_table_validate(blob, size) < 0) {
                free(blob);
                r = -EBADMSG;
        }
        if (r < 0) {
                m->table_error = r;
                return;
        }
        m->table = blob;
        m->table_size = size;
        m->table_flags = flags;
}

/* On success the module owns fd; on failure the caller still does. */
static int module_new(const char *path, int fd, ReplayModule **ret) {
        _cleanup_(module_freep) ReplayModule *m = NULL;
        const char *slash = strrchr(path, '/');
        int r;

        m = calloc(1, sizeof *m);
        if (!m)
                return -ENOMEM;
        m->fd = -EBADF;
        m->path = strdup(path);
        m->basename = strdup(slash ? slash + 1 : path);
        if (!m->path || !m->basename)
                return -ENOMEM;
        r = ep_file_id_from_fd(fd, m->file_id, NULL);
        if (r < 0)
                return r;

        int efd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        if (efd < 0)
                return -errno;
        if (ep_elf_open(efd, &m->elf) < 0) /* takes efd in any case */
                m->elf = NULL;
        open_debug_file(m);
        m->fd = fd;
        *ret = TAKE_PTR(m);
        return 0;
}

static int add_module(ReplayProcess *p, ReplayModule *m) {
        ReplayModule **a = reallocarray(p->modules, p->n_modules + 1, sizeof *a);
        if (!a)
                return -ENOMEM;
        p->modules = a;
        p->modules[p->n_modules++] = m;
        return 0;
}

static int add_region(ReplayProcess *p, uint64_t start, uint64_t end, uint64_t offset,
                      ReplayModule *m) {
        ReplayRegion *a = reallocarray(p->regions, p->n_regions + 1, sizeof *a);
        if (!a)
                return -ENOMEM;
        p->regions = a;
        p->regions[p->n_regions++] = (ReplayRegion) { start, end, offset, m };
        return 0;
}

static int region_compare(const void *a, const void *b) {
        const ReplayRegion *x = a, *y = b;
        return x->start < y->start ? -1 : x->start > y->start;
}

/* The vDSO is in no file: copy its image out of the core into a memfd and treat that as the
 * file (the loader does the same with the live process's vDSO). */
static int add_vdso(ReplayProcess *p) {
        _cleanup_close_ int fd = -EBADF;
        _cleanup_free_ uint8_t *image = NULL;
        ReplayModule *m = NULL;
        uint64_t base, start, end;
        int r;

        if (ep_core_auxv(p->core, AT_SYSINFO_EHDR, &base) < 0 || base == 0)
                return 0;
        if (ep_core_segment_at(p->core, base, &start, &end) < 0 || start != base ||
            end - start > (64u << 20))
                return 0;
        image = malloc(end - start);
        if (!image)
                return -ENOMEM;
        r = ep_core_read(p->core, start, image, end - start);
        if (r < 0)
                return r;
        fd = memfd_create("vdso", MFD_CLOEXEC);
        if (fd < 0)
                return -errno;
        if (write(fd, image, end - start) != (ssize_t) (end - start))
                return -EIO;

        r = module_new("[vdso]", fd, &m);
        if (r < 0)
                return r;
        TAKE_FD(fd);
        r = add_module(p, m);
        if (r < 0) {
                module_free(m);
                return r;
        }
        return add_region(p, start, end, 0, m);
}

static int process_load(const char *core_path, bool tables, ReplayProcess *p) {
        int r;

        *p = (ReplayProcess) {};
        r = ep_core_open(core_path, &p->core);
        if (r < 0)
                return r;

        for (size_t i = 0; i < ep_core_n_mappings(p->core); i++) {
                const EpCoreMapping *cm = ep_core_mapping(p->core, i);
                ReplayModule *m = NULL;

                for (size_t j = 0; j < p->n_modules; j++)
                        if (streq(p->modules[j]->path, cm->path))
                                m = p->modules[j];
                if (!m) {
                        int fd = open(cm->path, O_RDONLY | O_CLOEXEC);
                        if (fd < 0)
                                continue; /* gone since the dump: its frames stay unknown */
                        r = module_new(cm->path, fd, &m);
                        if (r < 0) {
                                close(fd);
                                return r;
                        }
                        r = add_module(p, m);
                        if (r < 0) {
                                module_free(m);
                                return r;
                        }
                }
                r = add_region(p, cm->start, cm->end, cm->offset, m);
                if (r < 0)
                        return r;
        }
        r = add_vdso(p);
        if (r < 0)
                return r;
        qsort(p->regions, p->n_regions, sizeof *p->regions, region_compare);

        if (!tables)
                return 0;
        for (size_t i = 0; i < p->n_modules; i++)
                load_table(p->modules[i]);
        return replay_python_load(p);
}

/* The function covering file offset off of m, or "[unknown] MODULE". */
static void symbolize_offset(const ReplayModule *m, uint64_t off, char *buf, size_t size) {
        _cleanup_free_ char *name = NULL;
        uint64_t vaddr;

        if (m->elf && ep_elf_offset_to_vaddr(m->elf, off, &vaddr) >= 0) {
                if (m->debug)
                        (void) ep_elf_lookup(m->debug, vaddr, &name, NULL);
                if (!name)
                        (void) ep_elf_lookup(m->elf, vaddr, &name, NULL);
        }
        if (name)
                snprintf(buf, size, "%s", name);
        else
                snprintf(buf, size, "[unknown] %s", m->basename);
}

/* "NAME" of the function at pc, or "[unknown] MODULE" / "[unmapped]". *ret_module and
 * *ret_offset name the place in the file. */
static void symbolize(const ReplayProcess *p, uint64_t pc, bool return_address, char *buf,
                      size_t size, const char **ret_module, uint64_t *ret_offset) {
        uint64_t lookup = return_address && pc > 0 ? pc - 1 : pc;
        const ReplayRegion *reg = replay_region_at(p, lookup);

        *ret_module = reg ? reg->module->basename : "?";
        *ret_offset = reg ? pc - reg->start + reg->offset : pc;
        if (!reg)
                snprintf(buf, size, "[unmapped]");
        else
                symbolize_offset(reg->module, lookup - reg->start + reg->offset, buf, size);
}

static void print_frame(const ReplayProcess *p, const ReplayFrame *f) {
        char name[EP_SYMBOL_NAME_MAX + 16];
        const char *module;
        uint64_t offset;

        if (f->python) {
                printf("0x%" PRIx64 " P cpython+%" PRId64 " [python code 0x%" PRIx64 "]\n", f->pc, f->offset, f->pc);
                return;
        }
        symbolize(p, f->pc, f->return_address, name, sizeof name, &module, &offset);
        printf("0x%" PRIx64 " %c %s+0x%" PRIx64 " %s\n", f->pc, f->return_address ? 'R' : 'E',
               module, offset, name);
}

/* "# unplaced TID CODE OFFSET first|next" lines: the thread's Python frames as BPF would send
 * them after a native walk that reached no eval loop. frames: room for REPLAY_MAX_FRAMES. */
static void print_unplaced(ReplayPython *py, const EpCoreThread *t, ReplayFrame *frames) {
        size_t n = replay_python_unplaced(py, t, frames, REPLAY_MAX_FRAMES);

        for (size_t k = 0; k < n; k++)
                printf("# unplaced %d 0x%" PRIx64 " %" PRId64 " %s\n", t->tid, frames[k].pc, frames[k].offset,
                       frames[k].activation ? "first" : "next");
}

static int cmd_unwind(ReplayProcess *p) {
        _cleanup_free_ ReplayFrame *frames = calloc(REPLAY_MAX_FRAMES, sizeof(ReplayFrame));
        int ret = 0;

        if (!frames)
                return -ENOMEM;
        for (size_t i = 0; i < p->n_modules; i++) {
                const ReplayModule *m = p->modules[i];
                char hex[2 * EP_FILE_ID_SIZE + 1];

                if (!m->elf)
                        continue; /* mapped data that is not ELF (clang maps its headers) */
                ep_file_id_to_hex(m->file_id, hex);
                if (m->table)
                        printf("# table %s %s %zu bytes flags 0x%x\n", hex, m->path, m->table_size,
                               m->table_flags);
                else
                        printf("# table %s %s missing: %s\n", hex, m->path, strerror(-m->table_error));
        }
        if (p->python)
                replay_python_print(p->python);
        for (size_t i = 0; i < ep_core_n_threads(p->core); i++) {
                const EpCoreThread *t = ep_core_thread(p->core, i);
                const char *stop = "?";
                size_t n = 0;
                int r;

                r = replay_unwind_thread(p, t, frames, REPLAY_MAX_FRAMES, &n, &stop);
                if (r < 0) {
                        fprintf(stderr, "ep-replay: unwinding thread %d: %s\n", t->tid, strerror(-r));
                        ret = r;
                        continue;
                }
                printf("thread %d stop %s frames %zu\n", t->tid, stop, n);
                for (size_t k = 0; k < n; k++)
                        print_frame(p, &frames[k]);
                if (p->python)
                        print_unplaced(p->python, t, frames);
        }
        if (p->python)
                replay_python_print_counters(p->python);
        return ret;
}

static int cmd_list_files(ReplayProcess *p) {
        for (size_t i = 0; i < p->n_modules; i++) {
                char hex[2 * EP_FILE_ID_SIZE + 1];
                struct stat st;

                ep_file_id_to_hex(p->modules[i]->file_id, hex);
                if (fstat(p->modules[i]->fd, &st) < 0)
                        return -errno;
                printf("%s\t%" PRIu64 "\t%s\n", hex, (uint64_t) st.st_size, p->modules[i]->path);
        }
        return 0;
}

static int cmd_symbolize(ReplayProcess *p) {
        char line[256];

        while (fgets(line, sizeof line, stdin)) {
                ReplayFrame f = {};
                char kind = 'E';

                if (sscanf(line, "%" SCNx64 " %c", &f.pc, &kind) < 1)
                        return -EINVAL;
                f.return_address = kind == 'R';
                print_frame(p, &f);
        }
        return 0;
}

/* Names file offsets of one file: "OFFSET R|E" lines in, "NAME" lines out. */
static int cmd_name(const char *path) {
        _cleanup_(module_freep) ReplayModule *m = NULL;
        char line[256], name[EP_SYMBOL_NAME_MAX + 16];
        int fd, r;

        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        r = module_new(path, fd, &m);
        if (r < 0) {
                close(fd);
                return r;
        }
        while (fgets(line, sizeof line, stdin)) {
                uint64_t off;
                char kind = 'E';

                if (sscanf(line, "%" SCNx64 " %c", &off, &kind) < 1)
                        return -EINVAL;
                symbolize_offset(m, kind == 'R' && off > 0 ? off - 1 : off, name, sizeof name);
                printf("%s\n", name);
        }
        return 0;
}

int main(int argc, char **argv) {
        ReplayProcess p;
        int r;

        if (argc != 3) {
                fprintf(stderr, "usage: ep-replay unwind|list-files|symbolize CORE\n"
                                "       ep-replay name FILE\n");
                return 2;
        }
        if (streq(argv[1], "name")) {
                r = cmd_name(argv[2]);
                fflush(stdout);
                if (r < 0)
                        fprintf(stderr, "ep-replay: %s: %s\n", argv[2], strerror(-r));
                return r < 0 ? 1 : 0;
        }
        r = process_load(argv[2], streq(argv[1], "unwind"), &p);
        if (r < 0) {
                fprintf(stderr, "ep-replay: %s: %s\n", argv[2], strerror(-r));
                return 1;
        }
        if (streq(argv[1], "unwind"))
                r = cmd_unwind(&p);
        else if (streq(argv[1], "list-files"))
                r = cmd_list_files(&p);
        else if (streq(argv[1], "symbolize"))
                r = cmd_symbolize(&p);
        else {
                fprintf(stderr, "ep-replay: unknown command '%s'\n", argv[1]);
                r = -EINVAL;
        }
        process_done(&p);
        fflush(stdout);
        return r < 0 ? 1 : 0;
}
