#!/usr/bin/env bash
# The test command: sets up what the tests need (apt packages, the test model),
# then runs every test (unit, integration with a real mosquitto and the real
# model, fault injection) against a release build.
set -euo pipefail
cd "$(dirname "$0")/.."
model=$(deploy/dev-setup.sh | tail -n1)
export TIDEWATCH_TEST_MODEL="$model"
exec cargo test --release --features fault-injection "$@"
