#!/bin/bash
# SPDX-License-Identifier: MIT
# Checks the systemd units with systemd-analyze (meson test units-analyze, suite 'system').
#
#   analyze-units.sh UNITS_SRCDIR loader=PATH symbolizer=PATH collector=PATH exporter=PATH \
#                    [NAME=VALUE...]
#
# Renders units/ebpf-profiler-*.service.in with ExecStart= pointing at the given daemons (the
# build tree's: `verify` wants ExecStart= binaries to exist) and every other @NAME@ replaced by
# VALUE, next to ebpf-profiler.target, then
#   1. `systemd-analyze verify` must pass, with warnings counted as errors;
#   2. it must fail on broken copies (unknown key, bad value, missing binary), so step 1 means
#      something;
#   3. `systemd-analyze security --offline` of each service must stay within its bound
#      (docs/systemd.md explains every exposed item), and a unit without its sandbox must not;
#   4. the sysusers.d and tmpfiles.d files must be accepted by systemd-sysusers and
#      systemd-tmpfiles in a scratch root (only as root: tmpfiles wants to chown).
# Prints a table of the scores. Exits 77 (skipped) only when systemd-analyze is missing.
set -euo pipefail

declare -A BOUND=([loader]=5.0 [symbolizer]=2.0 [collector]=2.0 [exporter]=3.0)
DAEMONS=(loader symbolizer collector exporter)

if ! command -v systemd-analyze >/dev/null 2>&1; then
        echo "SKIP: systemd-analyze not found (Debian: package systemd); the units are not checked"
        exit 77
fi

if [ $# -lt 1 ] || [ ! -d "$1" ]; then
        echo "usage: $0 UNITS_SRCDIR loader=PATH symbolizer=PATH collector=PATH exporter=PATH [NAME=VALUE...]" >&2
        exit 2
fi
SRC=$1
shift
declare -A BIN=()
SED=()
for kv in "$@"; do
        name=${kv%%=*}
        value=${kv#*=}
        if [ -n "${BOUND[$name]+x}" ]; then
                BIN[$name]=$value
        else
                SED+=(-e "s|@${name}@|${value}|g")
        fi
done
for d in "${DAEMONS[@]}"; do
        if [ -z "${BIN[$d]+x}" ]; then
                echo "FAIL: no $d=PATH given" >&2
                exit 2
        fi
        if [ ! -x "${BIN[$d]}" ]; then
                echo "FAIL: ${BIN[$d]} is not an executable: build the tree first (ninja -C BUILDDIR)" >&2
                exit 1
        fi
done

TMP=$(mktemp -d "${TMPDIR:-/tmp}/ebpf-profiler-units.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
mkdir "$TMP/units"
failures=0
fail() {
        echo "FAIL: $*"
        failures=$((failures + 1))
}

echo "systemd-analyze: $(systemd-analyze --version | head -n1)"

# ---- render ----
for d in "${DAEMONS[@]}"; do
        sed -e "s|@libexecdir@/ebpf-profiler-$d\\b|${BIN[$d]}|g" "${SED[@]}" \
                "$SRC/ebpf-profiler-$d.service.in" > "$TMP/units/ebpf-profiler-$d.service"
done
cp "$SRC/ebpf-profiler.target" "$TMP/units/"
if left=$(grep -Hn '@[a-z_]*@' "$TMP"/units/*); then
        echo "$left"
        fail "placeholders left unreplaced after rendering (missing NAME=VALUE arguments?)"
fi

# ---- 1. verify ----
# --recursive-errors=no: warnings about our units (unknown keys, values that do not parse)
# fail, warnings about units of the machine (dbus.socket, multi-user.target) do not. Without
# the option verify exits 0 on warnings. --man=no: the man pages are not installed here.
verify() {
        systemd-analyze verify --man=no --recursive-errors=no "$@" 2>&1
}
if out=$(cd "$TMP/units" && verify ./ebpf-profiler.target ./ebpf-profiler-*.service); then
        [ -n "$out" ] && echo "$out"
        echo "verify: ok (ebpf-profiler.target and the four services)"
else
        echo "$out"
        fail "systemd-analyze verify of the units"
fi

# ---- 2. verify must catch broken copies ----
mkdir "$TMP/broken"
broken() { # broken LABEL SED-EXPRESSION
        local f="$TMP/broken/ebpf-profiler-collector.service"
        sed -e "$2" "$TMP/units/ebpf-profiler-collector.service" > "$f"
        if cmp -s "$f" "$TMP/units/ebpf-profiler-collector.service"; then
                fail "negative check '$1': the edit did not change the unit"
        elif (cd "$TMP/broken" && verify ./ebpf-profiler-collector.service) > "$TMP/broken/out"; then
                cat "$TMP/broken/out"
                fail "negative check '$1': verify passed a broken unit"
        else
                echo "verify rejects a copy with $1: $(grep -m1 -o 'ebpf-profiler-collector.service:.*\|Command .*' "$TMP/broken/out" || head -n1 "$TMP/broken/out")"
        fi
}
broken "an unknown key" 's/^NoNewPrivileges=yes$/&\nProtectEverything=yes/'
broken "a bad value" 's/^ProtectSystem=strict$/ProtectSystem=strictest/'
broken "a missing binary" "s|^ExecStart=[^ ]*|ExecStart=$TMP/does-not-exist|"

# ---- 3. security ----
score() { # score UNITFILE -> the overall exposure level, e.g. 1.2
        (cd "$(dirname "$1")" && systemd-analyze security --offline=true --no-pager "./$(basename "$1")" 2>&1) |
                sed -n 's/.*Overall exposure level for [^:]*: \([0-9][0-9.]*\).*/\1/p'
}
over() { # over A B: true when A > B
        awk -v a="$1" -v b="$2" 'BEGIN { exit !(a > b) }'
}
declare -A SCORE=()
for d in "${DAEMONS[@]}"; do
        s=$(score "$TMP/units/ebpf-profiler-$d.service")
        if [ -z "$s" ]; then
                (cd "$TMP/units" && systemd-analyze security --offline=true --no-pager "./ebpf-profiler-$d.service") || true
                fail "no exposure level for ebpf-profiler-$d.service"
                s=none
        elif over "$s" "${BOUND[$d]}"; then
                (cd "$TMP/units" && systemd-analyze security --offline=true --no-pager "./ebpf-profiler-$d.service" |
                        grep -v '✓') || true
                fail "ebpf-profiler-$d.service: exposure $s is over the bound ${BOUND[$d]}"
        fi
        SCORE[$d]=$s
done

# The gate must be able to fail: the collector without its sandbox scores over its bound.
mkdir "$TMP/bare"
sed -e '/^CapabilityBoundingSet=/,/^UMask=/d' "$TMP/units/ebpf-profiler-collector.service" \
        > "$TMP/bare/ebpf-profiler-collector.service"
bare=$(score "$TMP/bare/ebpf-profiler-collector.service")
if [ -z "$bare" ] || ! over "$bare" "${BOUND[collector]}"; then
        fail "the collector without its sandbox scores '${bare}', not over ${BOUND[collector]}: the check cannot fail"
else
        echo "security: the collector without its sandbox scores $bare (over ${BOUND[collector]}), as it should"
fi

# ---- 4. sysusers.d and tmpfiles.d ----
if [ "$(id -u)" = 0 ] && command -v systemd-sysusers >/dev/null && command -v systemd-tmpfiles >/dev/null; then
        root="$TMP/root"
        mkdir -p "$root/etc" "$root/var/lib" "$root/var/cache"
        sed "${SED[@]}" "$SRC/ebpf-profiler.sysusers" > "$TMP/sysusers.conf"
        sed "${SED[@]}" "$SRC/ebpf-profiler.tmpfiles" > "$TMP/tmpfiles.conf"
        if ! out=$(systemd-sysusers --root="$root" "$TMP/sysusers.conf" 2>&1) ||
                        ! grep -q '^[^:]*:x:[0-9]*:[0-9]*:.*:/nonexistent:/usr/sbin/nologin$' "$root/etc/passwd"; then
                echo "$out"
                fail "systemd-sysusers on units/ebpf-profiler.sysusers"
        elif ! out=$(systemd-tmpfiles --root="$root" --create "$TMP/tmpfiles.conf" 2>&1) || [ -n "$out" ]; then
                echo "$out"
                fail "systemd-tmpfiles on units/ebpf-profiler.tmpfiles"
        else
                echo "sysusers.d: $(grep -v '^root:' "$root/etc/passwd" | head -n1)"
                echo "tmpfiles.d:"
                awk '$1 == "d" { print $2 }' "$TMP/tmpfiles.conf" | while read -r p; do
                        read -r mode uid gid < <(stat -c '%a %u %g' "$root$p")
                        user=$(awk -F: -v id="$uid" '$3 == id { print $1 }' "$root/etc/passwd")
                        group=$(awk -F: -v id="$gid" '$3 == id { print $1 }' "$root/etc/group")
                        [ "$uid" = 0 ] && user=root
                        [ "$gid" = 0 ] && group=root
                        echo "    $mode ${user:-$uid}:${group:-$gid} $p"
                done
        fi
else
        echo "sysusers.d/tmpfiles.d: not checked (needs root and systemd-sysusers/systemd-tmpfiles)"
fi
if ! grep -qx 'kernel.perf_event_paranoid = 2' "$SRC/ebpf-profiler.sysctl"; then
        fail "units/ebpf-profiler.sysctl does not set kernel.perf_event_paranoid = 2"
fi

# ---- table ----
echo
printf '%-32s %8s %6s  %s\n' "unit" "exposure" "bound" "result"
for d in "${DAEMONS[@]}"; do
        s=${SCORE[$d]}
        r=ok
        if [ "$s" = none ] || over "$s" "${BOUND[$d]}"; then
                r=FAIL
        fi
        printf '%-32s %8s %6s  %s\n' "ebpf-profiler-$d.service" "$s" "${BOUND[$d]}" "$r"
done
echo

if [ "$failures" -gt 0 ]; then
        echo "$failures check(s) failed"
        exit 1
fi
echo "all unit checks passed"
