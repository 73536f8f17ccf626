#!/usr/bin/env bash
# Memory of the daemon and `tidewatch warm` side by side, against the 4 GB
# board: peak RSS of each, anonymous and file-backed apart, and what the two
# and the broker take together.
#
#   deploy/bench-memory.sh [--model GGUF] [--alarms N] [--codes C1,C2] [--slots N]
#                          [--os-mib M] [--board-mib M]
#
# Starts its own mosquitto on a free loopback port and the daemon (`run`) on
# the model (default: $TIDEWATCH_TEST_MODEL), sends N alarms (default 4) and
# waits for their diagnoses, then runs `tidewatch warm --codes ...` beside it
# while N more alarms are answered, so both hold a context and decode at the
# same time. Samples /proc/PID/status (RssAnon, RssFile, VmHWM) and
# /proc/PID/smaps_rollup (Pss_Anon, Pss_File: the model's page cache that the
# two processes share counted once) of the daemon, warm and the broker every
# 0.2 s and prints the peaks, and each process's CPU_REPACK buffer from
# llama.cpp's log: on x86 llama.cpp copies the weights it repacks for its CPU
# kernels into anonymous memory; the A72 makes no such copy, so the board's
# figure is printed without it too. --os-mib is what the OS, journald and
# their page cache take beside (default 500); --board-mib the board's RAM
# (default 4096).
set -euo pipefail
cd "$(dirname "$0")/.."

model=${TIDEWATCH_TEST_MODEL:-}
n=4
codes="ADCP-NO-DATA,UPS-ON-BATT,SAT-LINK-DOWN"
slots=1
os_mib=500
board_mib=4096
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model=$2; shift ;;
    --alarms) n=$2; shift ;;
    --codes) codes=$2; shift ;;
    --slots) slots=$2; shift ;;
    --os-mib) os_mib=$2; shift ;;
    --board-mib) board_mib=$2; shift ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench-memory: unknown argument: $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$model" ] && [ -f "$model" ] || {
  echo "bench-memory: no model: pass --model GGUF or set TIDEWATCH_TEST_MODEL (deploy/fetch-models.sh fetches the test model, --standin the stand-in)" >&2
  exit 2
}
command -v mosquitto_pub >/dev/null && [ -x /usr/sbin/mosquitto ] || {
  echo "bench-memory: needs mosquitto and mosquitto-clients (apt-get install mosquitto mosquitto-clients)" >&2
  exit 2
}

# TW=path/to/tidewatch measures that build instead.
if [ -n "${TW:-}" ]; then tw=$TW; else cargo build --release --quiet; tw=target/release/tidewatch; fi
work=$(mktemp -d /tmp/tidewatch-memory.XXXXXX)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$work"' EXIT
"$tw" index build --knowledge knowledge --out "$work/knowledge.twx" >/dev/null

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
printf 'listener %s 127.0.0.1\nallow_anonymous true\n' "$port" >"$work/mosquitto.conf"
/usr/sbin/mosquitto -c "$work/mosquitto.conf" >/dev/null 2>&1 &
broker=$!
pids+=("$broker")
for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.1; done

cat >"$work/tidewatch.toml" <<EOF
state_dir = "$work/state"
[mqtt]
host = "127.0.0.1"
port = $port
client_id = "tidewatch-memory-bench"
topic_prefix = "bench"
[knowledge]
index = "$work/knowledge.twx"
[llm]
model = "$model"
threads = 2
slots = $slots
max_tokens = 96
EOF
# llama.cpp's own log says how large its buffers are (CPU_REPACK among them).
logs="info,llama_cpp_2=info,llama-cpp-2=info"
RUST_LOG=$logs "$tw" run --config "$work/tidewatch.toml" 2>"$work/daemon.log" &
daemon=$!
pids+=("$daemon")
for _ in $(seq 1800); do grep -q "tidewatch ready" "$work/daemon.log" && break; sleep 0.1; done
grep -q "tidewatch ready" "$work/daemon.log" || { tail -20 "$work/daemon.log" >&2; echo "bench-memory: the daemon never got ready" >&2; exit 1; }

# One line per sample: who, RssAnon, RssFile, VmHWM, Pss_Anon, Pss_File (kB).
sample() {
  local who=$1 pid=$2
  [ -r "/proc/$pid/status" ] || return 0
  awk -v who="$who" '
    FNR == NR && /^RssAnon:/ { a = $2 } FNR == NR && /^RssFile:/ { f = $2 } FNR == NR && /^VmHWM:/ { h = $2 }
    FNR != NR && /^Pss_Anon:/ { pa = $2 } FNR != NR && /^Pss_File:/ { pf = $2 }
    END { if (h) print who, a + 0, f + 0, h + 0, pa + 0, pf + 0 }' \
    "/proc/$pid/status" "/proc/$pid/smaps_rollup" 2>/dev/null || true
}
warm_pid_file=$work/warm.pid
sampler() {
  while :; do
    local w=""
    [ -s "$warm_pid_file" ] && w=$(cat "$warm_pid_file")
    { sample daemon "$daemon"; [ -z "$w" ] || sample warm "$w"; sample broker "$broker"; } |
      awk -v t="$(date +%s.%N)" '{ print t, $0 }'
    sleep 0.2
  done >>"$work/samples"
}
sampler &
pids+=($!)

send() { # $1: first id, $2: how many
  local i
  for i in $(seq "$1" $(($1 + $2 - 1))); do
    # One engine each: the same equipment and code would be merged.
    printf '{"id":"mem-%d","ts":"2026-12-06T00:00:00Z","equipment":"ME%d","code":"ME-LO-PRES-LO","severity":"major","kind":"main_engine_lube_oil","value":1.1,"unit":"bar","threshold":2.0,"message":"main engine lube oil pressure low"}' "$i" "$i" |
      mosquitto_pub -p "$port" -q 1 -t "bench/alarm/ME$i" -s
  done
}
answered() { # waits for $1 diagnoses on a subscription started before the alarms
  local sub=$2
  for _ in $(seq 6000); do
    [ "$(grep -c . "$sub" 2>/dev/null || true)" -ge "$1" ] && return 0
    sleep 0.1
  done
  echo "bench-memory: only $(grep -c . "$sub") of $1 alarms answered in 600 s" >&2
  return 1
}

echo "bench-memory: daemon ready; $n alarms alone" >&2
mosquitto_sub -p "$port" -t 'bench/diagnosis/#' >"$work/diag1" &
pids+=($!)
sleep 0.3
send 0 "$n"
answered "$n" "$work/diag1"

echo "bench-memory: warm --codes $codes beside the daemon, $n more alarms meanwhile" >&2
mosquitto_sub -p "$port" -t 'bench/diagnosis/#' >"$work/diag2" &
pids+=($!)
sleep 0.3
RUST_LOG=$logs "$tw" warm --codes "$codes" --config "$work/tidewatch.toml" >"$work/warm.out" 2>"$work/warm.log" &
warm=$!
echo "$warm" >"$warm_pid_file"
send 100 "$n"
answered "$n" "$work/diag2"
wait "$warm" || { tail -20 "$work/warm.log" >&2; echo "bench-memory: warm failed" >&2; exit 1; }
sleep 0.5
kill -TERM "$daemon"
wait "$daemon" 2>/dev/null || true

repack() { # MiB of llama.cpp's CPU_REPACK buffer in a log (0 without one)
  grep -o 'CPU_REPACK model buffer size = *[0-9.]* MiB' "$1" | head -1 | grep -o '[0-9.]* MiB' | cut -d' ' -f1 || true
}
# The KV cache of one context: MiB and cells, from llama.cpp's log.
kv=$(grep -o 'size = *[0-9.]* MiB ( *[0-9]* cells' "$work/daemon.log" | head -1 | tr -s ' ' | cut -d' ' -f3,6)
kv_mib=${kv%% *}; kv_cells=${kv##* }
rd=$(repack "$work/daemon.log"); rd=${rd:-0}
rw=$(repack "$work/warm.log"); rw=${rw:-0}
model_mib=$(( $(stat -c %s "$model") / 1048576 ))

awk -v kv_mib="${kv_mib:-0}" -v kv_cells="${kv_cells:-1}" -v rd="$rd" -v rw="$rw" -v os="$os_mib" -v board="$board_mib" -v model="$model" -v model_mib="$model_mib" -v slots="$slots" '
  function mib(k) { return k / 1024 }
  {
    t = $1; who = $2
    if ($3 > anon[who]) anon[who] = $3
    if ($4 > file[who]) file[who] = $4
    if ($5 > hwm[who]) hwm[who] = $5
    if ($6 + $7 > pss[who]) pss[who] = $6 + $7
    A[t] += $3; P[t] += $6 + $7; PA[t] += $6
    if (who == "warm") W[t] = 1
  }
  END {
    printf "model %s (%d MiB), daemon llm.slots = %d\n", model, model_mib, slots
    printf "%-8s %14s %14s %10s %10s %12s\n", "process", "peak RssAnon", "peak RssFile", "VmHWM", "peak Pss", "CPU_REPACK"
    split("daemon warm broker", order, " ")
    for (i = 1; i <= 3; i++) {
      w = order[i]; r = (w == "daemon") ? rd : (w == "warm") ? rw : 0
      printf "%-8s %10.0f MiB %10.0f MiB %6.0f MiB %6.0f MiB %8.0f MiB\n", w, mib(anon[w]), mib(file[w]), mib(hwm[w]), mib(pss[w]), r
    }
    for (t in P) { if (P[t] > pt) { pt = P[t]; pat = PA[t] }; if ((t in W) && A[t] > aw) aw = A[t] }
    printf "together (warm running): peak RssAnon %.0f MiB; peak Pss %.0f MiB (anonymous %.0f MiB; the shared model pages counted once)\n", mib(aw), mib(pt), mib(pat)
    total = mib(pt) + os
    printf "with the OS and journald (%d MiB): %.0f of %d MiB, %.0f MiB left for page cache\n", os, total, board, board - total
    norepack = total - rd - rw
    printf "without x86'\''s repacked weights (the A72 makes none): %.0f MiB, %.0f MiB left\n", norepack, board - norepack
    # A 1.7B-class model (28 layers, 8 KV heads of 128) holds 112 KiB a
    # token at f16: each context (the daemon'\''s slots and warm'\''s one)
    # grows by the difference.
    per = kv_mib * 1024 / kv_cells
    grow = (112 - per) * kv_cells / 1024 * (slots + 1)
    printf "KV: %.0f MiB a context (%d cells, %.0f KiB a token); a 1.7B-class model'\''s 112 KiB a token adds %.0f MiB over %d contexts: %.0f MiB, %.0f MiB left\n", kv_mib, kv_cells, per, grow, slots + 1, norepack + grow, board - norepack - grow
  }' "$work/samples"
echo "bench-memory: $(tail -1 "$work/warm.out")" >&2
