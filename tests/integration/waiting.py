# SPDX-License-Identifier: MIT
"""The one way the end-to-end tests wait: for a condition, with a deadline, never for a time.

    wait_until(fn, what, timeout=30, interval=0.2)

polls fn() until it says done and returns what it last saw; at the deadline it raises an
AssertionError naming what it waited for and what it last saw. fn returns either
  - a (done, last_seen) pair: done decides, last_seen is returned and shown on a timeout, or
  - any other value: done when it is truthy, and that value is returned / shown.
An AssertionError raised by fn propagates at once (a hard failure is not something to wait out).
`what` may be a callable returning more to say on a timeout (a diagnosis)."""
import time

__all__ = ["wait_until"]


def _judge(v):
    if isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], bool):
        return v
    return bool(v), v


def wait_until(fn, what, timeout=30.0, interval=0.2, sleep=None, diagnosis=None):
    """Polls fn() every `interval` seconds until done; returns what it last saw (see the module
    doc). Raises AssertionError("timed out after Ns waiting for <what>; last seen: <…>") at the
    deadline, with diagnosis() appended when given. sleep(seconds) replaces time.sleep (a
    condition variable's wait, for one)."""
    deadline = time.monotonic() + timeout
    sleep = sleep or time.sleep
    while True:
        done, seen = _judge(fn())
        if done:
            return seen
        left = deadline - time.monotonic()
        if left <= 0:
            msg = f"timed out after {timeout:g}s waiting for {what}; last seen: {seen!r}"
            if diagnosis is not None:
                try:
                    msg += "\n" + str(diagnosis())
                except Exception as e:  # a diagnosis that fails must not hide the timeout
                    msg += f"\n(diagnosis failed: {e})"
            raise AssertionError(msg)
        sleep(min(interval, left))

