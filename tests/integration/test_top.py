# SPDX-License-Identifier: MIT
"""End to end (root): `ebpf-profiler top` over a real store. Two known workloads run at once,
fpchain (A: main → alpha → beta → gamma_spin) and threads (B: main_spin, and the threads
"worker-a" → a_spin and "worker-b" → b_spin), each in a cgroup whose name carries a docker-like
64-hex ID, so the loader gives them container IDs. Then every filter of the views must select
exactly its samples (checked against SQL on the store), `--by process/thread` must count what
the store holds, and `--live` must print one snapshot per refresh when piped."""
import re
import secrets
import subprocess
import time
from pathlib import Path

import pytest

from conftest import WORKLOADS, cli, read_lines, run_workload
from waiting import wait_until

SECONDS = 5
A_FUNCS = {"gamma_spin", "beta", "alpha"}
# threads' spinners all spin in workload_burst (tests/workloads/workload.h), inlined: its
# DWARF inline chain makes it the leaf of every stack of B.
B_HOT = "workload_burst"
B_FUNCS = {"main_spin", "a_spin", "a_middle", "worker_a", "b_spin", "b_inner", "b_outer", "worker_b"}
ROW = re.compile(r"^\s*\d+\.\d%\s+\d+\.\d%\s+\d+\s+\d+\s")


def cgroup2_root():
    with open("/proc/self/mounts") as f:
        for line in f:
            fields = line.split()
            if fields[2] == "cgroup2":
                return Path(fields[1])
    return None


class FakeContainer:
    """A cgroup v2 leaf named like docker's (docker-<64 hex>.scope): the loader takes the 64-hex
    run of /proc/PID/cgroup as the container ID. A workload moves itself in before it execs."""

    def __init__(self, root, cid):
        self.id = cid
        self.path = root / f"docker-{cid}.scope"
        self.path.mkdir()

    def run(self, name, seconds):
        return subprocess.Popen(["sh", "-c", f'echo $$ > {self.path}/cgroup.procs && exec "$0" "$@"',
                                 str(WORKLOADS / name), str(seconds)])

    def remove(self):
        def removed():  # the cgroup empties once its processes are reaped
            try:
                self.path.rmdir()
                return True, None
            except OSError as e:
                return False, str(e)
        wait_until(removed, f"the fake container cgroup {self.path} removed", 5, interval=0.1)


def make_containers():
    """Two fake containers whose IDs share their first 4 characters (and no more), or [] when no
    writable cgroup v2 hierarchy is mounted."""
    root = cgroup2_root()
    if root is None:
        return []
    shared = secrets.token_hex(2)
    a = shared + secrets.token_hex(30)
    b = a
    while b[4] == a[4]:
        b = shared + secrets.token_hex(30)
    made = []
    try:
        for cid in (a, b):
            made.append(FakeContainer(root, cid))
    except OSError:
        for c in made:
            c.remove()
        return []
    return made


@pytest.fixture(scope="module")
def run(profiler):
    """Runs A and B together (in fake containers when possible); returns what the tests need."""
    containers = make_containers()
    t_start = time.time()
    if containers:
        a, b = containers[0].run("fpchain", SECONDS), containers[1].run("threads", SECONDS)
    else:
        a, b = run_workload("fpchain", SECONDS), run_workload("threads", SECONDS)
    for w in (a, b):
        w.wait(timeout=SECONDS + 30)
        assert w.returncode == 0
    t_end = time.time()
    # The last samples of the workloads may still be on their way (waiting for an unwind
    # table, for symbols): every view below must see all of them, with their names.
    profiler.settle()
    yield {"a": a.pid, "b": b.pid, "t_start": t_start, "t_end": t_end, "containers": containers}
    for c in containers:
        c.remove()


def top(profiler, *args, check=True):
    return cli("top", "--store", profiler.store, *args, check=check)


def rows(out):
    """The function rows of top's table, in order."""
    return [l for l in out.splitlines() if ROW.match(l)]


def function_of(row):
    return row.split("  ")[-1].strip()


def functions(out):
    return [function_of(r) for r in rows(out)]


def totals(out):
    """{function: TOTAL samples}"""
    return {function_of(r): int(r.split()[3]) for r in rows(out)}


def header_samples(out):
    m = re.match(r"(\d+) samples, ", out)
    assert m, out
    return int(m.group(1))


def store_sum(profiler, where, *params):
    with profiler.db() as con:
        return con.execute("SELECT TOTAL(s.count) FROM samples s JOIN processes p ON p.id = s.process "
                           f"WHERE {where}", params).fetchone()[0]


def test_pid_ranks_its_hot_function_first_and_shows_no_other_process(profiler, run):
    out = top(profiler, "--pid", run["a"], "--limit", "0").stdout
    fns = functions(out)
    assert fns and fns[0] == "gamma_spin", out
    assert A_FUNCS <= set(fns), out
    assert not B_FUNCS & set(fns), out
    assert header_samples(out) == store_sum(profiler, "p.pid = ?", run["a"]) > 20

    out = top(profiler, "--pid", run["b"], "--limit", "0").stdout
    fns = functions(out)
    assert fns[0] == B_HOT, out
    assert {"main_spin", "a_spin", "b_spin"} <= set(fns), out
    assert not A_FUNCS & set(fns), out

    # Several --pid: either process.
    out = top(profiler, "--pid", run["a"], "--pid", run["b"], "--limit", "0").stdout
    assert (A_FUNCS | B_FUNCS) <= set(functions(out)), out
    assert header_samples(out) == store_sum(profiler, "p.pid IN (?, ?)", run["a"], run["b"])


def test_comm_selects_by_command_name(profiler, run):
    out = top(profiler, "--comm", "fpchain", "--limit", "0").stdout
    assert A_FUNCS <= set(functions(out)) and not B_FUNCS & set(functions(out)), out
    out = top(profiler, "--comm", "threads", "--comm", "fpchain", "--limit", "0").stdout
    assert (A_FUNCS | B_FUNCS) <= set(functions(out)), out
    # AND across options: fpchain's pid with threads' comm is nothing.
    out = top(profiler, "--comm", "threads", "--pid", run["a"]).stdout
    assert "No samples" in out, out
    assert not rows(out)


def test_thread_by_name_and_by_tid(profiler, run):
    out = top(profiler, "--thread", "worker-a", "--limit", "0").stdout
    fns = functions(out)
    assert fns[0] == B_HOT, out
    assert totals(out)["a_spin"] >= 0.9 * header_samples(out), out
    assert not {"b_spin", "main_spin", "gamma_spin"} & set(fns), out
    assert header_samples(out) == store_sum(profiler, "s.thread_name = 'worker-a'")

    with profiler.db() as con:
        tid = con.execute("SELECT s.tid FROM samples s JOIN processes p ON p.id = s.process "
                          "WHERE p.pid = ? AND s.thread_name = 'worker-b' LIMIT 1", (run["b"],)).fetchone()[0]
    out = top(profiler, "--thread", tid, "--limit", "0").stdout
    fns = functions(out)
    assert fns[0] == B_HOT, out
    assert totals(out)["b_spin"] >= 0.9 * header_samples(out), out
    assert not {"a_spin", "main_spin", "gamma_spin"} & set(fns), out
    assert header_samples(out) == store_sum(profiler, "s.tid = ?", tid)


def window_samples(profiler, pid, since_ns, until_ns, of_a=None):
    """The store's samples of pid in the intervals that overlap [since, until) (as top selects
    them); of_a: only those of the process that started in [of_a[0], of_a[1]] (True) or of any
    other process given the same pid (False)."""
    where = "p.pid = ? AND s.interval IN (SELECT id FROM intervals WHERE end_ns > ? AND start_ns < ?)"
    params = [pid, since_ns, until_ns]
    if of_a is not None:
        lo, hi, mine = of_a
        where += f" AND {'' if mine else 'NOT '}(p.start_time_ns BETWEEN ? AND ?)"
        params += [int(lo * 1e9), int(hi * 1e9)]
    return int(store_sum(profiler, where, *params))


def test_since_until_select_the_time_window(profiler, run):
    a, t0, t1 = run["a"], run["t_start"], run["t_end"]
    # Intervals are 2 s: one that overlaps a window ending 3 s before A started holds none of A,
    # nor one starting 3 s after it ended. Pids are reused (pid_max is often 32768): another
    # process may have had A's pid in those windows, and top --pid shows it, as the store has it.
    for args, since, until in ((("--until", f"{t0 - 3:.3f}"), 0, int((t0 - 3) * 1e9)),
                               (("--since", f"{t1 + 3:.3f}"), int((t1 + 3) * 1e9), 2**63 - 1)):
        out = top(profiler, "--pid", a, *args).stdout
        assert window_samples(profiler, a, since, until, (t0 - 1, t1, True)) == 0, out
        others = window_samples(profiler, a, since, until, (t0 - 1, t1, False))
        if others == 0:
            assert "No samples" in out and not rows(out), out
        else:
            assert header_samples(out) == others, out
    out = top(profiler, "--pid", a, "--since", f"{t0 - 3:.3f}", "--until", f"{t1 + 3:.3f}").stdout
    assert functions(out)[0] == "gamma_spin", out
    assert header_samples(out) == store_sum(profiler, "p.pid = ?", a)


def test_sort_total(profiler, run):
    def keys(out, order):  # (TOTAL, SELF) or (SELF, TOTAL) per row
        return [(int(r.split()[3]), int(r.split()[2]))[::order] for r in rows(out)]

    by_total = top(profiler, "--pid", run["b"], "--sort", "total", "--limit", "0").stdout
    by_self = top(profiler, "--pid", run["b"], "--limit", "0").stdout
    assert keys(by_total, 1) == sorted(keys(by_total, 1), reverse=True), by_total
    assert keys(by_self, -1) == sorted(keys(by_self, -1), reverse=True), by_self
    assert sorted(functions(by_total)) == sorted(functions(by_self))
    # The threads' roots are on many stacks and leaves of none: never lower by total than by self.
    for fn in ("worker_a", "worker_b", "main_spin"):
        assert functions(by_total).index(fn) <= functions(by_self).index(fn), (by_total, by_self)


def parse_groups(out, columns):
    """{key: samples} from a --by process/thread table; key is the tuple of the int columns. A
    key on several rows sums them: a workload's `sh` sampled before it moved into its cgroup and
    exec'd is a row of its own (another comm and container), seen on a loaded machine."""
    result = {}
    for line in out.splitlines():
        m = re.match(r"^\s*\d+\.\d%\s+(\d+)\s+" + r"\s+".join([r"(\d+)"] * columns) + r"\s", line)
        if m:
            key = tuple(int(x) for x in m.groups()[1:])
            result[key] = result.get(key, 0) + int(m.group(1))
    return result


def test_by_process_counts_what_the_store_holds(profiler, run):
    out = top(profiler, "--by", "process", "--limit", "0").stdout
    assert re.search(r"SHARE%\s+SAMPLES\s+PID\s+COMM\s+CONTAINER", out), out
    got = parse_groups(out, 1)
    for pid in (run["a"], run["b"]):
        assert got.get((pid,)) == store_sum(profiler, "p.pid = ?", pid), (pid, out)
    line = next(l for l in out.splitlines() if re.search(rf"\s{run['a']}\s+fpchain\s", l))
    if run["containers"]:
        assert line.rstrip().endswith(run["containers"][0].id[:12]), line

    out = top(profiler, "--by", "thread", "--pid", run["b"], "--limit", "0").stdout
    got = parse_groups(out, 2)
    assert len(got) == 3, out  # main, worker-a, worker-b
    with profiler.db() as con:
        want = dict(((run["b"], tid), n) for tid, n in con.execute(
            "SELECT s.tid, SUM(s.count) FROM samples s JOIN processes p ON p.id = s.process "
            "WHERE p.pid = ? GROUP BY s.tid", (run["b"],)))
    assert got == want, out
    for name in ("worker-a", "worker-b", "threads"):
        assert re.search(rf"\s{name}$", out, re.M), out


def test_container_full_id_prefix_and_ambiguous_prefix(profiler, run):
    if not run["containers"]:
        pytest.skip("no writable cgroup v2 hierarchy: the container filter is covered by the unit test")
    ca, cb = run["containers"]
    with profiler.db() as con:
        # The workloads once they exec'd (their `sh` may be sampled before it moved itself in).
        ids = {cid for (cid,) in con.execute("SELECT container_id FROM processes WHERE pid IN (?, ?) "
                                             "AND comm IN ('fpchain', 'threads')", (run["a"], run["b"]))}
    assert ids == {ca.id, cb.id}, f"the loader did not report the cgroups' container IDs: {ids}"

    for sel in (ca.id, ca.id[:5], ca.id[:12]):
        out = top(profiler, "--container", sel, "--limit", "0").stdout
        assert functions(out)[0] == "gamma_spin", out
        assert not B_FUNCS & set(functions(out)), out
        assert header_samples(out) == store_sum(profiler, "p.container_id = ?", ca.id)
    out = top(profiler, "--container", cb.id[:5], "--by", "process").stdout
    assert set(parse_groups(out, 1)) == {(run["b"],)}, out

    p = top(profiler, "--container", ca.id[:4], check=False)
    assert p.returncode == 1, p
    assert "ambiguous" in p.stderr and ca.id in p.stderr and cb.id in p.stderr, p.stderr
    assert not p.stdout

    p = top(profiler, "--container", "abc", check=False)
    assert p.returncode == 2 and "at least 4" in p.stderr, p.stderr


def test_live_prints_one_snapshot_per_refresh_when_piped(profiler):
    w = run_workload("fpchain", 6)
    try:
        # Some of it is in the store, named: both snapshots of the 30 s window show it.
        profiler.wait_samples(w.pid, 1)
        profiler.settle([w.pid])
        start = time.monotonic()
        out = top(profiler, "--live", "--iterations", "2", "--refresh", "1", "--window", "30s",
                  "--pid", w.pid).stdout
        elapsed = time.monotonic() - start
    finally:
        w.wait(timeout=30)
    snapshots = out.split("\n\nLast ")
    assert len(snapshots) == 2, out
    assert out.startswith("Last 30s (") and out.count("Last 30s (") == 2, out
    assert "\033[" not in out, "no terminal control codes into a pipe"
    assert "q quits" not in out
    assert elapsed >= 1.0, elapsed  # it waited for the refresh between the two
    for s in snapshots:
        assert re.search(r"\): \d+ samples, \d+\.\d/s, 1 process; refresh 1s", s), s
        assert "gamma_spin" in s, s

    p = top(profiler, "--live", "--since", "10m", check=False)
    assert p.returncode == 2 and "--live" in p.stderr
    p = top(profiler, "--iterations", "2", check=False)
    assert p.returncode == 2 and "needs --live" in p.stderr


# A program that names itself (its comm, so its process and its main thread) with a window
# title escape and a screen clear.
ESCAPE_NAMED = r"""
import ctypes
assert ctypes.CDLL(None).prctl(15, b"\x1b]0;pwned\x07\x1b[2J", 0, 0, 0) == 0  # PR_SET_NAME
print("named", flush=True)
while True:
    pass
"""


def test_names_a_program_controls_reach_the_terminal_without_escapes(profiler):
    """What a program calls itself is its own choice: top prints it, but with '?' where an
    escape sequence would have set the window title and cleared the screen of whoever runs it."""
    p = subprocess.Popen(["/usr/bin/python3", "-c", ESCAPE_NAMED], stdout=subprocess.PIPE)
    named = rf"\s{p.pid}\s.*\?\]0;pwned\?\?\[2J"
    try:
        read_lines(p, 1)

        # Sampled before it named itself (a loaded machine starts it slowly), it is announced
        # as python3; the samples of its main thread carry the new name, which it then takes.
        def shown():
            profiler.flush()
            r = top(profiler, "--by", "process", "--pid", p.pid, check=False)  # 1: no sample yet
            return r.returncode == 0 and bool(re.search(named, r.stdout)), r.stdout + r.stderr
        wait_until(shown, f"top to show the name pid {p.pid} gave itself", 120)
    finally:
        p.kill()
        p.wait()
    for by in ("process", "thread"):
        out = top(profiler, "--by", by, "--pid", p.pid).stdout
        assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", out), repr(out)
        assert re.search(named, out), out
