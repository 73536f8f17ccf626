#!/usr/bin/env bash
# Gives the tidewatch daemon its login on the board's broker, and keeps it so:
# afterwards the [mqtt] section of TOML has a username and a password, and the
# mosquitto password file PASSWD has that user. Used by deploy/install.sh (and by
# tests/broker_login.rs against throwaway files).
#
#   deploy/mosquitto/login.sh TOML PASSWD
#
# A missing password is generated (128 random bits) and written to both; an
# existing one is kept, so running this again changes nothing. The user name is
# the one TOML names, "tidewatch" if none (tidewatch.acl grants rights to that
# name). TOML keeps its owner and mode (it holds the password: install.sh makes
# it root:tidewatch 0640). PASSWD is created if absent; the caller sets its owner.
# Prints one line per file it changed.
set -euo pipefail

die() {
    echo "login.sh: error: $*" >&2
    exit 1
}
[ $# -eq 2 ] || die "usage: login.sh TOML PASSWD"
toml=$1 passwd=$2
[ -f "$toml" ] || die "config '$toml' does not exist"
command -v mosquitto_passwd >/dev/null ||
    die "mosquitto_passwd not found (apt-get install mosquitto)"

# mqtt_key KEY: the string value of KEY in [mqtt], empty if not set; fails for a
# value this cannot read back exactly (escapes), rather than half-copy it into
# the password file.
mqtt_key() {
    awk -v key="$1" '
        /^[[:space:]]*\[/ { sect = $0; gsub(/^[[:space:]]*\[[[:space:]]*|[[:space:]]*\].*$/, "", sect); next }
        sect == "mqtt" && $0 ~ "^[[:space:]]*" key "[[:space:]]*=" {
            v = $0
            sub(/^[^=]*=[[:space:]]*/, "", v)
            q = substr(v, 1, 1)
            if (q != "\"" && q != "\047") exit 3
            v = substr(v, 2)
            end = index(v, q)
            v = substr(v, 1, end - 1)
            if (end == 0 || (q == "\"" && index(v, "\\"))) exit 3
            print v; exit
        }' "$toml"
}

user=$(mqtt_key username) ||
    die "cannot read [mqtt] username in '$toml' (write it as a plain quoted string)"
password=$(mqtt_key password) ||
    die "cannot read [mqtt] password in '$toml' (write it as a quoted string without escapes)"
add=()
if [ -z "$user" ]; then
    user=tidewatch
    add+=("username = \"$user\"")
fi
new_password=0
if [ -z "$password" ]; then
    password=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
    add+=("password = \"$password\"")
    new_password=1
fi

if [ ${#add[@]} -gt 0 ]; then
    # Right under the [mqtt] header (or a new [mqtt] at the end): a key written
    # after a later header would belong to that table, and deny_unknown_fields
    # would refuse the whole file.
    tmp=$(mktemp "$(dirname "$toml")/.$(basename "$toml").XXXXXX")
    trap 'rm -f "$tmp"' EXIT
    chmod --reference="$toml" "$tmp"
    chown --reference="$toml" "$tmp"
    # The new lines go in on stdin (printf is a builtin), never as an argument:
    # every local user can read a process's arguments in /proc/PID/cmdline.
    printf '%s\n' "${add[@]}" | awk '
        NR == FNR { lines = lines sep $0; sep = "\n"; next }
        { print }
        !done && /^[[:space:]]*\[[[:space:]]*mqtt[[:space:]]*\]/ { print lines; done = 1 }
        END { if (!done) { print ""; print "[mqtt]"; print lines } }' - "$toml" >"$tmp"
    mv -f "$tmp" "$toml"
    trap - EXIT
    echo "login.sh: wrote [mqtt] ${add[*]%% =*} to $toml"
fi

# mosquitto_passwd salts every hash, so an existing entry is left alone unless
# the password is new: rewriting it would change the file on every run.
has_user() { [ -f "$passwd" ] && awk -F: -v u="$user" '$1 == u { f = 1 } END { exit !f }' "$passwd"; }
if [ "$new_password" -eq 1 ] || ! has_user; then
    create=()
    [ -s "$passwd" ] || create=(-c)
    # On stdin, not with -b: a command line is readable by every local user.
    printf '%s\n%s\n' "$password" "$password" |
        mosquitto_passwd "${create[@]}" "$passwd" "$user" >/dev/null ||
        die "mosquitto_passwd could not set '$user' in '$passwd'"
    echo "login.sh: set the password of broker user '$user' in $passwd"
fi
