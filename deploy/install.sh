#!/usr/bin/env bash
# Installs (or removes) tidewatch on a Debian board running systemd. Run as root.
# Safe to run again: it converges to the same state and restarts the daemon only
# when the binary, unit, config or model actually changed; a new index alone is
# taken with a reload.
set -euo pipefail

PREFIX_BIN=/usr/bin/tidewatch
UNIT_DIR=/lib/systemd/system
UNIT=$UNIT_DIR/tidewatch.service
WARM_UNIT=$UNIT_DIR/tidewatch-warm.service
SHARE_DIR=/usr/share/tidewatch
INDEX=$SHARE_DIR/knowledge.twx
STATE_DIR=/var/lib/tidewatch
MODEL_DIR=$STATE_DIR/models
CONF_DIR=/etc/tidewatch
CONF=$CONF_DIR/tidewatch.toml
SVC_USER=tidewatch
MOSQ_DIR=/etc/mosquitto
MOSQ_LOCAL_CONF=$MOSQ_DIR/conf.d/tidewatch-local.conf
MOSQ_ACL=$MOSQ_DIR/tidewatch.acl
MOSQ_PASSWD=$MOSQ_DIR/tidewatch.passwd

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")

usage() {
    cat <<EOF
usage: install.sh --binary FILE --model FILE [--index FILE | --knowledge DIR]
       install.sh --uninstall [--purge]

Installs tidewatch as a systemd service (run as root on the board).

  --binary FILE     tidewatch executable for this machine -> $PREFIX_BIN
  --model FILE      GGUF model -> $MODEL_DIR/ (copied only if changed)
  --index FILE      prebuilt knowledge index -> $INDEX
  --knowledge DIR   build the index from these markdown files instead
                    (default: $repo/knowledge)
  --no-start        install and enable, but do not start or restart the daemon
  --no-broker       leave the local mosquitto alone (the broker is elsewhere, or
                    set up by hand); by default, when mosquitto is installed
                    here, its loopback listener is set up as in
                    deploy/mosquitto/local.conf with a login for the daemon
  --uninstall       stop and disable the service, remove unit, binary and index
  --purge           with --uninstall: also remove $CONF_DIR, $STATE_DIR
                    (models included) and the $SVC_USER user
  -h, --help        this text

$CONF is written only if it does not exist; edit it and
run 'systemctl restart tidewatch'. Its [mqtt] username and password (the
daemon's broker login) are generated once and kept. Logs: journalctl -u tidewatch
EOF
}

die() {
    echo "install.sh: error: $*" >&2
    exit 1
}
say() { echo "install.sh: $*"; }

binary='' model='' index='' knowledge='' uninstall=0 purge=0 start=1 broker=1
while [ $# -gt 0 ]; do
    case "$1" in
    --binary) binary=${2:?--binary needs a FILE}; shift 2 ;;
    --model) model=${2:?--model needs a FILE}; shift 2 ;;
    --index) index=${2:?--index needs a FILE}; shift 2 ;;
    --knowledge) knowledge=${2:?--knowledge needs a DIR}; shift 2 ;;
    --no-start) start=0; shift ;;
    --no-broker) broker=0; shift ;;
    --uninstall) uninstall=1; shift ;;
    --purge) purge=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
    esac
done

[ "$(id -u)" -eq 0 ] || die "must run as root (try: sudo $0 $*)"

# systemctl talks to PID 1 only on a booted system; in a chroot or image build we
# still install files but cannot enable --now or restart.
have_systemd=0
[ -d /run/systemd/system ] && have_systemd=1

if [ "$purge" -eq 1 ] && [ "$uninstall" -eq 0 ]; then
    die "--purge only goes with --uninstall"
fi

if dpkg-query -W -f='${Status}' tidewatch 2>/dev/null | grep -q 'ok installed'; then
    # Mixing the two would leave dpkg believing it owns files this script replaced.
    die "tidewatch is installed as a Debian package; use 'apt remove tidewatch' or upgrade the .deb instead"
fi

# ---------------------------------------------------------------- uninstall
if [ "$uninstall" -eq 1 ]; then
    if [ "$have_systemd" -eq 1 ]; then
        systemctl stop tidewatch-warm.service 2>/dev/null || true
        systemctl disable --now tidewatch.service 2>/dev/null || true
    fi
    rm -f "$UNIT" "$WARM_UNIT" /etc/systemd/system/tidewatch.service
    [ "$have_systemd" -eq 1 ] && systemctl daemon-reload
    rm -f "$PREFIX_BIN"
    rm -rf "$SHARE_DIR" /usr/share/doc/tidewatch
    say "removed service, $PREFIX_BIN and $SHARE_DIR"
    if [ "$purge" -eq 1 ]; then
        rm -rf "$CONF_DIR" "$STATE_DIR" /etc/systemd/system/tidewatch.service.d
        if getent passwd "$SVC_USER" >/dev/null; then
            userdel "$SVC_USER" 2>/dev/null || die "could not remove user $SVC_USER (a process still running as it?)"
        fi
        if getent group "$SVC_USER" >/dev/null; then
            groupdel "$SVC_USER" || true
        fi
        # The daemon's broker login goes with its config; the broker config itself
        # stays, since sensors and operators still depend on it.
        if [ -f "$MOSQ_PASSWD" ] && grep -q "^$SVC_USER:" "$MOSQ_PASSWD"; then
            mosquitto_passwd -D "$MOSQ_PASSWD" "$SVC_USER" >/dev/null
            if [ "$have_systemd" -eq 1 ]; then
                systemctl kill --kill-who=main -s HUP mosquitto.service 2>/dev/null || true
            fi
            say "removed broker user $SVC_USER from $MOSQ_PASSWD"
        fi
        say "purged $CONF_DIR, $STATE_DIR and user $SVC_USER"
    else
        say "kept $CONF_DIR and $STATE_DIR (models); --purge removes them"
    fi
    exit 0
fi

# ---------------------------------------------------------------- install
[ -n "$binary" ] || die "--binary FILE is required (see --help)"
[ -n "$model" ] || die "--model FILE is required (see --help)"
[ -f "$binary" ] || die "binary '$binary' does not exist"
[ -f "$model" ] || die "model '$model' does not exist"
[ -f "$repo/systemd/tidewatch.service" ] || die "unit file '$repo/systemd/tidewatch.service' missing: run install.sh from a tidewatch checkout or release tarball"
if [ -n "$index" ] && [ -n "$knowledge" ]; then
    die "give --index or --knowledge, not both"
fi
if [ -n "$index" ]; then
    [ -f "$index" ] || die "index '$index' does not exist"
else
    knowledge=${knowledge:-$repo/knowledge}
    [ -d "$knowledge" ] || die "knowledge folder '$knowledge' does not exist (give --knowledge DIR or --index FILE)"
fi
# The local broker is set up when mosquitto is installed here (see --no-broker).
if [ "$broker" -eq 1 ] && { [ ! -d "$MOSQ_DIR/conf.d" ] || ! command -v mosquitto_passwd >/dev/null; }; then
    say "no local mosquitto ($MOSQ_DIR/conf.d or mosquitto_passwd missing): give [mqtt] in $CONF your broker and a login"
    broker=0
fi
# The two-listener tidewatch.conf of earlier releases also defines the loopback
# listener: with tidewatch-local.conf next to it mosquitto would not start.
if [ "$broker" -eq 1 ] && grep -qE '^[[:space:]]*listener[[:space:]]+1883([[:space:]]|$)' "$MOSQ_DIR/conf.d/tidewatch.conf" 2>/dev/null; then
    die "$MOSQ_DIR/conf.d/tidewatch.conf still defines the loopback listener (1883, anonymous); replace it with $here/mosquitto/tls-acl.conf, which now holds only the TLS listener, and run install.sh again"
fi
# A model that is not GGUF (an HTML error page, a safetensors file) would only show
# up as a start timeout 5 minutes later.
[ "$(head -c 4 "$model")" = "GGUF" ] || die "model '$model' is not a GGUF file"
# Catch an x86_64 binary copied to the board (or vice versa) before touching anything.
version=$("$binary" --version 2>&1) || die "binary '$binary' does not run here: $version (built for another architecture?)"
say "installing $version"

changed=0
# install_if_changed SRC DEST MODE [OWNER]: copy via a temp file and rename, so a
# running daemon never sees a half-written file.
install_if_changed() {
    local src=$1 dest=$2 mode=$3 owner=${4:-root:root}
    if [ -f "$dest" ] && cmp -s "$src" "$dest"; then
        chmod "$mode" "$dest"
        chown "$owner" "$dest"
        return 0
    fi
    local tmp
    tmp=$(mktemp "$(dirname "$dest")/.$(basename "$dest").XXXXXX")
    cp "$src" "$tmp"
    chmod "$mode" "$tmp"
    chown "$owner" "$tmp"
    mv -f "$tmp" "$dest"
    say "installed $dest"
    changed=1
}

if ! getent group "$SVC_USER" >/dev/null; then
    groupadd --system "$SVC_USER"
fi
if ! getent passwd "$SVC_USER" >/dev/null; then
    useradd --system --gid "$SVC_USER" --home-dir "$STATE_DIR" --no-create-home \
        --shell /usr/sbin/nologin --comment "tidewatch daemon" "$SVC_USER"
    say "created system user $SVC_USER"
fi

install -d -m 0755 "$SHARE_DIR" "$CONF_DIR" "$UNIT_DIR"
# $STATE_DIR's parent is root's, so the path itself is ours; what is in it is
# the daemon's (see install_model for $MODEL_DIR).
install -d -m 0750 -o "$SVC_USER" -g "$SVC_USER" "$STATE_DIR"
[ -e "$MODEL_DIR" ] || [ -L "$MODEL_DIR" ] || mkdir -m 0750 "$MODEL_DIR"

install_if_changed "$binary" "$PREFIX_BIN" 0755
install_if_changed "$repo/systemd/tidewatch.service" "$UNIT" 0644
install_if_changed "$repo/systemd/tidewatch-warm.service" "$WARM_UNIT" 0644

# The index is tracked apart: a running daemon takes a new one with a reload
# (SIGHUP) and keeps its model, process and queued alarms.
other_changed=$changed
changed=0
if [ -n "$index" ]; then
    install_if_changed "$index" "$INDEX" 0644
else
    built=$(mktemp /tmp/tidewatch-index.XXXXXX)
    trap 'rm -f "$built"' EXIT
    "$PREFIX_BIN" index build --knowledge "$knowledge" --out "$built" ||
        die "building the index from '$knowledge' failed"
    install_if_changed "$built" "$INDEX" 0644
fi
index_changed=$changed
changed=$other_changed

# The example alarms coverage judges by, where the .deb puts them: the daemon
# finds them beside the index. It reads them at start, so a change restarts
# it. The eval set is not shipped: the test set is never the daemon's
# training data.
examples=$repo/knowledge/examples/alarms.jsonl
if [ -n "$knowledge" ] && [ -f "$knowledge/examples/alarms.jsonl" ]; then
    examples=$knowledge/examples/alarms.jsonl
fi
if [ -f "$examples" ]; then
    install -d -m 0755 "$SHARE_DIR/examples"
    install_if_changed "$examples" "$SHARE_DIR/examples/alarms.jsonl" 0644
fi
# An eval set an older install put here is no longer the package's.
rm -rf "$SHARE_DIR/eval"

# install_model SRC: SRC as $MODEL_DIR/NAME, tidewatch:tidewatch 0640; exits 10
# when it copied it (as a subshell). $MODEL_DIR is the daemon's user's: it can
# put a symbolic link in it, or in its place, between any check and a change
# here, and a chown or chmod that followed one would give that user any root
# file (the broker's TLS key). So no path inside it is ever changed: the shell
# enters the directory itself (refusing a link) and changes it as ".", and the
# model gets its mode and owner in a directory only root can enter and is
# renamed into place (a rename replaces a link, it never follows one).
install_model() (
    local src name stage
    # Absolute: the cd below must not change which file a relative --model names.
    src=$(realpath -e -- "$1") || die "model '$1' does not exist"
    name=$(basename "$1")
    local state_phys
    # Links above $STATE_DIR are root's (a /var moved to another disk); only
    # the last step, the daemon's, must not be one.
    state_phys=$(cd -P -- "$STATE_DIR" && pwd -P) || die "cannot enter $STATE_DIR"
    cd -P -- "$MODEL_DIR" 2>/dev/null && [ "$(pwd -P)" = "$state_phys/${MODEL_DIR##*/}" ] ||
        die "$MODEL_DIR is not a directory but a link (or missing): the model directory was replaced; look at it, remove it and run install.sh again"
    # Called in an `||` list, where set -e does not apply: every step says so.
    chown "$SVC_USER:$SVC_USER" . && chmod 0750 . || die "cannot set the owner and mode of $MODEL_DIR"
    if [ -f "$name" ] && [ ! -L "$name" ] &&
        [ "$(stat -c '%U:%G %a' -- "$name")" = "$SVC_USER:$SVC_USER 640" ] && cmp -s "$src" "$name"; then
        exit 0
    fi
    # Next to $STATE_DIR (in root's /var/lib), on the same filesystem, so the
    # move below is one rename and not a copy into the daemon's directory.
    stage=$(mktemp -d "$(dirname "$STATE_DIR")/.tidewatch-model.XXXXXX") || die "cannot make a staging directory next to $STATE_DIR"
    trap 'rm -rf "$stage"' EXIT
    [ "$(stat -c %d "$stage")" = "$(stat -c %d .)" ] ||
        die "$MODEL_DIR is on another filesystem than $(dirname "$STATE_DIR"); install.sh cannot put the model there without following links"
    cp -- "$src" "$stage/$name" && chmod 0640 "$stage/$name" &&
        chown "$SVC_USER:$SVC_USER" "$stage/$name" && mv -fT -- "$stage/$name" "./$name" ||
        die "cannot install the model as $MODEL_DIR/$name"
    exit 10
)
model_dest=$MODEL_DIR/$(basename "$model")
model_rc=0
install_model "$model" || model_rc=$?
case "$model_rc" in
0) ;;
10) say "installed $model_dest"; changed=1 ;;
*) exit "$model_rc" ;;
esac

# big_cores: the CPUs with the highest cpu_capacity (the Cortex-A72s on an RK3576),
# as a cpuset list; empty when all CPUs are alike. The kernel publishes capacity
# only on asymmetric (big.LITTLE) systems.
big_cores() {
    local f max=0 cap list=''
    for f in /sys/devices/system/cpu/cpu[0-9]*/cpu_capacity; do
        [ -r "$f" ] || return 0
        cap=$(cat "$f")
        [ "$cap" -gt "$max" ] && max=$cap
    done
    [ "$max" -gt 0 ] || return 0
    local n=0 total=0
    for f in /sys/devices/system/cpu/cpu[0-9]*/cpu_capacity; do
        total=$((total + 1))
        if [ "$(cat "$f")" -eq "$max" ]; then
            cpu=${f#/sys/devices/system/cpu/cpu}
            list="${list:+$list,}${cpu%%/*}"
            n=$((n + 1))
        fi
    done
    [ "$n" -lt "$total" ] && echo "$list"
    return 0
}

if [ ! -e "$CONF" ]; then
    ncpu=$(nproc --all)
    cpus=$(big_cores)
    # The RK3576's big cores are 4-7; kernels that do not publish cpu_capacity
    # still number them that way.
    if [ -z "$cpus" ] && [ "$ncpu" -ge 8 ]; then
        cpus=4-7
    fi
    threads=4
    [ "$ncpu" -lt 4 ] && threads=$ncpu
    tmp=$(mktemp "$CONF_DIR/.tidewatch.toml.XXXXXX")
    {
        echo "# Written by install.sh; every key is documented in /usr/share/doc/tidewatch/tidewatch.toml.example"
        echo "state_dir = \"$STATE_DIR\""
        echo
        echo "[mqtt]"
        echo "host = \"127.0.0.1\""
        echo "port = 1883"
        echo "topic_prefix = \"tidewatch\""
        echo
        echo "[knowledge]"
        echo "index = \"$INDEX\""
        echo "top_k = 3"
        echo
        echo "[llm]"
        echo "model = \"$model_dest\""
        echo "threads = $threads"
        if [ -n "$cpus" ]; then
            echo "cpus = \"$cpus\""
        fi
    } >"$tmp"
    # Readable by the daemon's group only: [mqtt] password may be added here later.
    chmod 0640 "$tmp"
    chown "root:$SVC_USER" "$tmp"
    mv "$tmp" "$CONF"
    say "wrote $CONF (llm.threads=$threads${cpus:+, llm.cpus=$cpus})"
    changed=1
else
    say "kept existing $CONF"
    grep -q "$model_dest" "$CONF" ||
        say "warning: $CONF does not mention $model_dest; the daemon keeps using the model named there"
fi

# The config holds the broker password from here on, whoever wrote it.
chown "root:$SVC_USER" "$CONF"
chmod 0640 "$CONF"

# ---------------------------------------------------------------- local broker
# The loopback listener wants a login and makes it the client id, so no local
# user can take the daemon's session (and the alarms queued in it) by connecting
# with its client id and a clean session. login.sh puts the daemon's login into
# $CONF and the password file, once.
broker_restart=0 broker_reload=0
if [ "$broker" -eq 1 ]; then
    outer_changed=$changed
    changed=0
    # Kept until mosquitto has restarted with the new file, to put back if it
    # cannot: a broker that is down takes the sensors with it.
    local_conf_before=$(cat "$MOSQ_LOCAL_CONF" 2>/dev/null) || local_conf_before=''
    install_if_changed "$here/mosquitto/local.conf" "$MOSQ_LOCAL_CONF" 0644
    broker_restart=$changed
    changed=$outer_changed
    # The ACL lists this ship's sensors and people: installed once, then the
    # administrator's.
    if [ ! -e "$MOSQ_ACL" ]; then
        install -m 0644 "$here/mosquitto/tidewatch.acl" "$MOSQ_ACL"
        say "installed $MOSQ_ACL"
        broker_reload=1
    elif ! grep -qE "^[[:space:]]*user[[:space:]]+$SVC_USER[[:space:]]*$" "$MOSQ_ACL"; then
        say "warning: $MOSQ_ACL has no 'user $SVC_USER' block: the broker will let the daemon in but grant it nothing"
    fi
    conf_sum=$(sha256sum <"$CONF")
    out=$("$here/mosquitto/login.sh" "$CONF" "$MOSQ_PASSWD" 2>&1) ||
        die "setting up the daemon's broker login failed: $out"
    # login.sh prints a line only for a file it changed.
    while IFS= read -r line; do
        [ -n "$line" ] || continue
        say "${line#login.sh: }"
        broker_reload=1
    done <<<"$out"
    [ "$(sha256sum <"$CONF")" = "$conf_sum" ] || changed=1
    # mosquitto reads it after dropping root; nobody else needs to.
    chown root:mosquitto "$MOSQ_PASSWD"
    chmod 0640 "$MOSQ_PASSWD"
    if [ "$have_systemd" -eq 1 ] && [ $((broker_restart + broker_reload)) -gt 0 ]; then
        if [ "$broker_restart" -eq 1 ]; then
            # A listener's settings are read only at start.
            say "restarting mosquitto ($MOSQ_LOCAL_CONF changed)"
            if ! systemctl restart mosquitto.service; then
                if [ -n "$local_conf_before" ]; then
                    printf '%s\n' "$local_conf_before" >"$MOSQ_LOCAL_CONF"
                else
                    rm -f "$MOSQ_LOCAL_CONF"
                fi
                systemctl restart mosquitto.service || true
                die "mosquitto did not start with $MOSQ_LOCAL_CONF, so it was put back as it was (another file in $MOSQ_DIR/conf.d with a listener on 1883? see /var/log/mosquitto/mosquitto.log; --no-broker leaves mosquitto alone)"
            fi
        elif systemctl is-active --quiet mosquitto.service; then
            # SIGHUP re-reads the password file and the ACL and keeps every
            # connection. Sent here: Debian's ExecReload wants /bin/kill (procps),
            # which a minimal board lacks.
            systemctl kill --kill-who=main -s HUP mosquitto.service
            say "mosquitto re-read its logins and ACL"
        fi
    fi
fi

if [ -r "$here/tidewatch.toml" ]; then
    install -d -m 0755 /usr/share/doc/tidewatch
    install -m 0644 "$here/tidewatch.toml" /usr/share/doc/tidewatch/tidewatch.toml.example
fi

# Run as the service user so a file it cannot read fails here, not at boot.
if command -v runuser >/dev/null; then
    check=(runuser -u "$SVC_USER" -- "$PREFIX_BIN" check-config --config "$CONF")
else
    check=("$PREFIX_BIN" check-config --config "$CONF")
fi
# Without --offline this loads the model: a model whose architecture this llama.cpp
# build does not know fails here, with the old daemon still running.
out=$("${check[@]}" 2>&1) || die "config check failed, not (re)starting the daemon:
$out
fix $CONF (or the model) and run install.sh again"
while IFS= read -r line; do say "  $line"; done <<<"$out"

if [ "$have_systemd" -eq 0 ]; then
    say "systemd is not running here; files installed, enable later with: systemctl enable --now tidewatch"
    exit 0
fi

systemctl daemon-reload
systemctl enable tidewatch.service >/dev/null 2>&1
if [ "$start" -eq 0 ]; then
    say "enabled; not started (--no-start)"
    exit 0
fi
# With Type=notify these block until READY=1 (model, index and broker up) or the
# unit's TimeoutStartSec, so success here means the daemon really serves.
if systemctl is-active --quiet tidewatch.service; then
    if [ "$changed" -eq 1 ]; then
        say "restarting tidewatch (files changed)"
        systemctl restart tidewatch.service || start_failed=1
    elif [ "$index_changed" -eq 1 ]; then
        say "reloading tidewatch (only the index changed; the daemon keeps running)"
        systemctl reload tidewatch.service || start_failed=1
    fi
else
    say "starting tidewatch (loading the model can take minutes)"
    systemctl start tidewatch.service || start_failed=1
fi
if [ "${start_failed:-0}" -eq 1 ]; then
    journalctl -u tidewatch.service -n 30 --no-pager >&2 || true
    die "tidewatch did not start; see above or: journalctl -u tidewatch -b"
fi
say "tidewatch is $(systemctl is-active tidewatch.service); logs: journalctl -u tidewatch -f"
# The manuals' prompt states, computed in the background at idle CPU and I/O
# priority: what exists is skipped, so this costs a model load when nothing
# changed. A config without a disk tier makes it exit at once, said in its log.
if systemctl start --no-block tidewatch-warm.service; then
    say "precomputing the manuals' prompt states in the background: journalctl -u tidewatch-warm"
fi
