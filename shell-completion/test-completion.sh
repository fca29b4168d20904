#!/bin/bash
# SPDX-License-Identifier: MIT
# test-completion.sh COMPLETION-FILE CLI
# Sources the bash completion and calls its function as bash would: completing
# `ebpf-profiler ` must offer every command `CLI --help` lists, and completing
# `ebpf-profiler COMMAND --` every option `CLI COMMAND --help` lists; a few values too.
# Runs twice: with the bash-completion package's helpers when installed, and without.
set -uo pipefail

completion=$1
cli=$2
failures=0

fail() {
        echo "FAIL: $*" >&2
        failures=$((failures + 1))
}

# complete WORD... : COMPREPLY for the last word (the one being completed), one per line.
# The words are split as bash splits a command line: '=' is a word of its own
# (COMP_WORDBREAKS), so "--by=p" is "--by" "=" "p".
complete_words() {
        local w
        COMP_WORDS=(ebpf-profiler)
        COMP_LINE="ebpf-profiler"
        for w in "$@"; do
                COMP_LINE+=" $w"
                while [[ $w == *=* ]]; do
                        [ -n "${w%%=*}" ] && COMP_WORDS+=("${w%%=*}")
                        COMP_WORDS+=("=")
                        w=${w#*=}
                done
                [[ -n $w || $COMP_LINE != *= ]] && COMP_WORDS+=("$w")
        done
        COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
        COMP_POINT=${#COMP_LINE}
        COMPREPLY=()
        _ebpf_profiler ebpf-profiler "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
        printf '%s\n' "${COMPREPLY[@]}"
}

expect_all() {   # what, expected words (newline-separated), completion words...
        local what=$1 expected=$2 got w
        shift 2
        got=$(complete_words "$@")
        while read -r w; do
                [ -n "$w" ] || continue
                grep -qxF -- "$w" <<<"$got" || fail "$what: '$w' not offered (offered: $(echo $got))"
        done <<<"$expected"
}

expect_exactly() {   # what, expected (space-separated, sorted), completion words...
        local what=$1 expected=$2 got
        shift 2
        got=$(complete_words "$@" | sort | xargs)
        [ "$got" = "$expected" ] || fail "$what: offered '$got', expected '$expected'"
}

run_checks() {
        local mode=$1
        echo "# $mode"
        commands=$("$cli" --help | awk '/^Commands:/ { on = 1; next } on && /^  [a-z]/ { print $1; next } on && NF == 0 && n++ { exit }')
        [ -n "$commands" ] || { fail "no commands in '$cli --help'"; return; }
        expect_all "$mode: commands" "$commands" ''

        for cmd in $commands; do
                # option definitions: lines that start with -x, or --long
                opts=$("$cli" "$cmd" --help | grep -oE '^ +(-[a-zA-Z], )?--[a-z][a-z0-9-]*' | grep -oE -- '--[a-z][a-z0-9-]*')
                [ -n "$opts" ] || fail "$mode: '$cli $cmd --help' lists no options"
                expect_all "$mode: $cmd options" "$opts" "$cmd" --
                # and in the middle of a command line
                expect_all "$mode: $cmd options after another" "$opts" "$cmd" --help --
                echo "ok: $cmd offers $(echo $opts | wc -w) options"
        done

        expect_exactly "$mode: top --by" "function process thread" top --by ''
        expect_exactly "$mode: top --sort" "self total" top --sort ''
        expect_exactly "$mode: flamegraph --format" "html svg" flamegraph --format ''
        expect_exactly "$mode: export --format" "folded otlp pprof" export --format ''
        expect_exactly "$mode: export -f p" "pprof" export -f p
        expect_exactly "$mode: run --otlp-protocol" "grpc http/protobuf" run --otlp-protocol ''
        expect_exactly "$mode: prefix" "flamegraph" fl
        expect_exactly "$mode: top --by=" "function process thread" top --by=
        expect_exactly "$mode: top --by=p" "process" top --by=p
        expect_exactly "$mode: run --log-level=w" "warning" run --log-level=w
        expect_exactly "$mode: global options" "--help --version" --
        expect_all "$mode: --pid" "$$" top --pid ''
        expect_all "$mode: --comm" "$(cat /proc/$$/comm)" top --comm ''
        expect_exactly "$mode: --thread takes a value" "" top --thread ''

        # files for --store and --output (in a directory of our own)
        local dir
        dir=$(mktemp -d)
        touch "$dir/profiles.db" "$dir/cpu.html"
        expect_all "$mode: --store FILE" "$dir/profiles.db" top --store "$dir/pro"
        expect_all "$mode: flamegraph -o FILE" "$dir/cpu.html" flamegraph -o "$dir/cp"
        rm -rf "$dir"
}

# Without the bash-completion package.
(
        # shellcheck source=bash/ebpf-profiler
        source "$completion"
        complete -p ebpf-profiler >/dev/null || { echo "FAIL: no 'complete' for ebpf-profiler" >&2; exit 1; }
        run_checks "plain bash"
        exit $((failures > 0))
) || failures=$((failures + 1))

# With its helpers (_init_completion, _filedir, _pids).
for bc in /usr/share/bash-completion/bash_completion; do
        [ -r "$bc" ] || { echo "# bash-completion not installed: that mode is skipped"; continue; }
        (
                source "$bc"
                source "$completion"
                declare -F _init_completion >/dev/null || { echo "FAIL: bash_completion did not load" >&2; exit 1; }
                run_checks "bash-completion"
                exit $((failures > 0))
        ) || failures=$((failures + 1))
done

if [ "$failures" -gt 0 ]; then
        echo "FAILED" >&2
        exit 1
fi
echo "all completions offered"
