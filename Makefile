# Everything runs from the project's own virtualenv in .venv; `make install` builds it once and
# again only when pyproject.toml changes.

PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV := .venv
VENV_PYTHON := $(VENV)/bin/python
INSTALL_STAMP := $(VENV)/.install-stamp

# Debian packages the project needs on the machine (gcc builds the generated C through cffi;
# libopenblas-dev gives the built-in `cblas` codegen cblas.h and -lopenblas; redis-server is the
# broker of the Celery topology test; bubblewrap is the sandbox of every build and run; jq and
# curl run the README's walk-through, which tests/service/test_readme_walkthrough.py executes;
# chromium is the browser the explorer page's tests drive through Playwright).
SYSTEM_PACKAGES := gcc libopenblas-dev redis-server bubblewrap jq curl chromium

.PHONY: install apt test serve bench openapi clean fuzz-diff fuzz soak conformance

install: apt $(INSTALL_STAMP)
	@# Bytecode of our own modules, written even where PYTHONDONTWRITEBYTECODE is set (it is on
	@# our CI machines): every CLI call, worker and sandboxed job starts a fresh interpreter,
	@# which otherwise compiles the compiler's ~140 modules from source again (0.5 s each time).
	@$(VENV_PYTHON) -m compileall -q -j 0 compiler service bench tests >/dev/null

# Installs only the packages that dpkg does not already know, so a ready machine pays nothing.
apt:
	@if ! command -v dpkg >/dev/null 2>&1; then \
		echo "apt: no dpkg here; make sure these are installed: $(SYSTEM_PACKAGES)"; exit 0; \
	fi; \
	missing=""; \
	for pkg in $(SYSTEM_PACKAGES); do \
		dpkg -s $$pkg >/dev/null 2>&1 || missing="$$missing $$pkg"; \
	done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" != "0" ]; then \
		echo "apt: not root, skipping; please install:$$missing"; exit 0; \
	fi; \
	echo "apt: installing$$missing"; \
	apt-get update -q && \
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing

$(INSTALL_STAMP): pyproject.toml
	test -x $(VENV_PYTHON) || $(PYTHON) -m venv $(VENV)
	$(VENV_PYTHON) -m pip install --quiet --upgrade pip
	$(VENV_PYTHON) -m pip install --quiet -e '.[test]'
	touch $@

# Three workers on two cores: the service tests spend much of their time waiting on servers and
# workers they started, and a third worker fills those waits (9:31 against 10:23 with two, on a
# busy 2-core host; tests/conftest.py also starts the longest modules first).
test: install
	$(VENV_PYTHON) -m pytest -n 3 -q

serve: install
	$(VENV)/bin/relaycc serve

# Differential testing at length: N generated models compiled (for c, cblas and the test
# codegens of tests/codegens, alone and together) and compared with the interpreter (make
# test runs a seeded sample of 50).
N ?= 1000
fuzz-diff: install
	$(VENV_PYTHON) -m tests.differential.run $(N)

# The service under load at length: 100 clients with their own API keys for 60 s against a real
# server, then every accepted job must finish (make test runs it for 10 s).
SECONDS_OF_LOAD ?= 60
soak: install
	$(VENV_PYTHON) -m tests.service.load --seconds $(SECONDS_OF_LOAD) --clients 100

# Parser and type-checker fuzzing: N inputs (hypothesis's grammar-aware programs and mutants,
# then atheris on raw bytes), then the hostile corpus at full size (10^6 let bindings); every
# input must end in a module or a located error (make test runs a bounded sample). N defaults
# to 10^6 here (not fuzz-diff's 1000). Failing inputs go to fuzz-out/parser.
fuzz: install
	$(VENV_PYTHON) -m pip install --quiet -e '.[test,fuzz]'
	$(VENV_PYTHON) -m compiler.testing.fuzz_driver $(if $(filter file,$(origin N)),1000000,$(N))

# The ONNX backend node tests (all 1,884, shipped with the onnx wheel) imported, compiled and
# compared with their reference outputs; prints passed / failed / unsupported and the reasons
# (make test runs the cases of the operators issue 12 lists). CONFORMANCE_ARGS="Conv Relu"
# for some op types only, "--list" for every case's result.
CONFORMANCE_ARGS ?=
conformance: install
	$(VENV_PYTHON) -m compiler.testing.onnx_conformance $(CONFORMANCE_ARGS)

# relaycc against numpy, onnxruntime, torch eager and torch.compile on the models of bench/models
# at 1 and 2 threads, the peers taking turns; prints the table and writes bench/results.json
# (30 minutes on 2 cores; BENCH_ARGS="--models cnn --threads 1" for a part of it).
BENCH_ARGS ?=
bench: install
	$(VENV_PYTHON) -m pip install --quiet -e '.[bench]'
	$(VENV_PYTHON) -m bench $(BENCH_ARGS)

openapi: install
	$(VENV_PYTHON) -m service.openapi

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
