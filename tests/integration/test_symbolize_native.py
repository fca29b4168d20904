# SPDX-License-Identifier: MIT
"""End to end: native frames named from DWARF under real sampling — inline chains with file:line
in the store's frame_lines (checked against the source's LINE: markers and against
`addr2line -i`), a stripped program whose debug file is found by build ID under a temporary
--debug-dir, and demangled C++ template and Rust names."""
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import KERNEL, REPO, WORKLOADS, cli, frame_ids, profile_until, running_profiler, stacks_query

SOURCE = REPO / "tests" / "workloads" / "inlinechain.c"
CHAIN = ["ic_inner", "ic_middle", "ic_outer", "ic_spin"]
SAMPLES = 200  # a workload runs until the store holds this many of its samples


def marker_line(name):
    for n, line in enumerate(SOURCE.read_text().splitlines(), 1):
        if f"LINE:{name} " in line:
            return n
    raise AssertionError(f"no marker {name}")


def build_id(path):
    out = subprocess.run(["readelf", "-n", str(path)], capture_output=True, text=True).stdout
    m = re.search(r"Build ID: ([0-9a-f]+)", out)
    assert m, out
    return m.group(1)


@pytest.fixture(scope="module")
def debug_root():
    """A debug root the unprivileged symbolizer can read, holding inlinechain's debug file
    under its build ID."""
    root = Path(tempfile.mkdtemp(prefix="ep-debug-root-"))
    bid = build_id(WORKLOADS / "inlinechain-stripped")
    d = root / ".build-id" / bid[:2]
    d.mkdir(parents=True)
    shutil.copy(WORKLOADS / "inlinechain.debug", d / f"{bid[2:]}.debug")
    for p in [root, root / ".build-id", d]:
        p.chmod(0o755)
    (d / f"{bid[2:]}.debug").chmod(0o644)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def profiler(debug_root):
    # A cache of its own: names found without the system's debug files (libc6-dbg is not under
    # these roots) must not be what the next profiler on the default cache answers.
    yield from running_profiler("--debug-dir", f"/nonexistent/debug:{debug_root}",
                                "--cache-dir", str(debug_root / "cache"))


def profile(profiler, name, samples=SAMPLES):
    if not (WORKLOADS / name).exists():
        pytest.skip(f"workload {name} was not built")
    return profile_until(profiler, name, samples)


def leaf_samples(con, pid):
    """[(frame_id, elf_addr, path, [(function, file, line) innermost first], samples)] for the
    innermost user frame of every stack of pid (kernel frames above it, an interrupt taken on
    the way back to user mode say, are not the program's; a stack without user frames keeps its
    kernel leaf), and the per-stack list of all function names."""
    lines = {}
    for frame, function, source_file, line in con.execute(
            "SELECT frame, function, source_file, line FROM frame_lines ORDER BY frame, depth"):
        lines.setdefault(frame, []).append((function, source_file, line))
    info = {fid: (elf_addr, path, kind) for fid, elf_addr, path, kind in con.execute(
        "SELECT f.id, f.elf_addr, fi.path, f.kind FROM frames f LEFT JOIN files fi ON fi.id = f.file")}
    leaves, stacks = [], []
    for _, blob, count in con.execute(*stacks_query(pid)):
        fids = frame_ids(blob)
        if not fids:
            continue
        leaf = next((f for f in fids if info.get(f, (None, None, None))[2] != KERNEL), fids[0])
        elf_addr, path, _ = info.get(leaf, (None, None, None))
        leaves.append((leaf, elf_addr, path, lines.get(leaf, []), count))
        stacks.append(([fn for f in fids for fn, _, _ in lines.get(f, [])], count))
    return leaves, stacks


def addr2line_chain(binary, addr):
    out = subprocess.run(["addr2line", "-i", "-f", "-C", "-e", str(binary), hex(addr)],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    chain = []
    for fn, loc in zip(out[0::2], out[1::2]):
        file, _, line = loc.rpartition(":")
        chain.append((fn, file, int(line.split()[0]) if line.split()[0].isdigit() else 0))
    return chain


def check_inline_chain(profiler, name, binary_for_addr2line):
    pid = profile(profiler, name)
    check_top_lines(profiler, pid)
    with profiler.db() as con:
        leaves, _ = leaf_samples(con, pid)
    total = sum(c for *_, c in leaves)
    assert total >= SAMPLES, f"{total} samples, after the store had {SAMPLES}"

    inner_lines = range(marker_line("inner-mark"), marker_line("inner-last") + 1)
    callers = [marker_line("middle-call"), marker_line("outer-call"), marker_line("spin-call")]
    good = 0
    checked = 0
    for fid, elf_addr, path, chain, count in leaves:
        if [fn for fn, _, _ in chain] != CHAIN:
            continue
        assert all(f.endswith("tests/workloads/inlinechain.c") for _, f, _ in chain), chain
        assert chain[0][2] in inner_lines, chain
        assert [l for _, _, l in chain[1:]] == callers, chain
        # Each distinct leaf address: exactly what binutils says.
        assert elf_addr is not None
        want = addr2line_chain(binary_for_addr2line, elf_addr)
        got = [(fn, os.path.basename(f), l) for fn, f, l in chain]
        assert got == [(fn, os.path.basename(f), l) for fn, f, l in want], (hex(elf_addr), got, want)
        checked += 1
        good += count
    assert good >= 0.95 * total, (
        f"{good}/{total} samples carry the inline chain {CHAIN}: "
        f"{sorted(leaves, key=lambda x: -x[-1])[:5]}")
    return good, total, checked


def check_top_lines(profiler, pid):
    """`top --lines` names the inlined innermost function with its file and line, and the
    spinning function with the line it calls the chain from."""
    out = cli("top", "--store", profiler.store, "--pid", pid, "--lines").stdout
    inner = range(marker_line("inner-mark"), marker_line("inner-last") + 1)
    rows = re.findall(r"ic_inner \(inlinechain\.c:(\d+)\)", out)
    assert rows and all(int(l) in inner for l in rows), out
    assert f"ic_spin (inlinechain.c:{marker_line('spin-call')})" in out, out


def test_inline_chain_lines_in_store(profiler):
    good, total, checked = check_inline_chain(profiler, "inlinechain", WORKLOADS / "inlinechain")
    print(f"inlinechain: {good}/{total} samples with the 4-frame inline chain; "
          f"{checked} distinct leaf addresses equal to addr2line -i")


def test_stripped_program_resolves_through_build_id_debug_file(profiler):
    # The stripped binary has neither DWARF nor .symtab: without the debug file under the
    # temporary --debug-dir, its leaf would have no name at all.
    assert b".debug_info" not in (WORKLOADS / "inlinechain-stripped").read_bytes()
    good, total, checked = check_inline_chain(profiler, "inlinechain-stripped", WORKLOADS / "inlinechain")
    print(f"inlinechain-stripped: {good}/{total} samples with the chain through the build-ID debug file")


def share_with(stacks, predicate):
    total = sum(c for _, c in stacks)
    return sum(c for names, c in stacks if any(predicate(n) for n in names if n)), total


def test_cxx_template_names_demangled(profiler):
    pid = profile(profiler, "cxxtemplate")
    with profiler.db() as con:
        _, stacks = leaf_samples(con, pid)
    good, total = share_with(stacks, lambda n: n.startswith("ns::Sorter<int>::run("))
    assert total >= 100, total
    assert good >= 0.95 * total, f"{good}/{total}: {sorted(stacks, key=lambda x: -x[1])[:3]}"
    names = {n for ns, _ in stacks for n in ns if n}
    assert not any(n.startswith("_Z") for n in names), names


def test_rust_names_demangled(profiler):
    pid = profile(profiler, "rustspin")
    with profiler.db() as con:
        _, stacks = leaf_samples(con, pid)
    good, total = share_with(stacks, lambda n: n == "mycrate::module::func")
    assert total >= 100, total
    assert good >= 0.95 * total, f"{good}/{total}: {sorted(stacks, key=lambda x: -x[1])[:3]}"
    names = {n for ns, _ in stacks for n in ns if n}
    assert "mycrate::main" in names, names
    assert not any(re.search(r"17h[0-9a-f]{16}E$", n) for n in names), names
