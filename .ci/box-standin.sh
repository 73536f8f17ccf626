#!/bin/sh
# A fake tidewatch for debugging .ci/box-test.sh itself when the real daemon is
# broken: `BOX_STANDIN=1 .ci/box-test.sh .ci/box-standin.sh MODEL`. It speaks the
# same MQTT topics and sd_notify protocol with mosquitto-clients and systemd-notify.
# Limits: its sd_notify comes from child processes (so the box relaxes NotifyAccess)
# and its journal records come from short-lived `logger` processes, which journald
# often cannot attribute to the unit; the box then matches SYSLOG_IDENTIFIER instead.
case "$1" in
--version) echo "tidewatch 0.0.0-standin"; exit 0 ;;
index)
    while [ $# -gt 0 ]; do
        [ "$1" = --out ] && echo standin >"$2"
        shift
    done
    exit 0
    ;;
check-config) exit 0 ;;
run) ;;
*) echo "box-standin: unsupported: $*" >&2; exit 2 ;;
esac
(while true; do systemd-notify WATCHDOG=1; sleep 1; done) &
systemd-notify --ready --status="stand-in serving"
mosquitto_sub -h 127.0.0.1 -q 1 -t 'tidewatch/alarm/#' -v | while read -r topic payload; do
    id=$(echo "$payload" | sed -n 's/.*"id" *: *"\([^"]*\)".*/\1/p')
    eq=${topic##*/}
    printf 'MESSAGE=diagnosed %s\nALARM_ID=%s\nEQUIPMENT=%s\nSYSLOG_IDENTIFIER=tidewatch\n' "$id" "$id" "$eq" | logger --journald
    mosquitto_pub -h 127.0.0.1 -q 1 -t "tidewatch/diagnosis/$eq" -m "{\"alarm_id\":\"$id\",\"summary\":\"stand-in\"}"
done
