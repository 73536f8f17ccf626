#!/usr/bin/env bash
# Fuzzes tidewatch's two parsers of untrusted bytes with cargo-fuzz (libFuzzer):
# `alarm` (alarm::parse, as the daemon calls it) and `index` (the index reader,
# then searches). The targets live in tests/fuzz/; see tests/fuzz/Cargo.toml.
#
#   deploy/fuzz.sh [SECONDS]            each target for SECONDS (default 60)
#   deploy/fuzz.sh 300 index            one target
#
# Works on the stable toolchain: cargo-fuzz needs nightly-only rustc flags
# (-Zsanitizer, sancov passes), and RUSTC_BOOTSTRAP=1 unlocks them on stable.
# The first build compiles llama.cpp again with the fuzz flags (several minutes;
# tests/fuzz/target is kept for the next run).
#
# Seeds (corpus) are made fresh each run, so they always match the current
# index format: the eval alarms of knowledge/eval/alarms.jsonl, and an index of
# three manuals from knowledge/ built by target/release/tidewatch (built first
# if missing).
# A crash leaves its input in tests/fuzz/artifacts/TARGET/ and fails the script;
# reproduce it with
#   RUSTC_BOOTSTRAP=1 cargo fuzz run --fuzz-dir tests/fuzz TARGET FILE
# and, once fixed, copy FILE to tests/fuzz/regressions/TARGET/ so that
# `cargo test --test fuzz_regressions` replays it from then on.
#
# Environment: FUZZ_RSS_MB (default 2048), libFuzzer's memory limit; a larger
# allocation counts as a crash (the board has 4 GB and MemoryMax=2600M).
set -Eeuo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(alarm index)
fuzz_dir=tests/fuzz
export RUSTC_BOOTSTRAP=1

command -v cargo >/dev/null || { echo "fuzz: cargo not found; install Rust with rustup first" >&2; exit 1; }
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz" >&2
    cargo install cargo-fuzz --locked
fi

# ---------------------------------------------------------------- seeds
seed() { mkdir -p "$fuzz_dir/corpus/$1"; }

seed alarm
# Input format (tests/fuzz/src/lib.rs): one byte topic length, topic, payload.
n=0
while IFS= read -r line; do
    alarm=$(sed -E 's/.*"alarm": (\{[^}]*\}).*/\1/' <<<"$line")
    equipment=$(sed -E 's/.*"equipment": "([^"]*)".*/\1/' <<<"$alarm")
    topic="tidewatch/alarm/$equipment"
    {
        printf "\\$(printf '%03o' "${#topic}")"
        printf '%s' "$topic" "$alarm"
    } >"$fuzz_dir/corpus/alarm/eval-$n"
    n=$((n + 1))
done <knowledge/eval/alarms.jsonl

if [[ " ${targets[*]} " == *" index "* ]]; then
    seed index
    bin=target/release/tidewatch
    if [ ! -x "$bin" ]; then
        echo "fuzz: building $bin for the index seed" >&2
        cargo build --release --locked
    fi
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    # Three real manuals (English and Chinese) rather than all of knowledge/:
    # the same format and code paths (inline and listed postings, CJK bigrams,
    # several documents) in 1/20 of the bytes (14 KB), so libFuzzer runs
    # thousands of inputs a second and its mutations land in the header and
    # tables, not mostly in passage text.
    mkdir "$tmp/knowledge"
    cp knowledge/ship/main_engine_lube_oil-en.md knowledge/ship/main_engine_lube_oil-zh.md \
        knowledge/ship/bilge-en.md "$tmp/knowledge/"
    "$bin" index build --knowledge "$tmp/knowledge" --out "$tmp/seed.twx" >/dev/null
    # The first byte is the target's mode: 0 = as is (header and CRC checks),
    # 1 = CRC recomputed after mutation, 3 = lengths too (body decoders).
    for mode in 0 1 3; do
        { printf "\\$(printf '%03o' "$mode")"; cat "$tmp/seed.twx"; } >"$fuzz_dir/corpus/index/seed-mode$mode"
    done
fi

# ---------------------------------------------------------------- run
t=$(date +%s)
status=0
for target in "${targets[@]}"; do
    echo "fuzz: $target for ${seconds}s"
    cargo fuzz run --fuzz-dir "$fuzz_dir" "$target" -- \
        -max_total_time="$seconds" -rss_limit_mb="${FUZZ_RSS_MB:-2048}" -print_final_stats=1 || {
        status=1
        echo "fuzz: $target FAILED; inputs in $fuzz_dir/artifacts/$target/" >&2
    }
done
echo "fuzz: done in $(($(date +%s) - t))s"
exit "$status"
