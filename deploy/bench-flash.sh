#!/usr/bin/env bash
# Flash wear: the bytes an answered alarm makes the board write, the daemon's
# (write_bytes in /proc/PID/io: inbox, outbox, prompt states) and the broker's
# (its database, saved every autosave_interval as deploy/mosquitto/local.conf
# sets), measured per alarm on a real disk, then projected for a 1.7B-class
# model and turned into an eMMC lifetime.
#
#   deploy/bench-flash.sh [--model GGUF] [--dir DIR] [--rate ALARMS_PER_DAY]
#
# GGUF: default the 1.5B stand-in (deploy/fetch-models.sh --standin). DIR: where
# the state and the broker's database go (default /var/tmp; tmpfs writes count
# nothing). Two faults are raised three times each (new ids and readings), one
# at a time: a first sight, a second, a third. Bytes do not depend on the load,
# so the figures hold on a shared machine. TW=path picks the binary (default
# target/release/tidewatch).
#
# The projection scales the prompt states by the KV bytes per token: a 1.7B-class
# model holds ~112 KiB a token at f16, four times the stand-in's ~28 KiB. The
# lifetime: an 8 GB eMMC, ~3,000 P/E cycles (MLC), write amplification 4, the
# prompt states' share a quarter of it (llm::FLASH_BUDGET_PER_DAY).
set -euo pipefail
cd "$(dirname "$0")/.."

model=""
base=/var/tmp
rate=200
while [ $# -gt 0 ]; do
    case "$1" in
    --model) model=$2; shift ;;
    --dir) base=$2; shift ;;
    --rate) rate=$2; shift ;;
    -h | --help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench-flash: unknown argument: $1 (try --help)" >&2; exit 2 ;;
    esac
    shift
done
[ -n "$model" ] || model=$(deploy/fetch-models.sh --standin | tail -n1)
[ -f "$model" ] || { echo "bench-flash: no model at $model (deploy/fetch-models.sh --standin fetches the stand-in)" >&2; exit 1; }
for tool in mosquitto mosquitto_pub mosquitto_sub python3; do
    command -v "$tool" >/dev/null || { echo "bench-flash: $tool not found (apt-get install mosquitto mosquitto-clients python3)" >&2; exit 1; }
done
tw=${TW:-target/release/tidewatch}
[ -x "$tw" ] || { echo "bench-flash: no binary at $tw (cargo build --release)" >&2; exit 1; }

work=$(mktemp -d "$base/tidewatch-flash.XXXXXX")
chmod 0777 "$work"
broker='' daemon=''
trap 'kill $daemon $broker 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
"$tw" index build --knowledge knowledge --out "$work/knowledge.twx" >/dev/null

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
saves=$(grep -E '^autosave_' deploy/mosquitto/local.conf)
printf 'listener %s 127.0.0.1\nallow_anonymous true\npersistence true\npersistence_location %s/\n%s\n' \
    "$port" "$work" "$saves" >"$work/mosquitto.conf"
mosquitto -c "$work/mosquitto.conf" >"$work/mosquitto.log" 2>&1 &
broker=$!
for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done

cat >"$work/tidewatch.toml" <<EOF
state_dir = "$work/state"
[mqtt]
host = "127.0.0.1"
port = $port
client_id = "tidewatch-flash-bench"
topic_prefix = "bench"
[knowledge]
index = "$work/knowledge.twx"
top_k = 3
[llm]
model = "$model"
threads = 2
EOF
RUST_LOG=tidewatch=debug "$tw" run --config "$work/tidewatch.toml" 2>"$work/daemon.log" &
daemon=$!
for _ in $(seq 3000); do grep -q "tidewatch ready" "$work/daemon.log" && break; sleep 0.2; done
grep -q "tidewatch ready" "$work/daemon.log" || { tail -20 "$work/daemon.log" >&2; echo "bench-flash: the daemon never got ready" >&2; exit 1; }
# The start's own writes (the static prefix's state) are not an alarm's.
for _ in $(seq 3000); do grep -q "prompt prefix" "$work/daemon.log" && break; sleep 0.2; done
sleep 2

wb() { awk '/^write_bytes/ {print $2}' "/proc/$1/io"; }
state_bytes() { { find "$work/state/kv/prompts" -name 'block-*.kv' -printf '%s\n' 2>/dev/null || true; } | awk '{s+=$1} END {print s+0}'; }

alarm() { # alarm ID CODE KIND MESSAGE VALUE
    printf '{"id":"%s","ts":"2026-12-06T00:00:00Z","equipment":"ME1","code":"%s","severity":"major","kind":"%s","message":"%s","value":%s}' "$1" "$2" "$3" "$4" "$5"
}
faults=(
    "ME-JCW-TEMP-HI|main_engine_cooling|jacket cooling water outlet temperature high"
    "ME-LO-PRES-LO|main_engine_lube_oil|main engine lube oil pressure low"
)
printf 'alarm\tsight\tdaemon_bytes\tbroker_bytes\tstates_written\n' >"$work/rows"
n=0
for f in "${faults[@]}"; do
    IFS='|' read -r code kind msg <<<"$f"
    for sight in 1 2 3; do
        n=$((n + 1))
        id="flash-$n"
        d0=$(wb "$daemon") b0=$(wb "$broker") s0=$(state_bytes)
        mosquitto_sub -p "$port" -q 1 -t 'bench/diagnosis/#' -C 1 -W 900 >"$work/diag" &
        sub=$!
        sleep 0.5
        mosquitto_pub -p "$port" -q 1 -t bench/alarm/ME1 -m "$(alarm "$id" "$code" "$kind" "$msg" "$((90 + n)).5")"
        wait $sub || { tail -20 "$work/daemon.log" >&2; echo "bench-flash: no diagnosis for $id" >&2; exit 1; }
        # The states are written after the publication; the broker saves
        # within autosave_interval.
        sleep 4
        s1=$(state_bytes)
        printf '%s\t%s\t%s\t%s\t%s\n' "$id" "$sight" $(($(wb "$daemon") - d0)) $(($(wb "$broker") - b0)) $((s1 > s0 ? s1 - s0 : 0)) >>"$work/rows"
        echo "bench-flash: $id ($code, sight $sight) answered" >&2
    done
done

# What the old policy (both states at every first sight) would have written:
# the states of each fault, as its second sight wrote them.
python3 - "$work/rows" "$rate" "$(basename "$model")" <<'EOF'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])][1:]
rate = float(sys.argv[2])
MiB = 1 << 20
print(f"model {sys.argv[3]}, {len(rows)} alarms (2 faults x 3 sights), bytes per answered alarm:")
print(f"{'alarm':10} {'sight':>5} {'daemon':>12} {'broker':>10} {'states':>12}")
for a, s, d, b, st in rows:
    print(f"{a:10} {s:>5} {int(d):>12,} {int(b):>10,} {int(st):>12,}")
n = len(rows)
daemon = sum(int(r[2]) for r in rows) / n
broker = sum(int(r[3]) for r in rows) / n
states = sum(int(r[4]) for r in rows) / n
other = daemon - states
second = [int(r[4]) for r in rows if r[1] == "2"]
per_fault = sum(second) / len(second)
print(f"mean per alarm: daemon {daemon/MiB:.2f} MiB (prompt states {states/MiB:.2f} MiB, the rest {other/1024:.0f} KiB), broker {broker/1024:.1f} KiB")
print(f"states of one fault (passage block + alarm): {per_fault/MiB:.2f} MiB; the old policy wrote them at every first sight")
budget = 384 * MiB
endurance = 8e9 * 3000 / 4  # host bytes the eMMC takes at write amplification 4
for name, k in (("stand-in", 1), ("1.7B-class (x4 KV)", 4)):
    # Worst case for the day: every alarm a new fault. Old policy: both states
    # each; second sight: both states for each fault seen twice, at most half
    # the alarms, and never past the budget.
    old = rate * (per_fault * k + other + broker)
    new_states = min(rate / 2 * per_fault * k, budget)
    new = new_states + rate * (other + broker)
    for label, day in (("old policy", old), ("second sight + budget", new)):
        years = endurance / (day * 365.25) if day else float("inf")
        print(f"{name}: {label}: {day/MiB:,.0f} MiB/day at {rate:.0f} alarms/day -> the whole eMMC's endurance lasts {years:,.1f} years")
EOF
