# SPDX-License-Identifier: MIT
"""End to end: what a backend needs to symbolize a native frame itself is kept and exported.
The store holds each file's GNU build ID (as `readelf -n` prints it) and each frame's ELF
address; the OTLP Mapping of the file carries process.executable.build_id.htlhash (the file
ID) and .gnu, and the Location address is the ELF address, inside the function `nm` gives.

The workload is fpchain as built (PIE: its file offsets equal its ELF addresses) and the same
source linked as a fixed-address executable, whose ELF addresses are 0x400000 above the file
offsets, so an offset exported in place of an address is caught."""
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import REPO, WORKLOADS, otlp_endpoint, running_profiler
from waiting import wait_until

CHAIN = ("gamma_spin", "beta", "alpha")
WORKLOAD_CFLAGS = ["-O1", "-fno-omit-frame-pointer", "-fno-optimize-sibling-calls", "-fno-inline"]


@pytest.fixture(scope="module")
def profiler(receiver):
    yield from running_profiler("--otlp-endpoint", otlp_endpoint(receiver))


@pytest.fixture(scope="module")
def binaries():
    """[(label, path)]: the built fpchain and, when a C compiler is there, a non-PIE build."""
    tmp = Path(tempfile.mkdtemp(prefix="ep-backend-ids-"))
    tmp.chmod(0o755)
    out = [("pie", WORKLOADS / "fpchain")]
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc:
        exe = tmp / "fpchain-nopie"
        subprocess.run([cc, *WORKLOAD_CFLAGS, "-no-pie", "-Wl,--build-id", "-o", str(exe),
                        str(REPO / "tests" / "workloads" / "fpchain.c")], check=True)
        out.append(("nopie", exe))
    yield out
    shutil.rmtree(tmp, ignore_errors=True)


def gnu_build_id(path):
    m = re.search(r"Build ID: ([0-9a-f]+)", subprocess.run(["readelf", "-n", str(path)], capture_output=True,
                                                            text=True, check=True).stdout)
    assert m, f"{path} has no GNU build ID note"
    return m.group(1)


def function_ranges(path):
    """{name: (start, end)} of the defined functions, ELF addresses, from `nm -S`."""
    out = {}
    for line in subprocess.run(["nm", "-S", "--defined-only", str(path)], capture_output=True, text=True,
                               check=True).stdout.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[2] in "Tt":
            start, size = int(parts[0], 16), int(parts[1], 16)
            out[parts[3]] = (start, start + size)
    return out


def exported_locations(receiver, pid):
    """[(function names, address, mapping filename, {mapping attribute: value})] of every
    Location the receiver got in stacks of pid."""
    out = []
    for req in list(receiver.requests):
        d = req.dictionary
        for rp in req.resource_profiles:
            pids = [kv.value.int_value for kv in rp.resource.attributes if kv.key == "process.pid"]
            if pids != [pid]:
                continue
            for sp in rp.scope_profiles:
                for prof in sp.profiles:
                    for s in prof.samples:
                        for li in d.stack_table[s.stack_index].location_indices:
                            loc = d.location_table[li]
                            m = d.mapping_table[loc.mapping_index]
                            attrs = {}
                            for ai in m.attribute_indices:
                                a = d.attribute_table[ai]
                                attrs[d.string_table[a.key_strindex]] = a.value.string_value
                            names = tuple(d.string_table[d.function_table[l.function_index].name_strindex]
                                          for l in loc.lines)
                            out.append((names, loc.address, d.string_table[m.filename_strindex], attrs))
    return out


def stored_file(profiler, path):
    with profiler.db() as con:
        rows = con.execute("SELECT id, file_id, gnu_build_id, go_build_id FROM files WHERE path = ?",
                           (str(path),)).fetchall()
    assert len(rows) == 1, f"{path}: {rows}"
    return rows[0]


def stored_frames(profiler, file_row_id):
    """{function: [(file offset, elf_addr)]} of the file's symbolized frames."""
    out = {}
    with profiler.db() as con:
        for fn, addr, elf_addr in con.execute(
                "SELECT l.function, f.addr, f.elf_addr FROM frames f JOIN frame_lines l ON l.frame = f.id "
                "WHERE f.file = ? AND f.kind = 1 AND l.depth = 0", (file_row_id,)):
            out.setdefault(fn, []).append((addr, elf_addr))
    return out


@pytest.mark.parametrize("label", ["pie", "nopie"])
def test_build_ids_and_elf_addresses_reach_store_and_otlp(profiler, receiver, binaries, label):
    found = dict(binaries)
    if label not in found:
        pytest.skip("no C compiler for the non-PIE build")
    exe = found[label]
    expect_gnu = gnu_build_id(exe)
    ranges = function_ranges(exe)

    w = subprocess.Popen([str(exe), "3"])
    w.wait(timeout=40)
    assert w.returncode == 0
    profiler.flush()

    # The store: the file's build ID as readelf prints it; frames with ELF addresses inside
    # their function (a return address may sit right after a call, still inside its caller).
    def stored():
        file_row, file_id, gnu, go = stored_file(profiler, exe)
        frames = stored_frames(profiler, file_row)
        return bool(gnu and all(fn in frames for fn in CHAIN)), (file_id, gnu, go, frames)
    file_id, gnu, go, frames = wait_until(stored, f"{exe.name}'s build ID and {CHAIN} in the store", 30,
                                          interval=0.5)
    assert gnu and bytes(gnu).hex() == expect_gnu, (gnu, expect_gnu)
    assert go is None  # a C program has no Go build ID
    for fn in CHAIN:
        assert fn in frames, f"{fn} not in the store: {frames}"
        lo, hi = ranges[fn]
        for offset, elf_addr in frames[fn]:
            assert elf_addr is not None and lo <= elf_addr < hi, f"{fn} at {elf_addr} not in [{lo:#x}, {hi:#x})"
            if label == "nopie":
                assert elf_addr != offset  # the two address spaces really differ here

    # OTLP: the same IDs on the Mapping, the ELF address on the Location.
    def exported():
        locs = [l for l in exported_locations(receiver, w.pid) if l[2] == str(exe)]
        return all(any(names and names[0] == fn for names, *_ in locs) for fn in CHAIN), locs
    locs = wait_until(exported, f"{CHAIN} of {exe.name} at the OTLP receiver", 30, interval=0.5)
    assert locs, "the receiver got no location of the workload"
    for names, address, _, attrs in locs:
        assert attrs.get("process.executable.build_id.htlhash") == bytes(file_id).hex(), attrs
        assert attrs.get("process.executable.build_id.gnu") == expect_gnu, attrs
        assert "process.executable.build_id.go" not in attrs
        if names and names[0] in ranges:
            lo, hi = ranges[names[0]]
            assert lo <= address < hi, f"{names[0]} exported at {address:#x}, not in [{lo:#x}, {hi:#x})"
    for fn in CHAIN:
        assert any(names and names[0] == fn for names, *_ in locs), f"{fn} not exported"
