#!/usr/bin/env bash
# The demo: builds tidewatch, fetches the test model, builds the knowledge
# index, starts a local mosquitto if none is listening on 127.0.0.1:1883,
# starts the daemon, publishes sample alarms in English and Chinese and prints
# the diagnoses. Everything it started is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
model=$(deploy/dev-setup.sh | tail -n1)
cargo build --release
bin=target/release/tidewatch
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

"$bin" index build --knowledge knowledge --out "$work/knowledge.twx"

port=1883
if ! (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null; then
  echo "demo: starting mosquitto on 127.0.0.1:$port" >&2
  printf 'listener %s 127.0.0.1\nallow_anonymous true\n' "$port" > "$work/mosquitto.conf"
  /usr/sbin/mosquitto -c "$work/mosquitto.conf" >/dev/null 2>&1 &
  pids+=($!)
  sleep 0.5
fi

prefix="tidewatch-demo"
cat > "$work/tidewatch.toml" <<TOML
state_dir = "$work/state"
[mqtt]
host = "127.0.0.1"
port = $port
client_id = "tidewatch-demo"
topic_prefix = "$prefix"
[knowledge]
index = "$work/knowledge.twx"
top_k = 3
[llm]
model = "$model"
threads = 2
TOML

"$bin" run --config "$work/tidewatch.toml" 2> "$work/daemon.log" &
pids+=($!)
echo "demo: waiting for tidewatch to come online" >&2
timeout 120 mosquitto_sub -p "$port" -t "$prefix/status" -C 1 | grep -q '"online"' \
  || { echo "demo: tidewatch did not come online; its log:" >&2; cat "$work/daemon.log" >&2; exit 1; }

mosquitto_sub -p "$port" -t "$prefix/diagnosis/#" -t "$prefix/error" -v -C 3 -W 300 > "$work/out" &
sub=$!
sleep 0.3
ts=$(date -u +%Y-%m-%dT%H:%M:%SZ)
pub() { mosquitto_pub -p "$port" -q 1 -t "$prefix/alarm/$1" -m "$2"; echo "demo: alarm -> $prefix/alarm/$1: $2" >&2; }
pub ME1 "{\"id\":\"demo-1\",\"ts\":\"$ts\",\"equipment\":\"ME1\",\"code\":\"ME-JCW-TEMP-HI\",\"severity\":\"major\",\"kind\":\"main_engine_cooling\",\"value\":93.5,\"unit\":\"degC\",\"threshold\":90,\"message\":\"JCW outlet temp high cyl 3\"}"
pub ME1 "{\"id\":\"demo-2\",\"ts\":\"$ts\",\"equipment\":\"ME1\",\"code\":\"ME-LO-PRES-LO\",\"severity\":\"critical\",\"kind\":\"main_engine_lube_oil\",\"value\":1.9,\"unit\":\"bar\",\"threshold\":2.5,\"message\":\"主机滑油进口压力低，备用泵已启动\"}"
pub BUOY-07 "{\"id\":\"demo-3\",\"ts\":\"$ts\",\"equipment\":\"BUOY-07\",\"code\":\"BAT-VOLT-LO\",\"severity\":\"minor\",\"kind\":\"battery\",\"value\":11.2,\"unit\":\"V\",\"message\":\"夜间蓄电池电压低\"}"
wait "$sub" || true
echo
while IFS= read -r line; do
  topic=${line%% *}; body=${line#* }
  echo "== $topic"
  printf '%s\n' "$body" | python3 -m json.tool --no-ensure-ascii 2>/dev/null || printf '%s\n' "$body"
done < "$work/out"
