#!/usr/bin/env bash
# How fast tidewatch takes a storm off the broker: alarms made durable in the
# inbox (group fsync) and acknowledged, per second, while the model works.
#
#   deploy/bench-intake.sh [--alarms N] [--state-dir DIR] [--inbox-bytes B]
#
# Starts its own mosquitto on a free loopback port with an unbounded queue
# (so the broker drops nothing and the figure is tidewatch's own), starts the
# daemon with the test model, publishes N QoS 1 alarms (default 20000,
# distinct codes, so none merge) as fast as mosquitto_pub goes, and reads the
# daemon's debug log: each group commit logs `flushed alarms=K ... acked=A`
# (A: alarms acknowledged, journaled or answered at once). Prints the
# alarms per second from the first flush to the one that completes N, and
# the alarms per fsync. --state-dir puts the inbox on the disk to measure
# (default: a temp dir). --inbox-bytes sets [inbox] max_bytes: a small one
# (say 1048576) is full for most of the storm, which measures intake at a
# full inbox. Fails if the daemon does not take all N in 120 s.
set -euo pipefail
cd "$(dirname "$0")/.."

n=20000
state=""
inbox=""
while [ $# -gt 0 ]; do
  case "$1" in
    --alarms) n=$2; shift ;;
    --state-dir) state=$2; shift ;;
    --inbox-bytes) inbox=$2; shift ;;
    -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench-intake: unknown argument: $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done

model=$(deploy/dev-setup.sh | tail -n1)
# TW=path/to/tidewatch measures that build instead (an older commit's).
if [ -n "${TW:-}" ]; then tw=$TW; else cargo build --release --quiet; tw=target/release/tidewatch; fi
work=$(mktemp -d /tmp/tidewatch-intake.XXXXXX)
[ -n "$state" ] || state="$work/state"
mkdir -p "$state"
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$work"' EXIT
"$tw" index build --knowledge knowledge --out "$work/knowledge.twx" >/dev/null

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$work/mosquitto.conf" <<EOF
listener $port 127.0.0.1
allow_anonymous true
max_inflight_messages 20
max_queued_messages 0
EOF
/usr/sbin/mosquitto -c "$work/mosquitto.conf" >/dev/null 2>&1 &
pids+=($!)
for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.1; done

cat >"$work/tidewatch.toml" <<EOF
state_dir = "$state"
[mqtt]
host = "127.0.0.1"
port = $port
client_id = "tidewatch-intake-bench"
topic_prefix = "bench"
[knowledge]
index = "$work/knowledge.twx"
top_k = 3
[llm]
model = "$model"
threads = 2
max_tokens = 48
EOF
[ -z "$inbox" ] || printf '[inbox]\nmax_bytes = %s\n' "$inbox" >>"$work/tidewatch.toml"
RUST_LOG=tidewatch=debug "$tw" run --config "$work/tidewatch.toml" 2>"$work/daemon.log" &
pids+=($!)
for _ in $(seq 600); do grep -q "tidewatch ready" "$work/daemon.log" && break; sleep 0.1; done
grep -q "tidewatch ready" "$work/daemon.log" || { cat "$work/daemon.log" >&2; echo "bench-intake: daemon never got ready" >&2; exit 1; }

for i in $(seq 0 $((n - 1))); do
  printf '{"id":"b-%d","ts":"2026-12-02T00:00:00Z","equipment":"PUMP","code":"BENCH-%d","severity":"warning","kind":"main_engine_cooling","message":"intake bench"}\n' "$i" "$i"
done >"$work/alarms.jsonl"
echo "bench-intake: publishing $n alarms" >&2
mosquitto_pub -h 127.0.0.1 -p "$port" -q 1 -t bench/alarm/PUMP -l <"$work/alarms.jsonl"

# Wait until the flushed alarms add up to n.
total=0
for _ in $(seq 1200); do
  total=$(sed 's/\x1b\[[0-9;]*m//g' "$work/daemon.log" | grep -o 'acked=[0-9]*' | awk -F= '{s+=$2} END {print s+0}')
  [ "$total" -ge "$n" ] && break
  sleep 0.1
done
[ "$total" -ge "$n" ] || { echo "bench-intake: only $total of $n alarms taken in 120 s" >&2; exit 1; }

sed 's/\x1b\[[0-9;]*m//g' "$work/daemon.log" | grep 'flushed' | python3 -c '
import sys, datetime
n = int(sys.argv[1])
first = last = None; total = 0; fsyncs = 0
for line in sys.stdin:
    parts = line.split()
    ts = datetime.datetime.fromisoformat(parts[0].replace("Z", "+00:00"))
    k = int(line.split("acked=")[1].split()[0])
    if k == 0:
        continue
    first = first or ts
    total += k; last = ts
    fsyncs += int(line.split("alarms=")[1].split()[0]) > 0
    if total >= n:
        break
secs = (last - first).total_seconds()
print(f"intake: {total} alarms durable and acknowledged in {secs:.2f} s = {total / secs:.0f} alarms/s, {fsyncs} inbox fsyncs ({total / max(fsyncs, 1):.1f} alarms each)")
' "$n"
