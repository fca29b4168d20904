/* SPDX-License-Identifier: MIT */
#pragma once

/* Messages carried by the shared-memory rings between the daemons (see docs/ARCHITECTURE.md,
 * "Data plane"). Fixed-layout structs are used on the hot path (traces); messages with strings
 * are serialized with wire-buf.h in the field order documented next to each type. Every
 * consumer validates lengths and counts against the record length before use. */

#include <stdint.h>

#define EP_FILE_ID_SIZE 16   /* first 16 bytes of the htlhash SHA-256 (see file-id.h) */
#define EP_BUILD_ID_MAX 64     /* GNU build IDs are 20 bytes (up to 64 accepted) */
#define EP_GO_BUILD_ID_MAX 128 /* Go build IDs are strings of ~83 characters */
#define EP_COMM_LEN 16
#define EP_MAX_FRAMES 2048   /* kernel + user frames in one trace */

/* Frame kinds: what an address means and who can name it. Values are stable (stored); what
 * each kind is, is described once in frame-kind.c. */
enum {
        EP_FRAME_UNKNOWN = 0,
        EP_FRAME_NATIVE = 1,   /* addr is a file offset in the file (file_key / file_id) */
        EP_FRAME_KERNEL = 2,   /* addr is a kernel virtual address */
        EP_FRAME_UNMAPPED = 3, /* addr is a process virtual address in no known file mapping
                                * (anonymous memory, JIT without a perf map, vdso before sync) */
        EP_FRAME_ABORT = 4,    /* unwinding stopped early here; addr holds the stop reason */
        EP_FRAME_CPYTHON = 5,  /* a CPython frame of process pid (per process, like UNMAPPED):
                                * addr bits 0-47 are the PyCodeObject's address, bits 48-63 the
                                * byte offset of the current instruction in the code's bytecode
                                * (saturated at 0xffff); see EP_FRAME_CPYTHON_ADDR() */
        _EP_FRAME_KIND_MAX,
};

#define EP_FRAME_CPYTHON_ADDR(code, offset) \
        (((uint64_t) (code) & ((1ULL << 48) - 1)) | ((uint64_t) ((offset) > 0xffff ? 0xffff : (offset)) << 48))
#define EP_FRAME_CPYTHON_CODE(addr) ((addr) & ((1ULL << 48) - 1))
#define EP_FRAME_CPYTHON_OFFSET(addr) ((uint32_t) ((addr) >> 48))

/* Frame flags. */
enum {
        /* addr was read as a return address: the call instruction is the byte before it. */
        EP_FRAME_FLAG_RETURN_ADDRESS = 1 << 0,
        /* the frame was reached by a frame-pointer step (no unwind table for the frame below
         * it): less certain than a table step */
        EP_FRAME_FLAG_FP_STEP = 1 << 1,
};

/* Why an unwind stopped (shared with bpf/ via the same numbers; see bpf/profiler.h). */
enum {
        EP_STOP_OK = 0,          /* reached the root frame (fp == 0 or known entry point) */
        EP_STOP_MAX_DEPTH = 1,   /* the frame budget ran out */
        EP_STOP_READ_FAILED = 2, /* reading the stack faulted (paged out / invalid pointer) */
        EP_STOP_BAD_FP = 3,      /* the frame pointer did not move up the stack */
        EP_STOP_NO_USER_REGS = 4,/* kernel thread or no user context to continue from */
        EP_STOP_PC_ZERO = 5,     /* a return address of zero before the root */
        /* Native unwinding (bpf/native-unwind.h). */
        EP_STOP_NO_UNWIND_INFO = 6,  /* the table has no rule for this PC (gap, not covered) */
        EP_STOP_NO_MAPPING = 7,      /* PC in no file mapping and the frame-pointer step failed */
        EP_STOP_TABLE_MISSING = 8,   /* the file's table is not loaded (yet) and the
                                      * frame-pointer step failed */
        EP_STOP_UNKNOWN_PROCESS = 9, /* the process's mappings were not known yet and the
                                      * frame-pointer step failed */
        EP_STOP_BAD_CFA = 10,        /* CFA unaligned or not above the stack pointer */
        EP_STOP_BAD_PC = 11,         /* return address below 4096 or outside user space */
        EP_STOP_FP_UNDEFINED = 12,   /* a rule needs rbp, which an earlier frame lost */
        EP_STOP_TABLE_ERROR = 13,    /* inconsistent table in BPF maps (a loader bug) */
        _EP_STOP_MAX,
};

/* ---- loader → collector: the trace ring ---- */
enum {
        EP_MSG_TRACE = 1,        /* EpTraceMsg */
        EP_MSG_FILE = 2,         /* serialized, see below */
        EP_MSG_PROCESS = 3,      /* serialized, see below */
        EP_MSG_PROCESS_EXIT = 4, /* serialized: u32 pid */
};

typedef struct EpFrame {
        uint64_t addr;
        uint32_t file_key; /* EP_FRAME_NATIVE: key announced by an EP_MSG_FILE; else 0 */
        uint8_t kind;
        uint8_t flags;
        uint16_t reserved;
} EpFrame;

typedef struct EpTraceMsg {
        uint64_t time_ns;  /* CLOCK_REALTIME */
        uint32_t pid, tid; /* as seen from the host's pid namespace */
        uint32_t cpu;
        uint16_t n_frames; /* total frames that follow */
        uint16_t n_kernel; /* the first n_kernel frames are kernel frames */
        uint32_t stop_reason; /* EP_STOP_* of the user-space unwind */
        char comm[EP_COMM_LEN]; /* thread name, NUL-padded */
        EpFrame frames[];       /* leaf first */
} EpTraceMsg;

/* EP_MSG_FILE, announced once per file_key before the first trace that uses it (and again
 * after a ring reset). Fields, in order:
 *   u32 file_key, bytes[16] file_id, bytes[16] htlhash, u64 file_size, str path
 * (file-id.h: the ID names the file everywhere, the htlhash is what OTLP backends know)
 * The loader does not parse ELF (it is privileged; the symbolizer parses untrusted files):
 * build IDs come from the symbolizer's EP_MSG_SYM_FILE_RESPONSE. */

/* EP_MSG_PROCESS, when a process is first seen or execs. Fields:
 *   u32 pid, u64 start_time_ns (CLOCK_REALTIME), str comm, str exe_path, str container_id */

/* ---- collector → symbolizer: request ring; symbolizer → collector: response ring ---- */
enum {
        EP_MSG_SYM_REQUEST = 16,  /* serialized, see below */
        EP_MSG_SYM_RESPONSE = 17, /* serialized, see below */
        EP_MSG_SYM_FILE_REQUEST = 18,  /* u64 cookie, bytes[16] file_id, str path */
        EP_MSG_SYM_FILE_RESPONSE = 19, /* u64 cookie, u8 status (EP_SYM_*), blob gnu_build_id,
                                        * str go_build_id */
        EP_MSG_SYM_FILE_CHANGED = 20,  /* bytes[16] file_id; unasked, to every session: the
                                        * answers for EP_FRAME_NATIVE frames of that file may
                                        * differ now (its debug file appeared while the
                                        * symbolizer ran): the requester asks them again */
};

/* EP_MSG_SYM_REQUEST: u64 cookie, u8 kind, bytes[16] file_id, u64 addr, u8 flags, str path,
 *   u32 pid, u64 start_time_ns (wire-sym.h reads and writes it)
 *   kind EP_FRAME_NATIVE: addr is a file offset in file_id; path is where the process maps
 *     the file (a hint for finding its debug file, and for messages)
 *   kind EP_FRAME_KERNEL: addr is a kernel address (file_id, path, pid unused)
 *   kind EP_FRAME_UNMAPPED: addr is an address in process pid (started at start_time_ns),
 *     named from its perf map when it writes one */

enum {
        EP_SYM_OK = 0,          /* at least one line with a function name */
        EP_SYM_NOT_FOUND = 1,   /* the file was read but no symbol covers addr */
        EP_SYM_NO_FILE = 2,     /* the loader could not open the file (process gone, ...) */
        EP_SYM_BAD_FILE = 3,    /* the file is not a usable ELF */
        EP_SYM_RETRY = 4,       /* not named for a passing reason (the loader timed out or is
                                 * restarting, a descriptor went stale, out of memory): not an
                                 * answer; the requester asks again later, nobody caches it */
        _EP_SYM_STATUS_MAX,
};

/* EP_MSG_SYM_RESPONSE: u64 cookie, u8 status, u64 elf_addr, str module, u16 n_lines,
 *   then n_lines × { str function, str file, u32 line }
 * Lines are innermost first (an inlined callee before the function it was inlined into).
 * elf_addr is the address in the ELF's virtual address space (native frames) or the kernel
 * address; module is the kernel module name for kernel frames ("" for vmlinux). */

/* ---- collector → exporter: the export ring, one finished interval at a time ---- */
enum {
        EP_MSG_EXP_BEGIN = 32,   /* u64 interval_id, u64 start_ns, u64 end_ns, u64 period_ns */
        EP_MSG_EXP_PROCESS = 33, /* u32 pid, str comm, str exe_path, str container_id */
        EP_MSG_EXP_FRAME = 34,   /* u32 frame_ref, u8 kind, bytes[16] file_id, bytes[16] htlhash, blob build_id
                                  * (GNU), str go_build_id, str mapping_path, u64 addr,
                                  * u64 elf_addr (native: ELF virtual address, 0 = unknown),
                                  * u16 n_lines, n_lines × { str function, str file, u32 line } */
        EP_MSG_EXP_STACK = 35,   /* u32 stack_ref, u32 n, n × u32 frame_ref (leaf first) */
        EP_MSG_EXP_SAMPLE = 36,  /* u32 pid, u32 tid, u32 cpu, str thread_name, u32 stack_ref,
                                  * u64 count, u32 n_timestamps, n × u64 time_ns */
        EP_MSG_EXP_END = 37,     /* u64 interval_id */
};
/* Within one BEGIN..END group every frame_ref and stack_ref is defined before it is used;
 * refs are only meaningful inside their group. */
