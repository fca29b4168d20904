# SPDX-License-Identifier: MIT
"""End to end (root): native unwinding without frame pointers, through the whole pipeline (BPF
sampling with the stack-delta unwinder, the loader, the symbolizer's unwind tables, the
collector's store).

Our own workloads (tests/workloads/, -O2 -fomit-frame-pointer): at least 99 % of the samples
must carry the EXACT expected chain, from the spinning function down to the thread's root
frame (tests/replay/expected_frames.py holds the chains).

Debian's own stripped programs (gzip, xz, sha256sum, openssl, sqlite3, clang++): at least
99 % of the samples must reach the thread's root, and the leaf must be in the file that does
the work. What is checkable about their frames, and why:
  - their executables are stripped and export nothing, so their own functions (gzip's
    deflate/longest_match, sha256sum's sha256_process_block, main, _start) have no name
    anywhere on the machine: such frames are "[unknown] gzip"; the test checks the FILE of the
    leaf (gzip, liblzma.so.5, sha256sum, libcrypto.so.3, libsqlite3.so.0, libLLVM/libclang-cpp);
  - the root of a main thread is recognised as __libc_start_main (named by libc's .dynsym)
    followed by exactly one frame, in the executable (_start);
  - libc's internal functions (__libc_start_call_main, start_thread, __clone3, __restore_rt) are
    only in libc's separate debug file (libc6-dbg): the test names such unsymbolized frames
    itself from that file (ep-replay name), and without it accepts "[unknown] libc.so.6";
  - libLLVM and libclang-cpp export most of their C++ functions: at least half of clang's
    leaves must be named (about 65 % are).

Each Debian program runs once briefly before it is measured, so its files' tables are loaded:
extracting a big library (libLLVM, libclang-cpp: ~1.3 s for clang's 113 files) happens while
the first run goes on, and those first samples stop at "table-missing"; that cost of first
sight is measured by bench/completeness.py (cold column), not asserted here.

Second start: with the same cache directory, the symbolizer answers the already-seen files'
unwind tables from its cache: UnwindCacheHits > 0, and UnwindCacheMisses counts only files
never seen before (new rows in the cache) or that cannot be extracted at all; none of the
already-seen files is extracted again.
"""
import collections
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path
from shutil import which

import pytest

from conftest import (ABORT, BUILD, NATIVE, REPO, WORKLOADS, Profiler, launch, need_root, read_lines,
                      run_until_sampled, running_profiler, samples_with_frames)
from waiting import wait_until

sys.path.insert(0, str(REPO / "tests" / "replay"))
from expected_frames import (CHAINS, CXXSORT_TAIL, MAIN_ROOT, SPAWN_CHILD, THREAD_ROOT,  # noqa: E402
                             chain_equal, ends_with, normalize, strip_clock_frames)

REPLAY = BUILD / "tests" / "replay" / "ep-replay"
CLANG_INPUT = REPO / "tests" / "workloads" / "clang-input.cpp"

SAMPLES = 400        # a workload that runs until it is stopped runs until the store holds this
                     # many of its samples (~4 s of one CPU at 99 Hz; longer on a busy machine)
MIN_SAMPLES = 100    # fewer and 99 % would mean nothing
COMPLETE = 0.99      # share of samples that must be complete
BIG_FILE_MB = 200


# ---- reading and naming the stored stacks ------------------------------------------------

class FrameNamer:
    """Names native frames the pipeline left unsymbolized (libc's internal functions are not in
    its .dynsym) from the file's separate debug file, through `ep-replay name`."""

    def __init__(self):
        self.cache = {}

    def name(self, path, addr, return_address):
        return self.names(path, [(addr, return_address)])[0]

    def names(self, path, queries):
        todo = [q for q in queries if (path, q) not in self.cache]
        if todo and path and REPLAY.exists() and os.path.exists(path):
            text = "".join(f"{addr:x} {'R' if ra else 'E'}\n" for addr, ra in todo)
            r = subprocess.run([str(REPLAY), "name", path], input=text, capture_output=True,
                               text=True, timeout=120)
            if r.returncode == 0:
                for q, line in zip(todo, r.stdout.splitlines()):
                    self.cache[(path, q)] = line
        base = os.path.basename(path) if path else None
        return [self.cache.get((path, q), f"[unknown] {base}" if base else "[unmapped]")
                for q in queries]


def native_frames(frames, namer):
    """[(name, path)] of the user-space frames, leaf first; unsymbolized frames are named from
    debug files where possible. The leaf, a signal trampoline and the frame a signal
    interrupted hold exact PCs; the others are return addresses. The pipeline names a
    trampoline at its exact address when anything can (test_signal_frames_are_named_...);
    one it left unnamed is named here as a return address, which reads "[unknown] libc.so.6"
    (accepted in its place)."""
    out = []
    exact = True
    for f in frames:
        if f["kind"] != NATIVE:
            continue
        name = f["function"]
        if name is None:
            name = namer.name(f["path"], f["addr"], not exact) if f["addr"] is not None else "[unmapped]"
        out.append((name, f["path"]))
        exact = normalize(name) == "__restore_rt"
    return out


# EP_STOP_* of common/wire.h, by value: why a stack ends early (the abort frame's address).
STOP_REASONS = {int(v): name.lower().replace("_", "-") for name, v in
                re.findall(r"EP_STOP_(\w+) = (\d+)", (REPO / "common" / "wire.h").read_text())}


def stop_reason(frames):
    """Why a stored stack ended before its root ("ok" when it did not)."""
    aborts = [f["addr"] for f in frames if f["kind"] == ABORT]
    return STOP_REASONS.get(aborts[-1], aborts[-1]) if aborts else "ok"


def basename(path):
    return os.path.basename(path) if path else None


LDSO_ENTRIES = ("_start", "_dl_start_user", "[unknown] ld-linux-x86-64.so.2")


def main_root(frames):
    """The main thread's root: __libc_start_main, then one frame in the executable (_start),
    or, before main runs, the dynamic loader's entry (_start, _dl_start_user in ld.so). The
    executable is not taken from the store (a sample between fork and exec records the
    parent's), it is the one file that calls __libc_start_main."""
    if len(frames) >= 2 and normalize(frames[-2][0]) in ("__libc_start_main", "__libc_start_main_impl"):
        return basename(frames[-1][1]) not in (None, "libc.so.6")
    return (bool(frames) and (basename(frames[-1][1]) or "").startswith("ld-linux")
            and frames[-1][0] in LDSO_ENTRIES)


def thread_root(frames):
    """A pthread's root: start_thread under clone3, in libc."""
    return (len(frames) >= 2 and all(basename(p) == "libc.so.6" for _, p in frames[-2:])
            and chain_equal([n for n, _ in frames[-2:]], THREAD_ROOT))


class Profile:
    """The samples of a set of processes, classified."""

    def __init__(self, con, pids, namer):
        self.samples = []  # (pid, tid, thread_name, [(name, path)], count)
        self.stops = collections.defaultdict(collections.Counter)  # (tid, frames) -> why they stopped
        for pid in pids:
            for tid, tname, frames, count in samples_with_frames(con, pid):
                native = native_frames(frames, namer)
                self.samples.append((pid, tid, tname, native, count))
                self.stops[(tid, tuple(native))][stop_reason(frames)] += count

    @property
    def total(self):
        return sum(s[-1] for s in self.samples)

    def share(self, predicate):
        """(share, count) of samples for which predicate(pid, tid, frames) holds."""
        n = sum(c for pid, tid, _, frames, c in self.samples if predicate(pid, tid, frames))
        return (n / self.total if self.total else 0.0), n

    @staticmethod
    def reaches_root(pid, tid, frames):
        return main_root(frames) if tid == pid else thread_root(frames)

    def worst(self, predicate, n=4):
        """The most frequent stacks for which predicate fails, for messages."""
        bad = sorted(((c, tid, frames) for pid, tid, _, frames, c in self.samples
                      if not predicate(pid, tid, frames)), key=lambda x: -x[0])
        return "\n".join(f"  {c} samples, tid {tid} (stopped: {dict(self.stops[(tid, tuple(frames))])}): "
                         + " <- ".join(f"{nm}" for nm, _ in frames[:40]) for c, tid, frames in bad[:n])

    def median_depth(self):
        depths = sorted(d for _, _, _, frames, c in self.samples for d in [len(frames)] * c)
        return depths[len(depths) // 2] if depths else 0


def names_without_clock(frames):
    names = [n for n, _ in strip_clock_frames([(n, basename(p)) for n, p in frames])]
    # The workloads are built with -g, so the store also has the inlined frame of their common
    # busy loop (workload.h); the chains below are of real calls.
    if names and names[0] == "workload_burst":
        names = names[1:]
    return names


# ---- workloads ---------------------------------------------------------------------------

def in_file(path, files):
    """path is one of files, by name or by a versioned name (libsqlite3.so.0 → libsqlite3.so.0.8.6)."""
    b = basename(path) or ""
    return any(b == f or b.startswith(f + ".") for f in files)


def leaf_in(*files):
    def check(pid, tid, frames):
        return bool(frames) and in_file(frames[0][1], files)
    return check


def chain_of(chains):
    def check(pid, tid, frames):
        names = names_without_clock(frames)
        return any(chain_equal(names, c) for c in chains)
    return check


def before_main(pid, tid, frames):
    names = [name for name, _ in frames]
    return "main" not in names and bool(names) and (names[-2:] == ["_dl_start", "_start"] or
                                                    "__spawni_child" in names)


def cxx_chain(pid, tid, frames):
    return ends_with(names_without_clock(frames), CXXSORT_TAIL)


def named_leaf(pid, tid, frames):
    return bool(frames) and not frames[0][0].startswith("[")


# Our workloads: exact chains for ≥ 99 % of the samples.
OURS = {
    "deepchain": chain_of(CHAINS["deepchain"]),
    "recurse": chain_of(CHAINS["recurse"]),
    "threads": chain_of(CHAINS["threads"]),
    "sighandler": chain_of(CHAINS["sighandler"]),
    "cxxsort": cxx_chain,
}

# Debian programs: (leaf files, share of samples whose leaf must be there, named-leaf share).
# Shares under what `perf record` attributes to those files here (gzip 99.8 %, xz 98.6 %,
# sha256sum 95.7 %, openssl 99.6 %, sqlite3 99.5 %, clang 87.4 %: libLLVM 65 + libclang-cpp 22,
# the rest is malloc/free/memcpy in libc and the kernel). libLLVM and libclang-cpp export
# most of their functions, but not static and anonymous-namespace ones: about 65 % of clang's
# leaves have a name.
DEBIAN = {
    "gzip": (("gzip",), 0.95, 0.0),
    "xz": (("liblzma.so.5",), 0.95, 0.0),
    "sha256sum": (("sha256sum",), 0.90, 0.0),
    "openssl": (("libcrypto.so.3",), 0.95, 0.0),
    "sqlite3": (("libsqlite3.so.0",), 0.95, 0.0),
    "clang++": (("libLLVM-14.so.1", "libclang-cpp.so.14"), 0.80, 0.50),
}


def debian_command(name, data):
    """(argv, stopped): stopped programs run until the store holds SAMPLES of theirs
    (run_until_sampled), the others do a fixed job to its end."""
    big = str(data / "big.txt")
    if name == "gzip":
        return ["gzip", "-9", "-c", big], True
    if name == "xz":
        return ["xz", "-9", "-c", big], True
    if name == "sha256sum":
        return ["sha256sum"] + [big] * 8, False  # ~0.6 s per pass here
    if name == "openssl":
        return ["openssl", "speed", "-seconds", "600", "-bytes", "16384", "sha256"], True
    if name == "sqlite3":
        return ["sqlite3", str(data / "test.db"),
                "SELECT count(*) FROM t t1, t t2 WHERE t1.a <= 1000 "
                "AND (t1.b + t2.b) % 1000 = 7 AND t2.c LIKE '%-1%';"], True
    if name == "clang++":
        return ["clang++", "-O2", "-std=c++17", "-c", str(CLANG_INPUT), "-o",
                str(data / "clang-input.o")], True
    raise KeyError(name)


def make_big_file(path, megabytes):
    """Text with a 5000-word vocabulary: compressible, but not trivially (gzip -9 works hard)."""
    rng = random.Random(1)
    syllables = ["ka", "to", "ri", "mu", "sen", "do", "la", "vi", "quo", "ter", "an", "el", "us",
                 "or", "pre", "ing", "ex", "con"]
    words = ["".join(rng.choices(syllables, k=rng.randint(1, 4))) for _ in range(5000)]
    size = 0
    with open(path, "w") as f:
        while size < megabytes << 20:
            chunk = " ".join(rng.choices(words, k=200000)) + "\n"
            f.write(chunk)
            size += len(chunk)


def make_database(path):
    sql = ("CREATE TABLE t(a INTEGER PRIMARY KEY, b INTEGER, c TEXT);"
           "WITH RECURSIVE s(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM s WHERE x < 200000) "
           "INSERT INTO t SELECT x, (x * 7919) % 10007, printf('row-%d-%x', x, x * 2654435761) FROM s;")
    subprocess.run(["sqlite3", str(path), sql], check=True, timeout=120)


def run_for(argv, stop_after=None, timeout=120, stdout=subprocess.DEVNULL):
    """Runs argv to its end, or SIGKILLs it after stop_after seconds; returns the Popen."""
    p = launch(argv, stdout=stdout, stderr=subprocess.DEVNULL)
    try:
        p.wait(timeout=stop_after if stop_after is not None else timeout)
    except subprocess.TimeoutExpired:
        if stop_after is None:
            p.kill()
            p.wait()
            raise
        p.send_signal(signal.SIGKILL)
        p.wait()
    return p


# ---- fixtures ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cache_dir():
    # Traversable by the unprivileged symbolizer; the CLI creates and hands over "cache".
    tmp = Path(tempfile.mkdtemp(prefix="ep-native-cache-"))
    tmp.chmod(0o755)
    yield tmp / "cache"
    subprocess.run(["rm", "-rf", str(tmp)], check=False)


@pytest.fixture(scope="module")
def profiler(cache_dir):
    yield from running_profiler("--cache-dir", str(cache_dir))


@pytest.fixture(scope="module")
def data():
    need_root()
    tmp = Path(tempfile.mkdtemp(prefix="ep-native-data-"))
    make_big_file(tmp / "big.txt", BIG_FILE_MB)
    if which("sqlite3"):
        make_database(tmp / "test.db")
    yield tmp
    subprocess.run(["rm", "-rf", str(tmp)], check=False)


@pytest.fixture(scope="module")
def namer():
    return FrameNamer()


def warm_up(profiler, argv, seconds=1.5):
    """Runs argv briefly so its files are seen and their tables extracted and loaded: the
    completeness figures are those of a profiler that has met the program before (the cost of
    first sight, extracting libLLVM's table while clang runs, is the benchmark's cold column)."""
    run_for(argv, seconds)
    profiler.wait_for_tables()


def collect(profiler, pids, namer):
    profiler.settle()
    with profiler.db() as con:
        return Profile(con, pids, namer)


def profile_ours(profiler, namer, name):
    """Runs our workload until the store holds SAMPLES of it (its own duration, 600 s, is only
    a backstop) and collects them."""
    w = run_until_sampled(profiler, [str(WORKLOADS / name), "600"], SAMPLES)
    assert w.returncode == -signal.SIGKILL, f"{name} exited {w.returncode} before it was stopped"
    return collect(profiler, [w.pid], namer)


def assert_share(profile, predicate, minimum, what):
    share, n = profile.share(predicate)
    assert share >= minimum, (f"{what}: {n}/{profile.total} samples ({share:.1%}), "
                              f"need {minimum:.0%}; most frequent failures:\n"
                              + profile.worst(predicate))


# ---- tests -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(OURS))
def test_our_workload_has_the_exact_chain_down_to_the_root(profiler, namer, name):
    prof = profile_ours(profiler, namer, name)
    assert prof.total >= MIN_SAMPLES, f"only {prof.total} samples of {name}"
    assert_share(prof, prof.reaches_root, COMPLETE, f"{name}: reaching the thread's root")
    assert_share(prof, OURS[name], COMPLETE, f"{name}: carrying the exact expected chain")


def test_signal_frames_are_named_at_their_exact_address(profiler, namer):
    """On a signal handler's stack, two frames hold exact addresses although the walk reached
    the first through a return address: the signal trampoline (the handler returns to its
    first instruction, glibc's __restore_rt, whose byte before is padding) and the instruction
    the signal interrupted (sighandler's ud2, the first instruction of trap_here, whose byte
    before is before_trap's). The pipeline itself must name both at that address: the unwinder
    records them without the return-address flag (bpf/native-unwind.h). What names the
    trampoline is libc's debug file; the test asks it for the name at the exact address (the
    same file the symbolizer finds), and requires the pipeline's name to be that one."""
    w = run_until_sampled(profiler, [str(WORKLOADS / "sighandler"), "600"], SAMPLES)
    assert w.returncode == -signal.SIGKILL, f"sighandler exited {w.returncode} before it was stopped"
    profiler.settle()
    with profiler.db() as con:
        stacks = samples_with_frames(con, w.pid)
    total = sum(count for *_, count in stacks)
    assert total >= MIN_SAMPLES, f"only {total} samples of sighandler"

    # (trampoline path, its file offset) -> the name at that exact address, from debug symbols.
    exact_names = {}
    good, bad = 0, collections.Counter()
    for _, _, frames, count in stacks:
        native = [f for f in frames if f["kind"] == NATIVE]
        names = [f["function"] for f in native]
        i = names.index("on_signal") if "on_signal" in names else -1
        if i < 0 or i + 3 >= len(native):
            bad[("no handler frames", tuple(names[:8]))] += count
            continue
        tramp, interrupted, caller = native[i + 1], native[i + 2], native[i + 3]
        key = (tramp["path"], tramp["addr"])
        if key not in exact_names:
            exact_names[key] = namer.name(tramp["path"], tramp["addr"], False)
        want = exact_names[key]
        if want.startswith("["):
            pytest.skip(f"nothing names {basename(tramp['path'])}+{tramp['addr']:#x} on this machine "
                        "(libc's debug symbols, libc6-dbg, are not installed)")
        got = (basename(tramp["path"]), normalize(tramp["function"]), interrupted["function"],
               caller["function"])
        if got == ("libc.so.6", normalize(want), "trap_here", "trap_caller"):
            good += count
        else:
            bad[got] += count
    assert good >= COMPLETE * total, (
        f"{good}/{total} samples name the trampoline ({sorted(set(exact_names.values()))} at its exact "
        f"address) and the interrupted frame (trap_here); most frequent otherwise "
        f"(file, trampoline, interrupted, its caller): {bad.most_common(4)}")


def test_a_repeated_stack_is_converted_once(profiler, namer):
    """The loader keeps its conversion of a stack (trace-cache.c): deepchain repeats one chain
    (a few leaf PCs), so most of its samples are copies of an earlier conversion, and the
    copies carry the exact chain like the conversions do."""
    before = profiler.prop("Loader", "TracesConvertedBefore")
    prof = profile_ours(profiler, namer, "deepchain")
    copied = profiler.prop("Loader", "TracesConvertedBefore") - before
    assert copied >= prof.total // 2, f"{copied} traces copied for {prof.total} samples of deepchain"
    assert_share(prof, OURS["deepchain"], COMPLETE, "deepchain: carrying the exact expected chain")


def test_threads_each_thread_has_its_own_chain(profiler, namer):
    prof = profile_ours(profiler, namer, "threads")
    by_chain = {}
    for pid, tid, tname, frames, count in prof.samples:
        names = names_without_clock(frames)
        for i, chain in enumerate(CHAINS["threads"]):
            if chain_equal(names, chain):
                by_chain.setdefault(i, set()).add(tid)
    # Three chains, each seen on exactly one thread, all different threads.
    assert sorted(by_chain) == [0, 1, 2], by_chain
    tids = [next(iter(t)) for t in by_chain.values()]
    assert all(len(t) == 1 for t in by_chain.values()) and len(set(tids)) == 3, by_chain


def test_spawned_children_have_the_exact_chain(profiler, namer):
    """posix_spawn and vfork + exec: short-lived processes (0.5 s each) must be unwound from
    their first samples on."""
    out = Path(tempfile.mkstemp(prefix="ep-spawn-")[1])

    def spawned():
        """{pid: how} of the children the parent has reported so far."""
        found = {}
        for line in out.read_text().splitlines():
            _, pid, how = line.split()
            found[int(pid)] = how
        return found

    try:
        # The parent spawns children until the store holds SAMPLES of theirs, of both kinds
        # (its 600 s are only a backstop); a busy machine takes more children, not fewer samples.
        with open(out, "w") as f:
            w = subprocess.Popen([str(WORKLOADS / "spawn"), "600", "0.5"], stdout=f)
        try:
            def enough():
                if w.poll() is not None:
                    raise AssertionError(f"spawn exited {w.returncode} before it was stopped")
                kids = spawned()
                profiler.flush()
                got = sum(sum(profiler.stack_counts(pid).values()) for pid in kids)
                return (got >= SAMPLES and {"posix_spawn", "vfork"} <= set(kids.values()),
                        f"{len(kids)} children, {got} samples")
            wait_until(enough, f"{SAMPLES} samples of spawned children of both kinds", 300, interval=0.5,
                       diagnosis=lambda: profiler.diagnosis(list(spawned())))
        finally:
            w.kill()
            w.wait()
        children = spawned()
    finally:
        out.unlink()
    assert {"posix_spawn", "vfork"} <= set(children.values()), children
    prof = collect(profiler, list(children), namer)
    assert prof.total >= MIN_SAMPLES, f"only {prof.total} samples of the spawned children"
    assert_share(prof, prof.reaches_root, COMPLETE, "spawned children: reaching the root")
    # A child is also sampled before its main: in ld.so's start-up, or in the parent's image
    # between clone and exec. Those stacks are complete (checked above), not the chain.
    in_chain = chain_of([SPAWN_CHILD])
    assert_share(prof, lambda *s: in_chain(*s) or before_main(*s), COMPLETE, "spawned children: exact chain")
    for how in ("posix_spawn", "vfork"):
        sub = collect(profiler, [p for p, h in children.items() if h == how], namer)
        assert sub.total > 0, f"no samples of the {how} children"


PRE_EXEC_CHAIN = ["child_spin", "pre_exec_spin", "pre_exec_outer", "fork_then_exec"] + MAIN_ROOT


def test_a_child_sampled_before_its_exec_is_in_its_parents_image(profiler, namer):
    """A forked child runs its parent's image until it execs, and BPF walks it with the parent's
    mappings (it gives the child the parent's entry at fork); the loader may read the child's
    own mappings only after the exec (on a loaded machine). Made certain here by stopping the
    loader from before the fork until the exec is done: the samples wait in the BPF ring, and
    the child's mappings the loader then reads are the new program's. The samples taken before
    the exec are still placed in the parent's image: the exact chain, to the root."""
    loader = profiler.daemon_pid("ebpf-profiler-loader")
    placed = profiler.prop("Loader", "ParentImageSamples")
    parent = subprocess.Popen([str(WORKLOADS / "spawn"), "--fork-exec", "1.5", str(WORKLOADS / "fpchain"), "2"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    child = None
    try:
        # The parent is known to the loader and its entry is in BPF: what the fork copies.
        wait_until(lambda: (sum(profiler.stack_counts(parent.pid).values()) > 0, None),
                   "samples of the parent", 120)
        profiler.wait_for_tables([parent.pid])
        os.kill(loader, signal.SIGSTOP)
        try:
            parent.stdin.write(b"go\n")
            parent.stdin.flush()
            forked, exec_line = read_lines(parent, 2)
            child = int(forked.split()[1])
            assert exec_line == "exec", (forked, exec_line)

            def exec_done():
                try:
                    return os.readlink(f"/proc/{child}/exe").endswith("/fpchain"), None
                except OSError as e:
                    return False, str(e)
            wait_until(exec_done, f"child {child} to exec fpchain", 60, interval=0.05)
        finally:
            os.kill(loader, signal.SIGCONT)
        parent.wait(timeout=120)
        assert parent.returncode == 0, f"spawn --fork-exec exited {parent.returncode}"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
    prof = collect(profiler, [child], namer)
    exact = chain_of([PRE_EXEC_CHAIN])
    pre_exec = [(c, frames) for pid, tid, _, frames, c in prof.samples
                if any(name == "pre_exec_spin" for name, _ in frames)]
    n = sum(c for c, _ in pre_exec)
    bad = [(c, frames) for c, frames in pre_exec if not (exact(child, child, frames) and main_root(frames))]
    assert n >= 20, f"{n} samples of the child in its parent's image: {prof.worst(lambda *a: False)}"
    assert n - sum(c for c, _ in bad) >= COMPLETE * n, f"before its exec, not the exact chain: {bad[:4]}"
    assert profiler.prop("Loader", "ParentImageSamples") - placed >= n


@pytest.mark.parametrize("name", sorted(DEBIAN))
def test_debian_program_reaches_the_root_with_the_expected_leaf(profiler, namer, data, name):
    argv, stopped = debian_command(name, data)
    if not which(argv[0]):
        pytest.skip(f"{argv[0]} is not installed")
    warm_up(profiler, argv)
    p = run_until_sampled(profiler, argv, SAMPLES) if stopped else run_for(argv)
    if not stopped:
        assert p.returncode == 0, f"{argv} exited {p.returncode}"
    prof = collect(profiler, [p.pid], namer)
    assert prof.total >= MIN_SAMPLES, f"only {prof.total} samples of {name}"
    assert_share(prof, prof.reaches_root, COMPLETE, f"{name}: reaching the thread's root")
    files, leaf_share, named_share = DEBIAN[name]
    assert_share(prof, leaf_in(*files), leaf_share, f"{name}: leaf in {files}")
    if named_share:
        assert_share(prof, named_leaf, named_share, f"{name}: leaf named")


def cached_file_ids(cache_dir):
    """File IDs of the tables in the symbolizer's cache (symbolizer/unwind-cache.h)."""
    db = Path(cache_dir) / "unwind-tables.db"
    if not db.exists():
        return set()
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        return {bytes(row[0]) for row in con.execute("SELECT file_id FROM unwind_tables")}
    finally:
        con.close()


def process_file_ids(profiler, pid):
    """File IDs of the files on disk in the stored stacks of pid (not the vDSO)."""
    with profiler.db() as con:
        paths = {f["path"] for _, _, frames, _ in samples_with_frames(con, pid) for f in frames
                 if f["path"] and f["path"].startswith("/")}
        return {bytes(fid) for fid, path in con.execute("SELECT file_id, path FROM files")
                if path in paths}


@pytest.fixture
def own_cache_dir():
    """A cache directory of the test's own (the module's profiler keeps the module's)."""
    need_root()
    tmp = Path(tempfile.mkdtemp(prefix="ep-native-cache-"))
    tmp.chmod(0o755)  # traversable by the unprivileged symbolizer
    yield tmp / "cache"
    subprocess.run(["rm", "-rf", str(tmp)], check=False)


def test_second_start_takes_tables_from_the_cache(namer, own_cache_dir):
    """Restart with the same cache directory: the files seen before are answered from the
    cache and none of them is extracted again (counters and the cache's rows, not time).
    The profiler is system-wide: files it never saw before (another program starting
    meanwhile) are extracted on the second start too; those are told apart by the rows they
    add to the cache."""
    # First start (a profiler of this test's own, with an empty cache of its own, so that the
    # module's profiler goes on for the other tests): deepchain's files are seen and their
    # tables extracted; everything asked for is answered before it stops.
    cache_dir = own_cache_dir
    first = Profiler(["--cache-dir", str(cache_dir)])
    try:
        prof = profile_ours(first, namer, "deepchain")
        assert prof.total > 0
        first.wait_for_tables()
        assert first.prop("Symbolizer", "UnwindCacheMisses") > 0, "the first start extracted nothing"
    finally:
        first.stop()
    seen = cached_file_ids(cache_dir)
    assert seen, "the first start left no table in the cache"

    second = Profiler(["--cache-dir", str(cache_dir)])
    try:
        w = run_until_sampled(second, [str(WORKLOADS / "deepchain"), "600"], MIN_SAMPLES)
        second.wait_for_tables()
        hits = second.prop("Symbolizer", "UnwindCacheHits")
        misses = second.prop("Symbolizer", "UnwindCacheMisses")
        errors = second.prop("Symbolizer", "UnwindExtractErrors")
        new_rows = cached_file_ids(cache_dir) - seen
        files = process_file_ids(second, w.pid)

        assert files and files <= seen, "deepchain's files were not cached by the first start"
        assert hits > 0, f"no cache hits on the second start (misses {misses}, errors {errors})"
        # Every miss is a file never seen before (a new row) or one that cannot be extracted
        # at all (never cached); a miss beyond those is an already-seen file extracted again.
        again = misses - len(new_rows) - errors
        assert again <= 0, (f"{again} already-seen files extracted again on the second start "
                            f"(misses {misses}, new files {len(new_rows)}, errors {errors}, hits {hits})")
        # The tables taken from the cache unwind as the extracted ones did. Judged on a process
        # started once they are in place: the first one's samples from before (the cache is
        # asked once the process is seen) have only what frame pointers give.
        prof = profile_ours(second, namer, "deepchain")
        share, _ = prof.share(OURS["deepchain"])
        assert share >= COMPLETE, f"second start: only {share:.1%} complete:\n" + prof.worst(OURS["deepchain"])
    finally:
        second.stop()
