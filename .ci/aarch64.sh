#!/usr/bin/env bash
# Cross-builds the release binary for the RK3576 board (aarch64, Cortex-A72/A53) and
# runs it under user-mode qemu emulating a Cortex-A53, the weakest core on the board,
# so an instruction the board lacks (dotprod, i8mm, SVE) fails here with SIGILL
# instead of at sea. Installs what it needs (apt, rustup) when missing. Run from
# anywhere; needs root only when something has to be installed.
#
#   .ci/aarch64.sh              toolchain, build, flags, qemu run, .deb
#   .ci/aarch64.sh --toolchain  only install what it needs (apt, rustup), so that
#                               CI can run the rest in the background while other
#                               stages run, with no two apt-gets at once
#
# Environment:
#   TW_AARCH64_TARGET_DIR=/tmp/tw-aarch64   cargo target dir (never the repo's target/,
#                                           which the x86_64 build uses)
#   TW_QEMU_CPU=cortex-a53                  qemu -cpu model
set -Eeuo pipefail

toolchain_only=0
case "${1:-}" in
    --toolchain) toolchain_only=1 ;;
    "") ;;
    *) echo "usage: .ci/aarch64.sh [--toolchain]" >&2; exit 2 ;;
esac
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
target=aarch64-unknown-linux-gnu
target_dir=${TW_AARCH64_TARGET_DIR:-/tmp/tw-aarch64}
sysroot=/usr/aarch64-linux-gnu
qemu=(qemu-aarch64 -cpu "${TW_QEMU_CPU:-cortex-a53}" -L "$sysroot")
bin=$target_dir/$target/release/tidewatch

step=setup
t_step=0
t_all=$(date +%s.%N)
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
begin() {
    step=$1
    t_step=$(date +%s.%N)
    echo "[aarch64] == $step"
}
end() { echo "[aarch64]    $step ok ($(elapsed "$t_step")s)${1:+ $1}"; }
fail() {
    echo "[aarch64] FAILED at '$step': $*" >&2
    exit 1
}
trap 'fail "command failed at line $LINENO: $BASH_COMMAND"' ERR

work=$(mktemp -d /tmp/tw-aarch64-run.XXXXXX)
trap 'rm -rf "$work"' EXIT

# ------------------------------------------------------------------ toolchain
begin toolchain
need=()
for pkg in gcc-aarch64-linux-gnu g++-aarch64-linux-gnu binutils-aarch64-linux-gnu \
    libc6-dev-arm64-cross cmake clang libclang-dev qemu-user jq; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed' || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
    [ "$(id -u)" -eq 0 ] || fail "missing packages ${need[*]}; run as root or apt-get install them"
    echo "[aarch64] installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null || fail "apt-get update failed"
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null ||
        fail "apt-get install ${need[*]} failed"
fi
command -v cargo >/dev/null || fail "cargo not found (install rustup)"
if ! rustup target list --installed | grep -qx "$target"; then
    rustup target add "$target" || fail "rustup target add $target failed"
fi
end
[ "$toolchain_only" = 0 ] || exit 0

# ------------------------------------------------------------------ build
begin build
cd "$repo"
locked=()
[ -f Cargo.lock ] && locked=(--locked)
# .cargo/config.toml supplies the linker, the cross compilers, the Cortex-A72/A53
# flags and the bindgen sysroot; nothing is passed here so that a developer's plain
# `cargo build --target aarch64-unknown-linux-gnu` is exactly what CI tests.
CARGO_TARGET_DIR=$target_dir cargo build --release "${locked[@]}" --target "$target" ||
    fail "cargo build --target $target failed"
[ -x "$bin" ] || fail "no binary at $bin"
end "($(du -h "$bin" | cut -f1), $(stat -c %s "$bin") bytes)"

# ------------------------------------------------------------------ cpu flags
begin cpu-flags
aarch64-linux-gnu-readelf -h "$bin" | grep -q 'Machine:.*AArch64' || fail "$bin is not an AArch64 ELF"
cache=$(find "$target_dir/$target/release/build" -path '*llama-cpp-sys-2-*/out/build/CMakeCache.txt' -printf '%T@ %p\n' |
    sort -n | tail -n1 | cut -d' ' -f2-)
[ -n "$cache" ] || fail "no llama.cpp CMakeCache.txt under $target_dir"
grep -q '^GGML_NATIVE:BOOL=OFF$' "$cache" || fail "GGML_NATIVE is not OFF in $cache: the build would target the build machine's CPU"
grep -q '^GGML_CPU_ARM_ARCH:STRING=armv8-a$' "$cache" ||
    fail "GGML_CPU_ARM_ARCH is not armv8-a in $cache: $(grep '^GGML_CPU_ARM_ARCH' "$cache" || echo unset)"
if grep -E '^CMAKE_C(XX)?_FLAGS:' "$cache" | grep -Eq 'dotprod|i8mm|sve|armv8\.[1-9]|armv9'; then
    fail "llama.cpp compiled with flags beyond ARMv8.0-A: $(grep -E '^CMAKE_C(XX)?_FLAGS:' "$cache")"
fi
# The decisive check: no instruction the Cortex-A72/A53 lacks made it into the binary.
aarch64-linux-gnu-objdump -d --no-show-raw-insn "$bin" >"$work/dis.txt"
bad=$(grep -cE $'\t(sdot|udot|usdot|sudot|smmla|ummla|usmmla|bfmmla|bfdot|ptrue|whilelo|ld1[bhwd])\t' "$work/dis.txt" || true)
[ "$bad" -eq 0 ] || fail "$bad dotprod/i8mm/SVE instructions in $bin: $(grep -m3 -E $'\t(sdot|udot|smmla|ummla|ptrue|whilelo)\t' "$work/dis.txt")"
end "(GGML_NATIVE=OFF, GGML_CPU_ARM_ARCH=armv8-a, no dotprod/i8mm/SVE instructions)"

# ------------------------------------------------------------------ run under qemu
begin version
"${qemu[@]}" "$bin" --version || fail "$bin --version failed under ${qemu[*]}"
end

begin index-build
"${qemu[@]}" "$bin" index build --knowledge "$repo/knowledge" --out "$work/knowledge.twx" ||
    fail "index build failed"
[ -s "$work/knowledge.twx" ] || fail "index build wrote an empty $work/knowledge.twx"
end "($(stat -c %s "$work/knowledge.twx") bytes)"

begin query
"${qemu[@]}" "$bin" query --index "$work/knowledge.twx" --top-k 3 --json \
    ME-LO-PRES-LO main engine lube oil pressure low >"$work/query.json" || fail "query failed"
jq -e 'length > 0' "$work/query.json" >/dev/null || fail "query returned no passages: $(head -c 300 "$work/query.json")"
end "(top hit: $(jq -r '.[0] | "\(.doc) / \(.section)"' "$work/query.json"))"

begin model
model=$("$repo/deploy/fetch-models.sh" | head -n1) || fail "deploy/fetch-models.sh failed"
[ -s "$model" ] || fail "deploy/fetch-models.sh gave no model file ('$model')"
end "($model)"

begin diagnose
cat >"$work/tidewatch.toml" <<EOF
state_dir = "$work/state"
[mqtt]
host = "127.0.0.1"
port = 1883
topic_prefix = "tidewatch"
[knowledge]
index = "$work/knowledge.twx"
top_k = 1
[llm]
model = "$model"
threads = 2
# qemu emulates NEON slowly, so a short prompt keeps CI near 4 min while still
# running retrieval, prompt assembly, prefill, decode and JSON parsing as aarch64
# code. 512 is about the least that holds the alarm's causes and checks with the
# test model's 200-token system prompt (at 256 no passage fit: a written answer,
# published as the passages' items, not a model answer).
prompt_budget = 512
max_tokens = 96
[watchdog]
# The defaults (20 s without decode progress = hung) are for the board; one emulated
# prefill batch takes minutes (more when CI runs this beside the tests, at a low
# priority), and a "hung" slot would end in the degraded fallback instead of
# testing the model.
stall_timeout_s = 1800
deadline_s = 3600
hard_timeout_s = 60
EOF
mkdir -p "$work/state"
cat >"$work/alarm.json" <<'EOF'
{"id":"aarch64-ci-1","ts":"2026-01-01T00:00:00Z","equipment":"ME1","code":"ME-LO-PRES-LO","severity":"major","kind":"main_engine_lube_oil","value":1.1,"unit":"bar","threshold":2.0,"message":"main engine lube oil pressure low"}
EOF
"${qemu[@]}" "$bin" diagnose --config "$work/tidewatch.toml" --alarm "$work/alarm.json" >"$work/diag.json" 2>"$work/diag.err" ||
    fail "diagnose failed: $(tail -20 "$work/diag.err")"
jq -e '.alarm_id == "aarch64-ci-1"' "$work/diag.json" >/dev/null ||
    fail "diagnosis is not JSON with alarm_id aarch64-ci-1: $(head -c 500 "$work/diag.json")"
# "degraded" means the model part was skipped or cancelled: the manuals-only fallback
# would pass the JSON check above without a single token generated on aarch64.
mode=$(jq -r '.mode' "$work/diag.json")
[ "$mode" = full ] || fail "diagnosis mode is '$mode', not 'full' (model did not answer): timings $(jq -c .timings "$work/diag.json")"
end "($(jq -r '.timings | "\(.prompt_tokens) prompt tokens, ttft \(.ttft_ms / 1000 | floor) s, \(.generated_tokens) tokens at \(.tokens_per_s) tok/s"' "$work/diag.json"))"
echo "[aarch64]    diagnosis: $(jq -c . "$work/diag.json" | head -c 400)"

# ------------------------------------------------------------------ .deb
# Only where cargo-deb is installed (cargo install cargo-deb): CI need not compile it.
if cargo deb --version >/dev/null 2>&1; then
    begin deb
    # The index goes where Cargo.toml's deb assets expect it (target/release/ as
    # cargo-deb maps it for this target and target dir).
    "${qemu[@]}" "$bin" index build --knowledge "$repo/knowledge" --out "$(dirname "$bin")/knowledge.twx" >/dev/null ||
        fail "index build for the package failed"
    deb=$(CARGO_TARGET_DIR=$target_dir cargo deb --no-build --target "$target" 2>"$work/deb.err" | tail -n1) ||
        fail "cargo deb failed: $(tail -20 "$work/deb.err")"
    [ -f "$deb" ] || fail "cargo deb printed no package path: $(tail -5 "$work/deb.err")"
    dpkg-deb -f "$deb" Architecture | grep -qx arm64 || fail "$deb is not an arm64 package"
    end "($deb, depends: $(dpkg-deb -f "$deb" Depends))"
else
    echo "[aarch64] (skipping .deb: cargo-deb not installed)"
fi

echo "[aarch64] PASSED in $(elapsed "$t_all")s; binary $bin ($(stat -c %s "$bin") bytes)"
