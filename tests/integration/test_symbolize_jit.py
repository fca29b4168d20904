# SPDX-License-Identifier: MIT
"""End to end: JIT frames named from perf maps (/tmp/perf-PID.map). Node with --perf-basic-prof
and Python 3.12 with -X perf spin in a known hot function under the real profiler; the samples
of that process must show the function's name as the runtime wrote it into its map (an
EP_FRAME_UNMAPPED frame symbolized through Loader1.OpenPerfMap), in the store and in `top`.
Each runtime is skipped only when it is not installed. The maps these runs create are removed
by their pid."""
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import cli, frame_ids, stacks_query
from waiting import wait_until

UNMAPPED = 3
NODE = os.environ.get("EP_TEST_NODE", "/usr/bin/node")
PYTHON312 = os.environ.get("EP_TEST_PYTHON312", "/root/.pyenv/versions/3.12.1/bin/python3.12")
RUN_LIMIT = 300  # the runtime keeps running while the test waits for the names, at most this

NODE_SCRIPT = """\
'use strict';
// Integer work only: no calls into V8 builtins, so the optimized code of hotLoop is the leaf.
function hotLoop(n) {
  let s = 0;
  for (let i = 0; i < n; i++) {
    s = (s * 31 + i) | 0;
  }
  return s;
}
const end = Date.now() + %d * 1000;
let acc = 0;
while (Date.now() < end) acc ^= hotLoop(2000000);
console.log('done', acc);
""" % RUN_LIMIT

PYTHON_SCRIPT = """\
import time

def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)

end = time.time() + %d
while time.time() < end:
    fib(22)
print("done")
""" % RUN_LIMIT


@pytest.fixture
def script_dir():
    d = Path(tempfile.mkdtemp(prefix="ep-jit-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def remove_perf_map(pid):
    """The map this test's runtime wrote; never a glob: other people's maps may be there."""
    try:
        os.unlink(f"/tmp/perf-{pid}.map")
    except FileNotFoundError:
        pass


def start_runtime(argv):
    """Starts a runtime that spins until killed (or RUN_LIMIT) and returns once it has written
    its perf map; the caller waits for its samples. A JIT process is named while it lives: the
    loader opens its map through /proc/PID/root, so a process that is gone cannot be named."""
    # In a scratch directory: node --perf-basic-prof also writes isolate-*.log files to its cwd.
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, cwd=os.path.dirname(argv[-1]))

    def mapped():
        if p.poll() is not None:
            raise AssertionError(f"{argv[0]} exited early with {p.returncode}")
        return Path(f"/tmp/perf-{p.pid}.map").exists(), "no perf map yet"
    try:
        wait_until(mapped, f"{argv[0]} (pid {p.pid}) to write /tmp/perf-{p.pid}.map", 60)
    except BaseException:
        p.kill()
        p.wait()
        remove_perf_map(p.pid)
        raise
    return p


def jit_samples(con, pid, pattern):
    """(samples of pid, samples whose stack holds an UNMAPPED frame named like pattern, the
    names of the UNMAPPED frames seen)."""
    names = {}
    for frame, function in con.execute(
            "SELECT l.frame, l.function FROM frame_lines l JOIN frames f ON f.id = l.frame "
            "WHERE f.kind = ?", (UNMAPPED,)):
        names[frame] = function
    total = hit = 0
    seen = set()
    for _, blob, count in con.execute(*stacks_query(pid)):
        ids = frame_ids(blob)
        total += count
        frame_names = [names[i] for i in ids if i in names]
        seen.update(frame_names)
        if any(re.search(pattern, n) for n in frame_names):
            hit += count
    return total, hit, seen


def wait_named(profiler, pid, pattern, min_fraction, min_samples):
    """Flushes until at least min_samples samples of pid are stored and min_fraction of them show
    pattern (late symbols arrive as UPDATEs with the next interval written; the runtime keeps
    running meanwhile, so a loaded machine only makes this take longer); returns (total, hit,
    names)."""
    def named():
        profiler.flush()
        with profiler.db() as con:
            total, hit, names = jit_samples(con, pid, pattern)
        return (total >= min_samples and hit >= min_fraction * total,
                (total, hit, names))
    return wait_until(named, f"{min_samples} samples of pid {pid}, {min_fraction:.0%} with a frame named like "
                             f"{pattern!r}", 180, interval=1.0,
                      diagnosis=lambda: f"Symbolizer LastError: {profiler.prop('Symbolizer', 'LastError')}")


def check_runtime(profiler, argv, pattern, label):
    p = start_runtime(argv)
    pid = p.pid
    try:
        total, hit, names = wait_named(profiler, pid, pattern, 0.5, 50)
        assert total >= 50, f"{label}: only {total} samples of pid {pid}"
        assert hit >= 0.5 * total, (
            f"{label}: {hit}/{total} samples carry a frame named like {pattern!r}; "
            f"JIT frame names seen: {sorted(names)[:20]}; "
            f"Symbolizer LastError: {profiler.prop('Symbolizer', 'LastError')}")
        # The view names the frame too (Python's trampolines are never the leaf: all rows).
        top = cli("top", "--store", profiler.store, "--pid", pid, "--limit", "0").stdout
        rows = [l for l in top.splitlines() if re.search(r"\d%", l)]
        in_row = r"\s" + pattern[1:] if pattern.startswith("^") else pattern
        assert any(re.search(in_row, r) for r in rows), f"{label}: {pattern!r} missing from top:\n{top}"
    finally:
        p.kill()
        p.wait()
        remove_perf_map(pid)
    return names


def test_node_perf_basic_prof_names_js_functions(profiler, script_dir):
    if not os.access(NODE, os.X_OK):
        pytest.skip(f"node is not installed at {NODE}")
    script = script_dir / "hot.js"
    script.write_text(NODE_SCRIPT)
    names = check_runtime(profiler, [NODE, "--perf-basic-prof", str(script)], r"hotLoop", "node")
    # The name is the map's, untouched (e.g. "JS:*hotLoop /tmp/ep-jit-.../hot.js:3" or
    # "LazyCompile:*hotLoop ..." depending on the V8 version).
    assert any(str(script) in n for n in names if "hotLoop" in n), sorted(names)[:20]


def test_python312_perf_trampoline_names_python_functions(profiler, script_dir):
    if not os.access(PYTHON312, os.X_OK):
        pytest.skip(f"Python 3.12 is not installed at {PYTHON312}")
    script = script_dir / "fib.py"
    script.write_text(PYTHON_SCRIPT)
    names = check_runtime(profiler, [PYTHON312, "-X", "perf", str(script)], r"^py::fib:", "python")
    assert f"py::fib:{script}" in names, sorted(names)[:20]
