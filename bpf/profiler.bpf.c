/* SPDX-License-Identifier: MIT */

/* The sampling program: runs on every tick of a software CPU-clock perf event on each CPU,
 * records who was running, the kernel stack and the user stack, and hands the record to the
 * loader through the BPF ring buffer. The user stack is unwound here with the per-file unwind
 * tables the loader puts in the maps below (bpf/native-unwind.h does one frame; bpf_loop drives
 * up to EP_BPF_MAX_USER_FRAMES of them). Where there is no table (yet), a frame takes one
 * frame-pointer step instead, so samples of processes seen for the first time are kept. */

#include "vmlinux-min.h"

#include <bpf/bpf_helpers.h>

#include "profiler.h"
#include "wire.h"
#include "native-unwind.h" /* types only here; the step functions after the hooks below */

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* Set by the loader before load. */
const volatile bool include_idle = false;
/* The loader's PID namespace (st_dev and st_ino of /proc/self/ns/pid) when it is not the
 * initial one: process IDs are then reported as the loader sees them in /proc, and tasks it
 * cannot see are not recorded. 0: the initial namespace, no translation. */
const volatile __u64 pidns_dev = 0;
const volatile __u64 pidns_ino = 0;

struct {
        __uint(type, BPF_MAP_TYPE_RINGBUF);
        __uint(max_entries, EP_BPF_RINGBUF_SIZE);
} events SEC(".maps");

struct {
        __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
        __uint(max_entries, EP_BPF_CNT_MAX);
        __type(key, __u32);
        __type(value, __u64);
} counters SEC(".maps");

/* The record is far too big for the 512-byte BPF stack: build it in a per-CPU slot. */
struct {
        __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
        __uint(max_entries, 1);
        __type(key, __u32);
        __type(value, struct ep_bpf_sample);
} scratch SEC(".maps");

/* The mapping the last frame was found in, per CPU, valid for the sample being unwound only
 * (consecutive frames are mostly in the same file: no process lookup and search for them). */
struct mapping_cache {
        __u64 start, size, bias;
        __u32 file_num;
        __u32 valid;
};

struct {
        __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
        __uint(max_entries, 1);
        __type(key, __u32);
        __type(value, struct mapping_cache);
} last_mapping SEC(".maps");

/* The user stack read in bulk, per CPU: the unwinder reads a frame's words from a copy of its
 * stack page, made with one bpf_probe_read_user() of the whole page the first time the walk
 * reaches it, rather than with one probe-read per word (each costs about as much as copying
 * hundreds of bytes). Direct-mapped: stack page P is in slot P % EP_BPF_WINDOW_PAGES, and
 * stack_window_tags says which page each slot holds (0: none) for the current walk only. */
#define EP_BPF_WINDOW_PAGES 8

struct stack_window {
        __u8 data[EP_BPF_WINDOW_PAGES * 4096];
};

struct stack_window_tags {
        __u64 page[EP_BPF_WINDOW_PAGES]; /* page number + 1 */
};

struct {
        __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
        __uint(max_entries, 1);
        __type(key, __u32);
        __type(value, struct stack_window);
} stack_window SEC(".maps");

struct {
        __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
        __uint(max_entries, 1);
        __type(key, __u32);
        __type(value, struct stack_window_tags);
} stack_window_tags SEC(".maps");

/* CLOCK_BOOTTIME of the last wake-up forced by a sample of an unknown process, per CPU. */
struct {
        __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
        __uint(max_entries, 1);
        __type(key, __u32);
        __type(value, __u64);
} last_wakeup SEC(".maps");

/* ---- native unwinding state (bpf/profiler.h; sizes are set by the loader before load) ---- */

struct {
        __uint(type, BPF_MAP_TYPE_HASH);
        __uint(map_flags, BPF_F_NO_PREALLOC);
        __uint(max_entries, 16384);
        __type(key, __u32);
        __type(value, struct ep_bpf_proc);
} proc_mappings SEC(".maps");

struct {
        __uint(type, BPF_MAP_TYPE_ARRAY);
        __uint(max_entries, EP_BPF_MAX_RULES);
        __type(key, __u32);
        __type(value, struct ep_unwind_rule);
} unwind_rules SEC(".maps");

struct {
        __uint(type, BPF_MAP_TYPE_HASH);
        __uint(map_flags, BPF_F_NO_PREALLOC);
        __uint(max_entries, 65536);
        __type(key, struct ep_bpf_page_key);
        __type(value, struct ep_bpf_page);
} unwind_pages SEC(".maps");

/* The template of the per-file delta arrays: BPF_F_INNER_MAP lets every file's array have its
 * own size. */
struct unwind_deltas {
        __uint(type, BPF_MAP_TYPE_ARRAY);
        __uint(map_flags, BPF_F_INNER_MAP);
        __uint(max_entries, 1);
        __type(key, __u32);
        __type(value, __u64); /* struct ep_bpf_delta_pair (a scalar here: BTF of the template) */
};

struct {
        __uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
        __uint(max_entries, 4096);
        __type(key, __u32);
        __array(values, struct unwind_deltas);
} unwind_tables SEC(".maps");

struct {
        __uint(type, BPF_MAP_TYPE_ARRAY);
        __uint(max_entries, 4096);
        __type(key, __u32);
        __type(value, __u32); /* EP_BPF_FILE_* */
} file_state SEC(".maps");

/* The rules found in tables lately, per CPU: most frames a sample walks were walked by the
 * samples before (hot code, recursion), and a hit costs one probe of this array instead of the
 * table, page and rule lookups. Direct-mapped on (file, offset). An entry is good only while
 * tables_gen is what it was when the entry was filled: the loader increments it whenever it
 * removes a table, before the file's number can be given to another file. */
#define EP_BPF_RULE_CACHE_BITS 10
#define EP_BPF_RULE_CACHE_SIZE (1u << EP_BPF_RULE_CACHE_BITS)

volatile __u32 tables_gen; /* written by the loader (unwinder-loader/tables.c) */

struct rule_cache_entry {
        __u32 file_num; /* 0: empty (no file has number 0) */
        __u32 file_offset;
        __u32 gen;
        struct ep_unwind_rule rule;
};

struct rule_cache {
        struct rule_cache_entry e[EP_BPF_RULE_CACHE_SIZE];
};

struct {
        __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
        __uint(max_entries, 1);
        __type(key, __u32);
        __type(value, struct rule_cache);
} rule_cache SEC(".maps");

_Static_assert(__builtin_offsetof(struct ep_bpf_sample, frames) == EP_BPF_SAMPLE_HEADER_SIZE,
               "EP_BPF_SAMPLE_HEADER_SIZE out of date");
_Static_assert(EP_BPF_CNT_STOP_BASE + _EP_STOP_MAX <= EP_BPF_CNT_MAX, "counters map too small");
_Static_assert(sizeof(struct ep_bpf_delta_pair) == 8, "two deltas per 8-byte array element");
_Static_assert(EP_BPF_CNT_STOP_BASE + _EP_STOP_MAX <= EP_BPF_CNT_OTHER_PID_NS, "counter ranges overlap");

static __always_inline void count_n(__u32 idx, __u64 n) {
        __u64 *v = bpf_map_lookup_elem(&counters, &idx);
        if (v)
                *v += n; /* per-CPU slot: no other writer */
}

static __always_inline void count(__u32 idx) {
        count_n(idx, 1);
}

static __always_inline __u64 wakeup_flags(void) {
        return bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= EP_BPF_WAKEUP_BYTES
                       ? BPF_RB_FORCE_WAKEUP
                       : BPF_RB_NO_WAKEUP;
}

/* ---- the hooks of bpf/native-unwind.h ----
 *
 * The verifier follows every path through a program, and a frame step is many branches deep:
 * inlined into the bpf_loop callback it exceeds the verifier's limits. So the step, the mapping
 * search and the rule search are GLOBAL functions, which the verifier checks once each, on
 * their own, with unknown arguments. Their pointer arguments are plain memory (they may not
 * carry map pointers), hence the process is looked up by pid again whenever a frame is
 * outside the mapping the previous one was found in (last_mapping). */

/* All ones when a < b, else 0; both below 2^63. Without a branch: a search whose every step
 * branches makes the verifier follow 2^steps paths. */
static __always_inline __u64 below_mask(__u64 a, __u64 b) {
        __u64 d = a - b, m;

        barrier_var(d);
        m = -(d >> 63);
        barrier_var(m); /* or clang turns the masks back into branches */
        return m;
}

struct mapping_hit {
        __u64 file_offset;
        __u32 file_num;
        __u32 reserved;
};

/* EP_LOOKUP_* for addr in pid's mappings. */
__noinline int ep_bpf_find_mapping(__u32 pid, __u64 addr, struct mapping_hit *hit) {
        const __u64 mask = EP_BPF_MAX_MAPPINGS - 1;
        struct mapping_cache *cache;
        struct ep_bpf_proc *p;
        struct ep_bpf_mapping *m;
        __u32 zero = 0;
        __u64 lo = 0, hi;

        if (!hit)
                return EP_LOOKUP_ERROR;
        cache = bpf_map_lookup_elem(&last_mapping, &zero);
        if (cache && cache->valid && addr - cache->start < cache->size) {
                hit->file_num = cache->file_num;
                hit->file_offset = addr - cache->bias;
                return EP_LOOKUP_FOUND;
        }
        p = bpf_map_lookup_elem(&proc_mappings, &pid);
        if (!p)
                return EP_LOOKUP_UNKNOWN_PROCESS;
        hi = p->n;
        if (hi > EP_BPF_MAX_MAPPINGS)
                return EP_LOOKUP_NO_MAPPING;
        /* lo ends at the first mapping that starts above addr. Branch-free steps; a step with
         * lo == hi changes nothing. */
        for (int i = 0; i < EP_BPF_MAPPING_SEARCH_STEPS + 1; i++) {
                __u64 mid = ((lo + hi) >> 1) & mask;
                __u64 active = below_mask(lo, hi);
                __u64 below = below_mask(addr, p->m[mid].start); /* addr < start */
                __u64 left = below & active, right = ~below & active;

                hi = (hi & ~left) | (mid & left);
                lo = (lo & ~right) | ((mid + 1) & right);
        }
        if (lo == 0)
                return EP_LOOKUP_NO_MAPPING;
        m = &p->m[(lo - 1) & mask];
        if (addr - m->start >= m->size || m->file_num == 0)
                return EP_LOOKUP_NO_MAPPING;
        hit->file_num = m->file_num;
        hit->file_offset = addr - m->bias;
        if (cache)
                *cache = (struct mapping_cache) {
                        .start = m->start, .size = m->size, .bias = m->bias, .file_num = m->file_num, .valid = 1,
                };
        return EP_LOOKUP_FOUND;
}

#define EP_PAGES_CTX void *

static __always_inline int ep_page_delta(void *inner, __u32 index, struct ep_bpf_delta *ret) {
        __u32 elem = index >> 1;
        struct ep_bpf_delta_pair *p = bpf_map_lookup_elem(inner, &elem);

        if (!p)
                return -1;
        *ret = p->d[index & 1];
        return 0;
}

#include "unwind-pages.h"

/* The entry of rule_cache where (file_num, file_offset) would be, or NULL. */
static __always_inline struct rule_cache_entry *rule_cache_slot(__u32 file_num, __u32 file_offset) {
        struct rule_cache *c;
        __u32 zero = 0, h;

        c = bpf_map_lookup_elem(&rule_cache, &zero);
        if (!c)
                return NULL;
        h = ((file_offset ^ (file_num * 0x9e3779b9u)) * 0x9e3779b9u) >> (32 - EP_BPF_RULE_CACHE_BITS);
        return &c->e[h & (EP_BPF_RULE_CACHE_SIZE - 1)];
}

/* EP_LOOKUP_* for the rule at file_offset of file_num. */
__noinline int ep_bpf_find_rule(__u32 file_num, __u32 file_offset, struct ep_unwind_rule *ret_rule) {
        struct ep_bpf_page_key key = { .file_num = file_num, .page = file_offset >> EP_BPF_PAGE_SHIFT };
        struct ep_unwind_rule found = { .cfa_kind = EP_CFA_INVALID }, *rule;
        struct rule_cache_entry *cached;
        struct ep_bpf_page *pg;
        __u32 idx, gen = tables_gen; /* before the table is looked at */
        void *inner;
        int r;

        if (!ret_rule)
                return EP_LOOKUP_ERROR;
        cached = rule_cache_slot(file_num, file_offset);
        if (cached && cached->file_num == file_num && cached->file_offset == file_offset && cached->gen == gen) {
                *ret_rule = cached->rule;
                return EP_LOOKUP_FOUND;
        }
        inner = bpf_map_lookup_elem(&unwind_tables, &file_num);
        if (!inner) {
                /* A file without CFI stays so until it is removed (tables_gen changes then). */
                __u32 *state = bpf_map_lookup_elem(&file_state, &file_num);
                if (!state || *state != EP_BPF_FILE_FP_ONLY)
                        return EP_LOOKUP_NO_TABLE; /* not cached: the table may come any time */
                found.cfa_kind = EP_CFA_FP_FALLBACK;
        }
        /* Pages are inserted before the table and removed after it: with the table present, a
         * missing page is an offset the table does not cover (EP_CFA_INVALID). */
        pg = inner ? bpf_map_lookup_elem(&unwind_pages, &key) : NULL;
        if (pg) {
                r = ep_page_search(inner, pg, file_offset & ((1u << EP_BPF_PAGE_SHIFT) - 1));
                if (r < 0)
                        return EP_LOOKUP_ERROR;
                idx = (__u32) r;
                rule = bpf_map_lookup_elem(&unwind_rules, &idx);
                if (!rule)
                        return EP_LOOKUP_ERROR;
                found = *rule;
        }
        *ret_rule = found;
        if (cached)
                *cached = (struct rule_cache_entry) {
                        .file_num = file_num, .file_offset = file_offset, .gen = gen, .rule = found,
                };
        return EP_LOOKUP_FOUND;
}

#define EP_UNWIND_CTX __u32 /* the pid */

/* size bytes at addr from the walk's copy of its stack page, which is made on first use;
 * a read across a page boundary, or of a page that cannot be copied whole, is a probe-read of
 * its own. size is a constant (8, 16 or 24). */
static __always_inline int ep_read_user(__u32 pid, void *dst, __u32 size, uint64_t addr) {
        __u64 page = addr >> 12, in_page = addr & 4095, slot = page & (EP_BPF_WINDOW_PAGES - 1), off, *tag;
        struct stack_window_tags *tags;
        struct stack_window *w;
        __u32 zero = 0;

        if (in_page > 4096 - size)
                return bpf_probe_read_user(dst, size, (const void *) addr);
        tags = bpf_map_lookup_elem(&stack_window_tags, &zero);
        w = bpf_map_lookup_elem(&stack_window, &zero);
        if (!tags || !w)
                return bpf_probe_read_user(dst, size, (const void *) addr);
        tag = &tags->page[slot];
        off = slot * 4096;
        barrier_var(off);
        if (off > (EP_BPF_WINDOW_PAGES - 1) * 4096)
                return bpf_probe_read_user(dst, size, (const void *) addr);
        if (*tag != page + 1) {
                if (bpf_probe_read_user(w->data + off, 4096, (const void *) (page << 12)) < 0) {
                        *tag = 0;
                        return bpf_probe_read_user(dst, size, (const void *) addr);
                }
                *tag = page + 1;
        }
        off += in_page;
        barrier_var(off);
        if (off > EP_BPF_WINDOW_PAGES * 4096 - size)
                return bpf_probe_read_user(dst, size, (const void *) addr);
        __builtin_memcpy(dst, w->data + off, size);
        return 0;
}

static __always_inline int ep_find_mapping(__u32 pid, uint64_t addr, __u32 *ret_file_num,
                                           uint64_t *ret_file_offset) {
        struct mapping_hit hit = {};
        int r = ep_bpf_find_mapping(pid, addr, &hit);

        *ret_file_num = hit.file_num;
        *ret_file_offset = hit.file_offset;
        return r;
}

static __always_inline int ep_find_rule(__u32 pid, __u32 file_num, __u32 file_offset,
                                        struct ep_unwind_rule *ret_rule) {
        return ep_bpf_find_rule(file_num, file_offset, ret_rule);
}

#include "native-unwind.h"

/* One step of pid's unwind from regs (EP_UNWIND_NEXT or EP_STOP_*). */
__noinline int ep_bpf_unwind_step(__u32 pid, struct ep_unwind_regs *regs) {
        if (!regs)
                return EP_STOP_TABLE_ERROR;
        return ep_unwind_step(pid, regs);
}

/* ---- interpreter runtimes: the seams ----
 *
 * on_sample hands a sample of a process that runs an interpreter to that runtime's own
 * program (a tail call through runtime_programs, keyed by RUNTIME_*), which unwinds the whole
 * user stack: the native walk of every program is the same code (walk_user_stack), compiled in
 * each with one runtime's hooks, so each program carries and the verifier checks only its own
 * runtime, and interpreted and native frames alternate within one bpf_loop with the native
 * walk's full EP_BPF_MAX_USER_FRAMES budget (one tail call per sample, not one per
 * interpreter activation: CPython <= 3.10 enters its eval loop once per Python call).
 * A runtime is one bpf/NAME.bpf.h (maps, walk state, walk) with the types it shares with the
 * loader in bpf/NAME.h, and plugs in here only:
 *   runtimes_sample_start    a sample of pid starts: which runtime (if any) the process runs;
 *   runtimes_on_native_frame a native frame is about to be recorded: true when that runtime's
 *                            frames come first (the frame is its interpreter loop);
 *   runtimes_next_frame      the next of those frames, in EP_RUNTIME_FRAME_SLOTS slots;
 *   runtimes_next_unplaced   after the native walk stopped short: the runtime's frames it did
 *                            not reach (bpf/profiler.h, EP_BPF_FRAME_F_UNPLACED);
 *   runtimes_frame_dropped   a frame did not fit (the runtime counts it);
 *   runtimes_process_gone / runtimes_process_forked  exec, exit, fork;
 *   RUNTIME_PROGRAM          its program, and its entry in runtime_programs.
 * docs/ARCHITECTURE.md, "Interpreter runtimes: the seams, and how to add a runtime". */

#include "cpython.bpf.h"

enum {
        RUNTIME_NONE = 0,
        RUNTIME_CPYTHON = 1, /* bpf/cpython.bpf.h */
        _RUNTIME_MAX,
};

#define EP_RUNTIME_FRAME_SLOTS 2 /* frames[] slots per interpreter frame */

static __always_inline __u32 runtimes_sample_start(__u32 pid, __u64 fsbase) {
        if (cpython_sample_start(pid, fsbase))
                return RUNTIME_CPYTHON;
        return RUNTIME_NONE;
}

/* The hooks below are called with a constant runtime (each program's own): the other runtimes'
 * branches compile away. pc: the native frame's lookup address (pc-1 for return addresses). */
static __always_inline bool runtimes_on_native_frame(__u32 runtime, __u64 pc) {
        return runtime == RUNTIME_CPYTHON && cpython_on_native_frame(pc);
}

static __always_inline int runtimes_next_frame(__u32 runtime, __u64 *slots) {
        return runtime == RUNTIME_CPYTHON ? cpython_next_frame(slots) : 0;
}

/* 1: slots filled; 0: nothing this time, call again; -1: no more. */
static __always_inline int runtimes_next_unplaced(__u32 runtime, __u64 *slots) {
        return runtime == RUNTIME_CPYTHON ? cpython_next_unplaced(slots) : -1;
}

static __always_inline void runtimes_frame_dropped(__u32 runtime) {
        if (runtime == RUNTIME_CPYTHON)
                cpython_frame_dropped();
}

static __always_inline void runtimes_process_gone(__u32 pid) {
        cpython_process_gone(pid);
}

static __always_inline void runtimes_process_forked(__u32 parent, __u32 pid) {
        cpython_process_forked(parent, pid);
}

enum {
        RT_MODE_NATIVE = 0, /* the next iteration records the native frame at regs.pc */
        RT_MODE_FRAMES = 1, /* the next iteration emits an interpreter frame of regs.pc's activation */
        RT_MODE_DONE = 2,   /* regs.pc's activation was handled: record the native frame */
};

struct unwind_state {
        struct ep_bpf_sample *rec;
        struct ep_unwind_regs regs;
        __u32 pid;
        __u32 n;    /* frames filled in rec->frames */
        __u32 end;  /* frames[] index limit for this sample's user frames */
        int stop;   /* EP_STOP_* */
        __u32 rt_mode; /* RT_MODE_* */
        __u16 steps[_EP_UNWIND_STEP_MAX]; /* how each caller was found: counted once per sample */
};

/* One frame per iteration: step to its caller, then record it. runtime: the program's own. */
static __always_inline long unwind_frame(struct unwind_state *st, __u32 runtime) {
        __u32 n = st->n, flags;
        __u64 pc;
        int s;

        if (n >= st->end || n >= EP_BPF_MAX_FRAMES) {
                st->stop = EP_STOP_MAX_DEPTH;
                return 1;
        }
        if (runtime != RUNTIME_NONE) {
                if (st->rt_mode == RT_MODE_FRAMES) {
                        __u64 slots[EP_RUNTIME_FRAME_SLOTS] = {};

                        if (runtimes_next_frame(runtime, slots) == 1) {
                                if (n + EP_RUNTIME_FRAME_SLOTS > st->end ||
                                    n + EP_RUNTIME_FRAME_SLOTS > EP_BPF_MAX_FRAMES) {
                                        runtimes_frame_dropped(runtime);
                                        st->stop = EP_STOP_MAX_DEPTH;
                                        return 1;
                                }
                                st->rec->frames[n] = slots[0];
                                st->rec->frames[n + 1] = slots[1];
                                st->n = n + EP_RUNTIME_FRAME_SLOTS;
                                return 0;
                        }
                        st->rt_mode = RT_MODE_DONE;
                } else if (st->rt_mode == RT_MODE_NATIVE &&
                           runtimes_on_native_frame(runtime, st->regs.pc - (st->regs.flags & EP_UNWIND_F_RETURN_ADDRESS ? 1 : 0))) {
                        st->rt_mode = RT_MODE_FRAMES;
                        return 0;
                }
        }
        st->rt_mode = RT_MODE_NATIVE;
        pc = st->regs.pc;
        flags = st->regs.flags;
        s = ep_bpf_unwind_step(st->pid, &st->regs);
        /* Recorded once its step is known: a signal trampoline's pc is exact (native-unwind.h). */
        st->rec->frames[n] = (pc & EP_BPF_FRAME_ADDR_MASK) |
                             ((__u64) ep_unwind_frame_flags(flags, st->regs.step) << EP_BPF_FRAME_FLAGS_SHIFT);
        st->n = n + 1;
        if (s != EP_UNWIND_NEXT) {
                st->stop = s;
                return 1;
        }
        if (st->regs.step < _EP_UNWIND_STEP_MAX)
                st->steps[st->regs.step]++;
        return 0;
}

/* The walk's step counts into the counters map, one update per kind of step. */
static __always_inline void count_steps(const struct unwind_state *st) {
        for (int i = 0; i < _EP_UNWIND_STEP_MAX; i++)
                if (st->steps[i])
                        count_n(EP_BPF_CNT_STEP_BASE + i, st->steps[i]);
}

/* One interpreter frame the native walk did not reach per iteration. */
static __always_inline long unplaced_frame(struct unwind_state *st, __u32 runtime) {
        __u64 slots[EP_RUNTIME_FRAME_SLOTS] = {};
        __u32 n = st->n;
        int r;

        /* Bounds on n itself, as the verifier tracks them (a bound on n + 2 does not carry over
         * to n, and the program is then rejected). */
        if (n >= st->end || n >= EP_BPF_MAX_FRAMES - EP_RUNTIME_FRAME_SLOTS + 1 ||
            n + EP_RUNTIME_FRAME_SLOTS > st->end)
                return 1;
        r = runtimes_next_unplaced(runtime, slots);
        if (r < 0)
                return 1;
        if (r == 1) {
                st->rec->frames[n] = slots[0];
                st->rec->frames[n + 1] = slots[1];
                st->n = n + EP_RUNTIME_FRAME_SLOTS;
        }
        return 0;
}

static __always_inline void walk_start(struct unwind_state *st, struct ep_bpf_sample *rec, __u32 pid, __u32 n,
                                       __u64 pc, __u64 sp, __u64 fp) {
        struct stack_window_tags *tags;
        struct mapping_cache *cache;
        __u32 zero = 0;

        *st = (struct unwind_state) {
                .rec = rec,
                .regs = { .pc = pc, .sp = sp, .fp = fp },
                .pid = pid,
                .n = n,
                .end = n + EP_BPF_MAX_USER_FRAMES,
                .stop = EP_STOP_MAX_DEPTH,
        };
        cache = bpf_map_lookup_elem(&last_mapping, &zero);
        if (cache)
                cache->valid = 0; /* another sample, maybe another process */
        tags = bpf_map_lookup_elem(&stack_window_tags, &zero);
        if (tags)
                __builtin_memset(tags, 0, sizeof(*tags)); /* the pages are another stack's */
}

/* walk_user_stack_NAME(rec, pid, n, pc, sp, fp): fills rec->frames[n ..] from the user
 * registers with runtime RT's hooks (the bpf_loop callbacks of each program are its own) and
 * returns the stop reason. */
#define DEFINE_USER_WALK(NAME, RT)                                                                  \
        static long unwind_frame_##NAME(__u64 index, void *data) {                                  \
                return unwind_frame(data, RT);                                                      \
        }                                                                                           \
        static long unplaced_frame_##NAME(__u64 index, void *data) {                                \
                return unplaced_frame(data, RT);                                                    \
        }                                                                                           \
        static __always_inline __u32 walk_user_stack_##NAME(struct ep_bpf_sample *rec, __u32 pid,   \
                                                            __u32 n, __u64 pc, __u64 sp, __u64 fp) { \
                struct unwind_state st;                                                             \
                                                                                                    \
                if (pc == 0)                                                                        \
                        return EP_STOP_PC_ZERO;                                                     \
                walk_start(&st, rec, pid, n, pc, sp, fp);                                           \
                bpf_loop(EP_BPF_MAX_USER_FRAMES, unwind_frame_##NAME, &st, 0);                      \
                count_steps(&st);                                                                   \
                /* Stopped short of the root: the interpreter frames still to come are sent        \
                 * anyway, for the loader to place (or to show where the native frames end). */    \
                if ((RT) != RUNTIME_NONE && st.stop != EP_STOP_OK && st.stop != EP_STOP_MAX_DEPTH)  \
                        bpf_loop(EP_BPF_MAX_USER_FRAMES, unplaced_frame_##NAME, &st, 0);            \
                rec->n_user = st.n - n;                                                             \
                return st.stop;                                                                     \
        }

/* Sends the sample with the user registers and up to EP_BPF_STACK_COPY_MAX bytes of stack above
 * sp (struct ep_bpf_stack_copy at EP_BPF_STACK_COPY_OFFSET): the rest of sp's page, then whole
 * pages until one cannot be read. The record has a fixed size (a reservation's size is a
 * constant) and is written in place in the ring buffer. Returns false when nothing was sent. */
static __always_inline bool send_with_stack_copy(struct ep_bpf_sample *rec, __u32 n, __u64 pc, __u64 sp, __u64 fp,
                                                 __u64 wakeup) {
        __u64 first, done, len = EP_BPF_SAMPLE_HEADER_SIZE + (__u64) n * sizeof(__u64);
        struct ep_bpf_stack_copy *c;
        __u8 *out, *data;

        if (sp == 0 || (sp & 7))
                return false;
        if (bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= EP_BPF_STACK_COPY_RING_LIMIT)
                return false;
        out = bpf_ringbuf_reserve(&events, EP_BPF_STACK_COPY_RECORD_SIZE, 0);
        if (!out)
                return false;
        barrier_var(len); /* the check must bound the very register passed below */
        if (len > EP_BPF_STACK_COPY_OFFSET || len < EP_BPF_SAMPLE_HEADER_SIZE ||
            bpf_probe_read_kernel(out, len, rec) < 0) {
                bpf_ringbuf_discard(out, BPF_RB_NO_WAKEUP);
                return false;
        }
        ((struct ep_bpf_sample *) out)->flags |= EP_BPF_SAMPLE_STACK_COPY;
        c = (struct ep_bpf_stack_copy *) (out + EP_BPF_STACK_COPY_OFFSET);
        data = out + EP_BPF_STACK_COPY_OFFSET + EP_BPF_STACK_COPY_HEADER_SIZE;
        c->pc = pc;
        c->sp = sp;
        c->fp = fp;
        c->reserved = 0;
        c->len = 0;

        first = 4096 - (sp & 4095); /* 8 .. 4096 */
        if (first > 4096 || bpf_probe_read_user(data, first, (const void *) sp) < 0) {
                bpf_ringbuf_submit(out, wakeup); /* registers only */
                return true;
        }
        done = first;
        /* Offsets are first + 4096 * i with i constant: each piece fits by itself. */
#pragma unroll
        for (int i = 0; i < (int) (EP_BPF_STACK_COPY_MAX / 4096) - 1; i++) {
                if (bpf_probe_read_user(data + first + 4096 * i, 4096, (const void *) (sp + first + 4096 * i)) < 0)
                        break;
                done = first + 4096 * (i + 1);
        }
        c->len = (__u32) done;
        bpf_ringbuf_submit(out, wakeup);
        return true;
}

/* A sample of a process (or mapping, or table) the loader has not synchronised yet: wake the
 * loader now (at most every EP_BPF_UNKNOWN_WAKEUP_NS per CPU) so the next samples unwind with
 * tables. */
static __always_inline __u64 unknown_process_wakeup(__u64 now) {
        __u32 zero = 0;
        __u64 *last = bpf_map_lookup_elem(&last_wakeup, &zero);

        if (!last || now - *last < EP_BPF_UNKNOWN_WAKEUP_NS)
                return wakeup_flags();
        *last = now;
        return BPF_RB_FORCE_WAKEUP;
}

/* The current task's process and thread IDs in the loader's PID namespace. False when the
 * task is not visible there. The idle task (0) is the same in every namespace. */
static __always_inline bool current_ids(__u32 *ret_pid, __u32 *ret_tid) {
        __u64 pid_tgid = bpf_get_current_pid_tgid();
        struct bpf_pidns_info ns;

        if (pidns_ino == 0 || pid_tgid == 0) {
                *ret_pid = pid_tgid >> 32;
                *ret_tid = (__u32) pid_tgid;
                return true;
        }
        if (bpf_get_ns_current_pid_tgid(pidns_dev, pidns_ino, &ns, sizeof(ns)) < 0)
                return false;
        *ret_pid = ns.tgid;
        *ret_tid = ns.pid;
        return true;
}

/* The sample's header and kernel stack, in this CPU's record; NULL when the task is not
 * recorded. */
static __always_inline struct ep_bpf_sample *begin_sample(struct bpf_perf_event_data *ctx) {
        struct ep_bpf_sample *rec;
        __u32 zero = 0, pid, tid;
        long r;

        if (!current_ids(&pid, &tid)) {
                count(EP_BPF_CNT_OTHER_PID_NS);
                return NULL;
        }
        if (pid == 0 && !include_idle) {
                count(EP_BPF_CNT_IDLE_SKIPPED);
                return NULL;
        }
        count(EP_BPF_CNT_SAMPLES);

        rec = bpf_map_lookup_elem(&scratch, &zero);
        if (!rec)
                return NULL;

        rec->type = EP_BPF_REC_SAMPLE;
        rec->pid = pid;
        rec->tid = tid;
        rec->cpu = bpf_get_smp_processor_id();
        rec->time_ns = bpf_ktime_get_boot_ns();
        rec->n_kernel = 0;
        rec->n_user = 0;
        rec->flags = 0;
        rec->maps_owner = 0;
        rec->reserved = 0;
        bpf_get_current_comm(rec->comm, sizeof(rec->comm));

        r = bpf_get_stack(ctx, rec->frames, EP_BPF_MAX_KERNEL_FRAMES * sizeof(__u64), 0);
        if (r < 0)
                count(EP_BPF_CNT_KSTACK_FAILED);
        else
                rec->n_kernel = r / sizeof(__u64);
        return rec;
}

static __always_inline __u32 kernel_frames(const struct ep_bpf_sample *rec) {
        return rec->n_kernel > EP_BPF_MAX_KERNEL_FRAMES ? EP_BPF_MAX_KERNEL_FRAMES : rec->n_kernel;
}

/* The user registers to unwind from; false when the task has none. */
static __always_inline bool user_regs(struct bpf_perf_event_data *ctx, struct ep_unwind_regs *ret) {
        struct task_struct *task = bpf_get_current_task_btf();
        struct pt_regs *regs;

        if ((ctx->regs.cs & 3) == 3) {
                /* The tick interrupted user mode: ctx->regs are the user registers. Each is
                 * read here, from ctx itself: clang would otherwise merge these loads with the
                 * ones below into loads from a computed pointer, which no context may be. */
                __u64 ip = ctx->regs.ip, sp = ctx->regs.sp, bp = ctx->regs.bp;

                barrier_var(ip);
                barrier_var(sp);
                barrier_var(bp);
                ret->pc = ip;
                ret->sp = sp;
                ret->fp = bp;
                return true;
        }
        if ((task->flags & PF_KTHREAD) || !task->mm)
                return false; /* kernel thread (or idle, or a task past exit_mm) */
        /* In the kernel on behalf of a user task: continue from the registers saved when it
         * entered the kernel. */
        regs = (struct pt_regs *) bpf_task_pt_regs(task);
        if (!regs)
                return false;
        ret->pc = regs->ip;
        ret->sp = regs->sp;
        ret->fp = regs->bp;
        return true;
}

/* Sends the record: n kernel frames, its user frames, unwound from u (pc 0: none). */
static __always_inline int send_sample(struct ep_bpf_sample *rec, __u32 n, __u32 stop, const struct ep_unwind_regs *u) {
        __u32 pid = rec->pid;
        struct ep_bpf_proc *proc = bpf_map_lookup_elem(&proc_mappings, &pid);
        __u64 size, wakeup = 0;

        rec->stop_reason = stop;
        rec->maps_owner = proc ? proc->owner : 0;
        rec->reserved = 0;
        if (stop < _EP_STOP_MAX)
                count(EP_BPF_CNT_STOP_BASE + stop);

        if (!proc && stop != EP_STOP_NO_USER_REGS && pid != 0) {
                rec->flags |= EP_BPF_SAMPLE_UNKNOWN_PROCESS;
                count(EP_BPF_CNT_UNKNOWN_PROCESS);
                wakeup = unknown_process_wakeup(rec->time_ns);
        } else if (stop == EP_STOP_NO_MAPPING || stop == EP_STOP_TABLE_MISSING) {
                /* A mapping or a table the loader should have: tell it now. */
                wakeup = unknown_process_wakeup(rec->time_ns);
        }

        /* Unwound without all it needed: the loader unwinds it again from a copy of the stack
         * once it has what was missing. */
        if (u->pc && (stop == EP_STOP_UNKNOWN_PROCESS || stop == EP_STOP_TABLE_MISSING || stop == EP_STOP_NO_MAPPING) &&
            send_with_stack_copy(rec, n + rec->n_user, u->pc, u->sp, u->fp, wakeup ?: wakeup_flags())) {
                count(EP_BPF_CNT_STACK_COPIES);
                return 0;
        }

        size = (__u64) n + rec->n_user;
        barrier_var(size);
        if (size > EP_BPF_MAX_FRAMES)
                size = EP_BPF_MAX_FRAMES;
        size = EP_BPF_SAMPLE_HEADER_SIZE + size * sizeof(__u64);
        if (bpf_ringbuf_output(&events, rec, size, wakeup ?: wakeup_flags()) < 0)
                count(EP_BPF_CNT_RINGBUF_FULL);
        return 0;
}

/* sample_NAME(ctx, rec): the user stack of the sample begun in rec, unwound with runtime RT's
 * hooks, and the record sent. */
#define DEFINE_SAMPLE(NAME, RT)                                                                     \
        DEFINE_USER_WALK(NAME, RT)                                                                  \
        static __always_inline int sample_##NAME(struct bpf_perf_event_data *ctx, struct ep_bpf_sample *rec) { \
                struct ep_unwind_regs u = {};                                                       \
                __u32 n = kernel_frames(rec), stop = EP_STOP_NO_USER_REGS;                          \
                                                                                                    \
                if (user_regs(ctx, &u))                                                             \
                        stop = walk_user_stack_##NAME(rec, rec->pid, n, u.pc, u.sp, u.fp);          \
                return send_sample(rec, n, stop, &u);                                               \
        }

/* on_sample_NAME: the program on_sample hands a sample of runtime RT's processes to. */
#define DEFINE_RUNTIME_PROGRAM(NAME, RT)                                                            \
        DEFINE_SAMPLE(NAME, RT)                                                                     \
        SEC("perf_event")                                                                           \
        int on_sample_##NAME(struct bpf_perf_event_data *ctx) {                                     \
                __u32 zero = 0;                                                                     \
                struct ep_bpf_sample *rec = bpf_map_lookup_elem(&scratch, &zero);                   \
                                                                                                    \
                return rec ? sample_##NAME(ctx, rec) : 0;                                           \
        }

DEFINE_SAMPLE(native, RUNTIME_NONE)
DEFINE_RUNTIME_PROGRAM(cpython, RUNTIME_CPYTHON)

/* The runtimes' programs by RUNTIME_* (filled at load by libbpf). */
struct {
        __uint(type, BPF_MAP_TYPE_PROG_ARRAY);
        __uint(max_entries, _RUNTIME_MAX);
        __type(key, __u32);
        __array(values, int(struct bpf_perf_event_data *));
} runtime_programs SEC(".maps") = {
        .values = {
                [RUNTIME_CPYTHON] = (void *) &on_sample_cpython,
        },
};

SEC("perf_event")
int on_sample(struct bpf_perf_event_data *ctx) {
        struct ep_bpf_sample *rec = begin_sample(ctx);
        __u32 runtime;

        if (!rec)
                return 0;
        runtime = runtimes_sample_start(rec->pid, bpf_get_current_task_btf()->thread.fsbase);
        if (runtime != RUNTIME_NONE) {
                bpf_tail_call(ctx, &runtime_programs, runtime);
                /* Only when its program is not in the array: native frames only. */
                count(EP_BPF_CNT_RUNTIME_NO_PROGRAM);
        }
        return sample_native(ctx, rec);
}

static __always_inline void send_task_event(__u32 type, __u32 pid) {
        struct ep_bpf_task_event ev = {
                .type = type,
                .pid = pid,
                .time_ns = bpf_ktime_get_boot_ns(),
        };
        if (bpf_ringbuf_output(&events, &ev, sizeof(ev), wakeup_flags()) < 0)
                count(EP_BPF_CNT_EVENTS_LOST);
}

SEC("raw_tp/sched_process_exit")
int on_exit(void *ctx) {
        struct task_struct *task = bpf_get_current_task_btf();
        __u32 pid, tid;

        /* Raw tracepoints need no tracefs mount. Every thread passes here; only the last one of
         * the group ends the process. */
        if (task->flags & PF_KTHREAD)
                return 0;
        if (task->signal->live.counter != 0)
                return 0;
        if (!current_ids(&pid, &tid))
                return 0;
        bpf_map_delete_elem(&proc_mappings, &pid);
        runtimes_process_gone(pid);
        send_task_event(EP_BPF_REC_EXIT, pid);
        return 0;
}

SEC("raw_tp/sched_process_exec")
int on_exec(void *ctx) {
        __u32 pid, tid;

        if (!current_ids(&pid, &tid))
                return 0;

        /* The old image's mappings are gone: frame-pointer steps until the loader re-reads the
         * new ones (it is told by the event below, and by the next sample). */
        bpf_map_delete_elem(&proc_mappings, &pid);
        runtimes_process_gone(pid);
        send_task_event(EP_BPF_REC_EXEC, pid);
        return 0;
}

/* A new process (not a thread) starts with its parent's mappings: give it the parent's entry,
 * so its first samples unwind with tables before the loader ever heard of it. Only in the
 * initial PID namespace: the child's ID in another one is not at hand here, and the loader
 * learns of the process from its first sample anyway. */
SEC("tp_btf/sched_process_fork")
int on_fork(__u64 *ctx) {
        struct task_struct *child = (struct task_struct *) ctx[1];
        __u32 parent = bpf_get_current_pid_tgid() >> 32, pid;
        struct ep_bpf_proc *p;

        if (pidns_ino != 0 || child->pid != child->tgid)
                return 0; /* a thread, or IDs we would have to translate */
        p = bpf_map_lookup_elem(&proc_mappings, &parent);
        if (!p)
                return 0;
        pid = child->tgid;
        runtimes_process_forked(parent, pid); /* the same address space */
        if (bpf_map_update_elem(&proc_mappings, &pid, p, BPF_NOEXIST) == 0)
                count(EP_BPF_CNT_FORK_INHERITED);
        return 0;
}
