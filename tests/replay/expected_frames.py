# SPDX-License-Identifier: MIT
"""The expected frames of the native-unwinding workloads (tests/workloads/), shared by the
replay tests (tests/replay/replay_test.py) and the end-to-end tests
(tests/integration/test_native_unwind.py). Chains are leaf first and complete: from the
spinning function down to the thread's root frame.

An entry is a name, or a tuple of accepted names. libc's internal functions
(__libc_start_call_main, start_thread, __clone3, __restore_rt) are not in libc's .dynsym:
they are named only through libc's separate debug file (package libc6-dbg), and are
"[unknown] libc.so.6" without it; both are accepted."""

UNKNOWN_LIBC = "[unknown] libc.so.6"


def libc(*names):
    """A libc-internal function: named only when libc's debug symbols are installed (by any
    of its aliases)."""
    return (*names, UNKNOWN_LIBC)


# The main thread's root: main's callers in libc, then _start in the executable.
MAIN_ROOT = ["main", libc("__libc_start_call_main"),
             ("__libc_start_main_impl", "__libc_start_main"), "_start"]
# A pthread's root: libc's thread entry, under the clone3 system call wrapper.
THREAD_ROOT = [libc("start_thread"), libc("__clone3", "clone3")]

DEEPCHAIN = [f"f{i:02d}" for i in range(25, 0, -1)] + MAIN_ROOT
RECURSE = ["recurse_spin"] + ["recurse"] * 1000 + MAIN_ROOT
THREADS_MAIN = ["main_spin"] + MAIN_ROOT
THREADS_A = ["a_spin", "a_middle", "worker_a"] + THREAD_ROOT
THREADS_B = ["b_spin", "b_inner", "b_outer", "worker_b"] + THREAD_ROOT
SIGHANDLER = ["handler_spin", "on_signal", libc("__restore_rt"), "trap_here", "trap_caller"] + MAIN_ROOT
SPAWN_CHILD = ["child_spin", "child_inner", "child_outer"] + MAIN_ROOT
# cxxsort's leaf is anywhere in filling, sorting (std::sort's internals, the comparator) or
# throwing; every stack ends with these frames (mangled names: the store keeps them so).
# Mangled where raw symbols are read (the replay tests), demangled in the store.
CXXSORT_TAIL = [("_ZN4work8PipelineINS_6RecordEE3runEd", "work::Pipeline<work::Record>::run(double)")] + MAIN_ROOT

# syscalls (the frame-pointer workload reading /dev/zero): mostly inside libc's read wrapper,
# in the kernel. Whatever is above read_zeroes is libc's or the vDSO's.
SYSCALLS_TAIL = ["read_zeroes"] + MAIN_ROOT

# Per workload: the chains its threads run (every thread runs one of them).
CHAINS = {
    "deepchain": [DEEPCHAIN],
    "recurse": [RECURSE],
    "threads": [THREADS_MAIN, THREADS_A, THREADS_B],
    "sighandler": [SIGHANDLER],
}


def normalize(name):
    """Which alias of a function names it is not the point: drops a symbol version
    ("__libc_start_main@@GLIBC_2.34") and glibc's internal-alias prefix ("__GI___clone3")."""
    if name is None:
        return None
    name = name.split("@", 1)[0]
    if name.startswith("__GI_"):
        name = name[len("__GI_"):]
    return name


def matches(name, want):
    name = normalize(name)
    return name in want if isinstance(want, tuple) else name == want


def chain_equal(names, chain):
    return len(names) == len(chain) and all(matches(n, w) for n, w in zip(names, chain))


def ends_with(names, tail):
    return len(names) >= len(tail) and chain_equal(names[-len(tail):], tail)


def is_clock_frame(name, module):
    """A frame of the vDSO's clock_gettime or libc's wrapper of it: the spinning loops look
    at the clock every millisecond, so a stack may start with these."""
    return (module is not None and "vdso" in module) or (name is not None and "clock_gettime" in name)


SIGNAL_TRAMPOLINE = libc("__restore_rt")


def strip_clock_frames(frames):
    """frames: [(name, module)], leaf first. Drops the clock frames at the leaf of each context:
    the stack's own, and the interrupted one right below a signal trampoline (a handler that
    ran while the loop looked at the clock)."""
    out, at_leaf = [], True
    for name, module in frames:
        if at_leaf and is_clock_frame(name, module):
            continue
        out.append((name, module))
        at_leaf = matches(name, SIGNAL_TRAMPOLINE)
    return out


def describe_mismatch(names, chain, limit=60):
    lines = []
    for i in range(max(len(names), len(chain))):
        got = names[i] if i < len(names) else "-"
        want = chain[i] if i < len(chain) else "-"
        ok = i < len(names) and i < len(chain) and matches(got, want)
        lines.append(f"  {' ' if ok else '!'} #{i}: got {got!r} want {want!r}")
    return "\n".join(lines[:limit])
