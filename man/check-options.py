#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Fails when a man page and its program's --help disagree about the options.

    check-options.py PAGE PROGRAM [--commands] [--groff]

Every option --help prints (long options anywhere in the text, short options where a line
starts with one) must be documented in the page; every long option the page lists as an
item (a .TP tag) must be one --help prints. A daemon's options are looked for in the OPTIONS
section. With --commands (the CLI), the command list is read from `PROGRAM --help`, each
command must have a `.SS COMMAND` section, and each command's options (`PROGRAM COMMAND
--help`) must be in that section, or in a section that declares it documents options of that
command with a roff comment line `.\\" options-of: COMMAND...`. The top-level options go in
OPTIONS. The version in the .TH line must be what `PROGRAM --version` prints. With --groff,
the page must also format without a groff warning (when groff is installed; otherwise that
part is skipped).
"""

import argparse
import os
import re
import shutil
import subprocess
import sys

LONG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
SHORT_AT_LINE_START = re.compile(r"^\s+(-[a-zA-Z])\b(?!-)")


def run_help(argv):
    p = subprocess.run(argv + ["--help"], capture_output=True, text=True, timeout=30,
                       env=dict(os.environ, LC_ALL="C"))
    if p.returncode != 0:
        sys.exit(f"{' '.join(argv)} --help exited {p.returncode}: {p.stderr.strip()}")
    return p.stdout


def options_of(help_text):
    opts = set(m.group(0) for m in LONG.finditer(help_text))
    for line in help_text.splitlines():
        m = SHORT_AT_LINE_START.match(line)
        if m:
            opts.add(m.group(1))
    return opts


def commands_of(help_text):
    """The names listed under 'Commands:' (two-space indent, a name, then its summary)."""
    cmds, inside = [], False
    for line in help_text.splitlines():
        if line.strip() == "Commands:":
            inside = True
            continue
        if inside:
            m = re.match(r"^  ([a-z][a-z0-9-]*)\s", line)
            if not m:
                if cmds:
                    break
                continue
            cmds.append(m.group(1))
    return cmds


def plain(roff_line):
    """A roff source line as the words it prints (escapes that matter for option names)."""
    s = roff_line
    s = s.replace("\\-", "-").replace("\\(hy", "-").replace("\\(en", "-")
    s = re.sub(r"\\f(\[[^\]]*\]|\(..|.)", "", s)   # font changes
    s = re.sub(r"\\[&%:c]", "", s)                  # zero-width escapes
    s = s.replace("\\e", "\\")
    return s


class Section:
    def __init__(self, level, title):
        self.level, self.title = level, title
        self.lines = []             # plain text of every line
        self.tags = []              # plain text of .TP tag lines
        self.options_of = set()     # commands named by an "options-of:" comment


def parse_page(path):
    """Sections (.SH and .SS, each with its own text) in order."""
    sections = [Section("SH", "")]
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    tag_next = False
    for raw in lines:
        m = re.match(r'^\.\\"\s*options-of:\s*(.*)$', raw)
        if m:
            sections[-1].options_of.update(m.group(1).split())
            continue
        if raw.startswith('.\\"'):
            continue
        m = re.match(r'^\.(SH|SS)\s+"?(.*?)"?\s*$', raw)
        if m:
            sections.append(Section(m.group(1), plain(m.group(2))))
            continue
        text = plain(raw)
        sections[-1].lines.append(text)
        if tag_next and not raw.startswith((".TP", ".PP")):
            sections[-1].tags.append(text)
            tag_next = False
        if raw.startswith((".TP", ".TQ")):
            tag_next = True
    return sections


def mentions(sections, option):
    pattern = re.compile(r"(?<![\w-])" + re.escape(option) + r"(?![\w-])")
    return any(pattern.search(line) for s in sections for line in s.lines)


def section_group(sections, index):
    """A .SH section with its .SS subsections, or one .SS section."""
    group = [sections[index]]
    if sections[index].level == "SH":
        for s in sections[index + 1:]:
            if s.level == "SH":
                break
            group.append(s)
    return group


def find(sections, level, title):
    for i, s in enumerate(sections):
        if s.level == level and s.title.split()[:1] == title.split()[:1] and s.title.startswith(title):
            return i
    return None


def tag_options(group):
    return set(m.group(0) for s in group for tag in s.tags for m in LONG.finditer(tag))


def check(page, where, sections, help_opts, errors):
    for opt in sorted(help_opts):
        if not mentions(sections, opt):
            errors.append(f"{page}: {opt} (from {where} --help) is not documented in "
                          f"{' / '.join(s.title or '(top)' for s in sections if s.title)}")
    for opt in sorted(tag_options(sections) - help_opts):
        errors.append(f"{page}: documents {opt} in "
                      f"{' / '.join(s.title for s in sections if s.title)}, "
                      f"but {where} --help does not list it")


def check_groff(page, errors):
    groff = shutil.which("groff")
    if not groff:
        print(f"{page}: groff not installed, formatting not checked")
        return
    p = subprocess.run([groff, "-man", "-ww", "-z", "-Tutf8", page], capture_output=True, text=True,
                       timeout=60, env=dict(os.environ, LC_ALL="C.UTF-8"))
    if p.returncode != 0 or p.stderr.strip():
        errors.append(f"{page}: groff warnings:\n{p.stderr.strip()}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("page")
    ap.add_argument("program")
    ap.add_argument("--commands", action="store_true", help="PROGRAM has commands (the CLI)")
    ap.add_argument("--groff", action="store_true", help="also check that groff formats the page cleanly")
    a = ap.parse_args()

    sections = parse_page(a.page)
    errors = []
    top_help = run_help([a.program])
    name = os.path.basename(a.program)

    opts_index = find(sections, "SH", "OPTIONS")
    if opts_index is None:
        errors.append(f"{a.page}: no OPTIONS section")
    else:
        opts_group = section_group(sections, opts_index) if not a.commands else [sections[opts_index]]
        check(a.page, name, opts_group, options_of(top_help), errors)

    if a.commands:
        cmds = commands_of(top_help)
        if not cmds:
            errors.append(f"{name} --help lists no commands under 'Commands:'")
        for cmd in cmds:
            i = find(sections, "SS", cmd)
            if i is None:
                errors.append(f"{a.page}: no '.SS {cmd}' section for the command '{cmd}'")
                continue
            group = [sections[i]] + [s for s in sections if cmd in s.options_of]
            check(a.page, f"{name} {cmd}", group, options_of(run_help([a.program, cmd])), errors)

    # The version in the page's title line is the program's.
    with open(a.page, encoding="utf-8") as f:
        th = next((plain(line) for line in f if line.startswith(".TH ")), "")
    shown = re.search(r'"ebpf-profiler (\S+)"', th)
    version = subprocess.run([a.program, "--version"], capture_output=True, text=True, timeout=30).stdout.split()
    if not shown or not version or shown.group(1) != version[-1]:
        errors.append(f"{a.page}: the .TH line ({th.strip()}) does not name version "
                      f"{version[-1] if version else '?'} ({name} --version)")

    if a.groff:
        check_groff(a.page, errors)

    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        return 1
    print(f"{a.page}: every option of {name}{' and its commands' if a.commands else ''} is documented")
    return 0


if __name__ == "__main__":
    sys.exit(main())
