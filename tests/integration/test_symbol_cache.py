# SPDX-License-Identifier: MIT
"""End to end: symbols persisted across a restart (symbolizer/symbol-cache.c). A first start
profiles a workload and stops (the symbolizer writes its queue on exit); a second start with
the same --cache-dir profiles the same program again and answers its frames from
<cache-dir>/symbols.db (Symbolizer1.PersistedHits), with the same names as the first time.
Answers computed before a program's debug file was there are not what the next start answers
once it is (Symbolizer1.PersistedInvalidated)."""
import os
import pwd
import re
import shutil
import sqlite3
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import (NATIVE, WORKLOADS, Profiler, frame_ids, need_root, profile_until, run_workload, stacks_for_pid,
                      stacks_query)
from waiting import wait_until

CHAIN = {"gamma_spin", "beta", "alpha", "main"}
INLINE_CHAIN = {"ic_inner", "ic_middle", "ic_outer", "ic_spin"}  # inlinechain.c
SAMPLES = 200
SYMBOLIZER_USER = "ebpf-profiler-symbolizer"  # the symbolizer runs as it under `run`


@pytest.fixture
def cache_dir():
    # Traversable by the unprivileged symbolizer; the CLI creates and hands over "cache".
    tmp = Path(tempfile.mkdtemp(prefix="ep-symcache-"))
    tmp.chmod(0o755)
    yield tmp / "cache"
    subprocess.run(["rm", "-rf", str(tmp)], check=False)


def profile_fpchain(profiler, seconds=3):
    w = run_workload("fpchain", seconds)
    w.wait(timeout=seconds + 30)
    assert w.returncode == 0
    profiler.settle()
    return w.pid


def native_names(profiler, pid):
    """{(file_id, file offset): (function names, innermost first)} of the symbolized native
    frames the process's samples use."""
    with profiler.db() as con:
        used = set()
        for (blob,) in con.execute("SELECT st.frames FROM samples s JOIN processes p ON p.id = s.process "
                                   "JOIN stacks st ON st.id = s.stack WHERE p.pid = ?", (pid,)):
            used.update(int.from_bytes(blob[o:o + 8], "little") for o in range(0, len(blob), 8))
        lines = {}
        for frame, fn in con.execute("SELECT frame, function FROM frame_lines ORDER BY frame, depth"):
            lines.setdefault(frame, []).append(fn)
        out = {}
        for fid, file_id, addr in con.execute(
                "SELECT f.id, fi.file_id, f.addr FROM frames f JOIN files fi ON fi.id = f.file "
                "WHERE f.kind = 1 AND f.status = 0"):
            if fid in used and fid in lines:
                out[(bytes(file_id), addr)] = tuple(lines[fid])
    return out


def persisted_rows(cache_dir):
    con = sqlite3.connect(f"file:{cache_dir / 'symbols.db'}?mode=ro", uri=True, timeout=10)
    try:
        return con.execute("SELECT count(*) FROM symbols").fetchone()[0]
    finally:
        con.close()


def test_restart_answers_from_the_persisted_cache(cache_dir):
    need_root()
    first = Profiler(["--cache-dir", str(cache_dir)])
    try:
        pid = profile_fpchain(first)
        before = native_names(first, pid)
        assert CHAIN <= {fn for names in before.values() for fn in names}, before
        # Everything is computed the first time (the cache directory is new).
        assert first.prop("Symbolizer", "PersistedHits") == 0
    finally:
        first.stop()  # SIGTERM: the symbolizer writes what it queued
    rows = persisted_rows(cache_dir)
    assert rows >= len(before), f"only {rows} rows persisted for {len(before)} native frames"

    second = Profiler(["--cache-dir", str(cache_dir)])
    try:
        assert second.prop("Symbolizer", "PersistedEntries") >= rows
        pid = profile_fpchain(second)
        after = native_names(second, pid)
        hits = second.prop("Symbolizer", "PersistedHits")
        assert hits > 0, second.output()
        common = before.keys() & after.keys()
        # The chain's frames are at the same file offsets in both runs.
        assert CHAIN <= {fn for k in common for fn in after[k]}, (before, after)
        assert hits >= len([k for k in common if any(fn in CHAIN for fn in after[k])])
        for k in common:
            assert after[k] == before[k], f"{k[0].hex()} +{k[1]:#x}: {before[k]} then {after[k]}"
    finally:
        second.stop()


def test_cache_files_root_created_are_handed_to_the_symbolizer(cache_dir):
    """A cache database root created (a symbolizer or a test run as root) must not lock the
    unprivileged symbolizer out of its cache: `run` hands the directory's files to the daemons'
    user, as systemd does for CacheDirectory=."""
    need_root()
    first = Profiler(["--cache-dir", str(cache_dir)])
    try:
        profile_fpchain(first)
    finally:
        first.stop()
    files = [p for p in cache_dir.iterdir() if p.is_file()]
    assert any(p.name == "symbols.db" for p in files), files
    for p in files:
        os.chown(p, 0, 0)  # as if root had made them

    second = Profiler(["--cache-dir", str(cache_dir)])
    try:
        uid = pwd.getpwnam(SYMBOLIZER_USER).pw_uid
        owners = {p.name: p.stat().st_uid for p in cache_dir.iterdir() if p.is_file()}
        assert set(owners.values()) == {uid}, owners
        assert "Cannot open the symbol cache" not in second.output(), second.output()
        assert second.prop("Symbolizer", "PersistedEntries") > 0, second.output()
    finally:
        second.stop()


def build_id(path):
    out = subprocess.run(["readelf", "-n", str(path)], capture_output=True, text=True).stdout
    m = re.search(r"Build ID: ([0-9a-f]+)", out)
    assert m, out
    return m.group(1)


def readable_dir(prefix):
    d = Path(tempfile.mkdtemp(prefix=prefix))
    d.chmod(0o755)  # for the unprivileged symbolizer
    return d


def install_debug_file(root, binary, debug):
    """root/.build-id/xx/yyyy.debug, as a -dbgsym package installs it under /usr/lib/debug."""
    bid = build_id(binary)
    d = root / ".build-id" / bid[:2]
    d.mkdir(parents=True)
    for p in [root / ".build-id", d]:
        p.chmod(0o755)
    target = d / f"{bid[2:]}.debug"
    shutil.copy(debug, target)
    target.chmod(0o644)


def native_functions(profiler, pid):
    with profiler.db() as con:
        return {fn for frames, _ in stacks_for_pid(con, pid) for kind, fn in frames if kind == NATIVE and fn}


def test_debug_file_installed_after_answers_were_persisted(cache_dir):
    """The first start finds no debug file for the stripped program (an empty --debug-dir) and
    persists answers without names; its debug file then shows up under the --debug-dir of the
    second start, which must not answer from those rows but name the frames from it."""
    need_root()
    stripped, debug = WORKLOADS / "inlinechain-stripped", WORKLOADS / "inlinechain.debug"
    if not stripped.exists() or not debug.exists():
        pytest.skip("workload inlinechain-stripped was not built")
    assert b".debug_info" not in stripped.read_bytes()
    empty, root = readable_dir("ep-debug-empty-"), readable_dir("ep-debug-root-")
    try:
        first = Profiler(["--debug-dir", str(empty), "--cache-dir", str(cache_dir)])
        try:
            pid = profile_until(first, "inlinechain-stripped", SAMPLES)
            names = native_functions(first, pid)
            assert not INLINE_CHAIN & names, names  # nothing names them without the debug file
            assert first.prop("Symbolizer", "PersistedInvalidated") == 0
        finally:
            first.stop()  # writes the rows and the file's record ("none" found)
        assert persisted_rows(cache_dir) > 0

        install_debug_file(root, stripped, debug)
        second = Profiler(["--debug-dir", str(root), "--cache-dir", str(cache_dir)])
        try:
            pid = profile_until(second, "inlinechain-stripped", SAMPLES)
            names = native_functions(second, pid)
            assert INLINE_CHAIN <= names, (names, second.output())
            assert second.prop("Symbolizer", "PersistedInvalidated") > 0, second.output()
        finally:
            second.stop()
    finally:
        shutil.rmtree(empty, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)


def test_debug_file_installed_while_the_profiler_runs(cache_dir):
    """A stripped program is profiled with an empty --debug-dir: its frames have no inline
    chain. Its debug file is then installed under that root while the profiler and the program
    run: without a restart the symbolizer finds it (Symbolizer1.DebugFilesAppeared), the
    collector asks the program's frames again (Collector1.SymbolsAskedAgain), and the stored
    frames, those of the samples taken before the install included, carry the inline chain."""
    need_root()
    stripped, debug = WORKLOADS / "inlinechain-stripped", WORKLOADS / "inlinechain.debug"
    if not stripped.exists() or not debug.exists():
        pytest.skip("workload inlinechain-stripped was not built")
    root = readable_dir("ep-debug-later-")
    profiler = Profiler(["--debug-dir", str(root), "--cache-dir", str(cache_dir)])
    w = subprocess.Popen([str(stripped), "600"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        profiler.wait_samples(w.pid, SAMPLES)
        profiler.settle([w.pid])
        before = profiler.stack_counts(w.pid)
        names = native_functions(profiler, w.pid)
        assert not INLINE_CHAIN & names, names  # nothing names them without the debug file
        assert profiler.prop("Symbolizer", "DebugFilesAppeared") == 0

        install_debug_file(root, stripped, debug)

        def named():
            profiler.flush()
            now = native_functions(profiler, w.pid)
            return INLINE_CHAIN <= now, sorted(now)
        wait_until(named, "the inline chain of the stripped program's frames, from its new debug file", 120,
                   interval=0.5, diagnosis=lambda: profiler.diagnosis([w.pid]))
        assert profiler.prop("Symbolizer", "DebugFilesAppeared") >= 1
        assert profiler.prop("Collector", "SymbolsAskedAgain") > 0
        assert re.search(r"Debug file \S+ appeared for \S*inlinechain-stripped", profiler.output()), \
            profiler.output()[-3000:]
        # The samples stored before the install name the chain too: their frame rows were updated.
        with profiler.db() as con:
            old = [frames for sid, frames, _ in con.execute(*stacks_query(w.pid)) if sid in before]
            lines = {}
            for frame, fn in con.execute("SELECT frame, function FROM frame_lines ORDER BY frame, depth"):
                lines.setdefault(frame, set()).add(fn)
        old_names = {fn for blob in old for fid in frame_ids(blob) for fn in lines.get(fid, ())}
        assert INLINE_CHAIN <= old_names, sorted(old_names)
    finally:
        w.kill()
        w.wait()
        profiler.stop()
        shutil.rmtree(root, ignore_errors=True)
