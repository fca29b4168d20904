# SPDX-License-Identifier: MIT
"""End to end: kernel frames named from kallsyms (vmlinux, BPF programs loaded after the
profiler started), seccomp filters bounded by the loader's BPF program extents, and the module
table, as the store and the symbolizer's Kernel* properties show them."""
import json
import os
import subprocess

import pytest

from conftest import KERNEL, WORKLOADS, read_lines, samples_with_frames

SYM = ("org.ebpfprofiler.Symbolizer1", "/org/ebpfprofiler/Symbolizer1", "org.ebpfprofiler.Symbolizer1")


def sym_prop(profiler, name):
    """A Symbolizer1 property decoded from busctl's JSON."""
    out = profiler.busctl("--json=short", "get-property", *SYM, name)
    return json.loads(out)["data"]


def kernel_frames(con, pid):
    """[(frames, count)] for one process, each frame a dict as in samples_with_frames() plus the
    store's module column for kernel frames."""
    modules = dict(con.execute("SELECT addr, module FROM frames WHERE kind = ?", (KERNEL,)))
    out = []
    for _, _, frames, count in samples_with_frames(con, pid):
        for f in frames:
            if f["kind"] == KERNEL:
                signed = f["addr"] - (1 << 64) if f["addr"] >= 1 << 63 else f["addr"]
                f["module"] = modules.get(signed)
        out.append((frames, count))
    return out


def bpf_symbols():
    """{name: address} of the BPF programs /proc/kallsyms lists now."""
    out = {}
    with open("/proc/kallsyms") as f:
        for line in f:
            if line.rstrip().endswith("[bpf]"):
                addr, _, name = line.split()[:3]
                out[name] = int(addr, 16)
    return out


def vmlinux_text():
    start = end = None
    with open("/proc/kallsyms") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[2] == "_stext":
                start = int(parts[0], 16)
            elif len(parts) == 3 and parts[2] == "_etext":
                end = int(parts[0], 16)
    assert start and end, "no _stext/_etext in /proc/kallsyms"
    return start, end


def run_delayed(name, seconds, delay, ready_line):
    """Starts a workload that loads its BPF code after `delay` s; returns (popen, the [bpf]
    symbols that appeared in kallsyms by then)."""
    before = bpf_symbols()
    w = subprocess.Popen([str(WORKLOADS / name), str(seconds), str(delay)], stdout=subprocess.PIPE, text=True)
    line = read_lines(w, 1)[0]
    assert line.strip() == ready_line, f"{name}: {line!r}"
    new = {n: a for n, a in bpf_symbols().items() if n not in before}
    return w, new


def finish(profiler, w, seconds):
    w.wait(timeout=seconds + 30)
    assert w.returncode == 0
    profiler.settle()


def test_syscall_frames_are_named_in_vmlinux(profiler):
    w = subprocess.Popen([str(WORKLOADS / "syscalls"), "3"])
    finish(profiler, w, 3)
    with profiler.db() as con:
        stacks = kernel_frames(con, w.pid)
    total = sum(c for _, c in stacks)
    assert total > 0
    named = {}
    for frames, count in stacks:
        for f in frames:
            if f["kind"] == KERNEL and f["function"]:
                named[f["function"]] = named.get(f["function"], 0) + count
                assert f["module"] == "", f
    assert "entry_SYSCALL_64" in named or "do_syscall_64" in named, sorted(named)
    assert any(n in named for n in ("ksys_read", "__x64_sys_read", "vfs_read")), sorted(named)
    kernel_samples = sum(c for frames, c in stacks if any(f["kind"] == KERNEL for f in frames))
    unnamed = sum(c for frames, c in stacks if any(f["kind"] == KERNEL and not f["function"] for f in frames))
    assert kernel_samples >= 0.9 * total
    assert unnamed <= 0.02 * kernel_samples, f"{unnamed}/{kernel_samples} samples with unnamed kernel frames"

    # The properties: the table as read, vmlinux's build ID as sysfs has it.
    assert sym_prop(profiler, "KernelSymbols") > 10000
    build_id = bytes(sym_prop(profiler, "KernelBuildId"))
    notes = open("/sys/kernel/notes", "rb").read()
    assert len(build_id) == 20 and build_id in notes, build_id.hex()


def test_bpf_program_loaded_after_start_is_named(profiler):
    """An eBPF program of the workload's own, loaded while the profiler runs: the symbolizer
    re-reads kallsyms on the miss and names it bpf_prog_<tag>_ep_spin, module "bpf"."""
    reloads = sym_prop(profiler, "KernelReloads")
    w, new = run_delayed("bpfprog", 3, 1, "program loaded")
    finish(profiler, w, 3)
    names = [n for n in new if n.endswith("_ep_spin")]
    assert len(names) == 1, f"the program is not in /proc/kallsyms: {new}"
    with profiler.db() as con:
        stacks = kernel_frames(con, w.pid)
    total = sum(c for _, c in stacks)
    in_prog = sum(c for frames, c in stacks
                  if any(f["kind"] == KERNEL and f["function"] == names[0] and f["module"] == "bpf" for f in frames))
    assert in_prog >= 0.5 * total, f"{in_prog}/{total} samples in {names[0]}: {stacks[:3]}"
    assert sym_prop(profiler, "KernelReloads") > reloads


UNLISTED = "[bpf] unlisted program"


def test_seccomp_filter_samples(profiler):
    """A classic BPF seccomp filter, installed while the profiler runs. The kernel JIT-compiles
    it but lists it nowhere: not in kallsyms (only eBPF programs loaded through bpf(2) are) and
    not among the programs BPF_PROG_GET_NEXT_ID enumerates (it gets no ID). kallsyms has no
    sizes, so the symbolizer bounds its BPF symbols with the extents the loader lists
    (Loader1.ListBpfPrograms): samples in the filter must not carry the name of the eBPF
    program placed before it, but "[bpf] unlisted program", module "bpf". Should a kernel list
    classic filters in kallsyms, their samples must carry that name."""
    text = vmlinux_text()
    before = set(bpf_symbols())
    w, new = run_delayed("seccomp", 3, 1, "filter installed")
    finish(profiler, w, 3)
    with profiler.db() as con:
        stacks = kernel_frames(con, w.pid)

    # Samples whose kernel leaf is outside vmlinux's text under __seccomp_filter: in the filter.
    in_filter = []
    for frames, count in stacks:
        k = [f for f in frames if f["kind"] == KERNEL]
        if k and not text[0] <= k[0]["addr"] < text[1] and any(f["function"] == "__seccomp_filter" for f in k):
            in_filter.append((k[0], count))
    total = sum(c for _, c in stacks)
    assert sum(c for _, c in in_filter) >= 0.2 * total, f"the filter did not run: {stacks[:3]}"
    filter_samples = sum(c for _, c in in_filter)

    if new:
        named = sum(c for f, c in in_filter if f["function"] in new and f["module"] == "bpf")
        assert named >= 0.9 * filter_samples, in_filter[:5]
        return
    # Not one sample after another program, whichever was loaded when.
    programs = before | set(bpf_symbols())
    wrong = {f["function"] for f, _ in in_filter if f["function"] in programs}
    assert not wrong, f"filter samples named after other BPF programs: {sorted(wrong)}"
    unlisted = sum(c for f, c in in_filter if f["function"] == UNLISTED and f["module"] == "bpf")
    assert unlisted >= 0.9 * filter_samples, f"{unlisted}/{filter_samples}: {in_filter[:5]}"


def test_kernel_modules_listed_with_size_and_build_id_but_no_address(profiler):
    if not os.path.exists("/proc/modules"):
        pytest.skip("this kernel has no loadable modules (CONFIG_MODULES=n)")
    modules = {}
    with open("/proc/modules") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and int(parts[5], 16):
                modules[parts[0]] = int(parts[1])
    if not modules:
        pytest.skip("no module is loaded")
    entries = sym_prop(profiler, "KernelModules")
    # (name, size, build ID): an unprivileged reader learns no kernel address.
    assert all(len(e) == 3 for e in entries), entries[:3]
    listed = {name: (size, bytes(bid)) for name, size, bid in entries}
    for name, size in modules.items():
        assert name in listed, f"{name} missing from KernelModules: {sorted(listed)}"
        assert listed[name][0] == size, (name, listed[name], size)
    # Build IDs as sysfs has them (one module is enough to prove the path).
    checked = 0
    for name in modules:
        path = f"/sys/module/{name}/notes/.note.gnu.build-id"
        if os.path.exists(path):
            data = open(path, "rb").read()
            namesz, descsz = int.from_bytes(data[0:4], "little"), int.from_bytes(data[4:8], "little")
            off = 12 + ((namesz + 3) & ~3)
            assert listed[name][1] == data[off:off + descsz], name
            checked += 1
    assert checked > 0 or not modules
