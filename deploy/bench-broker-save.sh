#!/usr/bin/env bash
# What the broker's save-every-2-s costs in a storm: the rate at which mosquitto
# takes QoS 1 alarms from a sensor (PUBACKs per second) with the persistence
# settings of deploy/mosquitto/local.conf, and with them taken out (mosquitto's
# default: a save every 1,800 s), one after the other in one run, while the
# daemon's persistent session is away (every alarm is queued in it: the largest
# database to save) and while a subscriber takes them. Also once with
# autosave_on_changes true (a save after nearly every queued alarm), on a
# storm a hundredth the size (at most 2,000), for comparison.
#
#   deploy/bench-broker-save.sh [--alarms N] [--db-dir DIR]
#
# N alarms (default 200000) go out as fast as mosquitto_pub goes; the broker's
# database is in a temp dir under DIR (default /var/tmp: put it on the disk to
# measure). The broker-wide limits are local.conf's. Read the ratios; the
# absolute rates depend on the machine and what else runs on it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

n=200000
dbdir=/var/tmp
while [ $# -gt 0 ]; do
    case "$1" in
    --alarms) n=$2; shift ;;
    --db-dir) dbdir=$2; shift ;;
    -h | --help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench-broker-save: unknown argument: $1 (try --help)" >&2; exit 2 ;;
    esac
    shift
done
for tool in mosquitto mosquitto_pub mosquitto_sub; do
    command -v "$tool" >/dev/null || { echo "bench-broker-save: $tool not found (apt-get install mosquitto mosquitto-clients)" >&2; exit 1; }
done

work=$(mktemp -d "$dbdir/tidewatch-broker-save.XXXXXX")
# mosquitto drops root to its own user, which must write the database.
chmod 0777 "$work"
broker='' sub=''
trap 'kill $broker $sub 2>/dev/null || true; rm -rf "$work"' EXIT

limits=$(grep -E '^(max_queued_messages|max_inflight_messages|max_packet_size) ' "$here/mosquitto/local.conf")
saves=$(grep -E '^autosave_' "$here/mosquitto/local.conf" || true)
[ -n "$saves" ] || { echo "bench-broker-save: local.conf sets no autosave_*" >&2; exit 1; }

for i in $(seq 0 $((n - 1))); do
    printf '{"id":"s-%d","ts":"2026-12-02T00:00:00Z","equipment":"PUMP","code":"BENCH-%d","severity":"warning","kind":"main_engine_cooling","message":"storm alarm %d"}\n' "$i" "$i" "$i"
done >"$work/alarms"

# run NAME DAEMON SETTINGS ALARMS: prints the intake rate in alarms/s
run() {
    local name=$1 daemon=$2 settings=$3 count=$4 port d t0 t1
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    d="$work/$name-$daemon"
    mkdir -m 0777 "$d"
    printf 'listener %s 127.0.0.1\nallow_anonymous true\npersistence true\npersistence_location %s/\n%s\n%s\n' \
        "$port" "$d" "$limits" "$settings" >"$d/mosquitto.conf"
    mosquitto -c "$d/mosquitto.conf" >"$d/log" 2>&1 &
    broker=$!
    for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
    # The daemon's persistent session, then away or reading.
    mosquitto_sub -p "$port" -c -i daemon -q 1 -t 'tidewatch/alarm/#' -E
    if [ "$daemon" = reading ]; then
        mosquitto_sub -p "$port" -c -i daemon -q 1 -t 'tidewatch/alarm/#' >/dev/null &
        sub=$!
        sleep 0.3
    fi
    t0=$(date +%s.%N)
    head -n "$count" "$work/alarms" | mosquitto_pub -p "$port" -q 1 -t tidewatch/alarm/PUMP -l
    t1=$(date +%s.%N)
    kill $broker $sub 2>/dev/null || true
    wait $broker $sub 2>/dev/null || true
    broker='' sub=''
    awk -v n="$count" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", n / (b - a) }'
}

echo "bench-broker-save: $n QoS 1 alarms, database in $dbdir" >&2
for daemon in away reading; do
    without=$(run default "$daemon" "" "$n")
    with=$(run shipped "$daemon" "$saves" "$n")
    echo "daemon $daemon: without autosave $without alarms/s, with local.conf's ($(echo $saves)) $with alarms/s: ratio $(awk -v a="$with" -v b="$without" 'BEGIN { printf "%.2f", a / b }')"
done
small=$((n / 100 < 2000 ? n / 100 : 2000))
without=$(run default-small away "" "$small")
changes=$(run changes away "autosave_interval 1
autosave_on_changes true" "$small")
echo "daemon away, $small alarms: without autosave $without alarms/s, autosave_on_changes true + autosave_interval 1 $changes alarms/s: ratio $(awk -v a="$changes" -v b="$without" 'BEGIN { printf "%.3f", a / b }')"
