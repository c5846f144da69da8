#!/usr/bin/env bash
# The whole test run (make test): install what is missing, start the
# servers, vet, run every test with -race against them, and stop the
# servers again (scripts/with-services.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${LOCKER_TEST_IN_SERVICES:-}" ] || LOCKER_TEST_IN_SERVICES=1 exec scripts/with-services.sh "$0" "$@"

echo "+ go vet ./..." >&2
go vet ./...
# One test binary at a time (-p 1): the fault tests kill and restart
# servers, and a JVM starting takes both cores of a small machine for
# seconds, which would stall the timing-sensitive cases of a package
# running beside them. Compile first, in parallel.
echo "+ go test -race -run '^\$' ./... && go test -race -count=1 -p 1 ./..." >&2
go test -race -count=1 -run '^$' ./... >/dev/null
go test -race -count=1 -p 1 -timeout 15m ./... "$@"
# cmd/lockctl is a module of its own, which ./... does not reach. Its
# end-to-end tests mostly wait for servers and TTLs: four run at once.
echo "+ (cd cmd/lockctl && go vet ./... && go test -race -count=1 -parallel 4 ./...)" >&2
(cd cmd/lockctl && go vet ./... && go test -race -count=1 -parallel 4 -timeout 10m ./...)
# Integrations with other libraries are modules of their own too (their
# dependencies stay out of the library's go.mod), tested against the
# servers with real schedulers.
for m in contrib/*/; do
	echo "+ (cd $m && go vet ./... && go test -race -count=1 -parallel 8 ./...)" >&2
	(cd "$m" && go vet ./... && go test -race -count=1 -parallel 8 -timeout 5m ./...)
done
# Benchmarks once each, briefly: they must keep working; the figures come
# from make bench.
echo "+ go test -run '^\$' -bench . -benchtime 20x ./..." >&2
go test -run '^$' -bench . -benchtime 20x ./... >/dev/null
for m in bench/*/; do
	echo "+ (cd $m && go vet ./... && go test -run '^\$' -bench . -benchtime 20x ./...)" >&2
	(cd "$m" && go vet ./... && go test -run '^$' -bench . -benchtime 20x ./... >/dev/null)
done
