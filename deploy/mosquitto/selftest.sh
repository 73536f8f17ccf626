#!/usr/bin/env bash
# Proves the broker configs in this folder do what README.md claims, with real
# mosquitto processes on free loopback ports and throwaway certificates and
# passwords: the logins (no anonymous client on either listener, tidewatch's
# client id and so its queued alarms reserved to its own user), the ACL (sensors
# write-only, operators read-only but for feedback, no certificate no entry) and the bridge (topic
# remapping, and diagnoses queued while shore is down arrive when it comes back).
# Needs mosquitto, mosquitto-clients and openssl.
#
#   deploy/mosquitto/selftest.sh        (KEEP=1 keeps the temp dir)
set -Eeuo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
for tool in mosquitto mosquitto_pub mosquitto_sub mosquitto_passwd openssl; do
    command -v "$tool" >/dev/null || {
        echo "selftest: $tool not found (apt-get install mosquitto mosquitto-clients openssl)" >&2
        exit 1
    }
done

t=$(mktemp -d /tmp/tw-mqtt-selftest.XXXXXX)
pids=()
step=setup
cleanup() {
    local rc=$?
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    if [ "$rc" -ne 0 ]; then
        echo "selftest: FAILED at '$step'; broker logs:" >&2
        tail -n 25 "$t"/*.stdout >&2 || true
    fi
    if [ "${KEEP:-0}" = 1 ]; then echo "selftest: kept $t"; else rm -rf "$t"; fi
    exit "$rc"
}
trap cleanup EXIT
fail() {
    echo "selftest: FAILED at '$step': $*" >&2
    exit 1
}
passed=0
ok() {
    passed=$((passed + 1))
    echo "selftest: ok  $step"
}

# mosquitto drops root privileges to the 'mosquitto' user, which must read these.
chmod 0755 "$t"

free_port() {
    local p
    for _ in $(seq 50); do
        p=$((20000 + RANDOM % 20000))
        if ! (echo >"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            echo "$p"
            return 0
        fi
    done
    return 1
}
board_local=$(free_port)
board_tls=$(free_port)
shore_tls=$(free_port)
shore_local=$(free_port)

# ------------------------------------------------------------ certificates
step=certificates
# The same commands as README.md, for two CAs: the ship's and the shore's.
newkey() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
mkca() { # mkca NAME CN
    newkey "$t/$1.key"
    openssl req -x509 -new -key "$t/$1.key" -days 30 -subj "/CN=$2" -out "$t/$1.crt"
}
mkcert() { # mkcert CA NAME CN serverAuth|clientAuth
    newkey "$t/$2.key"
    openssl req -new -key "$t/$2.key" -subj "/CN=$3" -out "$t/$2.csr"
    local ext="extendedKeyUsage=$4"
    [ "$4" = serverAuth ] && ext="$ext
subjectAltName=IP:127.0.0.1,DNS:localhost"
    openssl x509 -req -in "$t/$2.csr" -CA "$t/$1.crt" -CAkey "$t/$1.key" -CAcreateserial \
        -days 30 -out "$t/$2.crt" -extfile <(echo "$ext") 2>/dev/null
}
mkca ca "tidewatch test ship CA"
mkcert ca broker vessel01-broker serverAuth
mkcert ca tidewatch tidewatch clientAuth
# A sensor's CN is its equipment's name (tidewatch.acl).
mkcert ca sensor main-engine clientAuth
mkcert ca genset genset-1 clientAuth
mkcert ca operator operator clientAuth
mkca shore-ca "tidewatch test shore CA"
mkcert shore-ca shore-broker shore-broker serverAuth
mkcert shore-ca vessel01 vessel01 clientAuth
chmod 0644 "$t"/*
ok

# ------------------------------------------------------------ passwords
step=passwords
# Loopback logins, as install.sh makes them: the daemon's own (a random password)
# and a local operator's, whom the hijack steps below use as the intruder.
tw_pw=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
op_pw=operator-secret
mosquitto_passwd -c -b "$t/passwd" tidewatch "$tw_pw"
mosquitto_passwd -b "$t/passwd" operator "$op_pw"
# A device on the board without TLS: a loopback login named for its equipment.
mosquitto_passwd -b "$t/passwd" ballast-pump "$op_pw"
chmod 0644 "$t/passwd"
ok

# ------------------------------------------------------------ brokers
step=start-brokers
mkdir -m 0777 "$t/board-db" "$t/shore-db"
{
    echo "persistence true"
    echo "persistence_location $t/board-db/"
    echo "log_dest stderr"
    echo "log_type all"
    # In the order mosquitto reads /etc/mosquitto/conf.d: bridge.conf,
    # tidewatch-local.conf (local.conf), tidewatch.conf (tls-acl.conf).
    sed -e "s#^address .*#address 127.0.0.1:$shore_tls#" \
        -e "s#/etc/mosquitto/certs/#$t/#" \
        -e "s#^restart_timeout .*#restart_timeout 1 2#" \
        "$here/bridge.conf"
    sed -e "s#^listener 1883 #listener $board_local #" \
        -e "s#/etc/mosquitto/tidewatch.acl#$here/tidewatch.acl#" \
        -e "s#/etc/mosquitto/tidewatch.passwd#$t/passwd#" \
        "$here/local.conf"
    sed -e "s#^listener 8883#listener $board_tls 127.0.0.1#" \
        -e "s#/etc/mosquitto/certs/#$t/#" \
        -e "s#/etc/mosquitto/tidewatch.acl#$here/tidewatch.acl#" \
        "$here/tls-acl.conf"
} >"$t/board.conf"

cat >"$t/shore.acl" <<'EOF'
user vessel01
topic readwrite fleet/vessel01/#
EOF
cat >"$t/shore.conf" <<EOF
persistence true
persistence_location $t/shore-db/
log_dest stderr
log_type all
per_listener_settings true
listener $shore_local 127.0.0.1
allow_anonymous true
listener $shore_tls 127.0.0.1
cafile $t/shore-ca.crt
certfile $t/shore-broker.crt
keyfile $t/shore-broker.key
require_certificate true
use_identity_as_username true
allow_anonymous false
acl_file $t/shore.acl
EOF
chmod 0644 "$t"/*.conf "$t"/*.acl

start_broker() { # start_broker NAME PORT
    mosquitto -c "$t/$1.conf" >>"$t/$1.stdout" 2>&1 &
    pids+=($!)
    eval "${1}_pid=$!"
    for _ in $(seq 50); do
        (echo >"/dev/tcp/127.0.0.1/$2") 2>/dev/null && return 0
        kill -0 "$!" 2>/dev/null || fail "$1 broker exited: $(tail -5 "$t/$1.stdout")"
        sleep 0.1
    done
    fail "$1 broker did not listen on $2"
}
start_broker shore "$shore_tls"
start_broker board "$board_tls"
ok

tls() { # tls CERTNAME: client options for the board's TLS listener
    echo "-h 127.0.0.1 -p $board_tls --cafile $t/ca.crt --cert $t/$1.crt --key $t/$1.key"
}
# local_as USER: client options for the board's loopback listener, logged in as USER
local_as() {
    local pw=$op_pw
    [ "$1" = tidewatch ] && pw=$tw_pw
    echo "-h 127.0.0.1 -p $board_local -u $1 -P $pw"
}
# sub_one OUT ARGS...: wait for one message (max 5 s) in the background
sub_one() {
    local out=$1
    shift
    mosquitto_sub "$@" -C 1 -W 5 -v >"$out" 2>&1 &
    sub_pid=$!
    sleep 0.5
}

# ------------------------------------------------------------ ACL
step="sensor publishes an alarm over TLS, the daemon (loopback) receives it"
# shellcheck disable=SC2046
sub_one "$t/a1" $(local_as tidewatch) -q 1 -t 'tidewatch/alarm/#'
# shellcheck disable=SC2046 # word splitting of the option list is intended
mosquitto_pub $(tls sensor) -q 1 -t tidewatch/alarm/main-engine -m '{"id":"a1"}'
wait "$sub_pid" || fail "no alarm received: $(cat "$t/a1")"
grep -q '"a1"' "$t/a1" || fail "wrong message: $(cat "$t/a1")"
ok

step="a sensor raises alarms for its own equipment only, on either listener"
# tidewatch merges alarms by equipment and code: an alarm another sensor could
# put on main-engine's topic would shape the diagnosis of main-engine's own.
# The first alarm tidewatch reads must be each sender's genuine one, not the
# forged one sent before it.
for who in "tls genset" "local_as ballast-pump"; do
    own=${who##* }
    [ "$own" = genset ] && own=genset-1
    # shellcheck disable=SC2046
    sub_one "$t/own" $(local_as tidewatch) -q 1 -t 'tidewatch/alarm/#'
    # shellcheck disable=SC2046
    mosquitto_pub $($who) -q 1 -t tidewatch/alarm/main-engine -m "{\"id\":\"forged-by-$own\"}" || true
    # shellcheck disable=SC2046
    mosquitto_pub $($who) -q 1 -t "tidewatch/alarm/$own" -m "{\"id\":\"own-$own\"}"
    wait "$sub_pid" || fail "$own's alarm on its own topic did not arrive: $(cat "$t/own")"
    grep -q "^tidewatch/alarm/$own .*own-$own" "$t/own" ||
        fail "$own wrote another equipment's alarm topic: $(cat "$t/own")"
done
ok

step="sensor cannot read anything"
# shellcheck disable=SC2046
sub_one "$t/a2" $(tls sensor) -q 1 -t 'tidewatch/#'
# shellcheck disable=SC2046
mosquitto_pub $(local_as tidewatch) -q 1 -t tidewatch/diagnosis/main-engine -m '{"alarm_id":"a1"}'
if wait "$sub_pid" && grep -q alarm_id "$t/a2"; then fail "sensor read a diagnosis"; fi
ok

step="operator reads diagnoses but cannot inject alarms"
# shellcheck disable=SC2046
sub_one "$t/a3" $(tls operator) -q 1 -t 'tidewatch/diagnosis/#'
# shellcheck disable=SC2046
mosquitto_pub $(local_as tidewatch) -q 1 -t tidewatch/diagnosis/main-engine -m '{"alarm_id":"a3"}'
wait "$sub_pid" || fail "operator got no diagnosis: $(cat "$t/a3")"
# shellcheck disable=SC2046
sub_one "$t/a4" $(local_as tidewatch) -q 1 -t 'tidewatch/alarm/#'
# shellcheck disable=SC2046
mosquitto_pub $(tls operator) -q 1 -t tidewatch/alarm/main-engine -m '{"id":"forged"}' || true
if wait "$sub_pid" && grep -q forged "$t/a4"; then fail "an operator's forged alarm got through"; fi
ok

step="operator answers diagnoses on the feedback topic, a sensor cannot, tidewatch reads it"
# A site note made from feedback shapes later diagnoses: a sensor must not write one.
# shellcheck disable=SC2046
sub_one "$t/f1" $(local_as tidewatch) -q 1 -t 'tidewatch/feedback/+'
# shellcheck disable=SC2046
mosquitto_pub $(tls sensor) -q 1 -t tidewatch/feedback/main-engine -m '{"alarm_id":"forged-feedback"}' || true
# shellcheck disable=SC2046
mosquitto_pub $(tls operator) -q 1 -t tidewatch/feedback/main-engine -m '{"alarm_id":"f1"}'
wait "$sub_pid" || fail "tidewatch got no feedback: $(cat "$t/f1")"
grep -q '"f1"' "$t/f1" || fail "a sensor's feedback got through: $(cat "$t/f1")"
ok

step="no client certificate, no connection"
if mosquitto_pub -h 127.0.0.1 -p "$board_tls" --cafile "$t/ca.crt" -t tidewatch/alarm/x -m x 2>/dev/null; then
    fail "connected to the TLS listener without a client certificate"
fi
ok

# ------------------------------------------------------------ logins
step="anonymous clients and a wrong password are refused on the loopback listener"
# Any local user could otherwise read every alarm and take tidewatch's session.
for tool in mosquitto_sub mosquitto_pub; do
    args=(-t tidewatch/alarm/main-engine)
    [ "$tool" = mosquitto_sub ] && args+=(-E) || args+=(-q 1 -m '{"id":"anon"}')
    if "$tool" -h 127.0.0.1 -p "$board_local" "${args[@]}" >"$t/anon" 2>&1; then
        fail "anonymous $tool was let in on the loopback listener"
    fi
    grep -q 'not authorised' "$t/anon" || fail "anonymous $tool failed for another reason: $(cat "$t/anon")"
done
if mosquitto_sub -h 127.0.0.1 -p "$board_local" -u tidewatch -P not-the-password -t 'tidewatch/#' -E >"$t/anon" 2>&1; then
    fail "tidewatch's login was let in with a wrong password"
fi
grep -q 'not authorised' "$t/anon" || fail "a wrong password failed for another reason: $(cat "$t/anon")"
ok

# hijack_step WHO OPTIONS...: tidewatch's persistent session holds a QoS 1 alarm
# that arrived while it was away; WHO connects with tidewatch's client id and a
# clean session (OPTIONS); tidewatch reconnects and must still get the alarm.
# mosquitto discards a session when a client with its id connects with clean
# session, so this holds only if nobody else can get that id.
tw_id=tidewatch-vessel01
hijack_step() {
    local who=$1 id=hijack-$RANDOM
    shift
    step="$who asking for tidewatch's client id with a clean session does not discard its queued alarms"
    # shellcheck disable=SC2046
    mosquitto_sub $(local_as tidewatch) -i "$tw_id" -c -q 1 -t 'tidewatch/alarm/#' -E ||
        fail "tidewatch could not open its persistent session"
    # shellcheck disable=SC2046
    mosquitto_pub $(tls sensor) -q 1 -t tidewatch/alarm/main-engine -m "{\"id\":\"$id\"}" ||
        fail "the sensor could not publish"
    # The intruder's connection is the attack; whether it is then let in or
    # turned away does not matter here, only what it did to the session.
    mosquitto_sub "$@" -i "$tw_id" -t 'tidewatch/diagnosis/#' -E >"$t/$id.intruder" 2>&1 || true
    # shellcheck disable=SC2046
    mosquitto_sub $(local_as tidewatch) -i "$tw_id" -c -q 1 -t 'tidewatch/alarm/#' -C 1 -W 5 -v >"$t/$id" 2>&1 ||
        fail "the alarm queued for tidewatch was lost after $who connected as '$tw_id' ($(cat "$t/$id.intruder"))"
    grep -q "$id" "$t/$id" || fail "unexpected message: $(cat "$t/$id")"
    ok
}
# shellcheck disable=SC2046
hijack_step "a local user logged in as someone else" $(local_as operator)
# shellcheck disable=SC2046
hijack_step "a LAN client with its own certificate" $(tls operator)
hijack_step "an anonymous local client" -h 127.0.0.1 -p "$board_local"

# ------------------------------------------------------------ bridge
step="bridge forwards diagnoses to shore, remapped per board"
bridged() { grep -q 'state 1' < <(mosquitto_sub -h 127.0.0.1 -p "$shore_local" -t fleet/vessel01/bridge/state -C 1 -W 2 -F 'state %p' 2>/dev/null); }
for _ in $(seq 40); do bridged && break; sleep 0.25; done
bridged || fail "bridge did not connect to shore"
# A persistent shore subscriber (clean session off): it must get diagnoses that
# were published while shore was down, after shore comes back.
mosquitto_sub -h 127.0.0.1 -p "$shore_local" -c -i shore-desk -q 1 -t 'fleet/vessel01/tidewatch/#' -C 1 -W 5 -v >"$t/b1" 2>&1 &
sub_pid=$!
sleep 0.5
# shellcheck disable=SC2046
mosquitto_pub $(local_as tidewatch) -q 1 -t tidewatch/diagnosis/main-engine -m '{"alarm_id":"b1"}'
wait "$sub_pid" || fail "shore got nothing: $(cat "$t/b1")"
grep -q '^fleet/vessel01/tidewatch/diagnosis/main-engine .*b1' "$t/b1" || fail "unexpected shore message: $(cat "$t/b1")"
ok

step="diagnoses published while the link is down arrive when it is back"
# shellcheck disable=SC2154 # set by start_broker through eval
kill "$shore_pid"
wait "$shore_pid" 2>/dev/null || true
# shellcheck disable=SC2046
mosquitto_pub $(local_as tidewatch) -q 1 -t tidewatch/diagnosis/genset-1 -m '{"alarm_id":"queued"}'
sleep 1
start_broker shore "$shore_tls"
mosquitto_sub -h 127.0.0.1 -p "$shore_local" -c -i shore-desk -q 1 -t 'fleet/vessel01/tidewatch/#' -C 1 -W 10 -v >"$t/b2" 2>&1 ||
    fail "queued diagnosis never reached shore: $(cat "$t/b2")"
grep -q 'queued' "$t/b2" || fail "unexpected shore message: $(cat "$t/b2")"
ok

step="bridge forwards site notes to shore on their own topic"
for _ in $(seq 40); do bridged && break; sleep 0.25; done
mosquitto_sub -h 127.0.0.1 -p "$shore_local" -q 1 -t 'fleet/vessel01/tidewatch/notes/#' -C 1 -W 10 -v >"$t/n1" 2>&1 &
sub_pid=$!
sleep 0.5
# shellcheck disable=SC2046
mosquitto_pub $(local_as tidewatch) -q 1 -t tidewatch/notes/main-engine -m '{"id":"here:n1:t"}'
wait "$sub_pid" || fail "shore got no note: $(cat "$t/n1")"
grep -q '^fleet/vessel01/tidewatch/notes/main-engine .*n1' "$t/n1" || fail "unexpected shore message: $(cat "$t/n1")"
ok

echo "selftest: $passed passed, 0 failed"
