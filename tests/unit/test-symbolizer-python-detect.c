/* SPDX-License-Identifier: MIT */
/* CPython detection (unwinder-loader/python-detect.c) against every CPython on the machine:
 * the pyenv builds (every version under ~/.pyenv and /root/.pyenv) and the system's
 * /usr/bin/python3.N (Debian's is stripped, with libpython linked in) and libpython3.N. Expected
 * values come from elsewhere: the version from the interpreter itself (sys.version_info), the
 * addresses and sizes from readelf. Each file is also checked stripped (strip --strip-all: only
 * .dynsym left, as distributions ship them) and under a name that says nothing. An interpreter
 * that is missing is skipped with a message; the test is skipped (77) only when there is none. */

#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/wait.h>

#include "python-detect.h"
#include "test-python-util.h"

static const char *tmpdir;

static void check_names(void) {
        static const struct {
                const char *name;
                int r;
                unsigned minor;
        } cases[] = {
                { "libpython3.6m.so.1.0", 0, 6 },
                { "/root/.pyenv/versions/3.10.13/lib/libpython3.10.so.1.0", 0, 10 },
                { "libpython3.13t.so", 0, 13 },
                { "libpython3.9.so", 0, 9 },
                { "libpython3.11d.so.1.0", 0, 11 },
                { "python3.11", 0, 11 },
                { "/usr/bin/python3.11", 0, 11 },
                { "/usr/bin/python3.11 (deleted)", 0, 11 },
                { "python3.11d", 0, 11 },
                { "python3.7m", 0, 7 },
                { "python3.11-config", -EINVAL, 0 },
                { "python3", -EINVAL, 0 },
                { "python3.", -EINVAL, 0 },
                { "python3.123", -EINVAL, 0 },
                { "python2.7", -EINVAL, 0 },
                { "libpython3.so", -EINVAL, 0 },
                { "libpython3.9.a", -EINVAL, 0 },
                { "libpython3.9.sox", -EINVAL, 0 },
                { "libpython2.7.so.1.0", -EINVAL, 0 },
                { "pythonista", -EINVAL, 0 },
                { "/opt/python3.11/bin/foo", -EINVAL, 0 },
                { "", -EINVAL, 0 },
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                unsigned major = 0, minor = 0;
                int r = ep_py_version_from_name(cases[i].name, &major, &minor);

                if (r != cases[i].r)
                        fprintf(stderr, "name \"%s\"\n", cases[i].name);
                ASSERT_EQ(r, cases[i].r);
                if (r == 0) {
                        ASSERT_EQ(major, 3);
                        ASSERT_EQ(minor, cases[i].minor);
                }
        }
        ASSERT_EQ(ep_py_version_from_name(NULL, &(unsigned) { 0 }, &(unsigned) { 0 }), -EINVAL);
}

#define STRINGS(s) s, sizeof(s) - 1 /* the literal's bytes with their NULs, not the final one */

static void check_strings(void) {
        unsigned minor = 0, micro = 0;

        /* A string of its own. */
        ASSERT_EQ(ep_py_version_from_strings(STRINGS("abc\0" "3.11.2\0" "x\0"), 11, &minor, &micro), 0);
        ASSERT_EQ(minor, 11);
        ASSERT_EQ(micro, 2);
        /* At the very start, and release serials. */
        ASSERT_EQ(ep_py_version_from_strings(STRINGS("3.13.0rc1\0"), 13, &minor, &micro), 0);
        ASSERT_EQ(micro, 0);
        ASSERT_EQ(ep_py_version_from_strings(STRINGS("\0" "3.9.18+\0"), 9, &minor, &micro), 0);
        ASSERT_EQ(micro, 18);
        ASSERT_EQ(ep_py_version_from_strings(STRINGS("\0" "3.12.0a7\0"), 12, &minor, &micro), 0);
        ASSERT_EQ(ep_py_version_from_strings(STRINGS("\0" "3.12.0b4\0"), 12, &minor, &micro), 0);
        ASSERT_EQ(ep_py_version_from_strings(STRINGS("\0" "3.12.0rc\0"), 12, &minor, &micro), -ENOENT);
        ASSERT_EQ(ep_py_version_from_strings(STRINGS("\0" "3.12.0x\0"), 12, &minor, &micro), -ENOENT);
        /* The tail of a path (a merged string) counts, a string of its own wins over it. */
        ASSERT_EQ(ep_py_version_from_strings(STRINGS("\0/root/.pyenv/versions/3.9.18\0"), 9, &minor, &micro), 0);
        ASSERT_EQ(micro, 18);
        ASSERT_EQ(ep_py_version_from_strings(STRINGS("\0/x/Python-3.9.1\0" "3.9.18\0"), 9, &minor, &micro), 0);
        ASSERT_EQ(micro, 18);
        /* Not a version: part of a longer number or word, not NUL-terminated, other minor. */
        ASSERT_EQ(ep_py_version_from_strings(STRINGS("\0" "13.9.18\0" "v3.9.18\0" "3.9.18 \0" "3.9\0"), 9, &minor, &micro), -ENOENT);
        ASSERT_EQ(ep_py_version_from_strings(STRINGS("\0" "3.10.2\0"), 9, &minor, &micro), -ENOENT);
        ASSERT_EQ(ep_py_version_from_strings(STRINGS("\0" "3.9.123\0"), 9, &minor, &micro), -ENOENT);
        ASSERT_EQ(ep_py_version_from_strings(STRINGS("3.9.1"), 9, &minor, &micro), -ENOENT); /* no NUL */
        /* Disagreeing strings of the same rank. */
        ASSERT_EQ(ep_py_version_from_strings(STRINGS("\0" "3.9.18\0" "3.9.17\0"), 9, &minor, &micro), -ENOTUNIQ);
        ASSERT_EQ(ep_py_version_from_strings(STRINGS("\0" "3.9.18\0" "3.9.18\0"), 9, &minor, &micro), 0);
        /* Minor unknown: 3.6 or later ("3.2.0" is unicodedata's ucd_3_2_0). */
        ASSERT_EQ(ep_py_version_from_strings(STRINGS("\0" "3.2.0\0" "3.11.2\0"), 0, &minor, &micro), 0);
        ASSERT_EQ(minor, 11);
        ASSERT_EQ(micro, 2);
        ASSERT_EQ(ep_py_version_from_strings(STRINGS("\0/usr/3.9.18\0"), 0, &minor, &micro), 0);
        ASSERT_EQ(minor, 9);
        ASSERT_EQ(micro, 18);
        ASSERT_EQ(ep_py_version_from_strings(STRINGS("\0" "3.2.0\0"), 0, &minor, &micro), -ENOENT);
        ASSERT_EQ(ep_py_version_from_strings(STRINGS("\0" "3.10.1\0" "3.11.2\0"), 0, &minor, &micro), -ENOTUNIQ);
        ASSERT_EQ(ep_py_version_from_strings(NULL, 0, 0, &minor, &micro), -ENOENT);
        ASSERT_EQ(ep_py_version_from_strings(STRINGS(""), 0, &minor, &micro), -ENOENT);
}

static void check_decode(void) {
        /* mov 0x18a349(%rip),%rax; ret — 3.6.15's PyInterpreterState_Head at 0x174b90. */
        static const uint8_t rip[] = { 0x48, 0x8b, 0x05, 0x49, 0xa3, 0x18, 0x00, 0xc3 };
        static const uint8_t endbr_rip[] = { 0xf3, 0x0f, 0x1e, 0xfa, 0x48, 0x8b, 0x05, 0xf0, 0xff, 0xff, 0xff, 0xc3 };
        static const uint8_t abs[] = { 0x48, 0x8b, 0x04, 0x25, 0x40, 0x12, 0x6b, 0x00, 0xc3 };
        /* 3.7+: mov …(%rip),%rax; mov 0x18(%rax),%rax; ret — a load through _PyRuntime. */
        static const uint8_t two_loads[] = { 0x48, 0x8b, 0x05, 0xc1, 0xf1, 0x11, 0x00, 0x48, 0x8b, 0x40, 0x18, 0xc3 };
        uint64_t a = 0;

        ASSERT_EQ(ep_py_decode_interp_head(rip, sizeof rip, 0x174b90, &a), 0);
        ASSERT_EQ(a, 0x2feee0);
        ASSERT_EQ(ep_py_decode_interp_head(endbr_rip, sizeof endbr_rip, 0x1000, &a), 0);
        ASSERT_EQ(a, 0x1000 + 4 + 7 - 16);
        ASSERT_EQ(ep_py_decode_interp_head(abs, sizeof abs, 0x401000, &a), 0);
        ASSERT_EQ(a, 0x6b1240);
        ASSERT_EQ(ep_py_decode_interp_head(two_loads, sizeof two_loads, 0x187ab0, &a), -EBADMSG);
        ASSERT_EQ(ep_py_decode_interp_head(rip, sizeof rip - 1, 0x174b90, &a), -EBADMSG);
        ASSERT_EQ(ep_py_decode_interp_head(NULL, 0, 0, &a), -EBADMSG);
}

static void run_ok(const char *cmd) {
        int r = system(cmd);

        if (r != 0)
                fprintf(stderr, "command failed: %s\n", cmd);
        ASSERT_TRUE(r == 0);
}

/* Makes DT_SONAME say nothing: "libpython" becomes "libpXthon" in .dynstr. */
static void hide_soname(const char *path) {
        _cleanup_close_ int fd = open(path, O_RDWR | O_CLOEXEC);
        _cleanup_free_ char *buf = NULL;
        Elf_Scn *scn = NULL;
        GElf_Shdr shdr = {};
        size_t shstrndx, replaced = 0;
        bool found = false;
        Elf *elf;

        ASSERT_TRUE(fd >= 0);
        ASSERT_TRUE(elf_version(EV_CURRENT) != EV_NONE);
        elf = elf_begin(fd, ELF_C_READ, NULL);
        ASSERT_TRUE(elf);
        ASSERT_EQ(elf_getshdrstrndx(elf, &shstrndx), 0);
        while ((scn = elf_nextscn(elf, scn)))
                if (gelf_getshdr(scn, &shdr) && streq(elf_strptr(elf, shstrndx, shdr.sh_name) ?: "", ".dynstr")) {
                        found = true;
                        break;
                }
        elf_end(elf);
        ASSERT_TRUE(found);

        buf = malloc(shdr.sh_size + 1);
        ASSERT_TRUE(buf);
        ASSERT_EQ(pread(fd, buf, shdr.sh_size, (off_t) shdr.sh_offset), (ssize_t) shdr.sh_size);
        buf[shdr.sh_size] = '\0';
        for (char *p = buf; (p = memmem(p, shdr.sh_size - (size_t) (p - buf), "libpython", 9)); p += 9) {
                p[4] = 'X';
                replaced++;
        }
        ASSERT_TRUE(replaced > 0);
        ASSERT_EQ(pwrite(fd, buf, shdr.sh_size, (off_t) shdr.sh_offset), (ssize_t) shdr.sh_size);
}

/* Detection of one file against readelf's view of the original (unstripped) file. */
static void check_runtime(const PyInstall *in, const char *path, const char *name, bool stripped,
                          EpPyVersionSource source) {
        EpPyRuntime rt = {};
        EpPyLayout layout, table;
        PySym eval, sym, cold[8];
        size_t n_cold;
        int fd, r;

        fd = open(path, O_RDONLY | O_CLOEXEC);
        ASSERT_TRUE(fd >= 0);
        r = ep_py_detect_fd(fd, name, &rt);
        if (r != 1)
                fprintf(stderr, "%s (as %s): ep_py_detect_fd() = %d\n", path, name ?: "(no name)", r);
        ASSERT_EQ(r, 1);

        /* The version is the interpreter's own. */
        ASSERT_EQ(rt.major, in->major);
        ASSERT_EQ(rt.minor, in->minor);
        if (rt.micro != in->micro)
                fprintf(stderr, "%s: micro %u, the interpreter says %u\n", path, rt.micro, in->micro);
        ASSERT_EQ(rt.micro, in->micro);
        ASSERT_EQ(rt.version_source, source);

        /* The eval loop: .dynsym's value and size; its cold part(s) from .symtab. */
        ASSERT_TRUE(py_readelf_sym(in->runtime, true, "_PyEval_EvalFrameDefault", &eval));
        ASSERT_TRUE(eval.size > 0);
        ASSERT_TRUE(rt.n_eval >= 1);
        ASSERT_EQ(rt.eval[0].start, eval.value);
        ASSERT_EQ(rt.eval[0].end, eval.value + eval.size);
        n_cold = stripped ? 0 : py_readelf_syms(in->runtime, false, "_PyEval_EvalFrameDefault.cold", true, cold, ELEMENTSOF(cold));
        ASSERT_EQ(rt.n_eval, 1 + n_cold);
        for (size_t i = 0; i < n_cold; i++) {
                bool found = false;
                for (unsigned j = 1; j < rt.n_eval; j++)
                        if (rt.eval[j].start == cold[i].value && rt.eval[j].end == cold[i].value + cold[i].size)
                                found = true;
                ASSERT_TRUE(found);
        }

        if (in->minor >= 7) {
                ASSERT_TRUE(py_readelf_sym(in->runtime, true, "_PyRuntime", &sym));
                ASSERT_EQ(rt.runtime_addr, sym.value);
                ASSERT_EQ(rt.runtime_size, sym.size);
                ASSERT_EQ(rt.interp_head_addr, 0);
                ASSERT_EQ(rt.tstate_current_addr, 0);
                /* 3.13's _PyRuntime starts with _Py_DebugOffsets: it has an initializer. */
                if (in->minor >= 13)
                        ASSERT_TRUE(rt.runtime_file_offset != UINT64_MAX);
        } else {
                ASSERT_EQ(rt.runtime_addr, 0);
                ASSERT_TRUE(py_readelf_sym(in->runtime, true, "_PyThreadState_Current", &sym));
                ASSERT_EQ(rt.tstate_current_addr, sym.value);
                /* interp_head is a local symbol of .symtab; stripped, it is decoded from
                 * PyInterpreterState_Head() and must come out the same. */
                if (py_readelf_sym(in->runtime, false, "interp_head", &sym)) {
                        ASSERT_EQ(rt.interp_head_addr, sym.value);
                        ASSERT_EQ(rt.interp_head_source, stripped ? EP_PY_INTERP_HEAD_CODE : EP_PY_INTERP_HEAD_SYMTAB);
                } else
                        ASSERT_EQ(rt.interp_head_source, EP_PY_INTERP_HEAD_CODE);
        }

        /* The layout to walk it with: the table, and for 3.13 the table confirmed by the
         * runtime's own _Py_DebugOffsets. */
        ASSERT_OK(ep_py_detect_layout(fd, &rt, &layout));
        ASSERT_OK(ep_py_layout_for_version(rt.major, rt.minor, &table));
        ASSERT_TRUE(memcmp(&layout, &table, sizeof layout) == 0);
        /* ... and by the code type's member table, stripped or not: name, file name, first
         * line, line table at least. */
        ASSERT_TRUE(rt.n_members[EP_PY_MEMBERS_CODE] >= 8);
        /* co_argcount, co_kwonlyargcount, co_flags, co_firstlineno, co_filename, co_name and
         * co_lnotab, co_code (≤3.9) / co_linetable, co_code (3.10) / co_linetable, co_qualname */
        ASSERT_EQ(ep_py_members_check(EP_PY_MEMBERS_CODE, rt.members[EP_PY_MEMBERS_CODE],
                                      rt.n_members[EP_PY_MEMBERS_CODE], &layout, NULL), 8);
        /* ... and up to 3.10 the frame object's f_back, f_code and (a member up to 3.9, a getter
         * in 3.10) f_lasti by the frame type's. */
        ASSERT_EQ(ep_py_members_check(EP_PY_MEMBERS_FRAME, rt.members[EP_PY_MEMBERS_FRAME],
                                      rt.n_members[EP_PY_MEMBERS_FRAME], &layout, NULL),
                  in->minor <= 9 ? 3 : in->minor == 10 ? 2 : 0);
        close(fd);
}

/* The member check alone: a table that disagrees with the layout is refused, and names it. */
static void check_members(void) {
        EpPyMember m[] = { { "co_argcount", 0 }, { "co_name", 0 }, { "co_unknown_field", 999 } };
        const char *what = NULL;
        EpPyLayout y;

        ASSERT_OK(ep_py_layout_for_version(3, 12, &y));
        m[0].offset = y.co_argcount;
        m[1].offset = y.co_name;
        ASSERT_EQ(ep_py_members_check(EP_PY_MEMBERS_CODE, m, ELEMENTSOF(m), &y, &what), 2); /* unknown names are not judged */
        ASSERT_EQ(ep_py_members_check(EP_PY_MEMBERS_CODE, m, 0, &y, &what), 0);
        ASSERT_EQ(ep_py_members_check(EP_PY_MEMBERS_FRAME, m, ELEMENTSOF(m), &y, &what), 0); /* 3.12: no frame objects walked */
        m[1].offset = y.co_name + 8;
        ASSERT_EQ(ep_py_members_check(EP_PY_MEMBERS_CODE, m, ELEMENTSOF(m), &y, &what), -EBADMSG);
        ASSERT_TRUE(what && streq(what, "co_name"));
}

static void check_install(const PyInstall *in) {
        char path[PATH_MAX + 64], cmd[3 * PATH_MAX];
        const char *base = strrchr(in->runtime, '/') + 1;
        EpPyVersionSource source;
        EpPyRuntime rt;

        printf("  %s: Python %u.%u.%u\n", in->runtime, in->major, in->minor, in->micro);

        /* As it is, under its own name: Py_Version from 3.11 on, else DT_SONAME or the name. */
        source = in->minor >= 11 ? EP_PY_VERSION_FROM_PY_VERSION : EP_PY_VERSION_FROM_NAME;
        check_runtime(in, in->runtime, in->runtime, false, source);
        ASSERT_EQ(ep_py_detect_path(in->runtime, &rt), 1);

        /* Stripped like a distribution's file: .dynsym only. */
        snprintf(path, sizeof path, "%s/%s", tmpdir, base);
        snprintf(cmd, sizeof cmd, "strip --strip-all -o '%s' '%s'", path, in->runtime);
        run_ok(cmd);
        check_runtime(in, path, path, true, source);

        /* Under a name that says nothing (the loader may only have /proc/PID/map_files/…):
         * Py_Version, or DT_SONAME for a library. */
        if (in->minor >= 11 || strstr(base, "libpython")) {
                check_runtime(in, path, NULL, true, source);
                check_runtime(in, path, "/proc/1/map_files/7f00-7f80", true, source);
        }
        /* Before 3.11 with neither a telling name nor a soname (an interpreter linked into a
         * program of another name): the version string in .rodata. */
        if (in->minor < 11 && strstr(base, "libpython")) {
                hide_soname(path);
                check_runtime(in, path, NULL, true, EP_PY_VERSION_FROM_STRING);
        }
        unlink(path);

        /* A python3.N that links libpython is not a runtime itself. */
        PySym eval;
        if (!streq(in->exe, in->runtime) && !py_readelf_sym(in->exe, true, "_PyEval_EvalFrameDefault", &eval)) {
                ASSERT_EQ(ep_py_detect_path(in->exe, &rt), 0);
                printf("    %s links it: not a runtime itself\n", in->exe);
        }
}

/* Files that are not CPython 3 runtimes. */
static void check_negative(void) {
        char path[PATH_MAX + 64], cmd[3 * PATH_MAX];
        const char *roots[] = { getenv("HOME"), "/root" };
        EpPyRuntime rt;
        glob_t g = {};

        ASSERT_EQ(ep_py_detect_path("/bin/true", &rt), 0);           /* ELF, no Python */
        ASSERT_EQ(ep_py_detect_path("/etc/passwd", &rt), 0);         /* not ELF */
        ASSERT_EQ(ep_py_detect_path("/nonexistent/python3.11", &rt), -ENOENT);
        ASSERT_EQ(ep_py_detect_fd(-1, NULL, &rt), -EINVAL);

        /* The stable-ABI stub libpython3.so and Python 2's libpython2.7 (no
         * _PyEval_EvalFrameDefault). */
        for (size_t r = 0; r < ELEMENTSOF(roots); r++) {
                static const char *const patterns[] = {
                        "%s/.pyenv/versions/*/lib/libpython3.so",
                        "%s/.pyenv/versions/*/lib/libpython2.*.so.1.0",
                };
                if (!roots[r] || (r > 0 && roots[0] && streq(roots[0], roots[r])))
                        continue;
                for (size_t k = 0; k < ELEMENTSOF(patterns); k++) {
                        g = (glob_t) {};
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
                        snprintf(path, sizeof path, patterns[k], roots[r]);
#pragma GCC diagnostic pop
                        if (glob(path, 0, NULL, &g) == 0)
                                for (size_t i = 0; i < g.gl_pathc; i++) {
                                        ASSERT_EQ(ep_py_detect_path(g.gl_pathv[i], &rt), 0);
                                        printf("  %s: not a CPython 3 runtime, as expected\n", g.gl_pathv[i]);
                                }
                        globfree(&g);
                }
        }

        /* A truncated libpython: no crash, no runtime. */
        g = (glob_t) {};
        snprintf(path, sizeof path, "%s/.pyenv/versions/3.*/lib/libpython3.*.so.1.0", getenv("HOME") ?: "/root");
        if (glob(path, 0, NULL, &g) == 0 && g.gl_pathc > 0) {
                static const off_t sizes[] = { 16, 64, 4096, 1 << 20 };
                for (size_t i = 0; i < ELEMENTSOF(sizes); i++) {
                        snprintf(cmd, sizeof cmd, "%s/truncated", tmpdir);
                        py_copy_file(g.gl_pathv[0], cmd, sizes[i]);
                        ASSERT_TRUE(ep_py_detect_path(cmd, &rt) <= 0);
                        unlink(cmd);
                }
        }
        globfree(&g);
}

int main(void) {
        PyInstall ins[PY_MAX_INSTALLS];
        size_t n;

        check_names();
        check_strings();
        check_decode();
        check_members();

        tmpdir = py_tmpdir_make("test-py-detect");
        check_negative();

        n = py_discover(ins);
        if (n == 0) {
                printf("test-symbolizer-python-detect: no CPython on this machine, skipped\n");
                return 77;
        }
        for (size_t i = 0; i < n; i++)
                check_install(&ins[i]);

        /* Which of 3.6 … 3.13 were there. */
        for (unsigned minor = 6; minor <= 13; minor++) {
                bool found = false;
                for (size_t i = 0; i < n; i++)
                        if (ins[i].major == 3 && ins[i].minor == minor)
                                found = true;
                if (!found)
                        printf("  no CPython 3.%u on this machine: not checked\n", minor);
        }

        return tests_summary("test-symbolizer-python-detect");
}
