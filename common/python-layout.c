/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "log.h"
#include "python-layout.h"

/* The numbers below were read from the DWARF of the pyenv builds (3.6.15, 3.7.16, 3.8.18,
 * 3.9.18, 3.10.13, 3.11.7, 3.12.1, 3.13.0; x86-64, GIL build) and are checked against it by
 * tests/unit/test-symbolizer-python-layout.c, field by field. Fields a version lacks stay
 * EP_PY_NO_OFFSET. */

_Static_assert(offsetof(EpPyLayout, bytes_sval) + sizeof(uint32_t) == sizeof(EpPyLayout),
               "layout_reset() fills from lasti_unit to the end");

static void layout_reset(EpPyLayout *l, unsigned minor) {
        /* Every uint32_t of the structure (they follow the enums) starts as "absent". */
        *l = (EpPyLayout) {
                .major = 3,
                .minor = minor,
        };
        memset(&l->lasti_unit, 0xff, sizeof(*l) - offsetof(EpPyLayout, lasti_unit));

        /* Unchanged from 3.6 to 3.13. */
        l->pyobject_size = 16;
        l->pyvarobject_size = 24;
        l->ob_type = 8;
        l->ob_size = 16;
        l->interp_next = 0;
        l->tstate_next = 8;
        l->tstate_interp = 16;
        l->unicode_length = 16;
        l->unicode_state = 32;
        l->unicode_kind_shift = 2;
        l->unicode_compact_shift = 5;
        l->unicode_ascii_shift = 6;
        l->bytes_size = 16;
        l->bytes_sval = 32;
}

/* 3.6–3.10: PyFrameObject chain. */
static void layout_frame_objects(EpPyLayout *l) {
        l->frame_kind = EP_PY_FRAMES_OBJECT;
        l->interp_tstate_head = 8;
        l->tstate_frame = 24;
        l->frame_back = 24;
        l->frame_code = 32;
        l->unicode_ascii_data = 48;
        l->unicode_compact_data = 72;
}

/* 3.11+: _PyInterpreterFrame chain. */
static void layout_interpreter_frames(EpPyLayout *l) {
        l->line_table = EP_PY_LINES_LOCATIONS;
        l->lasti_unit = 0;
        l->co_flags = 48;
        l->co_filename = 112;
        l->co_name = 120;
        l->co_qualname = 128;
        l->co_linetable = 136;
}

int ep_py_layout_for_version(unsigned major, unsigned minor, EpPyLayout *ret) {
        EpPyLayout l;

        if (major != 3 || minor < 6 || minor > 13)
                return -EPROTONOSUPPORT;

        layout_reset(&l, minor);

        switch (minor) {
        case 6:
        case 7:
                layout_frame_objects(&l);
                l.line_table = EP_PY_LINES_LNOTAB;
                l.lasti_unit = 1;
                if (minor == 6) {
                        /* No _PyRuntime: the interpreter list is the static interp_head
                         * (python-detect.c). */
                        l.tstate_thread_id = 152;
                        l.frame_lasti = 120;
                } else {
                        l.runtime_interpreters_head = 24;
                        l.tstate_thread_id = 176;
                        l.frame_lasti = 104;
                }
                l.co_argcount = 16;
                l.co_kwonlyargcount = 20;
                l.co_flags = 32;
                l.co_firstlineno = 36;
                l.co_code = 40;
                l.co_filename = 96;
                l.co_name = 104;
                l.co_linetable = 112;
                break;

        case 8:
        case 9:
        case 10:
                /* 3.8 added co_posonlyargcount after co_argcount. */
                layout_frame_objects(&l);
                l.runtime_interpreters_head = 32;
                l.tstate_thread_id = 176;
                if (minor < 10) {
                        l.line_table = EP_PY_LINES_LNOTAB;
                        l.lasti_unit = 1;
                        l.frame_lasti = 104;
                } else {
                        l.line_table = EP_PY_LINES_LINETABLE;
                        l.lasti_unit = 2;
                        l.frame_lasti = 96;
                }
                l.co_argcount = 16;
                l.co_kwonlyargcount = 24;
                l.co_flags = 36;
                l.co_firstlineno = 40;
                l.co_code = 48;
                l.co_filename = 104;
                l.co_name = 112;
                l.co_linetable = 120;
                break;

        case 11:
                layout_interpreter_frames(&l);
                l.frame_kind = EP_PY_FRAMES_CFRAME;
                l.runtime_interpreters_head = 40;
                l.interp_tstate_head = 16;
                l.tstate_cframe = 56;
                l.cframe_current_frame = 8;
                l.tstate_thread_id = 152;
                l.tstate_native_thread_id = 160;
                l.frame_back = 48;
                l.frame_code = 32;
                l.frame_instr = 56;
                l.frame_is_entry = 68;
                l.frame_owner = 69;
                l.co_argcount = 56;
                l.co_kwonlyargcount = 64;
                l.co_firstlineno = 72;
                l.co_code_adaptive = 184;
                l.unicode_ascii_data = 48;
                l.unicode_compact_data = 72;
                break;

        case 12:
        case 13:
                layout_interpreter_frames(&l);
                if (minor == 12) {
                        l.frame_kind = EP_PY_FRAMES_CFRAME;
                        l.runtime_interpreters_head = 40;
                        l.interp_tstate_head = 72;
                        l.tstate_cframe = 56;
                        l.cframe_current_frame = 0;
                        l.tstate_thread_id = 136;
                        l.tstate_native_thread_id = 144;
                        l.co_code_adaptive = 192;
                } else {
                        l.frame_kind = EP_PY_FRAMES_TSTATE;
                        l.runtime_interpreters_head = 632;
                        l.interp_next = 7264;
                        l.interp_tstate_head = 7344;
                        l.tstate_current_frame = 72;
                        l.tstate_thread_id = 152;
                        l.tstate_native_thread_id = 160;
                        l.co_code_adaptive = 200;
                }
                l.frame_back = 8;
                l.frame_code = 0;
                l.frame_instr = 56;
                l.frame_owner = 70;
                l.frame_owner_cstack = 3;
                l.co_argcount = 52;
                l.co_kwonlyargcount = 60;
                l.co_firstlineno = 68;
                l.unicode_ascii_data = 40;
                l.unicode_compact_data = 56;
                break;
        }

        *ret = l;
        return 0;
}

/* One offset the debug block gives, the table field it must equal, the structure size it must
 * fit in and the width of the field read there. */
typedef struct DebugCheck {
        const char *name;
        size_t debug_offset;   /* offsetof(EpPyDebugOffsets313, …) of the offset */
        size_t debug_size;     /* offsetof(EpPyDebugOffsets313, …) of the structure's size, or
                                * SIZE_MAX when the block gives none */
        size_t layout_offset;  /* offsetof(EpPyLayout, …) */
        unsigned width;        /* bytes read at that offset */
} DebugCheck;

#define DO(f) offsetof(EpPyDebugOffsets313, f)
#define LO(f) offsetof(EpPyLayout, f)

static const DebugCheck debug_checks[] = {
        { "runtime_state.interpreters_head", DO(runtime_state.interpreters_head), DO(runtime_state.size), LO(runtime_interpreters_head), 8 },
        { "interpreter_state.next", DO(interpreter_state.next), DO(interpreter_state.size), LO(interp_next), 8 },
        { "interpreter_state.threads_head", DO(interpreter_state.threads_head), DO(interpreter_state.size), LO(interp_tstate_head), 8 },
        { "thread_state.next", DO(thread_state.next), DO(thread_state.size), LO(tstate_next), 8 },
        { "thread_state.interp", DO(thread_state.interp), DO(thread_state.size), LO(tstate_interp), 8 },
        { "thread_state.current_frame", DO(thread_state.current_frame), DO(thread_state.size), LO(tstate_current_frame), 8 },
        { "thread_state.thread_id", DO(thread_state.thread_id), DO(thread_state.size), LO(tstate_thread_id), 8 },
        { "thread_state.native_thread_id", DO(thread_state.native_thread_id), DO(thread_state.size), LO(tstate_native_thread_id), 8 },
        { "interpreter_frame.previous", DO(interpreter_frame.previous), DO(interpreter_frame.size), LO(frame_back), 8 },
        { "interpreter_frame.executable", DO(interpreter_frame.executable), DO(interpreter_frame.size), LO(frame_code), 8 },
        { "interpreter_frame.instr_ptr", DO(interpreter_frame.instr_ptr), DO(interpreter_frame.size), LO(frame_instr), 8 },
        { "interpreter_frame.owner", DO(interpreter_frame.owner), DO(interpreter_frame.size), LO(frame_owner), 1 },
        { "code_object.filename", DO(code_object.filename), DO(code_object.size), LO(co_filename), 8 },
        { "code_object.name", DO(code_object.name), DO(code_object.size), LO(co_name), 8 },
        { "code_object.qualname", DO(code_object.qualname), DO(code_object.size), LO(co_qualname), 8 },
        { "code_object.linetable", DO(code_object.linetable), DO(code_object.size), LO(co_linetable), 8 },
        { "code_object.firstlineno", DO(code_object.firstlineno), DO(code_object.size), LO(co_firstlineno), 4 },
        { "code_object.argcount", DO(code_object.argcount), DO(code_object.size), LO(co_argcount), 4 },
        { "code_object.co_code_adaptive", DO(code_object.co_code_adaptive), DO(code_object.size), LO(co_code_adaptive), 2 },
        { "pyobject.size", DO(pyobject.size), SIZE_MAX, LO(pyobject_size), 0 },
        { "pyobject.ob_type", DO(pyobject.ob_type), DO(pyobject.size), LO(ob_type), 8 },
        { "bytes_object.ob_size", DO(bytes_object.ob_size), DO(bytes_object.size), LO(bytes_size), 8 },
        { "bytes_object.ob_sval", DO(bytes_object.ob_sval), DO(bytes_object.size), LO(bytes_sval), 1 },
        { "unicode_object.length", DO(unicode_object.length), DO(unicode_object.size), LO(unicode_length), 8 },
        { "unicode_object.state", DO(unicode_object.state), DO(unicode_object.size), LO(unicode_state), 4 },
        { "unicode_object.asciiobject_size", DO(unicode_object.asciiobject_size), DO(unicode_object.size), LO(unicode_ascii_data), 0 },
};

#undef DO
#undef LO

static uint64_t debug_u64(const EpPyDebugOffsets313 *d, size_t offset) {
        uint64_t v;

        memcpy(&v, (const uint8_t *) d + offset, sizeof(v));
        return v;
}

int ep_py_layout_from_debug_offsets(const void *buf, size_t size, EpPyLayout *ret) {
        EpPyDebugOffsets313 d;
        EpPyLayout table;
        unsigned major, minor;
        int r;

        if (!buf || size < offsetof(EpPyDebugOffsets313, free_threaded))
                return -EBADMSG;
        if (memcmp(buf, EP_PY_DEBUG_OFFSETS_COOKIE, sizeof(d.cookie)) != 0)
                return log_debug_errno(-EBADMSG, "_Py_DebugOffsets: no \"%s\" cookie",
                                       EP_PY_DEBUG_OFFSETS_COOKIE);

        /* The version decides the block's layout, so it is read before the size is checked. */
        memcpy(&d.version, (const uint8_t *) buf + offsetof(EpPyDebugOffsets313, version),
               sizeof(d.version));
        major = (d.version >> 24) & 0xff;
        minor = (d.version >> 16) & 0xff;
        if (major != 3 || minor != 13)
                return log_debug_errno(-EPROTONOSUPPORT,
                                       "_Py_DebugOffsets of CPython %u.%u: only 3.13's layout is known",
                                       major, minor);
        if (size < sizeof(d))
                return log_debug_errno(-EBADMSG, "_Py_DebugOffsets truncated: %zu of %zu bytes",
                                       size, sizeof(d));
        memcpy(&d, buf, sizeof(d));
        if (d.free_threaded != 0)
                return log_debug_errno(-EPROTONOSUPPORT,
                                       "_Py_DebugOffsets: free-threaded build, not supported");

        r = ep_py_layout_for_version(major, minor, &table);
        if (r < 0)
                return r;

        for (size_t i = 0; i < ELEMENTSOF(debug_checks); i++) {
                const DebugCheck *c = &debug_checks[i];
                uint64_t v = debug_u64(&d, c->debug_offset);
                uint32_t expected;

                if (c->debug_size != SIZE_MAX) {
                        uint64_t limit = debug_u64(&d, c->debug_size);

                        if (v > limit || c->width > limit - v)
                                return log_debug_errno(-EBADMSG,
                                                       "_Py_DebugOffsets: %s=%" PRIu64 " outside its structure (%" PRIu64 " bytes)",
                                                       c->name, v, limit);
                }

                memcpy(&expected, (const uint8_t *) &table + c->layout_offset, sizeof(expected));
                if (v != expected)
                        return log_debug_errno(-EBADMSG,
                                               "_Py_DebugOffsets: %s=%" PRIu64 ", the 3.13 table says %" PRIu32,
                                               c->name, v, expected);
        }

        *ret = table;
        return 0;
}
