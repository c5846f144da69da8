# shellcheck shell=bash
# Sourced by install.sh and services.sh with ROOT set to the repository
# root: sets ETCD_VERSION (the etcd server version tools/etcd/go.mod
# requires) and ETCD_BIN (the binary to run: LOCKER_ETCD_BIN if set, else
# the one install.sh builds).
ETCD_VERSION=$(awk '$1 == "require" && $2 == "go.etcd.io/etcd/server/v3" { print $3 }' "$ROOT/tools/etcd/go.mod")
[ -n "$ETCD_VERSION" ] || { echo "etcd-bin.sh: no go.etcd.io/etcd/server/v3 requirement in $ROOT/tools/etcd/go.mod" >&2; exit 1; }
# shellcheck disable=SC2034 # used by the scripts that source this one
ETCD_BIN=${LOCKER_ETCD_BIN:-$ROOT/.cache/etcd-$ETCD_VERSION/etcd}
