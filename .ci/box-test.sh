#!/usr/bin/env bash
# The board in a box: boots a throwaway Debian bookworm with systemd and mosquitto
# under systemd-nspawn, installs tidewatch with deploy/install.sh exactly as on the
# board, and proves the things that only show up under a real init: Type=notify
# readiness, an alarm in and a diagnosis out over MQTT, structured journald fields,
# links the daemon's user plants in its model directory never followed by install.sh,
# a watchdog kill + restart of a hung daemon, and a restart after an abort (what a
# panic ends in). Needs root.
#
#   .ci/box-test.sh BINARY MODEL
#   .ci/box-test.sh --rootfs     only install the host tools and build the pristine
#                                rootfs (debootstrap), so that CI can do that in the
#                                background while the tests run
#
#   BINARY  tidewatch built for this machine (x86_64 here), e.g. target/release/tidewatch
#   MODEL   small GGUF, e.g. "$(deploy/fetch-models.sh)"
#
# Environment:
#   BOX_CACHE=/var/cache/tidewatch-box  where the pristine rootfs is kept between runs
#   BOX_KEEP=1                          leave the working copy for inspection
#   BOX_TIMEOUT=300                     seconds to wait for one diagnosis
#   BOX_DEB=FILE                        also test this .deb (apt install, alarm, a link planted
#                                       in place of the model directory and the package
#                                       reinstalled over it, purge) after the rest
#   BOX_STANDIN=1                       BINARY is .ci/box-standin.sh (debugging the box)
set -Eeuo pipefail

usage() { sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; }
rootfs_only=0
if [ $# -eq 1 ] && [ "$1" = --rootfs ]; then
    rootfs_only=1
elif [ $# -ne 2 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
    usage
    [ $# -eq 2 ] && exit 0
    exit 2
fi

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
binary="" model=""
if [ "$rootfs_only" = 0 ]; then
    binary=$(realpath "$1")
    model=$(realpath "$2")
fi
cache=${BOX_CACHE:-/var/cache/tidewatch-box}
timeout=${BOX_TIMEOUT:-300}
standin=${BOX_STANDIN:-0}
notify_access=main
# The shell stand-in's sd_notify messages come from child processes.
[ "$standin" = 1 ] && notify_access=all
suite=bookworm
# libgomp1: the daemon links llama.cpp with OpenMP; a minbase system lacks it
# (the .deb depends on it, install.sh users get it from the image).
# adduser: the .deb's postinst uses it; every non-minbase Debian has it.
packages=systemd,systemd-sysv,dbus,mosquitto,mosquitto-clients,libgomp1,adduser

stage=setup
t_stage=0
t_all=$(date +%s.%N)
nspawn_pid=''
box_pid=''
work=''

say() { echo "[box] $*"; }
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
begin() {
    stage=$1
    t_stage=$(date +%s.%N)
    say "== $stage"
}
end() { say "   $stage ok ($(elapsed "$t_stage")s)"; }

# box CMD...: run CMD inside the container, with a clean environment so nothing from
# the host (PATH into ~/.cargo, RUST_LOG, ...) changes what the box sees.
box() {
    nsenter -t "$box_pid" -a -- env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 "$@"
}

fail() {
    echo "[box] FAILED in stage '$stage': $*" >&2
    if [ -n "$box_pid" ] && kill -0 "$box_pid" 2>/dev/null; then
        echo "---- systemctl status tidewatch (in box)" >&2
        box systemctl status tidewatch --no-pager -l >&2 || true
        echo "---- journalctl -u tidewatch (in box, last 60)" >&2
        box journalctl -u tidewatch -n 60 --no-pager >&2 || true
    fi
    exit 1
}
trap 'fail "command failed at line $LINENO"' ERR

# Stops the container, if one runs: the first SIGTERM asks its systemd to
# power off cleanly.
stop_box() {
    if [ -n "$nspawn_pid" ] && kill -0 "$nspawn_pid" 2>/dev/null; then
        kill -TERM "$nspawn_pid" 2>/dev/null || true
        for _ in $(seq 100); do
            kill -0 "$nspawn_pid" 2>/dev/null || break
            sleep 0.2
        done
        kill -KILL "$nspawn_pid" 2>/dev/null || true
        wait "$nspawn_pid" 2>/dev/null || true
    fi
    return 0
}

teardown() {
    local rc=$?
    trap - ERR
    stop_box
    if [ -n "$work" ] && [ -d "$work" ]; then
        if [ "${BOX_KEEP:-0}" = 1 ]; then
            say "kept $work (BOX_KEEP=1)"
        else
            rm -rf "$work"
        fi
    fi
    if [ "$rc" -eq 0 ]; then
        say "PASSED in $(elapsed "$t_all")s"
    fi
    exit "$rc"
}
trap teardown EXIT

# wait_for SECONDS DESCRIPTION CMD...: poll CMD until it succeeds.
wait_for() {
    local secs=$1 what=$2
    shift 2
    local deadline=$(($(date +%s) + secs))
    until "$@"; do
        [ "$(date +%s)" -lt "$deadline" ] || fail "timed out after ${secs}s waiting for $what"
        sleep 0.5
    done
}

# ------------------------------------------------------------------ host tools
begin host-tools
[ "$(id -u)" -eq 0 ] || fail "must run as root (debootstrap and systemd-nspawn need it)"
if [ "$rootfs_only" = 0 ]; then
    [ -x "$binary" ] || fail "BINARY '$1' is not an executable file"
    [ -f "$model" ] || fail "MODEL '$2' does not exist"
fi
[ -d "$repo/knowledge" ] || fail "$repo/knowledge is missing: install.sh builds the index from it"
missing=()
for tool in debootstrap:debootstrap systemd-nspawn:systemd-container nsenter:util-linux jq:jq pgrep:procps; do
    command -v "${tool%%:*}" >/dev/null || missing+=("${tool##*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null ||
        fail "apt-get install ${missing[*]} failed"
fi
end

# ------------------------------------------------------------------ rootfs
# debootstrap takes ~30-60 s and needs the network, so the pristine tree is cached;
# a stamp written last marks it complete, and a changed package list rebuilds it.
begin rootfs
rootfs=$cache/rootfs
stamp="$suite $packages"
if [ -f "$rootfs/.tidewatch-box-stamp" ] && [ "$(cat "$rootfs/.tidewatch-box-stamp")" = "$stamp" ]; then
    say "reusing $rootfs"
else
    rm -rf "$rootfs" "$rootfs.partial"
    mkdir -p "$cache"
    # Use the Debian mirror this machine's apt is already configured with
    # (deb822 "URIs:" or one-line "deb URL suite" sources), not a hard-coded one.
    mirror=$(
        { grep -hE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}'
          grep -hE '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | awk '{print $2}'
        } | grep -m1 -E '/debian/?$' || true
    )
    [ -n "$mirror" ] || fail "no Debian mirror found in /etc/apt/sources.list*; debootstrap needs one"
    say "debootstrap $suite ($packages) from $mirror"
    debootstrap --variant=minbase --include="$packages" "$suite" "$rootfs.partial" \
        "$mirror" >"$cache/debootstrap.log" 2>&1 ||
        fail "debootstrap failed, see $cache/debootstrap.log"
    echo "$stamp" >"$rootfs.partial/.tidewatch-box-stamp"
    mv "$rootfs.partial" "$rootfs"
fi
end
if [ "$rootfs_only" = 1 ]; then
    trap - EXIT
    say "pristine rootfs ready in $rootfs ($(elapsed "$t_all")s); nothing booted or tested"
    exit 0
fi

# ------------------------------------------------------------------ boot
# Each run boots a fresh copy so state from an earlier run (users, units, retained
# MQTT messages) cannot make a test pass.
begin boot
work=$(mktemp -d /var/tmp/tidewatch-box.XXXXXX)
root=$work/root
model_name=$(basename "$model")
find_init() {
    kill -0 "$nspawn_pid" 2>/dev/null || fail "systemd-nspawn exited: $(tail -20 "$work/console.log")"
    box_pid=$(pgrep -P "$nspawn_pid" | head -n1 || true)
    [ -n "$box_pid" ]
}
booted() {
    local s
    s=$(box systemctl is-system-running 2>/dev/null || true)
    boot_state=${s:-no answer}
    case "$s" in
    running) return 0 ;;
    degraded)
        say "system degraded: $(box systemctl --failed --no-legend --plain | tr '\n' ' ')"
        return 0
        ;;
    *) return 1 ;;
    esac
}
# What a boot that did not finish was waiting for: its state, its queued jobs,
# the end of its console.
boot_report() {
    echo "state: $boot_state; nspawn $(kill -0 "$nspawn_pid" 2>/dev/null && echo running || echo exited)"
    echo "---- systemctl list-jobs (in box)"
    box systemctl list-jobs --no-pager 2>&1 | tail -20 || true
    echo "---- console (last 30 lines)"
    tail -30 "$work/console.log" 2>/dev/null || true
}
# boot_box: boots a fresh copy of the rootfs; false when it has not said
# running or degraded within BOOT_SECS.
BOOT_SECS=90
boot_box() {
    rm -rf "$root"
    cp -a "$rootfs" "$root"
    mkdir -p "$root/opt/tw/models"
    cp -a "$repo/deploy" "$repo/systemd" "$repo/knowledge" "$root/opt/tw/"
    cp "$binary" "$root/opt/tw/tidewatch"
    cp "$model" "$root/opt/tw/models/"
    # --private-network: the box's mosquitto gets its own 127.0.0.1:1883 and cannot
    # collide with a broker the host or the integration tests run.
    # --keep-unit/--register=no: work without systemd-machined (CI hosts and containers).
    systemd-nspawn -D "$root" -M "twbox-$$" --register=no --keep-unit --private-network \
        --boot --console=pipe </dev/null >"$work/console.log" 2>&1 &
    nspawn_pid=$!
    box_pid=''
    wait_for 30 "the container's init to appear" find_init
    local deadline=$(($(date +%s) + BOOT_SECS))
    until booted; do
        [ "$(date +%s)" -lt "$deadline" ] || return 1
        sleep 0.5
    done
}
boot_state=''
# The container's own boot is Debian's, not what this test tests: one that
# hangs is reported and booted afresh once before the run fails.
if ! boot_box; then
    say "boot did not finish in ${BOOT_SECS}s; booting a fresh copy once more"
    boot_report | sed 's/^/[box]      /'
    stop_box
    boot_box || fail "timed out after ${BOOT_SECS}s, twice, waiting for systemctl is-system-running to say running/degraded
$(boot_report)"
fi
box systemctl is-active --quiet mosquitto || fail "mosquitto is not active in the box"
end

# ------------------------------------------------------------------ install
begin install
missing_libs=$(box ldd /opt/tw/tidewatch 2>&1 | grep 'not found' || true)
[ -z "$missing_libs" ] || fail "binary needs libraries the box lacks: $missing_libs"
# A short watchdog makes the hang test take seconds; everything else is the shipped unit.
box mkdir -p /etc/systemd/system/tidewatch.service.d
cat >"$root/etc/systemd/system/tidewatch.service.d/box-test.conf" <<EOF
[Service]
WatchdogSec=6
RestartSec=1
NotifyAccess=$notify_access
EOF
box /opt/tw/deploy/install.sh --binary /opt/tw/tidewatch --model "/opt/tw/models/$model_name" ||
    fail "install.sh failed"
box systemd-analyze verify tidewatch.service || fail "systemd-analyze verify tidewatch.service reported problems"
box systemctl is-active --quiet tidewatch || fail "tidewatch is not active after install.sh"
# The daemon's example alarms lie beside the index, as the .deb puts them;
# the eval set is never installed (it is the test set, not the daemon's
# data). `tidewatch eval` runs on the board on an eval set it is given.
box test -s /usr/share/tidewatch/examples/alarms.jsonl || fail "install.sh did not install the example alarms"
box test ! -e /usr/share/tidewatch/eval || fail "install.sh installed the eval set"
box tidewatch eval --retrieval --index /usr/share/tidewatch/knowledge.twx \
    --cases /opt/tw/knowledge/eval/alarms.jsonl --limit 3 >"$work/eval.log" 2>&1 ||
    fail "tidewatch eval on the board failed: $(cat "$work/eval.log")"
# install.sh started `tidewatch warm` behind the daemon, at idle CPU and I/O
# priority, as the daemon's user: its passage-block states appear, private.
box systemd-analyze verify tidewatch-warm.service || fail "systemd-analyze verify tidewatch-warm.service reported problems"
[ "$(box systemctl show -P Nice tidewatch-warm)" = 19 ] || fail "tidewatch-warm does not run at Nice=19"
case "$(box systemctl show -P IOSchedulingClass tidewatch-warm)" in
3 | idle) ;;
*) fail "tidewatch-warm's I/O class is not idle: $(box systemctl show -P IOSchedulingClass tidewatch-warm)" ;;
esac
warmed() { box sh -c 'ls /var/lib/tidewatch/kv/prompts/block-*.kv' >/dev/null 2>&1; }
wait_for 120 "a passage-block state from tidewatch-warm in /var/lib/tidewatch/kv/prompts" warmed
perm=$(box sh -c 'stat -c "%U %a" /var/lib/tidewatch/kv/prompts/block-*.kv | sort -u')
[ "$perm" = "tidewatch 600" ] || fail "warmed states are not the daemon's user's, 0600: $perm"
say "   tidewatch-warm computing passage blocks at idle priority ($(box sh -c 'ls /var/lib/tidewatch/kv/prompts | wc -l') so far)"
pid_before=$(box systemctl show -P MainPID tidewatch)
# Idempotence: a second run with the same files must neither fail nor restart.
box /opt/tw/deploy/install.sh --binary /opt/tw/tidewatch --model "/opt/tw/models/$model_name" >"$work/install2.log" ||
    fail "second install.sh run failed: $(cat "$work/install2.log")"
[ "$(box systemctl show -P MainPID tidewatch)" = "$pid_before" ] ||
    fail "second install.sh run restarted the daemon although nothing changed"
# Updated manuals only: the running daemon reloads its index (SIGHUP), keeping its
# model, its process and its alarms, instead of being restarted.
box sh -c 'cp -a /opt/tw/knowledge /opt/tw/knowledge2 && rm -f /opt/tw/knowledge2/buoy/ais-*'
box /opt/tw/deploy/install.sh --binary /opt/tw/tidewatch --model "/opt/tw/models/$model_name" \
    --knowledge /opt/tw/knowledge2 >"$work/install3.log" 2>&1 ||
    fail "install.sh with updated manuals failed: $(cat "$work/install3.log")"
[ "$(box systemctl show -P MainPID tidewatch)" = "$pid_before" ] ||
    fail "install.sh restarted the daemon for an index-only change: $(cat "$work/install3.log")"
index_reloaded() {
    box journalctl -u tidewatch --no-pager -o cat | grep -c 'index reloaded' >/dev/null
}
wait_for 30 "'index reloaded' in the journal after an index-only install" index_reloaded
say "   index-only update reloaded in place (MainPID $pid_before kept)"
box runuser -u tidewatch -- test -r "/var/lib/tidewatch/models/$model_name" ||
    fail "user tidewatch cannot read the installed model"
end

# ------------------------------------------------------------------ links
# The model directory belongs to the daemon's user: what it puts
# there must not lead install.sh, running as root, to change a file elsewhere. A
# compromised daemon would aim a link at a root file (the broker's TLS key); here
# root-only files of the box's own stand in for one.
begin links
models=/var/lib/tidewatch/models
install_again() { # install_again LOG: install.sh as above, the model named as in README (relative)
    # shellcheck disable=SC2016 # $1 is expanded by the box's sh, on purpose
    box sh -c 'cd /opt/tw && deploy/install.sh --binary ./tidewatch --model "models/$1" --knowledge knowledge2' \
        sh "$model_name" >"$1" 2>&1
}
box sh -c 'mkdir -m 0700 /root/twbox /root/twbox/dir && cp "$1" /root/twbox/model && chmod 0600 /root/twbox/model' \
    sh "/opt/tw/models/$model_name"
# 1. The model replaced by a link to a root-only file with the same bytes, so that
#    an install that follows it finds the model unchanged and only sets its owner.
box runuser -u tidewatch -- ln -sfn /root/twbox/model "$models/$model_name"
rc=0
install_again "$work/install-link.log" || rc=$?
[ "$(box stat -c '%U:%G %a' /root/twbox/model)" = "root:root 600" ] ||
    fail "install.sh followed the link $models/$model_name: its target is now $(box stat -c '%U:%G %a' /root/twbox/model)"
[ "$rc" -eq 0 ] || fail "install.sh failed with a link in place of the model: $(cat "$work/install-link.log")"
box test ! -L "$models/$model_name" || fail "install.sh left the link in place of the model"
[ "$(box stat -c '%U:%G %a' "$models/$model_name")" = "tidewatch:tidewatch 640" ] ||
    fail "the reinstalled model is $(box stat -c '%U:%G %a' "$models/$model_name")"
# 2. The model directory itself replaced by a link to a root-only directory.
box runuser -u tidewatch -- sh -c 'mv "$1" "$1.moved" && ln -s /root/twbox/dir "$1"' sh "$models"
if install_again "$work/install-dirlink.log"; then
    fail "install.sh went on with $models a link: $(cat "$work/install-dirlink.log")"
fi
[ "$(box stat -c '%U:%G %a' /root/twbox/dir)" = "root:root 700" ] ||
    fail "install.sh followed the link $models: its target is now $(box stat -c '%U:%G %a' /root/twbox/dir)"
[ -z "$(box ls -A /root/twbox/dir)" ] || fail "install.sh wrote into the link's target: $(box ls -A /root/twbox/dir)"
grep -q "$models is not a directory but a link" "$work/install-dirlink.log" ||
    fail "install.sh stopped for another reason: $(cat "$work/install-dirlink.log")"
box runuser -u tidewatch -- sh -c 'rm "$1" && mv "$1.moved" "$1"' sh "$models"
install_again "$work/install-unlinked.log" ||
    fail "install.sh failed once the directory was back: $(cat "$work/install-unlinked.log")"
box rm -rf /root/twbox
say "   links in the model directory were replaced or refused, never followed"
end

# ------------------------------------------------------------------ broker login
# install.sh set up the box's mosquitto as on a board: nobody gets
# in anonymously, and the daemon logs in with the password install.sh generated
# and wrote to its config; the login is also its client id, so no other login
# can take its session. send_alarm below logs in as a sensor and an operator.
begin broker-login
toml=/etc/tidewatch/tidewatch.toml
passwd=/etc/mosquitto/tidewatch.passwd
[ "$(box stat -c '%U:%G %a' "$toml")" = "root:tidewatch 640" ] ||
    fail "$toml holds the broker password but is $(box stat -c '%U:%G %a' "$toml")"
box grep -qxE 'username = "tidewatch"' "$toml" || fail "install.sh wrote no [mqtt] username to $toml"
box grep -qxE 'password = "[0-9a-f]{32}"' "$toml" || fail "install.sh wrote no generated [mqtt] password to $toml"
[ "$(box stat -c '%U:%G %a' "$passwd")" = "root:mosquitto 640" ] ||
    fail "$passwd is $(box stat -c '%U:%G %a' "$passwd"), not root:mosquitto 640"
box grep -q '^tidewatch:' "$passwd" || fail "install.sh put no tidewatch user into $passwd"
if box mosquitto_sub -h 127.0.0.1 -t 'tidewatch/#' -E >"$work/anon.log" 2>&1; then
    fail "an anonymous client got into the box's broker"
fi
grep -q 'not authorised' "$work/anon.log" || fail "the anonymous client failed for another reason: $(cat "$work/anon.log")"
# The daemon is ready, so it is connected: as user tidewatch, under that id.
box grep -qE "as tidewatch \(.*u'tidewatch'\)" /var/log/mosquitto/mosquitto.log ||
    fail "mosquitto's log shows no client 'tidewatch' logged in as tidewatch: $(box tail -5 /var/log/mosquitto/mosquitto.log)"
box_pw=$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
# A sensor logs in as its equipment (tidewatch.acl): main-engine raises main-engine's alarms.
for u in main-engine operator; do
    printf '%s\n%s\n' "$box_pw" "$box_pw" | box mosquitto_passwd "$passwd" "$u" >/dev/null
done
box systemctl kill --kill-who=main -s HUP mosquitto
pub_login=(-u main-engine -P "$box_pw")
sub_login=(-u operator -P "$box_pw")
wait_for 10 "mosquitto to take the operator login" box mosquitto_sub -h 127.0.0.1 "${sub_login[@]}" -t tidewatch/status -E
# Idempotence of the broker part: a further run changes neither file and
# restarts neither service.
sums() { box sha256sum "$toml" "$passwd" /etc/mosquitto/conf.d/tidewatch-local.conf; }
before=$(sums)
mosq_pid=$(box systemctl show -P MainPID mosquitto)
tw_pid=$(box systemctl show -P MainPID tidewatch)
box /opt/tw/deploy/install.sh --binary /opt/tw/tidewatch --model "/opt/tw/models/$model_name" \
    --knowledge /opt/tw/knowledge2 >"$work/install4.log" 2>&1 ||
    fail "install.sh run after the broker setup failed: $(cat "$work/install4.log")"
[ "$(sums)" = "$before" ] || fail "a further install.sh run changed the broker login files: $(cat "$work/install4.log")"
[ "$(box systemctl show -P MainPID mosquitto)" = "$mosq_pid" ] || fail "a further install.sh run restarted mosquitto"
[ "$(box systemctl show -P MainPID tidewatch)" = "$tw_pid" ] || fail "a further install.sh run restarted tidewatch"
end

# ------------------------------------------------------------------ alarm
# send_alarm ID OUTFILE: publish one alarm and wait for the diagnosis of that alarm.
send_alarm() {
    local id=$1 out=$2 sub
    box mosquitto_sub -h 127.0.0.1 "${sub_login[@]}" -q 1 -t 'tidewatch/diagnosis/#' -C 1 -W "$timeout" >"$out" 2>"$out.err" &
    sub=$!
    # The diagnosis is not retained: the subscription must exist before the alarm.
    sleep 1
    local ts
    ts=$(date -u +%Y-%m-%dT%H:%M:%SZ)
    box mosquitto_pub -h 127.0.0.1 "${pub_login[@]}" -q 1 -t tidewatch/alarm/main-engine -m \
        "{\"id\":\"$id\",\"ts\":\"$ts\",\"equipment\":\"main-engine\",\"code\":\"ME-LO-PRES-LO\",\"severity\":\"major\",\"kind\":\"main_engine_lube_oil\",\"value\":1.1,\"unit\":\"bar\",\"threshold\":2.0,\"message\":\"main engine lube oil pressure low\"}" ||
        fail "mosquitto_pub of alarm $id failed"
    wait "$sub" || fail "no diagnosis for alarm $id within ${timeout}s ($(cat "$out.err"))"
    jq -e . "$out" >/dev/null 2>&1 || fail "diagnosis for $id is not JSON: $(head -c 500 "$out")"
    local got
    got=$(jq -r '.alarm_id // empty' "$out")
    [ "$got" = "$id" ] || fail "diagnosis alarm_id is '$got', expected '$id': $(head -c 500 "$out")"
    say "   diagnosis: $(head -c 300 "$out")"
}

begin alarm
alarm1=box-$$-1
send_alarm "$alarm1" "$work/diag1.json"
end

# ------------------------------------------------------------------ journal
begin journal
journal_match=(-u tidewatch)
[ "$standin" = 1 ] && journal_match=(SYSLOG_IDENTIFIER=tidewatch)
journal_has_alarm() {
    box journalctl "${journal_match[@]}" -o json --no-pager |
        jq -e --arg id "$alarm1" 'select(.ALARM_ID == $id)' >/dev/null 2>&1
}
# journald may take a moment to flush the stream.
wait_for 15 "a journal record with ALARM_ID=$alarm1" journal_has_alarm
box journalctl "${journal_match[@]}" -o json --no-pager >"$work/journal.json"
jq -c --arg id "$alarm1" 'select(.ALARM_ID == $id) | {SYSLOG_IDENTIFIER, ALARM_ID, EQUIPMENT, CODE, MESSAGE}' \
    "$work/journal.json" | sed -n 's/^/[box]    /;1,2p'
end

# ------------------------------------------------------------------ watchdog
begin watchdog
old_pid=$(box systemctl show -P MainPID tidewatch)
old_restarts=$(box systemctl show -P NRestarts tidewatch)
[ "$old_pid" -gt 0 ] || fail "no MainPID for tidewatch"
say "   SIGSTOP main pid $old_pid (NRestarts=$old_restarts); WatchdogSec=6"
if [ "$standin" = 1 ]; then
    # The stand-in pings from a child process, so freeze the whole unit.
    box systemctl kill --signal=SIGSTOP tidewatch
else
    # shellcheck disable=SC2016 # $1 is expanded by the box's sh, on purpose
    box sh -c 'kill -STOP "$1"' sh "$old_pid"
fi
restarted() {
    local pid n state
    pid=$(box systemctl show -P MainPID tidewatch)
    n=$(box systemctl show -P NRestarts tidewatch)
    state=$(box systemctl show -P ActiveState tidewatch)
    [ "$n" -gt "$old_restarts" ] && [ "$pid" != "$old_pid" ] && [ "$pid" -gt 0 ] && [ "$state" = active ]
}
wait_for 120 "systemd to kill the hung daemon and restart it" restarted
# Via a file: grep -q closing the pipe early would fail the pipeline (pipefail).
box journalctl -u tidewatch --no-pager -o cat >"$work/unit.log"
grep -q 'Watchdog timeout' "$work/unit.log" ||
    fail "service restarted, but not because of the watchdog: $(grep -m3 -iE 'fail|exit' "$work/unit.log")"
say "   restarted: MainPID $(box systemctl show -P MainPID tidewatch), NRestarts $(box systemctl show -P NRestarts tidewatch)"
end

# ------------------------------------------------------------------ abort
# A panic makes the daemon log it and abort() (src/crash.rs), rather than run on
# with a dead task. The release build has no fault hooks, so the abort is sent
# from outside; what is checked is systemd's side: a SIGABRT death restarts it.
begin abort
old_pid=$(box systemctl show -P MainPID tidewatch)
old_restarts=$(box systemctl show -P NRestarts tidewatch)
[ "$old_pid" -gt 0 ] || fail "no MainPID for tidewatch"
# The watchdog stage's kill was a SIGABRT too: count, do not just look.
box journalctl -u tidewatch --no-pager -o cat >"$work/unit.log"
old_aborts=$(grep -c 'status=6/ABRT' "$work/unit.log" || true)
say "   SIGABRT main pid $old_pid (NRestarts=$old_restarts)"
# shellcheck disable=SC2016 # $1 is expanded by the box's sh, on purpose
box sh -c 'kill -ABRT "$1"' sh "$old_pid"
wait_for 120 "systemd to restart the aborted daemon" restarted
box journalctl -u tidewatch --no-pager -o cat >"$work/unit.log"
[ "$(grep -c 'status=6/ABRT' "$work/unit.log" || true)" -gt "$old_aborts" ] ||
    fail "service restarted, but the journal does not show the abort: $(grep -m3 -iE 'fail|exit' "$work/unit.log")"
say "   restarted: MainPID $(box systemctl show -P MainPID tidewatch), NRestarts $(box systemctl show -P NRestarts tidewatch)"
end

begin alarm-after-restart
send_alarm "box-$$-2" "$work/diag2.json"
end

# ------------------------------------------------------------------ uninstall
begin uninstall
box /opt/tw/deploy/install.sh --uninstall --purge >/dev/null || fail "install.sh --uninstall --purge failed"
if box getent passwd tidewatch >/dev/null; then fail "user tidewatch still exists after --purge"; fi
if box grep -q '^tidewatch:' /etc/mosquitto/tidewatch.passwd; then fail "broker user tidewatch still exists after --purge"; fi
for p in /usr/bin/tidewatch /lib/systemd/system/tidewatch.service /usr/share/tidewatch /usr/share/doc/tidewatch /etc/tidewatch /var/lib/tidewatch; do
    [ ! -e "$root$p" ] || fail "$p still exists after --uninstall --purge"
done
end

# ------------------------------------------------------------------ .deb (optional)
if [ -n "${BOX_DEB:-}" ]; then
    begin deb
    deb=$(realpath "$BOX_DEB")
    cp "$deb" "$root/opt/tw/"
    # The box has no network (--private-network); every dependency (libgomp1,
    # adduser) is in the rootfs already, as on a stock Debian board.
    box env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "/opt/tw/$(basename "$deb")" >"$work/apt.log" 2>&1 ||
        fail "apt install of $(basename "$deb") failed: $(tail -20 "$work/apt.log")"
    [ "$(box systemctl is-enabled tidewatch)" = enabled ] || fail "the package did not enable tidewatch.service"
    box getent passwd tidewatch >/dev/null || fail "the package did not create user tidewatch"
    # The package ships no model; its default config expects this file.
    box install -o tidewatch -g tidewatch -m 0640 "/opt/tw/models/$model_name" /var/lib/tidewatch/models/model.gguf
    # The box's broker still wants a login (install.sh's, kept after its purge);
    # the package does not make one: give it one as deploy/mosquitto/README.md says.
    box /opt/tw/deploy/mosquitto/login.sh /etc/tidewatch/tidewatch.toml /etc/mosquitto/tidewatch.passwd
    box systemctl kill --kill-who=main -s HUP mosquitto
    box systemctl start tidewatch || fail "tidewatch from the .deb did not start"
    send_alarm "box-$$-deb" "$work/diag3.json"
    # The package's postinst runs as root at every install and upgrade, in a
    # directory the daemon's user owns: a link that user puts in place of the
    # model directory must not lead root's chown to its target (a root-only
    # directory of the box's stands in for /etc).
    models=/var/lib/tidewatch/models
    box mkdir -m 0700 /srv/tw-rootonly
    box runuser -u tidewatch -- sh -c 'mv "$1" "$1.moved" && ln -s /srv/tw-rootonly "$1"' sh "$models"
    box env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --reinstall "/opt/tw/$(basename "$deb")" >"$work/reinstall.log" 2>&1 ||
        fail "apt reinstall of $(basename "$deb") over a linked model directory failed: $(tail -20 "$work/reinstall.log")"
    [ "$(box stat -c '%U:%G %a' /srv/tw-rootonly)" = "root:root 700" ] ||
        fail "the package's postinst followed the link $models: its target is now $(box stat -c '%U:%G %a' /srv/tw-rootonly)"
    grep -q "$models is a link, not a directory" "$work/reinstall.log" ||
        fail "postinst did not name the link in place of $models: $(tail -20 "$work/reinstall.log")"
    box runuser -u tidewatch -- sh -c 'rm "$1" && mv "$1.moved" "$1"' sh "$models"
    box rm -rf /srv/tw-rootonly
    say "   a link in place of $models was left alone by the package's postinst"
    box env DEBIAN_FRONTEND=noninteractive apt-get purge -y -q tidewatch >"$work/purge.log" 2>&1 ||
        fail "apt purge tidewatch failed: $(tail -20 "$work/purge.log")"
    if box getent passwd tidewatch >/dev/null; then fail "user tidewatch still exists after apt purge"; fi
    if box systemctl is-active --quiet tidewatch; then fail "tidewatch still running after apt purge"; fi
    for p in /usr/bin/tidewatch /etc/tidewatch /var/lib/tidewatch /usr/share/tidewatch; do
        [ ! -e "$root$p" ] || fail "$p still exists after apt purge"
    done
    end
fi
