#!/usr/bin/env bash
# Installs everything the tests need (apt, pip, npm, Maven) on a fresh Debian machine as root,
# then runs every test. `.ci/run` calls this script; the README's second command is this script.
#
# The tests run in a virtual environment made afresh by this script on every run (.venv-test/),
# from the project's own dependency lists only, so a package installed by hand on the machine
# cannot hide one the project forgot. pip's and Maven's download caches make the rebuild cheap.
#
#   bash scripts/test.sh                       # everything: unit tests, compat-tests and kafka-python's own suite
#                                              # on kbroker, then compat-tests on Kafka
#   bash scripts/test.sh tests/log -x          # arguments go to the first pytest run only (the Kafka run is skipped)
#   KBROKER_TEST_VENV=/path bash scripts/test.sh   # another venv location (it is cleared!)
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(kcat chromium)   # zookeeper for the cluster tests comes from Maven (the jar Kafka 3.9 depends on)
command -v javac >/dev/null 2>&1 || APT_PACKAGES+=(openjdk-17-jdk-headless)   # Java harnesses, Kafka, Spark
command -v mvn >/dev/null 2>&1 || APT_PACKAGES+=(maven)                       # compat-tests/java/pom.xml
command -v node >/dev/null 2>&1 || APT_PACKAGES+=(nodejs npm)                 # compat-tests/node/kafkajs_driver.js
command -v ip >/dev/null 2>&1 || APT_PACKAGES+=(iproute2)                     # network namespaces: tests/cluster/netns.py
command -v systemd-analyze >/dev/null 2>&1 || APT_PACKAGES+=(systemd)         # tests/deploy: verify deploy/systemd/kbroker.service
python3 -m pip --version >/dev/null 2>&1 || APT_PACKAGES+=(python3-pip)       # Debian's python3 has no pip
python3 -c "import ensurepip, venv" >/dev/null 2>&1 || APT_PACKAGES+=(python3-venv)
if [ "${#APT_PACKAGES[@]}" -gt 0 ] && [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${APT_PACKAGES[@]}"
fi

VENV="${KBROKER_TEST_VENV:-$PWD/.venv-test}"
python3 -m venv --clear "$VENV"
PYTHON="$VENV/bin/python"
"$PYTHON" -m pip install --quiet --disable-pip-version-check -e '.[test,fast]'

# kafkajs for compat-tests/test_kafkajs.py, from package-lock.json; skipped while node_modules is newer than it.
# The lz4 and zstd codecs compile native code (optional dependencies: a failed build skips only those tests).
if command -v npm >/dev/null 2>&1 &&
        [ ! compat-tests/node/node_modules/.package-lock.json -nt compat-tests/node/package-lock.json ]; then
    npm ci --no-audit --no-fund --loglevel=error --prefix compat-tests/node
fi

# Java jar sets (kafka-clients 3.9 and 4.x, Apache Kafka 3.9 and 4.x, Spark's Kafka connector), once per machine.
"$PYTHON" compat-tests/maven_jars.py

"$PYTHON" -m ruff check .

run_pytest() {
    local status=0
    "$PYTHON" -m pytest -n auto --dist loadgroup "$@" || status=$?   # xdist_group("spark"): one Spark JVM
    if [ "$status" -eq 5 ]; then
        echo "pytest collected no tests ($*): failing, an empty run proves nothing" >&2
        return 1
    fi
    return "$status"
}

if [ "$#" -gt 0 ]; then
    run_pytest "$@"
    exit
fi
status=0
run_pytest || status=$?                                        # tests/ and compat-tests/ against kbroker
echo "== kafka-python's own integration suite against kbroker (scripts/client_suites.py) =="
"$PYTHON" scripts/client_suites.py --targets kbroker || status=$?
echo "== compat-tests against Apache Kafka 4.x (KRaft), the reference =="
run_pytest compat-tests --target kafka || status=$?
exit "$status"
