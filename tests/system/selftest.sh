#!/bin/bash
# SPDX-License-Identifier: MIT
# Runs inside a booted Debian 12 container (tests/system/nspawn.py): installs the package the
# way an administrator would and checks the service behaves. Prints one line per check,
#   CHECK <name> ok
#   CHECK <name> FAIL <why>
# which tests/system/test_nspawn.py turns into test results, and context after each failure.
set -u
export LC_ALL=C.UTF-8 SYSTEMD_PAGER= SYSTEMD_COLORS=0

UNITS="ebpf-profiler-loader ebpf-profiler-symbolizer ebpf-profiler-collector ebpf-profiler-exporter"
declare -A BUS=([ebpf-profiler-loader]=Loader1 [ebpf-profiler-symbolizer]=Symbolizer1
                [ebpf-profiler-collector]=Collector1 [ebpf-profiler-exporter]=Exporter1)
# Exposure limits of `systemd-analyze security` (issue 7).
declare -A EXPOSURE_MAX=([ebpf-profiler-loader]=5.0 [ebpf-profiler-symbolizer]=2.0
                         [ebpf-profiler-collector]=2.0 [ebpf-profiler-exporter]=3.0)
MSG_DAEMON_STARTED=4e1b7c3a0f8d4a6c9b2e5d7f1a3c8e60

ok() { echo "CHECK $1 ok${2:+ $2}"; }
fail() { echo "CHECK $1 FAIL $2"; shift 2; for c in "$@"; do echo "  \$ $c"; sh -c "$c" 2>&1 | sed 's/^/  | /' | tail -40; done; }

prop() { # SERVICE PROPERTY: the value only
        busctl --system get-property "org.ebpfprofiler.${BUS[$1]}" "/org/ebpfprofiler/${BUS[$1]}" \
                "org.ebpfprofiler.${BUS[$1]}" "$2" 2>/dev/null | awk '{print $2}' | tr -d '"'
}

wait_for() { # SECONDS CMD...: true once CMD succeeds
        local end=$((SECONDS + $1)); shift
        until "$@" >/dev/null 2>&1; do
                [ $SECONDS -ge $end ] && return 1
                sleep 0.5
        done
}

all_active() { local u; for u in $UNITS; do systemctl is-active -q "$u" || return 1; done; }
all_inactive() { local u; for u in $UNITS; do [ "$(systemctl is-active "$u")" = inactive ] || return 1; done; }
store_samples() { prop ebpf-profiler-collector StoreSamples; }
samples_at_least() { local n; n=$(store_samples); [ -n "$n" ] && [ "$n" -ge "$1" ]; }
samples_above() { samples_at_least $(($1 + 1)); }

# ---- install --------------------------------------------------------------------------------
deb=$(ls /out/ebpf-profiler_*.deb | grep -v dbgsym | head -1)
if dpkg -i "$deb" > /tmp/dpkg.log 2>&1; then ok install; else fail install "dpkg -i failed" "cat /tmp/dpkg.log"; fi

if id ebpf-profiler >/dev/null 2>&1 && id ebpf-profiler-symbolizer >/dev/null 2>&1 &&
   id ebpf-profiler-exporter >/dev/null 2>&1 && [ "$(stat -c %U /var/lib/ebpf-profiler 2>/dev/null)" = ebpf-profiler ]; then
        ok system-user
else
        fail system-user "not every daemon user exists, or ebpf-profiler does not own /var/lib/ebpf-profiler" \
                "getent passwd | grep ebpf-profiler" "ls -ld /var/lib/ebpf-profiler"
fi

# The man pages, as an administrator reads them (man-db is in the tree).
# Into files: a reader that stops early (grep -q) would make man complain of a broken pipe.
if MANWIDTH=100 man -P cat ebpf-profiler > /tmp/man1.txt 2>/tmp/man.err &&
   MANWIDTH=100 man -P cat 8 ebpf-profiler-loader > /tmp/man8.txt 2>>/tmp/man.err &&
   grep -q '^SYNOPSIS' /tmp/man1.txt && grep -q '^SYNOPSIS' /tmp/man8.txt && ! [ -s /tmp/man.err ]; then
        ok man-renders
else
        fail man-renders "man ebpf-profiler / man 8 ebpf-profiler-loader did not render cleanly" "cat /tmp/man.err" \
                "dpkg -L ebpf-profiler | grep /man/"
fi

if [ "$(systemctl is-enabled ebpf-profiler.target)" = enabled ]; then ok target-enabled
else fail target-enabled "ebpf-profiler.target is $(systemctl is-enabled ebpf-profiler.target)"; fi

# The package starts the target; `enable --now` is what the issue's administrator types.
systemctl enable --now ebpf-profiler.target > /tmp/enable.log 2>&1
if wait_for 30 all_active; then ok all-active
else fail all-active "not all four units are active" "systemctl status --no-pager $UNITS" "journalctl -b --no-pager -n 60 -u 'ebpf-profiler*'"; fi

# ---- the loader keeps CAP_PERFMON only for start-up ---------------------------------------------
# Its bounding set has it (the unit grants it); once the perf events are open it is gone from the
# effective and permitted sets, CAP_BPF (new tables) stays. CAP_PERFMON is bit 38, CAP_BPF 39.
cap_set() { [ $(( (0x$1 >> $2) & 1 )) = 1 ]; }
loader_caps() { awk -v k="$1:" '$1 == k {print $2}' "/proc/$(systemctl show -P MainPID ebpf-profiler-loader)/status"; }
if cap_set "$(loader_caps CapBnd)" 38 && ! cap_set "$(loader_caps CapEff)" 38 && ! cap_set "$(loader_caps CapPrm)" 38 &&
   cap_set "$(loader_caps CapEff)" 39; then
        ok loader-drops-perfmon
else
        fail loader-drops-perfmon "the running loader still holds CAP_PERFMON, or lost CAP_BPF" \
                "grep ^Cap /proc/\$(systemctl show -P MainPID ebpf-profiler-loader)/status" \
                "journalctl -b --no-pager -u ebpf-profiler-loader | tail -20"
fi

# ---- BPF programs are listed under the unit's capabilities ------------------------------------
# Without CAP_SYS_ADMIN the kernel refuses BPF_PROG_GET_NEXT_ID; the loader's iterator, loaded at
# start-up, still lists every program: its own sampling program (on_sample) among them, with a
# real address.
busctl --system call org.ebpfprofiler.Loader1 /org/ebpfprofiler/Loader1 org.ebpfprofiler.Loader1 \
        ListBpfPrograms > /tmp/bpf-programs.txt 2>&1
if grep -Eq '^a\(ttus\) [1-9][0-9]* ' /tmp/bpf-programs.txt && grep -q '_on_sample"' /tmp/bpf-programs.txt; then
        ok loader-lists-bpf-programs "$(cut -d' ' -f2 /tmp/bpf-programs.txt) functions"
else
        fail loader-lists-bpf-programs "ListBpfPrograms failed or did not list the loader's own on_sample" \
                "head -c 600 /tmp/bpf-programs.txt" "journalctl -b --no-pager -u ebpf-profiler-loader | tail -20"
fi

# ---- a workload shows up in `top` -------------------------------------------------------------
# dd from /dev/zero spends ~80 % of its samples in the kernel (read_zero) under a libc stack; a
# user-space burner such as sha256sum spent 0.5 %: a 40 s run could hold no kernel frame at all.
cp /usr/bin/dd /usr/local/bin/ep-burn
timeout 600 /usr/local/bin/ep-burn if=/dev/zero of=/dev/null bs=64k 2>/dev/null & BURN=$!
sleep 12 # more than two 5 s intervals
top_out=$(ebpf-profiler top --comm ep-burn 2>&1)
if echo "$top_out" | grep -q "ep-burn" && echo "$top_out" | grep -Eq '^ *[0-9]+ samples'; then
        ok top-shows-workload "$(echo "$top_out" | head -1)"
else
        echo "$top_out" > /tmp/top.txt
        fail top-shows-workload "ebpf-profiler top --comm ep-burn has no ep-burn samples" "cat /tmp/top.txt" "ebpf-profiler status"
fi

# Symbolized under the sandbox: libc's entry frames (native unwinding to the root, names from the
# file the loader handed over) and kernel frames (kallsyms through the loader's descriptor).
# Names of the first intervals may still be on their way from a cold symbolizer. `top` ranks by
# self time and shows 20 rows: __libc_start_main has none of its own, so all rows are read.
named_stacks() {
        ebpf-profiler top --comm ep-burn --limit 0 > /tmp/top.txt 2>&1 &&
                grep -q "__libc_start_main" /tmp/top.txt && grep -q ' \[k\]$' /tmp/top.txt
}
if wait_for 30 named_stacks; then
        ok top-named-stacks
else
        fail top-named-stacks "no __libc_start_main or no named kernel frame in top" "cat /tmp/top.txt" \
                "ebpf-profiler tables --pending" "ebpf-profiler status | grep -E 'Pending|Waiting|Unwind|Error'"
fi

# ---- the split between the daemons ----------------------------------------------------------------
# Each unprivileged daemon runs as its own user, owns only its own files, and the symbolizer's
# user (the one that parses hostile files) reads nothing of the others: not the exporter's
# environment, the store or the spool.
as_symbolizer() { setpriv --reuid=ebpf-profiler-symbolizer --regid=ebpf-profiler-symbolizer --clear-groups "$@"; }
user_of() { # SERVICE: the user its main process runs as (no ps in the container)
        local uid
        uid=$(awk '/^Uid:/ {print $2}' "/proc/$(systemctl show -P MainPID "$1")/status") &&
                getent passwd "$uid" | cut -d: -f1
}
split_users() {
        [ "$(user_of ebpf-profiler-symbolizer)" = ebpf-profiler-symbolizer ] &&
                [ "$(user_of ebpf-profiler-collector)" = ebpf-profiler ] &&
                [ "$(user_of ebpf-profiler-exporter)" = ebpf-profiler-exporter ]
}
exporter_pid=$(systemctl show -P MainPID ebpf-profiler-exporter)
if split_users && [ "$(stat -c %U /var/lib/ebpf-profiler/spool)" = ebpf-profiler-exporter ] &&
   [ "$(stat -c %U /var/cache/ebpf-profiler)" = ebpf-profiler-symbolizer ] &&
   [ -s /var/lib/ebpf-profiler/profiles.db ] &&
   ! as_symbolizer cat "/proc/$exporter_pid/environ" >/dev/null 2>&1 &&
   ! as_symbolizer cat /var/lib/ebpf-profiler/profiles.db >/dev/null 2>&1 &&
   ! as_symbolizer ls /var/lib/ebpf-profiler/spool >/dev/null 2>&1; then
        ok privilege-split
else
        fail privilege-split "the daemons do not run as their own users, or the symbolizer's user reads another's data" \
                "for u in symbolizer collector exporter; do grep -H ^Uid /proc/\$(systemctl show -P MainPID ebpf-profiler-\$u)/status; done" "ls -la /var/lib/ebpf-profiler /var/lib/ebpf-profiler/spool /var/cache/ebpf-profiler" \
                "setpriv --reuid=ebpf-profiler-symbolizer --regid=ebpf-profiler-symbolizer --clear-groups cat /proc/$exporter_pid/environ | head -c 200"
fi

# ---- resource limits (docs/systemd.md, "Resource limits") ---------------------------------------
# The values systemd holds for each service; where the container was given the memory and pids
# controllers, also what its cgroup says (a container on a host without them gets neither).
declare -A MEMORY_MAX=([ebpf-profiler-loader]=2147483648 [ebpf-profiler-symbolizer]=3221225472
                       [ebpf-profiler-collector]=1073741824 [ebpf-profiler-exporter]=1073741824)
declare -A TASKS_MAX=([ebpf-profiler-loader]=128 [ebpf-profiler-symbolizer]=32
                      [ebpf-profiler-collector]=16 [ebpf-profiler-exporter]=16)
cgroup_value() { # FILE(v2) CONTROLLER FILE(v1) CGROUP: the value, or nothing without the controller
        cat "/sys/fs/cgroup$4/$1" 2>/dev/null || cat "/sys/fs/cgroup/$2$4/$3" 2>/dev/null
}
limits_ok=1 usage="" applied=0
for u in $UNITS; do
        cg=$(systemctl show -P ControlGroup "$u")
        mem=$(systemctl show -P MemoryMax "$u") tasks=$(systemctl show -P TasksMax "$u")
        cg_mem=$(cgroup_value memory.max memory memory.limit_in_bytes "$cg")
        cg_tasks=$(cgroup_value pids.max pids pids.max "$cg")
        if [ "$mem" != "${MEMORY_MAX[$u]}" ] || [ "$tasks" != "${TASKS_MAX[$u]}" ] ||
           [ "${cg_mem:-$mem}" != "$mem" ] || [ "${cg_tasks:-$tasks}" != "$tasks" ]; then
                limits_ok=0
                fail resource-limits "$u: MemoryMax '$mem' (cgroup '$cg_mem', want ${MEMORY_MAX[$u]}), TasksMax '$tasks' (cgroup '$cg_tasks', want ${TASKS_MAX[$u]})" \
                        "systemctl cat $u"
                break
        fi
        [ -n "$cg_mem" ] && applied=$((applied + 1))
        # What it used by now, after the workload above: the margin the limits leave.
        pid=$(systemctl show -P MainPID "$u")
        usage="$usage ${u#ebpf-profiler-}=$(awk '$1 == "VmHWM:" {printf "%d", $2 / 1024}' "/proc/$pid/status")MiB/$(awk '$1 == "Threads:" {print $2}' "/proc/$pid/status")threads"
done
[ $limits_ok = 1 ] && ok resource-limits "$applied of 4 cgroups carry them; peak RSS and threads:$usage"

# ---- status over the system bus -----------------------------------------------------------------
bus_ok=1
for u in $UNITS; do
        v=$(prop "$u" Version)
        [ -n "$v" ] || { bus_ok=0; fail "busctl-$u" "no Version property from org.ebpfprofiler.${BUS[$u]}"; }
done
[ $bus_ok = 1 ] && ok busctl-get-property
if busctl --system tree org.ebpfprofiler.Loader1 --no-pager 2>&1 | grep -q /org/ebpfprofiler/Loader1 &&
   busctl --system introspect org.ebpfprofiler.Collector1 /org/ebpfprofiler/Collector1 --no-pager 2>&1 | grep -q '\.Flush'; then
        ok busctl-tree-introspect
else
        fail busctl-tree-introspect "busctl tree/introspect did not list our objects" \
                "busctl --system tree org.ebpfprofiler.Loader1 --no-pager"
fi
if busctl --system call org.ebpfprofiler.Loader1 /org/ebpfprofiler/Loader1 org.ebpfprofiler.Loader1 SetFrequency u 49 &&
   [ "$(prop ebpf-profiler-loader Frequency)" = 49 ] &&
   busctl --system call org.ebpfprofiler.Collector1 /org/ebpfprofiler/Collector1 org.ebpfprofiler.Collector1 Flush &&
   busctl --system call org.ebpfprofiler.Exporter1 /org/ebpfprofiler/Exporter1 org.ebpfprofiler.Exporter1 Flush; then
        ok busctl-call
else
        fail busctl-call "SetFrequency/Flush failed" "busctl --system get-property org.ebpfprofiler.Loader1 /org/ebpfprofiler/Loader1 org.ebpfprofiler.Loader1 Frequency"
fi
# The real policy on the real dbus-daemon: anyone reads status, only root changes things.
as_nobody() { setpriv --reuid=nobody --regid=nogroup --clear-groups "$@"; }
if as_nobody busctl --system get-property org.ebpfprofiler.Collector1 /org/ebpfprofiler/Collector1 \
        org.ebpfprofiler.Collector1 StoreSamples >/dev/null 2>&1 &&
   ! as_nobody busctl --system call org.ebpfprofiler.Collector1 /org/ebpfprofiler/Collector1 \
        org.ebpfprofiler.Collector1 Flush >/dev/null 2>&1 &&
   ! as_nobody busctl --system call org.ebpfprofiler.Loader1 /org/ebpfprofiler/Loader1 \
        org.ebpfprofiler.Loader1 SetFrequency u 10 >/dev/null 2>&1; then
        ok bus-policy
else
        fail bus-policy "an unprivileged user could not read status, or could change something"
fi
if ebpf-profiler status > /tmp/status.txt 2>&1; then ok cli-status
else fail cli-status "ebpf-profiler status exited $?" "cat /tmp/status.txt"; fi

# ---- journald: structured, with message IDs -------------------------------------------------
n=$(journalctl -b -o json --no-pager MESSAGE_ID=$MSG_DAEMON_STARTED 2>/dev/null |
    grep -c '"_SYSTEMD_UNIT":"ebpf-profiler-')
if [ "${n:-0}" -ge 4 ] && journalctl -b -o json --no-pager MESSAGE_ID=$MSG_DAEMON_STARTED | grep -q '"PRIORITY":"6"'; then
        ok journal-structured "$n start records"
else
        fail journal-structured "expected 4 start records with MESSAGE_ID=$MSG_DAEMON_STARTED from our units, got ${n:-0}" \
                "journalctl -b -o json --no-pager -u ebpf-profiler-loader -n 3"
fi

# ---- kill -9 of each daemon: systemd restarts it, the pipeline recovers -------------------------
for u in $UNITS; do
        pid=$(systemctl show -p MainPID --value "$u")
        if [ -z "$pid" ] || [ "$pid" = 0 ]; then fail "restart-$u" "no main PID"; continue; fi
        kill -9 "$pid"
        new_pid() { local p; p=$(systemctl show -p MainPID --value "$u"); [ "$p" != 0 ] && [ "$p" != "$pid" ] && systemctl is-active -q "$u"; }
        if ! wait_for 20 new_pid; then
                fail "restart-$u" "not restarted after kill -9" "systemctl status --no-pager $u"
                continue
        fi
        # Samples reach the store again: through loader, collector and the symbolizer's names.
        before=$(store_samples); before=${before:-0}
        if wait_for 40 samples_above "$before" && wait_for 20 all_active; then
                ok "restart-$u" "NRestarts=$(systemctl show -p NRestarts --value "$u"), samples $before -> $(store_samples)"
        else
                fail "restart-$u" "restarted, but no new samples reached the store within 40 s (still $(store_samples))" \
                        "systemctl status --no-pager $UNITS" "journalctl -b --no-pager -n 40 -u 'ebpf-profiler*'"
        fi
done
kill "$BURN" 2>/dev/null

# ---- the units as installed ---------------------------------------------------------------
unitfiles=$(for u in $UNITS; do systemctl show -p FragmentPath --value "$u"; done)
if out=$(systemd-analyze verify --man=no $(systemctl show -p FragmentPath --value ebpf-profiler.target) $unitfiles 2>&1); then
        ok analyze-verify
else
        fail analyze-verify "systemd-analyze verify: $out"
fi
for u in $UNITS; do
        score=$(systemd-analyze security --no-pager "$u.service" 2>/dev/null | sed -n 's/.*Overall exposure level for .*: \([0-9.]*\).*/\1/p')
        if [ -n "$score" ] && awk -v s="$score" -v m="${EXPOSURE_MAX[$u]}" 'BEGIN { exit !(s <= m) }'; then
                ok "exposure-$u" "$score (limit ${EXPOSURE_MAX[$u]})"
        else
                fail "exposure-$u" "exposure ${score:-unknown} above ${EXPOSURE_MAX[$u]}" "systemd-analyze security --no-pager $u.service | grep -v '✓'"
        fi
done

# ---- upgrade: the same package again over a store holding samples and an edited conffile -------
echo "# edited by the selftest" >> /etc/ebpf-profiler/exporter.conf
before=$(store_samples); before=${before:-0}
loader_pid=$(systemctl show -P MainPID ebpf-profiler-loader)
restarted() { local p; p=$(systemctl show -P MainPID ebpf-profiler-loader); [ "$p" != 0 ] && [ "$p" != "$loader_pid" ]; }
cache_inode=$(stat -c %i /var/cache/ebpf-profiler/unwind-tables.db 2>/dev/null)
if [ "$before" -gt 0 ] && [ -n "$cache_inode" ] && dpkg -i "$deb" > /tmp/upgrade.log 2>&1 && wait_for 30 restarted &&
   wait_for 30 all_active && wait_for 20 samples_at_least "$before" &&
   [ "$(stat -c %i /var/cache/ebpf-profiler/unwind-tables.db)" = "$cache_inode" ] &&
   [ "$(stat -c %U /var/lib/ebpf-profiler/spool)" = ebpf-profiler-exporter ]; then
        ok upgrade-keeps-samples "$before -> $(store_samples) samples; the daemons restarted, cache and spool kept"
else
        fail upgrade-keeps-samples "after dpkg -i of the same package: store samples $before -> $(store_samples), or the cache or spool went" \
                "cat /tmp/upgrade.log" "systemctl status --no-pager $UNITS" "ls -lai /var/cache/ebpf-profiler /var/lib/ebpf-profiler"
fi
if grep -q "edited by the selftest" /etc/ebpf-profiler/exporter.conf &&
   [ "$(stat -c '%a %U %G' /etc/ebpf-profiler/exporter.conf)" = "640 root ebpf-profiler-exporter" ]; then
        ok upgrade-keeps-conffile
else
        fail upgrade-keeps-conffile "exporter.conf lost the edit, or is not 0640 root:ebpf-profiler-exporter" \
                "ls -l /etc/ebpf-profiler" "tail -3 /etc/ebpf-profiler/exporter.conf" "cat /tmp/upgrade.log"
fi

# ---- stop, remove, purge ----------------------------------------------------------------------
systemctl stop ebpf-profiler.target
if wait_for 20 all_inactive; then ok target-stop
else fail target-stop "not all four stopped cleanly" "systemctl status --no-pager $UNITS"; fi

systemctl start ebpf-profiler.target
wait_for 30 all_active
dpkg -L ebpf-profiler > /tmp/package-files 2>/dev/null
dpkg -r ebpf-profiler > /tmp/remove.log 2>&1
if wait_for 20 all_inactive && [ -d /var/lib/ebpf-profiler ] && ! [ -e /usr/bin/ebpf-profiler ]; then
        ok remove "stopped; the store is kept"
else
        fail remove "dpkg -r did not stop the units, or removed the state" "cat /tmp/remove.log" "systemctl status --no-pager $UNITS"
fi
dpkg -P ebpf-profiler > /tmp/purge.log 2>&1
# What the package installed (dpkg -L before): no file of it, and no directory of its own, is left.
package_left() {
        local f
        while read -r f; do
                # Files (and symlinks to files); of the directories only the package's own
                # (/lib is a symlink to usr/lib and listed too).
                if { [ -f "$f" ] && ! [ -d "$f" ]; } || { [ -L "$f" ] && ! [ -d "$f" ]; } ||
                   { [ -d "$f" ] && ! [ -L "$f" ] && case "${f##*/}" in *ebpf-profiler*) true ;; *) false ;; esac; }; then
                        echo "$f"
                fi
        done < /tmp/package-files
}
left=$(package_left)
if [ -s /tmp/package-files ] && [ -z "$left" ] && ! [ -e /var/lib/ebpf-profiler ] && ! [ -e /var/cache/ebpf-profiler ] &&
   ! [ -e /etc/ebpf-profiler ]; then
        ok purge "$(wc -l < /tmp/package-files) paths of the package gone"
else
        fail purge "state, configuration or files of the package left after purge: ${left:-(no file of the package)}" \
                "cat /tmp/purge.log" "ls -la /var/lib/ebpf-profiler /var/cache/ebpf-profiler /etc/ebpf-profiler"
fi

# ---- the same build through `meson install`, without the package ------------------------------
# The steps docs/systemd.md gives for an install from source (prefix /usr): the files, then the
# users, directories, unit files and bus policy taken in, then the target.
# /lib is a symlink to usr/lib (merged /usr): tar must keep it, and leave existing directories be.
if tar -C / --keep-directory-symlink --no-overwrite-dir -xzf /out/meson-install.tar.gz > /tmp/meson.log 2>&1 &&
   systemd-sysusers >> /tmp/meson.log 2>&1 && systemd-tmpfiles --create >> /tmp/meson.log 2>&1 &&
   systemctl daemon-reload >> /tmp/meson.log 2>&1 &&
   busctl call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus ReloadConfig >> /tmp/meson.log 2>&1 &&
   systemctl enable --now ebpf-profiler.target >> /tmp/meson.log 2>&1 && wait_for 30 all_active; then
        ok meson-install-active
else
        fail meson-install-active "not all four units are active after the meson install steps" "cat /tmp/meson.log" \
                "systemctl status --no-pager $UNITS" "journalctl -b --no-pager -n 40 -u 'ebpf-profiler*'"
fi
timeout 120 /usr/local/bin/ep-burn if=/dev/zero of=/dev/null bs=64k 2>/dev/null & BURN=$!
if wait_for 40 samples_above 0; then
        ok meson-install-samples "$(store_samples) samples"
else
        fail meson-install-samples "no samples reached the store" "ebpf-profiler status" \
                "journalctl -b --no-pager -n 40 -u 'ebpf-profiler*'"
fi
kill "$BURN" 2>/dev/null
systemctl disable --now ebpf-profiler.target > /dev/null 2>&1
exit 0
