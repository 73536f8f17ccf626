#!/usr/bin/env bash
# The 10,000-alarm storm, RUNS times (default 5): 10,000 warnings past the
# inbox budget and a critical alarm at the end, each run must answer all
# 10,001. CI runs it once; repeated, it caught a defect on 2026-12-03 (2 of 5
# runs lost the storm's last 17 alarms at a stock broker after a 1.2 s pause
# of the hub; fixed by the MQTT 5 receive maximum, see tests/storm.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
model=$(deploy/dev-setup.sh | tail -n1)
export TIDEWATCH_TEST_MODEL="$model"
runs=${RUNS:-5} ok=0
for i in $(seq 1 "$runs"); do
    if cargo test --release --features fault-injection --test storm ten_thousand; then
        ok=$((ok + 1))
    fi
done
echo "bench-storm: $ok of $runs runs answered every alarm"
[ "$ok" -eq "$runs" ]
