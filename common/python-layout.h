/* SPDX-License-Identifier: MIT */
#pragma once

/* Where CPython keeps what a Python stack walker reads, per minor version, for x86-64 builds
 * with the GIL (the default build). Every offset is in bytes from the start of the structure
 * named in the comment. The built-in table (python-layout.c) was taken from the DWARF of the
 * pyenv builds 3.6.15 … 3.13.0 and is re-checked against that DWARF by
 * tests/unit/test-symbolizer-python-layout.c; 3.13 also describes itself at run time through the
 * _Py_DebugOffsets block at the start of _PyRuntime (ep_py_layout_from_debug_offsets()). */

#include <stddef.h>
#include <stdint.h>

/* A field this version does not have. */
#define EP_PY_NO_OFFSET UINT32_MAX

/* How the frames of a thread are found and linked. */
typedef enum EpPyFrameKind {
        /* 3.6–3.10: PyFrameObject chain from tstate->frame through f_back; one
         * _PyEval_EvalFrameDefault activation per Python frame. */
        EP_PY_FRAMES_OBJECT = 1,
        /* 3.11–3.12: _PyInterpreterFrame chain from tstate->cframe->current_frame through
         * previous; one _PyEval_EvalFrameDefault activation runs several Python frames, the
         * oldest of which is marked (3.11: is_entry; 3.12: the frame after an
         * owner == FRAME_OWNED_BY_CSTACK shim). */
        EP_PY_FRAMES_CFRAME = 2,
        /* 3.13: _PyInterpreterFrame chain from tstate->current_frame (no _PyCFrame any more). */
        EP_PY_FRAMES_TSTATE = 3,
} EpPyFrameKind;

/* What co_lnotab / co_linetable holds (the symbolizer decodes it). */
typedef enum EpPyLineTable {
        EP_PY_LINES_LNOTAB = 1,      /* 3.6–3.9: co_lnotab, (byte offset delta, line delta) pairs */
        EP_PY_LINES_LINETABLE = 2,   /* 3.10: co_linetable, PEP 626 (start, end, line delta) */
        EP_PY_LINES_LOCATIONS = 3,   /* 3.11+: co_linetable, location table (PEP 657) */
} EpPyLineTable;

typedef struct EpPyLayout {
        unsigned major, minor;       /* the version this layout describes */
        EpPyFrameKind frame_kind;
        EpPyLineTable line_table;
        /* Bytes per unit of f_lasti: 1 for 3.6–3.9 (a byte offset into co_code), 2 for 3.10 (an
         * index of 16-bit code units). 0 from 3.11 on (frames hold an instruction pointer). */
        uint32_t lasti_unit;

        /* Object headers (Include/object.h). */
        uint32_t pyobject_size;            /* sizeof(PyObject) */
        uint32_t pyvarobject_size;         /* sizeof(PyVarObject) */
        uint32_t ob_type;                  /* PyObject.ob_type */
        uint32_t ob_size;                  /* PyVarObject.ob_size */

        /* Runtime → interpreters → threads. */
        uint32_t runtime_interpreters_head; /* _PyRuntimeState.interpreters.head; 3.7+ */
        uint32_t interp_next;              /* PyInterpreterState.next */
        uint32_t interp_tstate_head;       /* PyInterpreterState.tstate_head (≤3.10) / .threads.head */
        uint32_t tstate_next;              /* PyThreadState.next */
        uint32_t tstate_interp;            /* PyThreadState.interp */
        uint32_t tstate_thread_id;         /* PyThreadState.thread_id: pthread_self() (8 bytes) */
        uint32_t tstate_native_thread_id;  /* PyThreadState.native_thread_id: gettid(); 3.11+ */
        uint32_t tstate_frame;             /* PyThreadState.frame; 3.6–3.10 */
        uint32_t tstate_cframe;            /* PyThreadState.cframe; 3.11–3.12 */
        uint32_t cframe_current_frame;     /* _PyCFrame.current_frame; 3.11–3.12 */
        uint32_t tstate_current_frame;     /* PyThreadState.current_frame; 3.13 */

        /* Frames: PyFrameObject (3.6–3.10) or _PyInterpreterFrame (3.11+). */
        uint32_t frame_back;               /* f_back / previous */
        uint32_t frame_code;               /* f_code / f_executable (3.13) */
        uint32_t frame_lasti;              /* f_lasti (int); 3.6–3.10 */
        uint32_t frame_instr;              /* prev_instr (3.11–3.12) / instr_ptr (3.13) */
        uint32_t frame_is_entry;           /* is_entry (bool); 3.11 */
        uint32_t frame_owner;              /* owner (char); 3.11+ */
        uint32_t frame_owner_cstack;       /* FRAME_OWNED_BY_CSTACK's value; 3.12+ */

        /* PyCodeObject. */
        uint32_t co_argcount;              /* int */
        uint32_t co_kwonlyargcount;        /* int */
        uint32_t co_flags;                 /* int */
        uint32_t co_firstlineno;           /* int */
        uint32_t co_filename;              /* str */
        uint32_t co_name;                  /* str */
        uint32_t co_qualname;              /* str; 3.11+ */
        uint32_t co_linetable;             /* bytes: co_lnotab (≤3.9) or co_linetable */
        uint32_t co_code;                  /* bytes; ≤3.10 */
        uint32_t co_code_adaptive;         /* first code unit, inside the code object; 3.11+ */

        /* str (Include/cpython/unicodeobject.h). A compact ASCII string's characters follow
         * its PyASCIIObject header, other compact strings' their PyCompactUnicodeObject. */
        uint32_t unicode_length;           /* PyASCIIObject.length (characters) */
        uint32_t unicode_state;            /* PyASCIIObject.state (a 32-bit bit-field word) */
        uint32_t unicode_kind_shift;       /* state.kind: 3 bits at this bit */
        uint32_t unicode_compact_shift;    /* state.compact: 1 bit */
        uint32_t unicode_ascii_shift;      /* state.ascii: 1 bit */
        uint32_t unicode_ascii_data;       /* sizeof(PyASCIIObject) */
        uint32_t unicode_compact_data;     /* sizeof(PyCompactUnicodeObject) */

        /* bytes. */
        uint32_t bytes_size;               /* PyBytesObject.ob_size (PyVarObject) */
        uint32_t bytes_sval;               /* PyBytesObject.ob_sval */
} EpPyLayout;

/* The built-in layout of CPython major.minor (3.6 … 3.13). -EPROTONOSUPPORT otherwise. */
int ep_py_layout_for_version(unsigned major, unsigned minor, EpPyLayout *ret);

/* CPython 3.13's _Py_DebugOffsets (the first 584 bytes of _PyRuntime), as 3.13.0 defines it in
 * Include/internal/pycore_runtime.h. Only stable within one minor version. */
#define EP_PY_DEBUG_OFFSETS_COOKIE "xdebugpy"
#define EP_PY_DEBUG_OFFSETS_313_SIZE 584u

/* The block's layout (all offsets and sizes are 64-bit). The member names are CPython's, so
 * the layout test can check each one against the DWARF of struct _Py_DebugOffsets. */
typedef struct EpPyDebugOffsets313 {
        char cookie[8];
        uint64_t version;          /* PY_VERSION_HEX */
        uint64_t free_threaded;
        struct {
                uint64_t size, finalizing, interpreters_head;
        } runtime_state;
        struct {
                uint64_t size, id, next, threads_head, gc, imports_modules, sysdict, builtins,
                        ceval_gil, gil_runtime_state, gil_runtime_state_enabled,
                        gil_runtime_state_locked, gil_runtime_state_holder;
        } interpreter_state;
        struct {
                uint64_t size, prev, next, interp, current_frame, thread_id, native_thread_id,
                        datastack_chunk, status;
        } thread_state;
        struct {
                uint64_t size, previous, executable, instr_ptr, localsplus, owner;
        } interpreter_frame;
        struct {
                uint64_t size, filename, name, qualname, linetable, firstlineno, argcount,
                        localsplusnames, localspluskinds, co_code_adaptive;
        } code_object;
        struct {
                uint64_t size, ob_type;
        } pyobject;
        struct {
                uint64_t size, tp_name, tp_repr, tp_flags;
        } type_object;
        struct {
                uint64_t size, ob_item, ob_size;
        } tuple_object;
        struct {
                uint64_t size, ob_item, ob_size;
        } list_object;
        struct {
                uint64_t size, ma_keys, ma_values;
        } dict_object;
        struct {
                uint64_t size, ob_fval;
        } float_object;
        struct {
                uint64_t size, lv_tag, ob_digit;
        } long_object;
        struct {
                uint64_t size, ob_size, ob_sval;
        } bytes_object;
        struct {
                uint64_t size, state, length, asciiobject_size;
        } unicode_object;
        struct {
                uint64_t size, collecting;
        } gc;
} EpPyDebugOffsets313;
_Static_assert(sizeof(EpPyDebugOffsets313) == EP_PY_DEBUG_OFFSETS_313_SIZE, "_Py_DebugOffsets 3.13");

/* Parses a _Py_DebugOffsets block (buf: the first bytes of _PyRuntime, from the file's .data
 * or the process) and checks every offset it gives against the built-in table:
 *   -EBADMSG           wrong cookie, truncated, an offset outside its structure, or an offset
 *                      that differs from the table (a build with another layout: the fields
 *                      the block does not describe cannot be trusted either);
 *   -EPROTONOSUPPORT   not 3.13, or a free-threaded build.
 * On success *ret is the table entry (equal, field by field, to what the block says). */
int ep_py_layout_from_debug_offsets(const void *buf, size_t size, EpPyLayout *ret);
