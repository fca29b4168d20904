#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Captures a core dump of a running workload for the replay tests.

Starts the command, waits until it is in its steady state (alive, the expected number of
threads, and burning CPU), dumps it with gcore, kills it, and writes next to the core:
  NAME.core        the core dump
  NAME.files       the mapped files: "FILE_ID<TAB>SIZE<TAB>PATH" (from ep-replay list-files)
  NAME.gdb.json    every thread's frames as gdb unwinds them (the reference)

Usage: capture.py --replay EP_REPLAY --out DIR --name NAME [--threads N] [--settle S] -- CMD...
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """User + system CPU time of the whole process so far."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def wait_steady(proc, threads, settle, timeout=20):
    """Waits until proc has `threads` threads and has burnt `settle` CPU seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"workload exited early with {proc.returncode}")
        try:
            n = len(os.listdir(f"/proc/{proc.pid}/task"))
            if n >= threads and cpu_seconds(proc.pid) >= settle:
                return
        except (OSError, ValueError, IndexError):
            pass
        time.sleep(0.05)
    raise RuntimeError(f"workload {proc.pid} not steady after {timeout}s")


def stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait()


def capture(replay, out_dir, name, cmd, threads=1, settle=0.4, stdin=None, stdout=None):
    """Returns {"core", "files", "gdb", "pid"} paths for a fresh capture of cmd (its output goes
    to stdout, a file, or is dropped)."""
    for tool in ("gcore", "gdb"):
        if not shutil.which(tool):
            raise FileNotFoundError(f"{tool} is not installed")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    core = out_dir / f"{name}.core"
    files = out_dir / f"{name}.files"
    frames = out_dir / f"{name}.gdb.json"
    for p in (core, files, frames):
        p.unlink(missing_ok=True)

    proc = subprocess.Popen(cmd, stdin=stdin, stdout=stdout or subprocess.DEVNULL)
    try:
        wait_steady(proc, threads, settle)
        prefix = out_dir / f"{name}.tmp"
        r = subprocess.run(["gcore", "-o", str(prefix), str(proc.pid)],
                           capture_output=True, text=True, timeout=120)
        dumped = Path(f"{prefix}.{proc.pid}")
        if r.returncode != 0 or not dumped.exists():
            raise RuntimeError(f"gcore failed ({r.returncode}): {r.stdout}{r.stderr}")
        dumped.rename(core)
    finally:
        stop(proc)

    r = subprocess.run([str(replay), "list-files", str(core)], capture_output=True, text=True,
                       timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"ep-replay list-files failed: {r.stderr}")
    files.write_text(r.stdout)

    env = dict(os.environ, EP_GDB_FRAMES_OUT=str(frames))
    r = subprocess.run(["gdb", "-q", "-batch", "-nx",
                        "-iex", "set debuginfod enabled off",
                        "-iex", "set auto-load safe-path /",
                        "-x", str(HERE / "gdb_frames.py"), cmd[0], str(core)],
                       capture_output=True, text=True, env=env, timeout=300)
    if r.returncode != 0 or not frames.exists():
        raise RuntimeError(f"gdb failed ({r.returncode}): {r.stdout}{r.stderr}")
    return {"core": core, "files": files, "gdb": frames, "pid": proc.pid}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--replay", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--settle", type=float, default=0.4)
    ap.add_argument("cmd", nargs="+")
    a = ap.parse_args()
    res = capture(a.replay, a.out, a.name, a.cmd, a.threads, a.settle)
    print(json.dumps({k: str(v) for k, v in res.items()}))


if __name__ == "__main__":
    sys.exit(main())
