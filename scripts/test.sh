#!/usr/bin/env bash
# Installs everything the tests need (pip, apt, npm) on a fresh Debian machine as root,
# then runs every test. `.ci/run` calls this script; the README's second command is this script.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(kcat)   # zookeeper arrives with the cluster tests
if ! command -v javac >/dev/null 2>&1; then
    APT_PACKAGES+=(openjdk-17-jdk-headless)   # compiles and runs compat-tests/java/KafkaHarness.java
fi
if ! command -v node >/dev/null 2>&1; then
    APT_PACKAGES+=(nodejs npm)   # runs compat-tests/node/kafkajs_driver.js
fi
if ! python3 -m pip --version >/dev/null 2>&1; then
    APT_PACKAGES+=(python3-pip)   # Debian's python3 comes without pip
fi
if [ "${#APT_PACKAGES[@]}" -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${APT_PACKAGES[@]}"
    fi
fi

# Debian marks its python3 externally managed (PEP 668); this script installs as root on purpose.
export PIP_BREAK_SYSTEM_PACKAGES=1
python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore -e '.[test,fast]'

# kafkajs for compat-tests/test_kafkajs.py, from package-lock.json; skipped while node_modules is newer than it.
# The lz4 and zstd codecs compile native code (optional dependencies: a failed build skips only those tests).
if command -v npm >/dev/null 2>&1 &&
        [ ! compat-tests/node/node_modules/.package-lock.json -nt compat-tests/node/package-lock.json ]; then
    npm ci --no-audit --no-fund --loglevel=error --prefix compat-tests/node
fi

python3 -m ruff check .

set +e
python3 -m pytest -n auto "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
    echo "pytest collected no tests: failing, an empty run proves nothing" >&2
    exit 1
fi
exit "$status"
