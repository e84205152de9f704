# The two entry points for a newcomer: `make demo` and `make test`. Both set up .venv themselves.
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3

.PHONY: demo test lint venv debian-tools grafana-schema clean

$(VENV)/.installed: pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip "setuptools>=77" wheel
	$(PY) -m pip install -q -e '.[test]'
	touch $@

venv: $(VENV)/.installed

# promtool, prometheus, amtool and alertmanager come from Debian (tests run the real ones);
# openssl makes the certificate for the receivers' TLS test.
debian-tools:
	@if ! command -v promtool >/dev/null || ! command -v amtool >/dev/null || ! command -v prometheus-alertmanager >/dev/null || ! command -v openssl >/dev/null; then \
		echo "installing prometheus, prometheus-alertmanager and openssl from Debian"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			prometheus prometheus-alertmanager openssl >/dev/null; \
	fi

# Grafana's published schema (@grafana/schema) and TypeScript, pinned by the lock file, for the dashboards'
# schema test (dashboards/schema_check.py); node and npm come from Debian when missing.
SCHEMA_DIR := .grafana-schema
$(SCHEMA_DIR)/.installed: dashboards/grafana_schema/package.json dashboards/grafana_schema/package-lock.json
	@if ! command -v npm >/dev/null || ! command -v node >/dev/null; then \
		echo "installing nodejs and npm from Debian"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			nodejs npm >/dev/null; \
	fi
	mkdir -p $(SCHEMA_DIR)
	cp dashboards/grafana_schema/package.json dashboards/grafana_schema/package-lock.json $(SCHEMA_DIR)/
	npm ci --prefix $(SCHEMA_DIR) --no-audit --no-fund --ignore-scripts --silent
	touch $@

grafana-schema: $(SCHEMA_DIR)/.installed

demo: venv
	$(VENV)/bin/infersight --config infersight.example.yaml demo

test: venv debian-tools grafana-schema
	$(VENV)/bin/ruff check .
	@# pytest exits 5 when it collected no tests: a failure here, never a pass.
	$(PY) -m pytest -q; rc=$$?; if [ $$rc -eq 5 ]; then echo "make test: no tests collected" >&2; exit 1; fi; exit $$rc

lint: venv
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) .infersight build *.egg-info $(SCHEMA_DIR)
