#!/usr/bin/env bash
# The long storms, outside CI: 10,000 warnings past the inbox budget and a
# critical alarm at the end, RUNS times (default 5), each must answer all
# 10,001. It caught an open defect on 2026-12-03 (intake stalls with ~17
# alarms left at the broker in 2 of 5 runs); see tests/storm.rs.
set -euo pipefail
cd "$(dirname "$0")/.."
model=$(deploy/dev-setup.sh | tail -n1)
export TIDEWATCH_TEST_MODEL="$model"
runs=${RUNS:-5} ok=0
for i in $(seq 1 "$runs"); do
    if cargo test --release --features fault-injection --test storm -- --ignored ten_thousand; then
        ok=$((ok + 1))
    fi
done
echo "bench-storm: $ok of $runs runs answered every alarm"
[ "$ok" -eq "$runs" ]
