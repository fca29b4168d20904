# SPDX-License-Identifier: MIT
# The CPython workload of the replay tests (replay_test.py cpython): main -> outer -> middle ->
# inner, inner spinning in bytecode (no Python call while it spins, so no eval-loop activation
# starts or ends). middle calls inner from C (through map), so that 3.11+ too run inner in an
# eval-loop activation of its own: the walk must cross an activation boundary (3.11's
# is_entry, 3.12+'s frame owned by the C stack) in the middle of the chain. Before spinning it
# prints, as one JSON line, its version and each code object's name, address (id() of a code
# object is its address) and bytecode size, innermost first. Runs on every CPython 3.6-3.13:
# no f-strings, nothing newer than 3.6.
import json
import sys
import time


def inner(deadline):
    x = 0
    while time.time() < deadline:
        for i in range(2000):
            x += i
    return x


def middle(deadline):
    return list(map(inner, [deadline]))[0] + 1


def outer(deadline):
    return middle(deadline) + 1


def main(seconds):
    deadline = time.time() + seconds
    codes = [inner.__code__, middle.__code__, outer.__code__, main.__code__, MODULE]
    print(json.dumps({"version": list(sys.version_info[:2]),
                      "codes": [[c.co_name, id(c), len(c.co_code)] for c in codes]}), flush=True)
    return outer(deadline)


MODULE = sys._getframe().f_code
main(float(sys.argv[1]))
