# SPDX-License-Identifier: MIT
"""Runs inside gdb (gdb -batch -x gdb_frames.py EXE CORE): writes every thread's frames as
JSON to $EP_GDB_FRAMES_OUT, the reference the replay tests compare the native unwinder with.
Inline frames are left out (they share the PC of the real frame that holds them), and so are
tail-call frames (gdb makes them up from DWARF call-site information, e.g. in the pyenv
CPython builds: a function that jumped to its callee has no frame on the stack); each frame
is {"pc", "name", "kind"} with kind "E" for an exact PC (the interrupted one, a signal
trampoline's: the handler returns to its first instruction, and the PC a signal interrupted),
and "R" for a return address (named from the byte before)."""
import json
import os

import gdb

gdb.execute("set backtrace past-main on")
gdb.execute("set backtrace past-entry on")
gdb.execute("set backtrace limit 0")

threads = []
for inferior in gdb.inferiors():
    for thread in inferior.threads():
        thread.switch()
        frames = []
        frame = gdb.newest_frame()
        exact = True  # the newest frame, and the frame a signal interrupted, hold exact PCs
        while frame is not None:
            if frame.type() not in (gdb.INLINE_FRAME, gdb.TAILCALL_FRAME):
                frames.append({"pc": frame.pc(), "name": frame.name(),
                               "kind": "E" if exact or frame.type() == gdb.SIGTRAMP_FRAME else "R"})
                exact = frame.type() == gdb.SIGTRAMP_FRAME
            try:
                frame = frame.older()
            except gdb.error:
                break
        threads.append({"tid": thread.ptid[1], "frames": frames})

with open(os.environ["EP_GDB_FRAMES_OUT"], "w") as f:
    json.dump(threads, f)
