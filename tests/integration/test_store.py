# SPDX-License-Identifier: MIT
"""End to end: the local store as a product. Retention by size under real ingestion, crash
safety (kill -9 of the collector while it writes), and the store's status (ebpf-profiler
status, the Collector1 properties) against the file itself."""
import json
import os
import signal
import subprocess
import time

from conftest import cli, run_workload, running_profiler, stacks_for_pid

# The smallest limit the collector takes; a few busy workloads at 999 Hz fill it several times
# in 15 s.
SIZE_LIMIT = 256 << 10
# The collector copies the WAL into the file only when the file then fits the limit, or when the
# WAL outgrew its own bound (1 MiB for a store this small) before retention made room: on a
# loaded machine at 999 Hz that happens, and the file then runs over by what that checkpoint
# brought (315 KB for this limit was seen in CI). What is guaranteed is that retention brings
# it back under the limit (checked at the end) and that it never grows without bound.
FILE_TOLERANCE = SIZE_LIMIT
# The WAL holds an interval and the retention that makes room for it until that checkpoint.
WAL_TOLERANCE = 2 << 20
BUSY = (("threads", ()), ("spawn", ("0.2",)), ("deepchain", ()), ("cxxsort", ()))


def start_busy(seconds):
    return [run_workload(name, seconds, *args) for name, args in BUSY]


def file_size(path):
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


def sqlite(path, sql):
    p = subprocess.run(["sqlite3", "-readonly", str(path), sql], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


def wait_restarted(profiler, old, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        new = profiler.daemon_pid("ebpf-profiler-collector")
        if new and new != old:
            try:
                if profiler.prop("Collector", "LoaderAttached") == "true":
                    return new
            except AssertionError:
                pass
        time.sleep(0.3)
    raise AssertionError(f"collector was not restarted:\n{profiler.output()}")


def test_retention_size_keeps_the_store_small_under_load():
    # 999 Hz: more data than 99 Hz gives on a small machine in 15 s; 1 s intervals, so that the
    # newest interval alone (always kept) is well under the limit
    gen = running_profiler("--retention-size", "256K", "--frequency", "999", "--interval", "1s")
    profiler = next(gen)
    try:
        wal = profiler.store.with_name(profiler.store.name + "-wal")
        workloads = start_busy(15)
        last = workloads[-1].pid
        started = time.time()
        max_file = max_wal = 0
        last_seen_late = False
        while any(w.poll() is None for w in workloads):
            max_file = max(max_file, file_size(profiler.store))
            max_wal = max(max_wal, file_size(wal))
            # Late in the run, while old intervals are being deleted, the newest samples of a
            # running workload are in the store.
            if not last_seen_late and time.time() - started > 10:
                with profiler.db() as con:
                    last_seen_late = sum(c for _, c in stacks_for_pid(con, last)) > 0
            time.sleep(0.2)
        profiler.flush()
        time.sleep(1)
        deleted = profiler.prop("Collector", "RetentionDeletedIntervals")
        written = profiler.prop("Collector", "SamplesWritten")
        stored = profiler.prop("Collector", "StoreSamples")
        print(f"file at most {max_file} bytes, WAL at most {max_wal} bytes, {deleted} intervals "
              f"deleted, {stored} of {written} samples kept")
        assert profiler.prop("Collector", "RetentionSize") == SIZE_LIMIT
        # Real ingestion exceeded the limit several times over.
        assert deleted >= 3, profiler.output()
        assert written > 2 * stored, (written, stored)
        assert max_file <= SIZE_LIMIT + FILE_TOLERANCE, max_file
        assert max_wal <= WAL_TOLERANCE, max_wal
        assert file_size(profiler.store) <= SIZE_LIMIT
        # The newest samples are kept: the last workload's late in its run, and the last
        # interval is recent.
        assert last_seen_late, f"no samples of pid {last} in the store late in its run"
        with profiler.db() as con:
            newest = con.execute("SELECT max(end_ns) FROM intervals").fetchone()[0]
            assert newest > (time.time() - 10) * 1e9
            # what retention left behind is consistent
            assert con.execute("SELECT count(*) FROM samples s JOIN intervals i ON i.id = s.interval "
                               "WHERE NOT EXISTS (SELECT 1 FROM stacks WHERE id = s.stack)").fetchone()[0] == 0
        assert sqlite(profiler.store, "PRAGMA integrity_check") == "ok"
    finally:
        gen.close()


def test_kill_9_while_writing_loses_at_most_one_interval(profiler):
    # A workload that keeps the collector writing, then kill -9 in the middle of it.
    workloads = start_busy(12)
    time.sleep(5)
    old = profiler.daemon_pid("ebpf-profiler-collector")
    assert old, profiler.output()
    profiler.flush()  # an interval is being written right now
    os.kill(old, signal.SIGKILL)
    wait_restarted(profiler, old)
    for w in workloads:
        w.wait(timeout=30)
    profiler.settle()

    assert sqlite(profiler.store, "PRAGMA integrity_check") == "ok"
    # whole intervals only: every interval's samples add up to its count
    assert sqlite(profiler.store, "SELECT count(*) FROM intervals i WHERE samples != "
                                  "(SELECT coalesce(sum(count), 0) FROM samples WHERE interval = i.id)") == "0"
    pid = workloads[0].pid
    top = cli("top", "--store", profiler.store, "--pid", pid).stdout
    assert "spin" in top, top


def read_props(profiler):
    return {name: profiler.prop("Collector", name)
            for name in ("StoreIntervals", "StoreSamples", "StoreFirstNs", "StoreLastNs", "StoreBytes")}


def test_status_store_section_matches_the_file(profiler):
    w = run_workload("threads", 3)
    w.wait(timeout=30)
    profiler.flush()
    time.sleep(0.5)

    # The collector writes every 2 s: compare while nothing changed in between.
    for _ in range(10):
        before = read_props(profiler)
        counts = sqlite(profiler.store, "SELECT count(*) || ' ' || sum(count) FROM samples s "
                                        "JOIN intervals i ON i.id = s.interval")
        span = sqlite(profiler.store, "SELECT min(start_ns) || ' ' || max(end_ns) FROM intervals")
        after = read_props(profiler)
        if before == after:
            break
    intervals = int(sqlite(profiler.store, "SELECT count(*) FROM intervals"))
    samples = int(counts.split()[1])
    first, last = map(int, span.split())
    assert after["StoreIntervals"] == intervals > 0
    assert after["StoreSamples"] == samples > 0
    assert after["StoreFirstNs"] == first and after["StoreLastNs"] == last
    on_disk = file_size(profiler.store) + file_size(str(profiler.store) + "-wal")
    assert abs(after["StoreBytes"] - on_disk) <= 1 << 20
    assert profiler.prop("Collector", "StoreSchemaVersion") == 2
    assert profiler.prop("Collector", "RetentionAge") == 3 * 86400
    assert profiler.prop("Collector", "RetentionSize") == 1 << 30

    out = cli("status", env=profiler.env).stdout
    section = out[out.index("\nstore "):]
    assert str(profiler.store) in section, out
    for word in ("time span", "intervals", "samples", "retention", "3d 0h", "1.0 GiB"):
        assert word in section, section
    shown = {l.split()[0]: l.split()[1] for l in section.splitlines()[1:] if l.strip()}
    assert int(shown["intervals"]) > 0 and int(shown["samples"]) > 0

    doc = json.loads(cli("status", "--json", env=profiler.env).stdout)
    store = doc["store"]
    assert store["path"] == str(profiler.store)
    assert store["intervals"] > 0 and store["samples"] > 0
    assert store["schema_version"] == 2
    assert store["retention"]["age_seconds"] == 3 * 86400
    assert store["first_ns"] <= store["last_ns"]


def test_bad_retention_options_are_usage_errors():
    for args, word in ((["run", "--retention-size", "lots"], "retention-size"),
                       (["run", "--retention-size", "1K"], "retention-size"),
                       (["run", "--retention-age", "5s"], "retention-age"),
                       (["run", "--retention-age", "soon"], "retention-age")):
        p = cli(*args, check=False)
        assert p.returncode == 2, (args, p.returncode, p.stderr)
        assert word in p.stderr, p.stderr
