#!/usr/bin/env bash
# Installs what ebpf-profiler needs to build, run and test on Debian 12, then builds it.
# Idempotent; apt only. Usage: scripts/setup.sh [--no-build] [--test-deps]
set -euo pipefail
cd "$(dirname "$0")/.."

build=1 test_deps=0
for arg in "$@"; do
        case "$arg" in
        --no-build) build=0 ;;
        --test-deps) test_deps=1 ;;
        *) echo "setup.sh: unknown option '$arg' (known: --no-build --test-deps)" >&2; exit 2 ;;
        esac
done

if [ "$(id -u)" -ne 0 ]; then
        echo "setup.sh: run as root (it installs packages with apt-get)" >&2
        exit 1
fi

build_pkgs=(
        build-essential clang llvm meson ninja-build pkg-config
        libbpf-dev bpftool libelf-dev libdw-dev libsystemd-dev
        libprotobuf-c-dev protobuf-c-compiler libcurl4-openssl-dev
        libsqlite3-dev zlib1g-dev libzstd-dev dbus
        # C++ and Rust demangling (the symbolizer links its static libiberty)
        libiberty-dev
        # libFuzzer's runtime: the fuzz targets are built whenever clang is there
        libclang-rt-14-dev
)
test_pkgs=(
        protobuf-compiler python3-protobuf python3-pytest gdb linux-perf
        # the end-to-end tests run in two workers (scripts/test.sh), each test under a time limit
        python3-pytest-xdist python3-pytest-timeout
        # the OTLP/gRPC receiver of the export tests
        python3-grpcio
        # workloads of the native-unwinding tests (Debian's own stripped programs)
        xz-utils openssl sqlite3 gzip
        # names glibc's internal frames (__libc_start_call_main, start_thread) in the tests
        libc6-dbg
        # stripped Go programs for the .gopclntab tests; `go tool pprof` reads our pprof export
        golang-go
        # renders the HTML flame graph in the tests (headless)
        chromium
        # the Debian package (scripts/build-deb.sh, tests/system): build, lint, man pages,
        # bash completion, and the systemd-nspawn container it is installed in
        debhelper dpkg-dev fakeroot lintian groff-base bash-completion
        debootstrap systemd-container
)
want=("${build_pkgs[@]}")
[ "$test_deps" = 1 ] && want+=("${test_pkgs[@]}")

missing=()
for p in "${want[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
        echo "setup.sh: installing ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get -o DPkg::Lock::Timeout=300 update -qq
        apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The unprivileged daemons run as static system users of their own, as the package makes them:
# from the sysusers.d file (docs/systemd.md), with the default names put in.
sysusers=$(mktemp)
sed -e 's/@user@/ebpf-profiler/' -e 's/@symbolizer_user@/ebpf-profiler-symbolizer/' \
    -e 's/@exporter_user@/ebpf-profiler-exporter/' units/ebpf-profiler.sysusers >"$sysusers"
systemd-sysusers "$sysusers" || { rm -f "$sysusers"; echo "setup.sh: cannot create the daemons' users" >&2; exit 1; }
rm -f "$sysusers"

# The loader attaches tracepoints (tracefs) and may pin maps (bpffs). systemd mounts both at
# boot; on a host or container without it they may be missing.
mountpoint -q /sys/kernel/tracing || mount -t tracefs tracefs /sys/kernel/tracing
mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf

if [ "$build" = 1 ]; then
        [ -f build/build.ninja ] || meson setup build --buildtype=debugoptimized >/dev/null
        ninja -C build
fi
