/* SPDX-License-Identifier: MIT */
#pragma once

/* Is an ELF file a CPython runtime (libpython3.X*.so, or a python3.X executable with the
 * interpreter linked in), which version, and where are the things a Python stack walker starts
 * from. All addresses are ELF virtual addresses (symbol values, before the load bias). x86-64
 * only. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "python-layout.h"

#define EP_PY_MICRO_UNKNOWN UINT32_MAX
#define EP_PY_MAX_EVAL_RANGES 4u
#define EP_PY_MAX_MEMBERS 32u
#define EP_PY_MEMBER_NAME_MAX 24u

typedef enum EpPyMemberTable {
        EP_PY_MEMBERS_CODE,  /* PyCode_Type */
        EP_PY_MEMBERS_FRAME, /* PyFrame_Type: f_back, f_code up to 3.10, f_lasti up to 3.9 */
        _EP_PY_MEMBERS_MAX,
} EpPyMemberTable;

/* One PyMemberDef: a field's name and offset in the object, as the runtime declares it. */
typedef struct EpPyMember {
        char name[EP_PY_MEMBER_NAME_MAX];
        uint64_t offset;
} EpPyMember;

/* Where major.minor came from. */
typedef enum EpPyVersionSource {
        EP_PY_VERSION_FROM_PY_VERSION = 1, /* the exported Py_Version (3.11+): exact */
        EP_PY_VERSION_FROM_NAME = 2,       /* DT_SONAME, else the file name given */
        EP_PY_VERSION_FROM_STRING = 3,     /* a "3.X.Y" string in .rodata */
} EpPyVersionSource;

/* How 3.6's interp_head (the static head of the interpreter list) was found. */
typedef enum EpPyInterpHeadSource {
        EP_PY_INTERP_HEAD_NONE = 0,
        EP_PY_INTERP_HEAD_SYMTAB = 1,      /* the local symbol interp_head in .symtab */
        EP_PY_INTERP_HEAD_CODE = 2,        /* decoded from PyInterpreterState_Head()'s one load */
} EpPyInterpHeadSource;

typedef struct EpPyAddrRange {
        uint64_t start, end; /* [start, end) */
} EpPyAddrRange;

typedef struct EpPyRuntime {
        unsigned major, minor;
        unsigned micro;                    /* EP_PY_MICRO_UNKNOWN when nothing says */
        EpPyVersionSource version_source;

        /* 3.7+: _PyRuntime (the runtime state; in 3.13 it starts with _Py_DebugOffsets). */
        uint64_t runtime_addr, runtime_size;
        /* File offset of _PyRuntime's initial contents, or UINT64_MAX when it lives in .bss
         * (before 3.13 it is zero-initialized, so nothing of it is in the file). */
        uint64_t runtime_file_offset;

        /* 3.6 (no _PyRuntime): the interpreter list head and the GIL holder's thread state. */
        uint64_t interp_head_addr;         /* PyInterpreterState *interp_head */
        EpPyInterpHeadSource interp_head_source;
        uint64_t tstate_current_addr;      /* _PyThreadState_Current (a _Py_atomic_address) */

        /* _PyEval_EvalFrameDefault, then its separately named cold part(s) (.symtab only). */
        EpPyAddrRange eval[EP_PY_MAX_EVAL_RANGES];
        unsigned n_eval;

        /* The code and frame types' own member tables (tp_members: the PyMemberDef arrays that
         * name some of their fields' offsets for Python code), as far as the file holds them; 0
         * entries when it does not (no exported type, a pointer left to a relocation). */
        EpPyMember members[_EP_PY_MEMBERS_MAX][EP_PY_MAX_MEMBERS];
        unsigned n_members[_EP_PY_MEMBERS_MAX];
} EpPyRuntime;

/* Examines the ELF file open at fd. name is the file's path or name as the process maps it
 * (used for the version when the file does not say; may be NULL). Returns 1 and fills *ret for
 * a CPython 3 runtime, 0 for anything else (not ELF, not x86-64, no _PyEval_EvalFrameDefault
 * defined: e.g. a python3.X that links libpython, or libpython3.so), -ENODATA for a runtime
 * whose version or thread-state symbols cannot be found, other negative errno on I/O errors
 * or a malformed file. */
int ep_py_detect_fd(int fd, const char *name, EpPyRuntime *ret);
int ep_py_detect_path(const char *path, EpPyRuntime *ret);

/* The layout to walk this runtime with: 3.13 from the _Py_DebugOffsets in the file's copy of
 * _PyRuntime (checked against the table: returns 1), older versions from the table (returns
 * 0). */
int ep_py_detect_layout(int fd, const EpPyRuntime *rt, EpPyLayout *ret);

/* Checks the layout's offsets against a type's member table of the runtime: the number of
 * offsets checked (0: nothing to check with), or -EBADMSG when one differs (*ret_what names it,
 * may be NULL). ep_py_detect_layout() calls it for each table. */
int ep_py_members_check(EpPyMemberTable table, const EpPyMember *members, size_t n, const EpPyLayout *layout,
                        const char **ret_what);

/* Helpers, exported for the tests. */

/* major.minor from a file name: libpython3.X[abiflags].so…, python3.X[abiflags] (any
 * directory part is ignored). -EINVAL when the name does not say. */
int ep_py_version_from_name(const char *name, unsigned *ret_major, unsigned *ret_minor);

/* Looks through the NUL-terminated strings of a section (.rodata) for the version string
 * "3.X.Y" (with an optional a/b/rc serial and "+"). A string of its own wins over one that is
 * the tail of a path ("…/Python-3.9.18": linkers merge a string into a longer one ending with
 * it). With minor != 0 only 3.minor.* counts, else any 3.X.Y with X >= 6. Returns 0 and the
 * version, -ENOENT when there is none, -ENOTUNIQ when candidates of the same rank disagree. */
int ep_py_version_from_strings(const char *data, size_t size, unsigned minor,
                               unsigned *ret_minor, unsigned *ret_micro);

/* 3.6's PyInterpreterState_Head() is "return interp_head;": one load into %rax and ret
 * (optionally after endbr64). Decodes that load: RIP-relative (mov disp32(%rip),%rax) or
 * absolute (mov disp32,%rax). code holds the function's first bytes, func_addr its address.
 * -EBADMSG for any other instruction sequence. */
int ep_py_decode_interp_head(const uint8_t *code, size_t size, uint64_t func_addr, uint64_t *ret);
