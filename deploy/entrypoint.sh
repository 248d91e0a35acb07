#!/bin/sh
# Starts `kbroker serve` in a container. Reads /etc/kbroker/server.properties when mounted (KBROKER_CONFIG names
# another file); KBROKER_* variables override it (docs/deploy.md). In a Kubernetes StatefulSet (KBROKER_POD_ORDINAL_FROM
# _HOSTNAME=1) the broker id is the pod ordinal (kbroker-2 -> broker.id=2) and the advertised listener is the pod's
# stable DNS name <pod>.<KBROKER_HEADLESS_SERVICE>:<KBROKER_ADVERTISED_PORT>.
# `exec` replaces this shell, so the SIGTERM tini forwards reaches kbroker itself.
set -eu

config="${KBROKER_CONFIG:-/etc/kbroker/server.properties}"
set -- serve "$@"
if [ -f "$config" ]; then
    set -- "$@" --config "$config"
fi

if [ "${KBROKER_POD_ORDINAL_FROM_HOSTNAME:-0}" = "1" ]; then
    pod="${HOSTNAME:?HOSTNAME is not set}"
    ordinal="${pod##*-}"
    case "$ordinal" in
        ''|*[!0-9]*) echo "entrypoint: cannot read a pod ordinal from HOSTNAME=$pod" >&2; exit 2 ;;
    esac
    set -- "$@" --override "broker.id=$ordinal"
    if [ -n "${KBROKER_HEADLESS_SERVICE:-}" ]; then
        set -- "$@" --override \
            "advertised.listeners=PLAINTEXT://$pod.$KBROKER_HEADLESS_SERVICE:${KBROKER_ADVERTISED_PORT:-9092}"
    fi
fi

exec "${KBROKER_BIN:-kbroker}" "$@"
