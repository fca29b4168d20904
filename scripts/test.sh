#!/usr/bin/env bash
# Sets everything up and runs every test: unit tests (also under ASan+UBSan), then the
# end-to-end tests (root: BPF, perf events, the four daemons on a private bus), then the system
# tests (the Debian package, and the service under systemd in a systemd-nspawn container).
# Ends with one line: "N passed, N failed[, N skipped]".
set -uo pipefail
cd "$(dirname "$0")/.."

# The time of each phase, printed as it ends and again before the summary, so growth is visible.
phase_times=()
phase_start=$SECONDS
phase_name=
phase() {
        if [ -n "$phase_name" ]; then
                local t=$((SECONDS - phase_start))
                phase_times+=("$(printf '%-18s %4d s' "$phase_name" "$t")")
                echo "== phase $phase_name: ${t} s"
        fi
        phase_name=${1-}
        phase_start=$SECONDS
}

phase "setup and build"
bash scripts/setup.sh --test-deps || { echo "setup failed"; echo "0 passed, 1 failed"; exit 1; }

results=$(mktemp -d /tmp/ep-test-results.XXXXXX)
trap 'rm -rf "$results"' EXIT

# A second build with sanitizers for the unit tests.
phase "sanitizer build"
if [ ! -f build-sanitize/build.ninja ]; then
        meson setup build-sanitize -Db_sanitize=address,undefined -Db_lundef=false >/dev/null
fi
ninja -C build-sanitize >/dev/null || { echo "sanitizer build failed"; echo "0 passed, 1 failed"; exit 1; }

export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
# Each fuzz test replays its whole corpus, then fuzzes on for this long (meson's default run:
# 15 s each); longer fuzzing is a development task, not a check of every change.
export EP_FUZZ_SECONDS=${EP_FUZZ_SECONDS:-5}
phase "unit, fuzz, replay"
meson test -C build --no-rebuild --print-errorlogs
phase "sanitizer unit"
meson test -C build-sanitize --no-rebuild --suite unit --print-errorlogs

phase "end to end"
# One line per failure (its assertion message), so that every failure of a run is in view in a
# CI log; `pytest --tb=long tests/integration/test_x.py` shows the rest.
# Two workers, a test file each at a time (module fixtures stay in one worker): most of a
# test's time is a workload running or a daemon answering, not the test's own CPU, and every
# profiler a test starts has its own bus, store, cache and BPF objects. Running two at once is
# also load the tests must bear (issue 16: pass on a machine whose cores are busy).
# Every wait of a test has its own deadline; $PYTEST_LIMIT (far above the longest test, ~140 s
# here) is the net under them: a test that hangs anyway fails with the stack it hung in, and
# the run goes on to its summary instead of running into the CI's own limit.
PYTEST_LIMIT=(--timeout=1800 --timeout-method=signal)
/usr/bin/python3 -m pytest -p no:cacheprovider -v --tb=line --durations=25 -n 2 --dist loadfile "${PYTEST_LIMIT[@]}" \
        --junitxml="$results/e2e.xml" tests/integration
pytest_rc=$?

phase system
# The Debian package: built, linted, then installed and run under systemd in a booted container.
# Two workers as well: the package's build and container boot in one (the files marked
# xdist_group("deb") share the package), the bench smoke runs in the other.
/usr/bin/python3 -m pytest -p no:cacheprovider -v --tb=line --durations=25 -n 2 --dist loadgroup "${PYTEST_LIMIT[@]}" \
        --junitxml="$results/system.xml" tests/system
system_rc=$?

phase
echo "== phase times (total $SECONDS s)"
printf '   %s\n' "${phase_times[@]}"

/usr/bin/python3 scripts/test-summary.py build/meson-logs/testlog.json \
        build-sanitize/meson-logs/testlog.json "$results/e2e.xml" "$results/system.xml"
summary_rc=$?
for rc in "$pytest_rc" "$system_rc"; do
        [ "$rc" -le 1 ] || [ "$summary_rc" -ne 0 ] || summary_rc=1
done
exit $summary_rc
