/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <libelf.h>
#include <stddef.h>
#include <string.h>
#include <sys/stat.h>

#include "log.h"
#include "macro.h"
#include "python-detect.h"

#define EVAL_NAME "_PyEval_EvalFrameDefault"
#define EVAL_COLD_NAME EVAL_NAME ".cold"
#define MAX_STRINGS_SCAN (64u << 20) /* .rodata larger than this is not looked through */
#define INTERP_HEAD_CODE_SIZE 16u

DEFINE_TRIVIAL_CLEANUP_FUNC(Elf *, elf_end);

/* One symbol of interest, as the symbol tables define it. */
typedef struct FoundSym {
        bool found, conflict; /* conflict: two definitions with different values */
        uint64_t value, size;
} FoundSym;

typedef struct Symbols {
        FoundSym eval, runtime, py_version, tstate_current, interp_head, interp_head_func, types[_EP_PY_MEMBERS_MAX];
        EpPyAddrRange cold[EP_PY_MAX_EVAL_RANGES - 1];
        unsigned n_cold;
        bool cold_overflow;
} Symbols;

static void found_sym_set(FoundSym *f, const GElf_Sym *s) {
        if (!f->found) {
                f->found = true;
                f->value = s->st_value;
                f->size = s->st_size;
        } else if (f->value != s->st_value)
                f->conflict = true;
}

static bool found_sym_ok(const FoundSym *f) {
        return f->found && !f->conflict;
}

/* "_PyEval_EvalFrameDefault.cold" or GCC's older "_PyEval_EvalFrameDefault.cold.N". */
static bool is_cold_name(const char *name) {
        const char *p;

        if (!startswith(name, EVAL_COLD_NAME))
                return false;
        p = name + strlen(EVAL_COLD_NAME);
        if (*p == '\0')
                return true;
        if (*p != '.' || p[1] == '\0')
                return false;
        for (p++; *p; p++)
                if (*p < '0' || *p > '9')
                        return false;
        return true;
}

static void symbols_add(Symbols *syms, const char *name, const GElf_Sym *s) {
        unsigned type = GELF_ST_TYPE(s->st_info);

        if (s->st_shndx == SHN_UNDEF || s->st_value == 0)
                return;

        if (type == STT_FUNC) {
                if (streq(name, EVAL_NAME))
                        found_sym_set(&syms->eval, s);
                else if (streq(name, "PyInterpreterState_Head"))
                        found_sym_set(&syms->interp_head_func, s);
                else if (is_cold_name(name) && s->st_size > 0 && s->st_value + s->st_size > s->st_value) {
                        for (unsigned i = 0; i < syms->n_cold; i++)
                                if (syms->cold[i].start == s->st_value)
                                        return;
                        if (syms->n_cold >= ELEMENTSOF(syms->cold)) {
                                syms->cold_overflow = true;
                                return;
                        }
                        syms->cold[syms->n_cold++] = (EpPyAddrRange) {
                                .start = s->st_value,
                                .end = s->st_value + s->st_size,
                        };
                }
        } else if (type == STT_OBJECT) {
                if (streq(name, "_PyRuntime"))
                        found_sym_set(&syms->runtime, s);
                else if (streq(name, "Py_Version"))
                        found_sym_set(&syms->py_version, s);
                else if (streq(name, "_PyThreadState_Current"))
                        found_sym_set(&syms->tstate_current, s);
                else if (streq(name, "PyCode_Type"))
                        found_sym_set(&syms->types[EP_PY_MEMBERS_CODE], s);
                else if (streq(name, "PyFrame_Type"))
                        found_sym_set(&syms->types[EP_PY_MEMBERS_FRAME], s);
                else if (streq(name, "interp_head") && GELF_ST_BIND(s->st_info) == STB_LOCAL)
                        found_sym_set(&syms->interp_head, s);
        }
}

/* Both .dynsym and .symtab: local symbols (the cold part, interp_head) are only in .symtab, a
 * stripped file has only .dynsym. */
static int symbols_read(Elf *elf, Symbols *syms) {
        Elf_Scn *scn = NULL;

        while ((scn = elf_nextscn(elf, scn))) {
                GElf_Shdr shdr;
                Elf_Data *data;
                size_t n;

                if (!gelf_getshdr(scn, &shdr))
                        return -EBADMSG;
                if (shdr.sh_type != SHT_SYMTAB && shdr.sh_type != SHT_DYNSYM)
                        continue;
                if (shdr.sh_entsize == 0)
                        return -EBADMSG;
                data = elf_getdata(scn, NULL);
                if (!data)
                        return -EBADMSG;
                n = data->d_size / shdr.sh_entsize;
                for (size_t i = 1; i < n; i++) {
                        GElf_Sym s;
                        const char *name;

                        if (!gelf_getsym(data, (int) i, &s))
                                return -EBADMSG;
                        if (s.st_name == 0)
                                continue;
                        name = elf_strptr(elf, shdr.sh_link, s.st_name);
                        if (!name)
                                continue;
                        symbols_add(syms, name, &s);
                }
        }
        return 0;
}

/* The file offset of [addr, addr+size) if a PT_LOAD segment has it in the file, else
 * UINT64_MAX (not in any segment, or in the zero-filled tail: .bss). *ret_writable tells
 * whether that segment is writable (may be NULL). */
static uint64_t vaddr_to_offset(Elf *elf, uint64_t addr, uint64_t size, bool *ret_writable) {
        size_t n;

        if (elf_getphdrnum(elf, &n) < 0)
                return UINT64_MAX;
        for (size_t i = 0; i < n; i++) {
                GElf_Phdr ph;

                if (!gelf_getphdr(elf, (int) i, &ph) || ph.p_type != PT_LOAD)
                        continue;
                if (addr < ph.p_vaddr || addr - ph.p_vaddr >= ph.p_memsz)
                        continue;
                if (ret_writable)
                        *ret_writable = ph.p_flags & PF_W;
                if (addr - ph.p_vaddr > ph.p_filesz || size > ph.p_filesz - (addr - ph.p_vaddr))
                        return UINT64_MAX;
                return ph.p_offset + (addr - ph.p_vaddr);
        }
        return UINT64_MAX;
}

static int pread_full(int fd, void *buf, size_t size, uint64_t offset) {
        size_t done = 0;

        if (offset > (uint64_t) INT64_MAX - size)
                return -EBADMSG;
        while (done < size) {
                ssize_t k = pread(fd, (uint8_t *) buf + done, size - done, (off_t) (offset + done));

                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (k == 0)
                        return -EBADMSG; /* the file is shorter than its headers say */
                done += (size_t) k;
        }
        return 0;
}

static int read_vaddr(int fd, Elf *elf, uint64_t addr, void *buf, size_t size) {
        uint64_t off = vaddr_to_offset(elf, addr, size, NULL);

        if (off == UINT64_MAX)
                return -EBADMSG;
        return pread_full(fd, buf, size, off);
}

static uint64_t le_uint(const uint8_t *p, size_t n) {
        uint64_t v = 0;

        for (size_t i = n; i > 0; i--)
                v = v << 8 | p[i - 1];
        return v;
}

/* Py_Version (3.11+) is PY_VERSION_HEX: 0xMMmmuuLS (major, minor, micro, level, serial). */
static int version_from_py_version(int fd, Elf *elf, const FoundSym *f, EpPyRuntime *rt) {
        uint8_t buf[8];
        uint64_t hex;
        int r;

        if (f->size < 4 || f->size > sizeof(buf))
                return -EBADMSG;
        r = read_vaddr(fd, elf, f->value, buf, f->size);
        if (r < 0)
                return r;
        hex = le_uint(buf, f->size) & 0xffffffffu;
        if (hex >> 24 != 3)
                return -EBADMSG;
        rt->major = 3;
        rt->minor = (hex >> 16) & 0xff;
        rt->micro = (hex >> 8) & 0xff;
        rt->version_source = EP_PY_VERSION_FROM_PY_VERSION;
        return 0;
}

static const char *elf_soname(Elf *elf) {
        Elf_Scn *scn = NULL;

        while ((scn = elf_nextscn(elf, scn))) {
                GElf_Shdr shdr;
                Elf_Data *data;

                if (!gelf_getshdr(scn, &shdr) || shdr.sh_type != SHT_DYNAMIC || shdr.sh_entsize == 0)
                        continue;
                data = elf_getdata(scn, NULL);
                if (!data)
                        return NULL;
                for (size_t i = 0; i < data->d_size / shdr.sh_entsize; i++) {
                        GElf_Dyn d;

                        if (!gelf_getdyn(data, (int) i, &d) || d.d_tag == DT_NULL)
                                break;
                        if (d.d_tag == DT_SONAME)
                                return elf_strptr(elf, shdr.sh_link, d.d_un.d_val);
                }
        }
        return NULL;
}

/* .rodata's contents, or NULL. */
static Elf_Data *rodata(Elf *elf) {
        Elf_Scn *scn = NULL;
        size_t shstrndx;

        if (elf_getshdrstrndx(elf, &shstrndx) < 0)
                return NULL;
        while ((scn = elf_nextscn(elf, scn))) {
                GElf_Shdr shdr;
                const char *name;

                if (!gelf_getshdr(scn, &shdr) || shdr.sh_type != SHT_PROGBITS)
                        continue;
                name = elf_strptr(elf, shstrndx, shdr.sh_name);
                if (!name || !streq(name, ".rodata"))
                        continue;
                if (shdr.sh_size > MAX_STRINGS_SCAN)
                        return NULL;
                return elf_getdata(scn, NULL);
        }
        return NULL;
}

int ep_py_version_from_name(const char *name, unsigned *ret_major, unsigned *ret_minor) {
        const char *p, *slash;
        unsigned minor = 0;
        bool lib;

        if (!name)
                return -EINVAL;
        slash = strrchr(name, '/');
        p = slash ? slash + 1 : name;

        lib = startswith(p, "libpython");
        if (lib)
                p += strlen("libpython");
        else if (startswith(p, "python"))
                p += strlen("python");
        else
                return -EINVAL;

        if (p[0] != '3' || p[1] != '.')
                return -EINVAL;
        p += 2;
        if (*p < '0' || *p > '9')
                return -EINVAL;
        for (unsigned digits = 0; *p >= '0' && *p <= '9'; p++, digits++) {
                if (digits == 2)
                        return -EINVAL;
                minor = minor * 10 + (unsigned) (*p - '0');
        }
        /* ABI flags: d(ebug), m(alloc, ≤3.7), u(nicode, ≤3.2), t (free-threaded, 3.13+). */
        while (*p && strchr("dmut", *p))
                p++;

        if (lib) {
                if (!startswith(p, ".so") || (p[3] != '\0' && p[3] != '.'))
                        return -EINVAL;
        } else if (*p != '\0' && !streq(p, " (deleted)"))
                return -EINVAL;

        *ret_major = 3;
        *ret_minor = minor;
        return 0;
}

/* Parses "X.Y[{a,b,rc}N][+]" NUL-terminated at s (after "3."), within end. */
static bool parse_version_tail(const char *s, const char *end, unsigned *ret_minor, unsigned *ret_micro) {
        unsigned v[2] = {};

        for (unsigned part = 0; part < 2; part++) {
                unsigned digits = 0;

                if (part == 1) {
                        if (s >= end || *s != '.')
                                return false;
                        s++;
                }
                for (; s < end && *s >= '0' && *s <= '9'; s++) {
                        if (++digits > 2)
                                return false;
                        v[part] = v[part] * 10 + (unsigned) (*s - '0');
                }
                if (digits == 0)
                        return false;
        }
        if (s < end && (*s == 'a' || *s == 'b' || *s == 'r')) {
                unsigned digits = 0;

                if (*s == 'r') {
                        if (end - s < 2 || s[1] != 'c')
                                return false;
                        s++;
                }
                for (s++; s < end && *s >= '0' && *s <= '9'; s++)
                        digits++;
                if (digits == 0)
                        return false;
        }
        if (s < end && *s == '+')
                s++;
        if (s >= end || *s != '\0')
                return false;
        *ret_minor = v[0];
        *ret_micro = v[1];
        return true;
}

int ep_py_version_from_strings(const char *data, size_t size, unsigned minor,
                               unsigned *ret_minor, unsigned *ret_micro) {
        /* [0]: a string of its own, [1]: the tail of a longer string. */
        bool have[2] = {}, conflict[2] = {};
        unsigned got_minor[2] = {}, got_micro[2] = {};
        const char *end;

        if (!data) /* no .rodata: NULL + 0 is undefined too */
                return -ENOENT;
        end = data + size;

        for (const char *p = data; p && end - p >= 5; p = memchr(p + 1, '3', (size_t) (end - p - 1))) {
                unsigned m, u, rank;

                if (p[0] != '3' || p[1] != '.')
                        continue;
                if (p == data || p[-1] == '\0')
                        rank = 0;
                else if (p[-1] == '/' || p[-1] == '-')
                        rank = 1;
                else
                        continue;
                if (!parse_version_tail(p + 2, end, &m, &u))
                        continue;
                if (minor != 0 ? m != minor : m < 6)
                        continue; /* "3.2.0" is unicodedata's ucd_3_2_0, never a runtime's */

                if (!have[rank]) {
                        have[rank] = true;
                        got_minor[rank] = m;
                        got_micro[rank] = u;
                } else if (got_minor[rank] != m || got_micro[rank] != u)
                        conflict[rank] = true;
        }

        for (unsigned rank = 0; rank < 2; rank++) {
                if (!have[rank])
                        continue;
                if (conflict[rank])
                        return -ENOTUNIQ;
                *ret_minor = got_minor[rank];
                *ret_micro = got_micro[rank];
                return 0;
        }
        return -ENOENT;
}

int ep_py_decode_interp_head(const uint8_t *code, size_t size, uint64_t func_addr, uint64_t *ret) {
        static const uint8_t endbr64[4] = { 0xf3, 0x0f, 0x1e, 0xfa };
        size_t i = 0;

        if (!code)
                return -EBADMSG;
        if (size >= sizeof(endbr64) && memcmp(code, endbr64, sizeof(endbr64)) == 0)
                i = sizeof(endbr64);

        /* 48 8b 05 <disp32>   mov disp32(%rip),%rax;  c3  ret */
        if (size >= i + 8 && code[i] == 0x48 && code[i + 1] == 0x8b && code[i + 2] == 0x05 &&
            code[i + 7] == 0xc3) {
                int32_t disp = (int32_t) (uint32_t) le_uint(code + i + 3, 4);

                *ret = func_addr + i + 7 + (uint64_t) (int64_t) disp;
                return 0;
        }
        /* 48 8b 04 25 <disp32>   mov disp32,%rax (absolute, sign-extended);  c3  ret */
        if (size >= i + 9 && code[i] == 0x48 && code[i + 1] == 0x8b && code[i + 2] == 0x04 &&
            code[i + 3] == 0x25 && code[i + 8] == 0xc3) {
                int32_t disp = (int32_t) (uint32_t) le_uint(code + i + 4, 4);

                *ret = (uint64_t) (int64_t) disp;
                return 0;
        }
        return -EBADMSG;
}

/* 3.6 has no _PyRuntime: the interpreter list starts at the static interp_head in
 * Python/pystate.c. The local symbol names it when .symtab is there; a stripped file still
 * exports PyInterpreterState_Head(), whose body is the one load of it. */
static int find_interp_head(int fd, Elf *elf, const Symbols *syms, EpPyRuntime *rt) {
        uint8_t code[INTERP_HEAD_CODE_SIZE];
        uint64_t addr, size;
        bool writable = false;
        int r;

        if (found_sym_ok(&syms->interp_head)) {
                rt->interp_head_addr = syms->interp_head.value;
                rt->interp_head_source = EP_PY_INTERP_HEAD_SYMTAB;
                return 0;
        }
        if (!found_sym_ok(&syms->interp_head_func))
                return -ENODATA;

        size = MIN((uint64_t) sizeof(code), syms->interp_head_func.size ?: sizeof(code));
        r = read_vaddr(fd, elf, syms->interp_head_func.value, code, size);
        if (r < 0)
                return r;
        r = ep_py_decode_interp_head(code, size, syms->interp_head_func.value, &addr);
        if (r < 0)
                return log_debug_errno(r, "PyInterpreterState_Head() is not a single load");
        /* It must be a variable in a writable segment (.data/.bss). */
        (void) vaddr_to_offset(elf, addr, 0, &writable);
        if (!writable)
                return -ENODATA;

        rt->interp_head_addr = addr;
        rt->interp_head_source = EP_PY_INTERP_HEAD_CODE;
        return 0;
}

static int detect_version(int fd, Elf *elf, const char *name, const Symbols *syms, EpPyRuntime *rt) {
        unsigned major = 0, minor = 0, micro, m;
        Elf_Data *ro;
        const char *soname;
        int r;

        if (found_sym_ok(&syms->py_version)) {
                r = version_from_py_version(fd, elf, &syms->py_version, rt);
                if (r >= 0)
                        return 0;
                log_debug_errno(r, "Py_Version unreadable, looking at names: %m");
        }

        soname = elf_soname(elf);
        if ((soname && ep_py_version_from_name(soname, &major, &minor) >= 0) ||
            ep_py_version_from_name(name, &major, &minor) >= 0)
                rt->version_source = EP_PY_VERSION_FROM_NAME;

        ro = rodata(elf);
        r = ro ? ep_py_version_from_strings(ro->d_buf, ro->d_size, minor, &m, &micro) : -ENOENT;
        if (r >= 0) {
                if (major == 0) {
                        major = 3;
                        minor = m;
                        rt->version_source = EP_PY_VERSION_FROM_STRING;
                }
                rt->micro = micro;
        } else
                log_debug_errno(r, "No CPython version string in .rodata: %m");

        if (major == 0)
                return -ENODATA;
        rt->major = major;
        rt->minor = minor;
        return 0;
}

/* PyTypeObject.tp_members on x86-64 (the field order is part of the stable type object since
 * 3.0; 3.8 renamed tp_print to tp_vectorcall_offset in place), and PyMemberDef's fields. */
#define TYPE_TP_MEMBERS 240
#define MEMBER_SIZE 40
#define MEMBER_NAME 0
#define MEMBER_OFFSET 16

/* A type's member table, as the file holds it: the linker writes the addresses of a
 * position-independent file's static pointers in place as well as in their relocations, so
 * they read as ELF addresses. Anything that does not read as a table leaves none (nothing to
 * check with, not an error). */
static unsigned read_members(int fd, Elf *elf, const FoundSym *type, EpPyMember ret[static EP_PY_MAX_MEMBERS]) {
        uint8_t ptr[8], entry[MEMBER_SIZE];
        uint64_t table;

        if (!found_sym_ok(type) || type->size < TYPE_TP_MEMBERS + 8 ||
            read_vaddr(fd, elf, type->value + TYPE_TP_MEMBERS, ptr, sizeof ptr) < 0)
                return 0;
        table = le_uint(ptr, 8);
        for (unsigned i = 0; table != 0 && i < EP_PY_MAX_MEMBERS; i++) {
                EpPyMember *m = &ret[i];
                uint64_t name;

                if (read_vaddr(fd, elf, table + (uint64_t) i * MEMBER_SIZE, entry, sizeof entry) < 0)
                        break;
                name = le_uint(entry + MEMBER_NAME, 8);
                if (name == 0)
                        return i; /* the terminating entry: a whole table */
                if (read_vaddr(fd, elf, name, m->name, sizeof m->name) < 0 || !memchr(m->name, '\0', sizeof m->name))
                        break;
                m->offset = le_uint(entry + MEMBER_OFFSET, 8);
        }
        log_debug("A type's member table cannot be read from the file: not checked.");
        return 0;
}

int ep_py_detect_fd(int fd, const char *name, EpPyRuntime *ret) {
        _cleanup_(elf_endp) Elf *elf = NULL;
        Symbols syms = {};
        EpPyRuntime rt = {
                .micro = EP_PY_MICRO_UNKNOWN,
                .runtime_file_offset = UINT64_MAX,
        };
        GElf_Ehdr eh;
        int r;

        if (fd < 0 || !ret)
                return -EINVAL;
        if (elf_version(EV_CURRENT) == EV_NONE)
                return -ENOTSUP;

        /* Read, not mapped: a file truncated under us must give an error, not SIGBUS. */
        elf = elf_begin(fd, ELF_C_READ, NULL);
        if (!elf || elf_kind(elf) != ELF_K_ELF)
                return 0;
        if (!gelf_getehdr(elf, &eh))
                return 0;
        if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_machine != EM_X86_64)
                return 0;

        r = symbols_read(elf, &syms);
        if (r < 0)
                return r;

        /* What makes it a runtime: the eval loop is defined here. */
        if (!found_sym_ok(&syms.eval))
                return 0;
        if (syms.eval.size == 0 || syms.eval.value + syms.eval.size < syms.eval.value)
                return log_debug_errno(-ENODATA, EVAL_NAME " has no size, or one past the address space");

        r = detect_version(fd, elf, name, &syms, &rt);
        if (r < 0)
                return log_debug_errno(r, "CPython runtime of unknown version");
        if (rt.major != 3 || rt.minor < 6)
                return log_debug_errno(-ENODATA, "CPython %u.%u has no known thread-state symbols",
                                       rt.major, rt.minor);

        rt.eval[rt.n_eval++] = (EpPyAddrRange) {
                .start = syms.eval.value,
                .end = syms.eval.value + syms.eval.size,
        };
        for (unsigned i = 0; i < syms.n_cold; i++)
                rt.eval[rt.n_eval++] = syms.cold[i];
        if (syms.cold_overflow)
                log_debug("More than %u cold parts of " EVAL_NAME ", the rest ignored",
                          EP_PY_MAX_EVAL_RANGES - 1);

        if (rt.minor == 6) {
                r = find_interp_head(fd, elf, &syms, &rt);
                if (r < 0)
                        return log_debug_errno(r == -ENODATA ? r : -ENODATA,
                                               "CPython 3.6 without a findable interp_head");
                if (found_sym_ok(&syms.tstate_current))
                        rt.tstate_current_addr = syms.tstate_current.value;
        } else {
                if (!found_sym_ok(&syms.runtime) || syms.runtime.size == 0)
                        return log_debug_errno(-ENODATA, "CPython %u.%u without _PyRuntime",
                                               rt.major, rt.minor);
                rt.runtime_addr = syms.runtime.value;
                rt.runtime_size = syms.runtime.size;
                rt.runtime_file_offset = vaddr_to_offset(elf, rt.runtime_addr,
                                                         MIN(rt.runtime_size, (uint64_t) EP_PY_DEBUG_OFFSETS_313_SIZE),
                                                         NULL);
        }

        for (unsigned t = 0; t < _EP_PY_MEMBERS_MAX; t++)
                rt.n_members[t] = read_members(fd, elf, &syms.types[t], rt.members[t]);
        *ret = rt;
        return 1;
}

int ep_py_detect_path(const char *path, EpPyRuntime *ret) {
        _cleanup_close_ int fd = -EBADF;

        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return -errno;
        return ep_py_detect_fd(fd, path, ret);
}

typedef struct MemberField {
        const char *name;
        size_t layout_offset;
} MemberField;

/* The members whose offsets the layout has (≤3.9 keep the line table in co_lnotab). */
static const MemberField code_fields[] = {
        { "co_argcount", offsetof(EpPyLayout, co_argcount) },
        { "co_kwonlyargcount", offsetof(EpPyLayout, co_kwonlyargcount) },
        { "co_flags", offsetof(EpPyLayout, co_flags) },
        { "co_firstlineno", offsetof(EpPyLayout, co_firstlineno) },
        { "co_filename", offsetof(EpPyLayout, co_filename) },
        { "co_name", offsetof(EpPyLayout, co_name) },
        { "co_qualname", offsetof(EpPyLayout, co_qualname) },
        { "co_linetable", offsetof(EpPyLayout, co_linetable) },
        { "co_lnotab", offsetof(EpPyLayout, co_linetable) },
        { "co_code", offsetof(EpPyLayout, co_code) },
        {}
};

/* Up to 3.10 the walk reads frame objects; from 3.11 on the layout's frame fields are those of
 * the interpreter's own frames, which no member table describes. */
static const MemberField frame_fields[] = {
        { "f_back", offsetof(EpPyLayout, frame_back) },
        { "f_code", offsetof(EpPyLayout, frame_code) },
        { "f_lasti", offsetof(EpPyLayout, frame_lasti) },
        {}
};

int ep_py_members_check(EpPyMemberTable table, const EpPyMember *members, size_t n, const EpPyLayout *layout,
                        const char **ret_what) {
        const MemberField *fields = table == EP_PY_MEMBERS_CODE ? code_fields : frame_fields;
        int checked = 0;

        if (table == EP_PY_MEMBERS_FRAME && layout->frame_kind != EP_PY_FRAMES_OBJECT)
                return 0;
        for (size_t i = 0; i < n; i++)
                for (const MemberField *f = fields; f->name; f++) {
                        uint32_t want;

                        if (!streq(members[i].name, f->name))
                                continue;
                        memcpy(&want, (const uint8_t *) layout + f->layout_offset, sizeof want);
                        if (want == EP_PY_NO_OFFSET)
                                continue; /* a field the walk or the symbolizer does not read */
                        if (members[i].offset != want) {
                                if (ret_what)
                                        *ret_what = f->name;
                                return -EBADMSG;
                        }
                        checked++;
                }
        return checked;
}

static int layout_of(int fd, const EpPyRuntime *rt, EpPyLayout *ret) {
        uint8_t buf[EP_PY_DEBUG_OFFSETS_313_SIZE];
        int r;

        /* From 3.13 on the runtime describes itself; its initial value is in the file. */
        if (rt->major == 3 && rt->minor >= 13 && rt->runtime_file_offset != UINT64_MAX &&
            rt->runtime_size >= sizeof(buf)) {
                r = pread_full(fd, buf, sizeof(buf), rt->runtime_file_offset);
                if (r < 0)
                        return r;
                r = ep_py_layout_from_debug_offsets(buf, sizeof(buf), ret);
                return r < 0 ? r : 1;
        }
        return ep_py_layout_for_version(rt->major, rt->minor, ret);
}

int ep_py_detect_layout(int fd, const EpPyRuntime *rt, EpPyLayout *ret) {
        const char *what = NULL;
        EpPyLayout layout;
        int r, k;

        if (!rt)
                return -EINVAL;
        r = layout_of(fd, rt, &layout);
        if (r < 0)
                return r;
        /* The runtime's own word on its objects wins over our table: a build whose layout
         * differs is refused rather than read wrongly. */
        for (unsigned t = 0; t < _EP_PY_MEMBERS_MAX; t++) {
                k = ep_py_members_check(t, rt->members[t], rt->n_members[t], &layout, &what);
                if (k < 0)
                        return log_debug_errno(k, "CPython %u.%u: the member %s is not where the layout table says",
                                               rt->major, rt->minor, what);
        }
        *ret = layout;
        return r;
}
