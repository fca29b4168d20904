/* SPDX-License-Identifier: MIT */
/* The built-in CPython layouts (unwinder-loader/python-layout.c) checked two ways, for every
 * CPython on the machine:
 *
 *  1. DWARF (pyenv builds, which have it): every entry of the table equals the member offset,
 *     structure size, bit position or enumerator value that libdw reads from the build's debug
 *     information; every field the table marks absent really is absent; the mirror of 3.13's
 *     _Py_DebugOffsets matches struct _Py_DebugOffsets member by member.
 *  2. A live walk (every interpreter, including stripped ones without DWARF): a child
 *     interpreter runs a script of known functions and blocks; the test reads the child's
 *     memory (/proc/PID/mem) with nothing but the detected addresses and the table: runtime →
 *     interpreters → the thread whose thread_id is what threading.get_ident() printed → the
 *     frame chain → code objects → names, qualified names, first lines, argument counts and
 *     flags, which must be those of the script. That also checks what DWARF cannot: the
 *     meaning of f_lasti, 3.11's is_entry, 3.12+'s C-stack shim frames, the string flags.
 *
 * _Py_DebugOffsets parsing is also checked with built blocks for each way it can fail. */

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>

#include "python-detect.h"
#include "python-layout.h"
#include "test-python-util.h"

/* ---- DWARF ---------------------------------------------------------------------------- */

#define MAX_TYPES 32

typedef struct TypeCache {
        Dwarf *dw;
        const char *names[MAX_TYPES];
        Dwarf_Die dies[MAX_TYPES];
        bool found[MAX_TYPES];
        size_t n;
} TypeCache;

/* Follows typedefs and qualifiers. */
static bool dw_peel(Dwarf_Die *die) {
        for (unsigned i = 0; i < 16; i++) {
                Dwarf_Attribute a;
                int tag = dwarf_tag(die);

                if (tag != DW_TAG_typedef && tag != DW_TAG_const_type && tag != DW_TAG_volatile_type &&
                    tag != DW_TAG_atomic_type)
                        return true;
                if (!dwarf_attr_integrate(die, DW_AT_type, &a) || !dwarf_formref_die(&a, die))
                        return false;
        }
        return false;
}

static bool dw_is_definition(Dwarf_Die *die) {
        return !dwarf_hasattr(die, DW_AT_declaration) && dwarf_haschildren(die) > 0;
}

/* "struct X" and "enum X" name a tagged type, anything else a typedef (of a structure). */
static bool dw_matches(Dwarf_Die *die, const char *query, Dwarf_Die *ret) {
        const char *name = dwarf_diename(die);
        int tag = dwarf_tag(die);

        if (!name)
                return false;
        if (startswith(query, "struct ")) {
                if (tag != DW_TAG_structure_type || !streq(name, query + 7) || !dw_is_definition(die))
                        return false;
                *ret = *die;
                return true;
        }
        if (startswith(query, "enum ")) {
                if (tag != DW_TAG_enumeration_type || !streq(name, query + 5) || !dw_is_definition(die))
                        return false;
                *ret = *die;
                return true;
        }
        if (tag != DW_TAG_typedef || !streq(name, query))
                return false;
        Dwarf_Die t = *die;
        if (!dw_peel(&t) || dwarf_tag(&t) != DW_TAG_structure_type || !dw_is_definition(&t))
                return false; /* an incomplete type in this unit: look further */
        *ret = t;
        return true;
}

/* Looks every type not found yet up, in one pass over the units' top-level entries. */
static void types_resolve(TypeCache *c) {
        Dwarf_CU *cu = NULL;
        Dwarf_Die cudie, subdie;
        uint8_t unit_type;
        size_t missing = 0;

        for (size_t i = 0; i < c->n; i++)
                missing += !c->found[i];
        while (missing > 0 && dwarf_get_units(c->dw, cu, &cu, NULL, &unit_type, &cudie, &subdie) == 0) {
                Dwarf_Die child;

                if (dwarf_child(&cudie, &child) != 0)
                        continue;
                do
                        for (size_t i = 0; i < c->n; i++)
                                if (!c->found[i] && dw_matches(&child, c->names[i], &c->dies[i])) {
                                        c->found[i] = true;
                                        missing--;
                                }
                while (missing > 0 && dwarf_siblingof(&child, &child) == 0);
        }
}

static void types_want(TypeCache *c, const char *name) {
        for (size_t i = 0; i < c->n; i++)
                if (streq(c->names[i], name))
                        return;
        ASSERT_TRUE(c->n < MAX_TYPES);
        c->names[c->n++] = name;
}

static Dwarf_Die *types_get(TypeCache *c, const char *name) {
        for (size_t i = 0; i < c->n; i++)
                if (streq(c->names[i], name))
                        return c->found[i] ? &c->dies[i] : NULL;
        ASSERT_TRUE(!"type not asked for");
        return NULL;
}

static bool dw_udata(Dwarf_Die *die, unsigned name, uint64_t *ret) {
        Dwarf_Attribute a;
        Dwarf_Word w;

        if (!dwarf_attr_integrate(die, name, &a))
                return false;
        ASSERT_EQ(dwarf_formudata(&a, &w), 0); /* a constant, not a location expression */
        *ret = w;
        return true;
}

typedef struct Member {
        uint64_t offset;     /* bytes from the outer structure */
        uint64_t bit_offset; /* bit-fields: bits from the start of the innermost structure */
        uint64_t bit_size;   /* 0: not a bit-field */
        uint64_t size;       /* the member type's size; 0 when it has none (flexible arrays) */
} Member;

/* Resolves a dotted member path ("interpreters.head") inside a structure. */
static bool dw_member(Dwarf_Die *type, const char *path, Member *ret) {
        char buf[256], *save = NULL;
        Dwarf_Die st = *type;
        Member m = {};

        snprintf(buf, sizeof buf, "%s", path);
        for (char *part = strtok_r(buf, ".", &save); part; part = strtok_r(NULL, ".", &save)) {
                Dwarf_Die child;
                bool found = false;
                uint64_t v;

                if (!dw_peel(&st) || (dwarf_tag(&st) != DW_TAG_structure_type && dwarf_tag(&st) != DW_TAG_union_type))
                        return false;
                if (dwarf_child(&st, &child) != 0)
                        return false;
                do {
                        const char *name = dwarf_diename(&child);
                        if (dwarf_tag(&child) == DW_TAG_member && name && streq(name, part)) {
                                found = true;
                                break;
                        }
                } while (dwarf_siblingof(&child, &child) == 0);
                if (!found)
                        return false;

                m.bit_size = 0;
                if (dw_udata(&child, DW_AT_data_member_location, &v))
                        m.offset += v;
                if (dw_udata(&child, DW_AT_bit_size, &m.bit_size)) {
                        uint64_t byte_size;
                        if (dw_udata(&child, DW_AT_data_bit_offset, &v))
                                m.bit_offset = v;
                        else if (dw_udata(&child, DW_AT_bit_offset, &v) && dw_udata(&child, DW_AT_byte_size, &byte_size))
                                m.bit_offset = byte_size * 8 - v - m.bit_size; /* DWARF 2/3, little endian */
                        else
                                ASSERT_TRUE(!"bit-field without a position");
                }

                Dwarf_Attribute a;
                ASSERT_TRUE(dwarf_attr_integrate(&child, DW_AT_type, &a));
                ASSERT_TRUE(dwarf_formref_die(&a, &st));
        }
        Dwarf_Word size;
        m.size = dwarf_aggregate_size(&st, &size) == 0 ? size : 0;
        *ret = m;
        return true;
}

static bool dw_enumerator(Dwarf_Die *en, const char *name, int64_t *ret) {
        Dwarf_Die child;

        if (dwarf_child(en, &child) != 0)
                return false;
        do {
                const char *n = dwarf_diename(&child);
                if (dwarf_tag(&child) == DW_TAG_enumerator && n && streq(n, name)) {
                        Dwarf_Attribute a;
                        Dwarf_Sword v;
                        ASSERT_TRUE(dwarf_attr(&child, DW_AT_const_value, &a));
                        ASSERT_EQ(dwarf_formsdata(&a, &v), 0);
                        *ret = v;
                        return true;
                }
        } while (dwarf_siblingof(&child, &child) == 0);
        return false;
}

/* ---- What each table field is, per version --------------------------------------------- */

typedef enum SpecKind {
        SPEC_OFFSET,  /* member offset (and the member's size, when width != 0) */
        SPEC_SIZEOF,  /* the type's size */
        SPEC_BIT,     /* a bit-field's first bit inside its word (width: its bits) */
        SPEC_ENUM,    /* an enumerator's value */
} SpecKind;

typedef struct Spec {
        const char *field;
        size_t layout_offset;
        SpecKind kind;
        const char *type, *path;
        unsigned width;
} Spec;

#define MAX_SPECS 64
#define S_OFF(f, t, p, w) (Spec) { #f, offsetof(EpPyLayout, f), SPEC_OFFSET, t, p, w }
#define S_SIZE(f, t) (Spec) { #f, offsetof(EpPyLayout, f), SPEC_SIZEOF, t, NULL, 0 }
#define S_BIT(f, t, p, w) (Spec) { #f, offsetof(EpPyLayout, f), SPEC_BIT, t, p, w }
#define S_ENUM(f, t, p) (Spec) { #f, offsetof(EpPyLayout, f), SPEC_ENUM, t, p, 0 }

/* Members that must not exist in this version (the table marks them absent, or the walker
 * must not look for them). */
typedef struct Absent {
        const char *type, *path; /* path NULL: the type itself */
} Absent;

static size_t specs_for(unsigned minor, Spec *s, Absent *a, size_t *n_absent) {
        size_t n = 0, na = 0;
        const char *frame = minor <= 10 ? "struct _frame" : "struct _PyInterpreterFrame";

        s[n++] = S_SIZE(pyobject_size, "PyObject");
        s[n++] = S_SIZE(pyvarobject_size, "PyVarObject");
        s[n++] = S_OFF(ob_type, "PyObject", "ob_type", 8);
        s[n++] = S_OFF(ob_size, "PyVarObject", "ob_size", 8);

        if (minor >= 7)
                s[n++] = S_OFF(runtime_interpreters_head, "struct pyruntimestate", "interpreters.head", 8);
        else
                a[na++] = (Absent) { "struct pyruntimestate", NULL };
        s[n++] = S_OFF(interp_next, "struct _is", "next", 8);
        s[n++] = S_OFF(interp_tstate_head, "struct _is", minor <= 10 ? "tstate_head" : "threads.head", 8);
        s[n++] = S_OFF(tstate_next, "struct _ts", "next", 8);
        s[n++] = S_OFF(tstate_interp, "struct _ts", "interp", 8);
        s[n++] = S_OFF(tstate_thread_id, "struct _ts", "thread_id", 8);
        if (minor >= 11)
                s[n++] = S_OFF(tstate_native_thread_id, "struct _ts", "native_thread_id", 8);
        else
                a[na++] = (Absent) { "struct _ts", "native_thread_id" };

        if (minor <= 10) {
                s[n++] = S_OFF(tstate_frame, "struct _ts", "frame", 8);
                s[n++] = S_OFF(frame_lasti, frame, "f_lasti", 4);
                a[na++] = (Absent) { "struct _PyInterpreterFrame", NULL };
        } else
                a[na++] = (Absent) { "struct _ts", "frame" };
        if (minor == 11 || minor == 12) {
                s[n++] = S_OFF(tstate_cframe, "struct _ts", "cframe", 8);
                s[n++] = S_OFF(cframe_current_frame, "struct _PyCFrame", "current_frame", 8);
        }
        if (minor >= 13) {
                s[n++] = S_OFF(tstate_current_frame, "struct _ts", "current_frame", 8);
                a[na++] = (Absent) { "struct _PyCFrame", NULL };
                a[na++] = (Absent) { "struct _ts", "cframe" };
        } else
                a[na++] = (Absent) { "struct _ts", "current_frame" };

        s[n++] = S_OFF(frame_back, frame, minor <= 10 ? "f_back" : "previous", 8);
        s[n++] = S_OFF(frame_code, frame, minor <= 12 ? "f_code" : "f_executable", 8);
        if (minor >= 11) {
                s[n++] = S_OFF(frame_instr, frame, minor <= 12 ? "prev_instr" : "instr_ptr", 8);
                s[n++] = S_OFF(frame_owner, frame, "owner", 1);
        }
        if (minor == 11)
                s[n++] = S_OFF(frame_is_entry, frame, "is_entry", 1);
        else if (minor > 11)
                a[na++] = (Absent) { frame, "is_entry" };
        if (minor >= 12)
                s[n++] = S_ENUM(frame_owner_cstack, "enum _frameowner", "FRAME_OWNED_BY_CSTACK");
        else if (minor == 11)
                a[na++] = (Absent) { "enum _frameowner", "FRAME_OWNED_BY_CSTACK" };

        s[n++] = S_OFF(co_argcount, "PyCodeObject", "co_argcount", 4);
        s[n++] = S_OFF(co_kwonlyargcount, "PyCodeObject", "co_kwonlyargcount", 4);
        s[n++] = S_OFF(co_flags, "PyCodeObject", "co_flags", 4);
        s[n++] = S_OFF(co_firstlineno, "PyCodeObject", "co_firstlineno", 4);
        s[n++] = S_OFF(co_filename, "PyCodeObject", "co_filename", 8);
        s[n++] = S_OFF(co_name, "PyCodeObject", "co_name", 8);
        if (minor >= 11)
                s[n++] = S_OFF(co_qualname, "PyCodeObject", "co_qualname", 8);
        else
                a[na++] = (Absent) { "PyCodeObject", "co_qualname" };
        s[n++] = S_OFF(co_linetable, "PyCodeObject", minor <= 9 ? "co_lnotab" : "co_linetable", 8);
        if (minor >= 10)
                a[na++] = (Absent) { "PyCodeObject", "co_lnotab" };
        if (minor <= 10)
                s[n++] = S_OFF(co_code, "PyCodeObject", "co_code", 8);
        else {
                s[n++] = S_OFF(co_code_adaptive, "PyCodeObject", "co_code_adaptive", 0);
                a[na++] = (Absent) { "PyCodeObject", "co_code" };
        }

        s[n++] = S_OFF(unicode_length, "PyASCIIObject", "length", 8);
        s[n++] = S_OFF(unicode_state, "PyASCIIObject", "state", 4);
        s[n++] = S_BIT(unicode_kind_shift, "PyASCIIObject", "state.kind", 3);
        s[n++] = S_BIT(unicode_compact_shift, "PyASCIIObject", "state.compact", 1);
        s[n++] = S_BIT(unicode_ascii_shift, "PyASCIIObject", "state.ascii", 1);
        s[n++] = S_SIZE(unicode_ascii_data, "PyASCIIObject");
        s[n++] = S_SIZE(unicode_compact_data, "PyCompactUnicodeObject");
        s[n++] = S_OFF(bytes_size, "PyBytesObject", "ob_base.ob_size", 8);
        s[n++] = S_OFF(bytes_sval, "PyBytesObject", "ob_sval", 0);

        ASSERT_TRUE(n <= MAX_SPECS);
        *n_absent = na;
        return n;
}

static uint32_t layout_u32(const EpPyLayout *l, size_t offset) {
        uint32_t v;

        memcpy(&v, (const uint8_t *) l + offset, sizeof v);
        return v;
}

/* 3.13's _Py_DebugOffsets, member by member, against EpPyDebugOffsets313. */
#define DO(p) { #p, offsetof(EpPyDebugOffsets313, p) }
static const struct {
        const char *path;
        size_t offset;
} debug_members[] = {
        DO(cookie), DO(version), DO(free_threaded),
        DO(runtime_state.size), DO(runtime_state.finalizing), DO(runtime_state.interpreters_head),
        DO(interpreter_state.size), DO(interpreter_state.id), DO(interpreter_state.next),
        DO(interpreter_state.threads_head), DO(interpreter_state.gc), DO(interpreter_state.imports_modules),
        DO(interpreter_state.sysdict), DO(interpreter_state.builtins), DO(interpreter_state.ceval_gil),
        DO(interpreter_state.gil_runtime_state), DO(interpreter_state.gil_runtime_state_enabled),
        DO(interpreter_state.gil_runtime_state_locked), DO(interpreter_state.gil_runtime_state_holder),
        DO(thread_state.size), DO(thread_state.prev), DO(thread_state.next), DO(thread_state.interp),
        DO(thread_state.current_frame), DO(thread_state.thread_id), DO(thread_state.native_thread_id),
        DO(thread_state.datastack_chunk), DO(thread_state.status),
        DO(interpreter_frame.size), DO(interpreter_frame.previous), DO(interpreter_frame.executable),
        DO(interpreter_frame.instr_ptr), DO(interpreter_frame.localsplus), DO(interpreter_frame.owner),
        DO(code_object.size), DO(code_object.filename), DO(code_object.name), DO(code_object.qualname),
        DO(code_object.linetable), DO(code_object.firstlineno), DO(code_object.argcount),
        DO(code_object.localsplusnames), DO(code_object.localspluskinds), DO(code_object.co_code_adaptive),
        DO(pyobject.size), DO(pyobject.ob_type),
        DO(type_object.size), DO(type_object.tp_name), DO(type_object.tp_repr), DO(type_object.tp_flags),
        DO(tuple_object.size), DO(tuple_object.ob_item), DO(tuple_object.ob_size),
        DO(list_object.size), DO(list_object.ob_item), DO(list_object.ob_size),
        DO(dict_object.size), DO(dict_object.ma_keys), DO(dict_object.ma_values),
        DO(float_object.size), DO(float_object.ob_fval),
        DO(long_object.size), DO(long_object.lv_tag), DO(long_object.ob_digit),
        DO(bytes_object.size), DO(bytes_object.ob_size), DO(bytes_object.ob_sval),
        DO(unicode_object.size), DO(unicode_object.state), DO(unicode_object.length),
        DO(unicode_object.asciiobject_size),
        DO(gc.size), DO(gc.collecting),
};
#undef DO

/* Leaf members of a structure, nested structures counted through. */
static size_t dw_count_leaves(Dwarf_Die *st) {
        Dwarf_Die child, t;
        size_t n = 0;

        if (dwarf_child(st, &child) != 0)
                return 0;
        do {
                Dwarf_Attribute a;
                if (dwarf_tag(&child) != DW_TAG_member)
                        continue;
                ASSERT_TRUE(dwarf_attr_integrate(&child, DW_AT_type, &a) && dwarf_formref_die(&a, &t));
                ASSERT_TRUE(dw_peel(&t));
                n += dwarf_tag(&t) == DW_TAG_structure_type ? dw_count_leaves(&t) : 1;
        } while (dwarf_siblingof(&child, &child) == 0);
        return n;
}

static void check_debug_offsets_struct(TypeCache *c) {
        Dwarf_Die *st = types_get(c, "struct _Py_DebugOffsets");
        Dwarf_Word size;

        ASSERT_TRUE(st);
        ASSERT_EQ(dwarf_aggregate_size(st, &size), 0);
        ASSERT_EQ(size, sizeof(EpPyDebugOffsets313));
        for (size_t i = 0; i < ELEMENTSOF(debug_members); i++) {
                Member m;
                if (!dw_member(st, debug_members[i].path, &m))
                        fprintf(stderr, "_Py_DebugOffsets has no %s\n", debug_members[i].path);
                ASSERT_TRUE(dw_member(st, debug_members[i].path, &m));
                ASSERT_EQ(m.offset, debug_members[i].offset);
        }
        /* Nothing in the DWARF that the mirror lacks. */
        ASSERT_EQ(dw_count_leaves(st), ELEMENTSOF(debug_members));
}

/* Returns false when the file has no DWARF. */
static bool check_dwarf(const PyInstall *in) {
        _cleanup_close_ int fd = open(in->runtime, O_RDONLY | O_CLOEXEC);
        Spec specs[MAX_SPECS];
        Absent absent[MAX_SPECS];
        size_t n, n_absent;
        bool covered[sizeof(EpPyLayout) / 4] = {};
        TypeCache c = {};
        EpPyLayout l;

        ASSERT_TRUE(fd >= 0);
        c.dw = dwarf_begin(fd, DWARF_C_READ);
        if (!c.dw)
                return false;

        ASSERT_OK(ep_py_layout_for_version(in->major, in->minor, &l));
        n = specs_for(in->minor, specs, absent, &n_absent);
        for (size_t i = 0; i < n; i++)
                types_want(&c, specs[i].type);
        for (size_t i = 0; i < n_absent; i++)
                types_want(&c, absent[i].type);
        types_want(&c, "struct _PyCFrame");
        types_want(&c, "struct _PyInterpreterFrame");
        if (in->minor >= 13)
                types_want(&c, "struct _Py_DebugOffsets");
        types_resolve(&c);

        for (size_t i = 0; i < n; i++) {
                const Spec *s = &specs[i];
                Dwarf_Die *t = types_get(&c, s->type);
                uint32_t have = layout_u32(&l, s->layout_offset);
                uint64_t want = 0;
                Member m;

                if (!t)
                        fprintf(stderr, "%s: no DWARF type %s\n", in->runtime, s->type);
                ASSERT_TRUE(t);
                switch (s->kind) {
                case SPEC_SIZEOF: {
                        Dwarf_Word size;
                        ASSERT_EQ(dwarf_aggregate_size(t, &size), 0);
                        want = size;
                        break;
                }
                case SPEC_OFFSET:
                case SPEC_BIT:
                        if (!dw_member(t, s->path, &m))
                                fprintf(stderr, "%s: %s has no member %s\n", in->runtime, s->type, s->path);
                        ASSERT_TRUE(dw_member(t, s->path, &m));
                        if (s->kind == SPEC_OFFSET) {
                                want = m.offset;
                                ASSERT_EQ(m.bit_size, 0);
                                if (s->width != 0 && m.size != s->width)
                                        fprintf(stderr, "%s: %s.%s is %" PRIu64 " bytes wide\n", in->runtime,
                                                s->type, s->path, m.size);
                                if (s->width != 0)
                                        ASSERT_EQ(m.size, s->width);
                        } else {
                                want = m.bit_offset;
                                ASSERT_EQ(m.bit_size, s->width);
                                /* The bit-field word is the one unicode_state names. */
                                ASSERT_EQ(m.offset, l.unicode_state);
                        }
                        break;
                case SPEC_ENUM: {
                        int64_t v;
                        ASSERT_TRUE(dw_enumerator(t, s->path, &v));
                        want = (uint64_t) v;
                        break;
                }
                }
                if (have != want)
                        fprintf(stderr, "%s: table %u.%u %s = %" PRIu32 ", DWARF (%s %s) says %" PRIu64 "\n",
                                in->runtime, in->major, in->minor, s->field, have, s->type, s->path ?: "size", want);
                ASSERT_EQ(have, want);
                covered[s->layout_offset / 4] = true;
        }

        /* Every other field of the table is absent in this version. lasti_unit is not in the
         * DWARF (the live walk checks it). */
        for (size_t off = offsetof(EpPyLayout, lasti_unit) + 4; off < sizeof(EpPyLayout); off += 4)
                if (!covered[off / 4]) {
                        if (layout_u32(&l, off) != EP_PY_NO_OFFSET)
                                fprintf(stderr, "%s: table field at offset %zu is set but not checked\n",
                                        in->runtime, off);
                        ASSERT_EQ(layout_u32(&l, off), EP_PY_NO_OFFSET);
                }
        for (size_t i = 0; i < n_absent; i++) {
                Dwarf_Die *t = types_get(&c, absent[i].type);
                Member m;
                int64_t v;

                if (!absent[i].path)
                        ASSERT_TRUE(!t);
                else if (t && startswith(absent[i].type, "enum "))
                        ASSERT_TRUE(!dw_enumerator(t, absent[i].path, &v));
                else if (t) {
                        if (dw_member(t, absent[i].path, &m))
                                fprintf(stderr, "%s: %s has %s\n", in->runtime, absent[i].type, absent[i].path);
                        ASSERT_TRUE(!dw_member(t, absent[i].path, &m));
                }
        }

        /* How frames are found and what the line table is, from the structures themselves. */
        Dwarf_Die *cf = types_get(&c, "struct _PyCFrame");
        Member m;
        EpPyFrameKind kind = !types_get(&c, "struct _PyInterpreterFrame") ? EP_PY_FRAMES_OBJECT :
                             cf && dw_member(cf, "current_frame", &m) ? EP_PY_FRAMES_CFRAME : EP_PY_FRAMES_TSTATE;
        ASSERT_EQ(l.frame_kind, kind);
        Dwarf_Die *code = types_get(&c, "PyCodeObject");
        EpPyLineTable lines = dw_member(code, "co_lnotab", &m) ? EP_PY_LINES_LNOTAB :
                              !dw_member(code, "co_exceptiontable", &m) ? EP_PY_LINES_LINETABLE : EP_PY_LINES_LOCATIONS;
        ASSERT_EQ(l.line_table, lines);

        if (in->minor >= 13)
                check_debug_offsets_struct(&c);

        printf("    DWARF: %zu table entries and %zu absent members checked\n", n, n_absent);
        dwarf_end(c.dw);
        return true;
}

/* ---- _Py_DebugOffsets parsing ------------------------------------------------------------ */

static EpPyDebugOffsets313 debug_block_from_table(void) {
        EpPyDebugOffsets313 d = {};
        EpPyLayout l;

        ASSERT_OK(ep_py_layout_for_version(3, 13, &l));
        memcpy(d.cookie, EP_PY_DEBUG_OFFSETS_COOKIE, sizeof d.cookie);
        d.version = 0x030d00f0;
        d.runtime_state.size = 0x452b8;
        d.runtime_state.interpreters_head = l.runtime_interpreters_head;
        d.interpreter_state.size = 0x2f998;
        d.interpreter_state.next = l.interp_next;
        d.interpreter_state.threads_head = l.interp_tstate_head;
        d.thread_state.size = 0x130;
        d.thread_state.next = l.tstate_next;
        d.thread_state.interp = l.tstate_interp;
        d.thread_state.current_frame = l.tstate_current_frame;
        d.thread_state.thread_id = l.tstate_thread_id;
        d.thread_state.native_thread_id = l.tstate_native_thread_id;
        d.interpreter_frame.size = 0x50;
        d.interpreter_frame.previous = l.frame_back;
        d.interpreter_frame.executable = l.frame_code;
        d.interpreter_frame.instr_ptr = l.frame_instr;
        d.interpreter_frame.owner = l.frame_owner;
        d.code_object.size = 0xd0;
        d.code_object.filename = l.co_filename;
        d.code_object.name = l.co_name;
        d.code_object.qualname = l.co_qualname;
        d.code_object.linetable = l.co_linetable;
        d.code_object.firstlineno = l.co_firstlineno;
        d.code_object.argcount = l.co_argcount;
        d.code_object.co_code_adaptive = l.co_code_adaptive;
        d.pyobject.size = l.pyobject_size;
        d.pyobject.ob_type = l.ob_type;
        d.bytes_object.size = 0x28;
        d.bytes_object.ob_size = l.bytes_size;
        d.bytes_object.ob_sval = l.bytes_sval;
        d.unicode_object.size = 0x40;
        d.unicode_object.state = l.unicode_state;
        d.unicode_object.length = l.unicode_length;
        d.unicode_object.asciiobject_size = l.unicode_ascii_data;
        return d;
}

static void check_debug_offsets_parsing(void) {
        EpPyDebugOffsets313 d;
        EpPyLayout l, table;

        ASSERT_OK(ep_py_layout_for_version(3, 13, &table));

        d = debug_block_from_table();
        ASSERT_EQ(ep_py_layout_from_debug_offsets(&d, sizeof d, &l), 0);
        ASSERT_TRUE(memcmp(&l, &table, sizeof l) == 0);
        /* Longer buffers are fine (a caller may read more of _PyRuntime); unaligned too. */
        uint8_t big[sizeof d + 9];
        memcpy(big + 1, &d, sizeof d);
        ASSERT_EQ(ep_py_layout_from_debug_offsets(big + 1, sizeof d + 8, &l), 0);
        /* Release level and serial do not matter (3.13.0rc2 = 0x030d00c2). */
        d.version = 0x030d00c2;
        ASSERT_EQ(ep_py_layout_from_debug_offsets(&d, sizeof d, &l), 0);

        /* Each way to fail. */
        d = debug_block_from_table();
        ASSERT_EQ(ep_py_layout_from_debug_offsets(NULL, 0, &l), -EBADMSG);
        ASSERT_EQ(ep_py_layout_from_debug_offsets(&d, 8, &l), -EBADMSG);
        ASSERT_EQ(ep_py_layout_from_debug_offsets(&d, 16, &l), -EBADMSG);
        ASSERT_EQ(ep_py_layout_from_debug_offsets(&d, sizeof d - 1, &l), -EBADMSG);
        d.cookie[0] = 'X';
        ASSERT_EQ(ep_py_layout_from_debug_offsets(&d, sizeof d, &l), -EBADMSG);
        d = debug_block_from_table();
        d.version = 0x030e00f0; /* 3.14: another layout of the block */
        ASSERT_EQ(ep_py_layout_from_debug_offsets(&d, sizeof d, &l), -EPROTONOSUPPORT);
        d.version = 0x030c01f0;
        ASSERT_EQ(ep_py_layout_from_debug_offsets(&d, sizeof d, &l), -EPROTONOSUPPORT);
        d = debug_block_from_table();
        d.free_threaded = 1;
        ASSERT_EQ(ep_py_layout_from_debug_offsets(&d, sizeof d, &l), -EPROTONOSUPPORT);
        d = debug_block_from_table();
        d.thread_state.thread_id += 8; /* a build with another layout */
        ASSERT_EQ(ep_py_layout_from_debug_offsets(&d, sizeof d, &l), -EBADMSG);
        d = debug_block_from_table();
        d.unicode_object.asciiobject_size = 48;
        ASSERT_EQ(ep_py_layout_from_debug_offsets(&d, sizeof d, &l), -EBADMSG);
        d = debug_block_from_table();
        d.thread_state.size = 0x40; /* thread_id (152) outside a 64-byte structure */
        ASSERT_EQ(ep_py_layout_from_debug_offsets(&d, sizeof d, &l), -EBADMSG);
        d = debug_block_from_table();
        d.interpreter_frame.owner = UINT64_MAX; /* no overflow in the bounds check */
        ASSERT_EQ(ep_py_layout_from_debug_offsets(&d, sizeof d, &l), -EBADMSG);
        /* *ret untouched on failure. */
        memset(&l, 0x5a, sizeof l);
        ASSERT_EQ(ep_py_layout_from_debug_offsets(&d, sizeof d, &l), -EBADMSG);
        ASSERT_EQ(l.major, 0x5a5a5a5a);

        /* The table has 3.6 … 3.13 and nothing else. */
        for (unsigned minor = 0; minor < 20; minor++)
                ASSERT_EQ(ep_py_layout_for_version(3, minor, &l), minor >= 6 && minor <= 13 ? 0 : -EPROTONOSUPPORT);
        ASSERT_EQ(ep_py_layout_for_version(2, 7, &l), -EPROTONOSUPPORT);
        ASSERT_EQ(ep_py_layout_for_version(4, 0, &l), -EPROTONOSUPPORT);
}

/* ---- The live walk ----------------------------------------------------------------------- */

/* Line numbers matter: they are the functions' co_firstlineno. */
static const char script[] =
        "import sys, threading\n"                                         /* 1 */
        "class Box:\n"                                                    /* 2 */
        "    def method(self):\n"                                         /* 3 */
        "        return level_three()\n"                                  /* 4 */
        "def level_three():\n"                                            /* 5 */
        "    sys.stdout.write('ready %d\\n' % threading.get_ident())\n"   /* 6 */
        "    sys.stdout.flush()\n"                                        /* 7 */
        "    return sys.stdin.read()\n"                                   /* 8 */
        "def level_two(*, depth=2):\n"                                    /* 9 */
        "    return Box().method()\n"                                     /* 10 */
        "def stufe_\xc3\xbc():\n"                                         /* 11: a non-ASCII name */
        "    return level_two(depth=2)\n"                                 /* 12 */
        "stufe_\xc3\xbc()\n";                                             /* 13 */

static const struct {
        const char *name;     /* Latin-1, as a 1-byte-kind str stores it */
        const char *qualname;
        int firstlineno, argcount, kwonlyargcount;
        bool function;
} expected_frames[] = {
        { "level_three", "level_three", 5, 0, 0, true },
        { "method", "Box.method", 3, 1, 0, true },
        { "level_two", "level_two", 9, 0, 1, true },
        { "stufe_\xfc", "stufe_\xfc", 11, 0, 0, true },
        { "<module>", "<module>", 1, 0, 0, false },
};

#define CO_OPTIMIZED 0x1
#define CO_NEWLOCALS 0x2

typedef struct Child {
        pid_t pid;
        int in_fd, out_fd, mem_fd;
} Child;

static void mem_read(const Child *c, uint64_t addr, void *buf, size_t size) {
        ssize_t k = pread(c->mem_fd, buf, size, (off_t) addr);

        if (k != (ssize_t) size)
                fprintf(stderr, "reading %zu bytes at 0x%" PRIx64 " of %d: %zd (%m)\n", size, addr, (int) c->pid, k);
        ASSERT_EQ(k, (ssize_t) size);
}

static uint64_t mem_u64(const Child *c, uint64_t addr) {
        uint64_t v;
        mem_read(c, addr, &v, sizeof v);
        return v;
}

static uint32_t mem_u32(const Child *c, uint64_t addr) {
        uint32_t v;
        mem_read(c, addr, &v, sizeof v);
        return v;
}

static uint8_t mem_u8(const Child *c, uint64_t addr) {
        uint8_t v;
        mem_read(c, addr, &v, sizeof v);
        return v;
}

/* A str's characters (1-byte kinds only: ASCII, or Latin-1 behind the compact header). */
static void mem_str(const Child *c, const EpPyLayout *l, uint64_t obj, char *buf, size_t size) {
        uint32_t state = mem_u32(c, obj + l->unicode_state);
        uint64_t len = mem_u64(c, obj + l->unicode_length);
        unsigned kind = (state >> l->unicode_kind_shift) & 7;
        bool compact = (state >> l->unicode_compact_shift) & 1, ascii = (state >> l->unicode_ascii_shift) & 1;

        ASSERT_TRUE(compact);
        ASSERT_EQ(kind, 1); /* PyUnicode_1BYTE_KIND */
        ASSERT_TRUE(len < size);
        mem_read(c, obj + (ascii ? l->unicode_ascii_data : l->unicode_compact_data), buf, len);
        buf[len] = '\0';
}

static uint64_t load_bias(const Child *c, const char *runtime) {
        _cleanup_close_ int fd = open(runtime, O_RDONLY | O_CLOEXEC);
        uint64_t first_vaddr = UINT64_MAX, start;
        Elf *elf;
        size_t n;

        ASSERT_TRUE(fd >= 0);
        elf = elf_begin(fd, ELF_C_READ, NULL);
        ASSERT_TRUE(elf);
        ASSERT_EQ(elf_getphdrnum(elf, &n), 0);
        for (size_t i = 0; i < n; i++) {
                GElf_Phdr ph;
                ASSERT_TRUE(gelf_getphdr(elf, (int) i, &ph));
                if (ph.p_type == PT_LOAD && ph.p_offset == 0)
                        first_vaddr = ph.p_vaddr & ~(uint64_t) 0xfff;
        }
        elf_end(elf);
        ASSERT_TRUE(first_vaddr != UINT64_MAX);

        start = py_mapping_start(c->pid, runtime);
        return start == UINT64_MAX ? UINT64_MAX : start - first_vaddr;
}

static bool child_start(const PyInstall *in, const char *script_path, Child *ret) {
        *ret = (Child) { .mem_fd = -EBADF };
        ret->pid = py_spawn(in->exe, script_path, &ret->in_fd, &ret->out_fd);
        return true;
}

static void child_stop(Child *c) {
        int status;

        close(c->in_fd); /* sys.stdin.read() returns, the script ends */
        if (c->mem_fd >= 0)
                close(c->mem_fd);
        ASSERT_EQ(waitpid(c->pid, &status, 0), c->pid);
        close(c->out_fd);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* Returns false (a message printed) when the walk cannot be done here. */
static bool check_live(const PyInstall *in, const char *script_path) {
        char line[128], mem[64], buf[256];
        EpPyRuntime rt;
        EpPyLayout l;
        Child c;
        unsigned long long ident;
        uint64_t bias, interp = 0, tstate = 0, frame, code_type = 0, str_type = 0;
        size_t got = 0, cstack = 0;
        int r;

        ASSERT_EQ(ep_py_detect_path(in->runtime, &rt), 1);
        {
                _cleanup_close_ int fd = open(in->runtime, O_RDONLY | O_CLOEXEC);
                ASSERT_TRUE(fd >= 0);
                ASSERT_OK(ep_py_detect_layout(fd, &rt, &l));
        }

        ASSERT_TRUE(child_start(in, script_path, &c));
        /* Wait for the script to reach level_three(). */
        struct pollfd p = { .fd = c.out_fd, .events = POLLIN };
        ASSERT_EQ(poll(&p, 1, 30000), 1);
        ssize_t k = read(c.out_fd, line, sizeof line - 1);
        ASSERT_TRUE(k > 0);
        line[k] = '\0';
        ASSERT_EQ(sscanf(line, "ready %llu", &ident), 1);

        bias = load_bias(&c, in->runtime);
        if (bias == UINT64_MAX) {
                printf("    live walk: %s does not load %s, skipped\n", in->exe, in->runtime);
                child_stop(&c);
                return false;
        }
        snprintf(mem, sizeof mem, "/proc/%d/mem", (int) c.pid);
        c.mem_fd = open(mem, O_RDONLY | O_CLOEXEC);
        if (c.mem_fd < 0) {
                r = -errno;
                printf("    live walk: cannot open %s (%s), skipped\n", mem, strerror(-r));
                child_stop(&c);
                return false;
        }

        /* Runtime → interpreters → threads: the one whose thread_id is pthread_self(). */
        uint64_t head = rt.minor >= 7 ? rt.runtime_addr + bias + l.runtime_interpreters_head : rt.interp_head_addr + bias;
        for (uint64_t it = mem_u64(&c, head), i = 0; it && !tstate && i < 8; it = mem_u64(&c, it + l.interp_next), i++)
                for (uint64_t ts = mem_u64(&c, it + l.interp_tstate_head), j = 0; ts && j < 64; ts = mem_u64(&c, ts + l.tstate_next), j++)
                        if (mem_u64(&c, ts + l.tstate_thread_id) == ident) {
                                interp = it;
                                tstate = ts;
                                break;
                        }
        if (!tstate)
                fprintf(stderr, "%s: no thread state with thread_id %llu\n", in->runtime, ident);
        ASSERT_TRUE(tstate);
        ASSERT_EQ(mem_u64(&c, tstate + l.tstate_interp), interp);
        if (l.tstate_native_thread_id != EP_PY_NO_OFFSET)
                ASSERT_EQ(mem_u64(&c, tstate + l.tstate_native_thread_id), c.pid); /* the main thread */
        if (rt.tstate_current_addr) {
                /* 3.6: the GIL holder; nobody holds it while the script blocks in read(). */
                uint64_t cur = mem_u64(&c, rt.tstate_current_addr + bias);
                ASSERT_TRUE(cur == 0 || cur == tstate);
        }

        switch (l.frame_kind) {
        case EP_PY_FRAMES_OBJECT:
                frame = mem_u64(&c, tstate + l.tstate_frame);
                break;
        case EP_PY_FRAMES_CFRAME:
                frame = mem_u64(&c, mem_u64(&c, tstate + l.tstate_cframe) + l.cframe_current_frame);
                break;
        case EP_PY_FRAMES_TSTATE:
                frame = mem_u64(&c, tstate + l.tstate_current_frame);
                break;
        default:
                ASSERT_TRUE(!"frame kind");
                return false;
        }

        for (unsigned depth = 0; frame && depth < 64; frame = mem_u64(&c, frame + l.frame_back), depth++) {
                uint64_t code;

                if (l.frame_owner_cstack != EP_PY_NO_OFFSET &&
                    mem_u8(&c, frame + l.frame_owner) == l.frame_owner_cstack) {
                        /* 3.12+: the shim an eval-loop entry pushes; it ends the chain here. */
                        cstack++;
                        continue;
                }
                ASSERT_EQ(cstack, 0); /* no Python frame after the entry shim: one eval-loop run */
                if (got >= ELEMENTSOF(expected_frames))
                        fprintf(stderr, "%s: more frames than expected\n", in->runtime);
                ASSERT_TRUE(got < ELEMENTSOF(expected_frames));

                code = mem_u64(&c, frame + l.frame_code);
                ASSERT_TRUE(code != 0);
                /* All code objects share a type, all names another. */
                if (!code_type)
                        code_type = mem_u64(&c, code + l.ob_type);
                ASSERT_EQ(mem_u64(&c, code + l.ob_type), code_type);

                uint64_t name = mem_u64(&c, code + l.co_name);
                if (!str_type)
                        str_type = mem_u64(&c, name + l.ob_type);
                ASSERT_EQ(mem_u64(&c, name + l.ob_type), str_type);
                ASSERT_TRUE(str_type != code_type);
                mem_str(&c, &l, name, buf, sizeof buf);
                if (!streq(buf, expected_frames[got].name))
                        fprintf(stderr, "%s: frame %zu is %s, expected %s\n", in->runtime, got, buf, expected_frames[got].name);
                ASSERT_STREQ(buf, expected_frames[got].name);
                if (l.co_qualname != EP_PY_NO_OFFSET) {
                        mem_str(&c, &l, mem_u64(&c, code + l.co_qualname), buf, sizeof buf);
                        ASSERT_STREQ(buf, expected_frames[got].qualname);
                }
                mem_str(&c, &l, mem_u64(&c, code + l.co_filename), buf, sizeof buf);
                ASSERT_STREQ(buf, script_path);
                ASSERT_EQ((int32_t) mem_u32(&c, code + l.co_firstlineno), expected_frames[got].firstlineno);
                ASSERT_EQ((int32_t) mem_u32(&c, code + l.co_argcount), expected_frames[got].argcount);
                ASSERT_EQ((int32_t) mem_u32(&c, code + l.co_kwonlyargcount), expected_frames[got].kwonlyargcount);
                uint32_t flags = mem_u32(&c, code + l.co_flags);
                ASSERT_EQ(!!(flags & CO_OPTIMIZED), expected_frames[got].function);
                ASSERT_EQ(!!(flags & CO_NEWLOCALS), expected_frames[got].function);

                /* The line table is a non-empty bytes object. */
                uint64_t lines = mem_u64(&c, code + l.co_linetable);
                ASSERT_TRUE(mem_u64(&c, lines + l.bytes_size) > 0);

                if (l.frame_lasti != EP_PY_NO_OFFSET) {
                        /* f_lasti × lasti_unit is the byte offset of the call being made. */
                        uint64_t bytecode = mem_u64(&c, code + l.co_code);
                        uint64_t size = mem_u64(&c, bytecode + l.bytes_size);
                        int32_t lasti = (int32_t) mem_u32(&c, frame + l.frame_lasti);
                        ASSERT_TRUE(lasti >= 0);
                        ASSERT_TRUE((uint64_t) lasti * l.lasti_unit < size);
                        uint8_t op = mem_u8(&c, bytecode + l.bytes_sval + (uint64_t) lasti * l.lasti_unit);
                        /* CALL_FUNCTION, CALL_FUNCTION_KW, CALL_FUNCTION_EX, CALL_METHOD */
                        if (op != 131 && op != 141 && op != 142 && op != 161)
                                fprintf(stderr, "%s: frame %zu: opcode %u at f_lasti %d × %u\n", in->runtime, got,
                                        op, lasti, l.lasti_unit);
                        ASSERT_TRUE(op == 131 || op == 141 || op == 142 || op == 161);
                } else {
                        /* The instruction pointer is inside the code object's own copy of the
                         * bytecode: Py_SIZE(code) 16-bit code units from co_code_adaptive. */
                        uint64_t instr = mem_u64(&c, frame + l.frame_instr);
                        uint64_t first = code + l.co_code_adaptive;
                        uint64_t units = mem_u64(&c, code + l.ob_size);
                        ASSERT_TRUE(instr >= first && instr < first + 2 * units);
                        ASSERT_EQ((instr - first) % 2, 0);
                }
                if (l.frame_is_entry != EP_PY_NO_OFFSET)
                        /* 3.11: only the frame the eval loop was entered with. */
                        ASSERT_EQ(mem_u8(&c, frame + l.frame_is_entry), !expected_frames[got].function);
                if (l.frame_owner != EP_PY_NO_OFFSET)
                        ASSERT_EQ(mem_u8(&c, frame + l.frame_owner), 0); /* FRAME_OWNED_BY_THREAD */
                got++;
        }
        ASSERT_EQ(got, ELEMENTSOF(expected_frames));
        if (l.frame_owner_cstack != EP_PY_NO_OFFSET)
                ASSERT_EQ(cstack, 1);

        child_stop(&c);
        printf("    live walk: thread %llu found, %zu Python frames%s match the script\n", ident, got,
               cstack ? " (after one C-stack shim)" : "");
        return true;
}

int main(void) {
        char script_path[PATH_MAX];
        PyInstall ins[PY_MAX_INSTALLS];
        size_t n, n_dwarf = 0, n_live = 0;
        FILE *f;

        ASSERT_TRUE(elf_version(EV_CURRENT) != EV_NONE);
        check_debug_offsets_parsing();

        n = py_discover(ins);
        if (n == 0) {
                printf("test-symbolizer-python-layout: no CPython on this machine, skipped\n");
                return 77;
        }

        snprintf(script_path, sizeof script_path, "%s/frames.py", py_tmpdir_make("test-py-layout"));
        f = fopen(script_path, "we");
        ASSERT_TRUE(f);
        ASSERT_EQ(fputs(script, f) >= 0, 1);
        ASSERT_EQ(fclose(f), 0);

        for (size_t i = 0; i < n; i++) {
                const PyInstall *in = &ins[i];
                EpPyLayout l;

                printf("  %s: Python %u.%u.%u\n", in->runtime, in->major, in->minor, in->micro);
                if (ep_py_layout_for_version(in->major, in->minor, &l) < 0) {
                        printf("    no built-in layout for %u.%u, skipped\n", in->major, in->minor);
                        continue;
                }
                if (check_dwarf(in))
                        n_dwarf++;
                else
                        printf("    no DWARF: table checked by the live walk only\n");
                if (check_live(in, script_path))
                        n_live++;
        }

        printf("  %zu runtimes checked against DWARF, %zu by a live walk\n", n_dwarf, n_live);
        ASSERT_TRUE(n_dwarf + n_live > 0);
        return tests_summary("test-symbolizer-python-layout");
}
