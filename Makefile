# make test           everything: install servers if missing, start them, vet,
#                     go test -race against them, stop them
# make example        the library-only example (examples/swap) on the embedded
#                     memory backend, no servers
# make lockctl        build the command-line tool as ./lockctl (from cmd/lockctl)
# make demo           lockctl's story of a paused and a crashed holder, fencing
#                     at work, on the embedded memory backend, no servers
# make services-up    start the servers for development (then:
#                     eval $$(scripts/services.sh env))
# make services-down  stop them
# make bench          lockctl bench: every backend against the raw server
#                     primitives and the peer libraries, every scenario; starts
#                     and stops its own servers; report in bench-report/
# make chaos          lockctl chaos: faults (paused, killed and cut-off holders,
#                     restarted servers, a clock running ahead) on every
#                     backend, 10 rounds each, counted by a fencing-checked
#                     resource; starts and stops its own servers; report in
#                     chaos-report/
# make bench-go       the packages' Go benchmarks and bench/*/ against running
#                     servers (make services-up first)
# make torture        the randomized fault test on every backend, 3 minutes
#                     each (LOCKER_TORTURE_DURATION, LOCKER_TORTURE_SEEDS,
#                     FAULTTEST_SEED to replay a failure's seed)

GO ?= go

.PHONY: test torture example lockctl demo services-up services-down install vet test-short bench bench-go chaos

test:
	scripts/test.sh

torture:
	scripts/torture.sh

example:
	$(GO) run ./examples/swap

# cmd/lockctl is a module of its own (its CLI dependencies stay out of the
# library's go.mod), so it is built from its directory.
lockctl:
	cd cmd/lockctl && $(GO) build -o ../../lockctl .

demo:
	cd cmd/lockctl && $(GO) run . demo --url memory://

install:
	scripts/install.sh

services-up: install
	scripts/services.sh up
	@echo 'now: eval $$(scripts/services.sh env)'

services-down:
	scripts/services.sh down

vet:
	$(GO) vet ./...

# Unit tests without servers: backend tests skip.
test-short:
	$(GO) test -race -count=1 ./...

bench:
	scripts/bench.sh

chaos:
	scripts/chaos.sh

# The library's benchmarks, then the peer comparisons in bench/*/ (modules
# of their own, so that peer libraries stay out of the library's go.mod).
bench-go:
	. $${LOCKER_SERVICES_DIR:-/tmp/locker-services}/env && \
		LOCKER_HELD_SIZES=$${LOCKER_HELD_SIZES:-10000,100000} \
		$(GO) test -run '^$$' -bench . -benchmem -timeout 60m ./... && \
		for m in bench/*/; do (cd $$m && $(GO) test -run '^$$' -bench . -benchmem ./...) || exit 1; done
