# The two commands of the README. Both set up a virtual environment first.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
BROWSER := tests/browser

.PHONY: setup demo test benchmark chromium node labextension

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

setup: $(BIN)/python
	$(BIN)/pip install -q -e '.[test]'

# The browser test renders a notebook's widgets offline: Debian's Chromium, and the widget manager
# and require.js from npm at the versions in package-lock.json.
chromium:
	command -v chromium >/dev/null || { $(SUDO) apt-get update -qq && \
	  $(SUDO) apt-get install -y -qq --no-install-recommends --no-upgrade chromium; }

$(BROWSER)/node_modules/.package-lock.json: $(BROWSER)/package-lock.json
	cd $(BROWSER) && npm ci --no-audit --no-fund --loglevel=error

# The JupyterLab extension (labextension/README.md): its npm packages at the versions in
# package-lock.json, built with the machine's Node.js (20.19 or newer: Debian's nodejs and npm where
# there is none), and copied where the environment's JupyterLab finds it (an editable install copies
# it only when it was built before; a wheel carries it: pyproject.toml).
LABEXT := labextension
node:
	command -v npm >/dev/null || { $(SUDO) apt-get update -qq && \
	  $(SUDO) apt-get install -y -qq --no-install-recommends --no-upgrade nodejs npm; }

$(LABEXT)/node_modules/.package-lock.json: $(LABEXT)/package-lock.json | node
	cd $(LABEXT) && npm ci --no-audit --no-fund --loglevel=error

$(LABEXT)/dist/package.json: $(LABEXT)/node_modules/.package-lock.json $(LABEXT)/package.json $(LABEXT)/tsconfig.json \
		$(LABEXT)/install.json $(wildcard $(LABEXT)/src/*) $(wildcard $(LABEXT)/style/*)
	cd $(LABEXT) && npm run --silent build

labextension: $(LABEXT)/dist/package.json | setup
	rm -rf $(VENV)/share/jupyter/labextensions/mt-magic
	mkdir -p $(VENV)/share/jupyter/labextensions && cp -r $(LABEXT)/dist $(VENV)/share/jupyter/labextensions/mt-magic

demo: setup labextension
	SPARK_LOCAL_IP=127.0.0.1 $(BIN)/python -m mt_magic.demo

# The whole suite twice, at once: on a classic SparkSession and as a client of a local Spark Connect
# server (the example notebooks: nbval on a classic session, test_notebooks over Connect). One after
# the other the two passes left the machine's two cores partly idle (each mostly waits on its driver):
# measured on a slow host, 22:40 then 23:00 one after the other, 30:08 and 31:00 at once; with the
# process tests beside them, 42:43 each (the whole fresh-clone CI 44 minutes, against 49 before).
# The tests that start their own processes (services, kernels, killed workers; marked `processes`) run
# once, beside the passes, from the start: they mostly wait for their processes (alone they took over
# 20 minutes); so do the classic runs of the longest tests (marked `long`): the classic pass took ten
# minutes longer than they (29:21 against 19:06), a whole run 31:58. Their output follows the passes';
# any pass failing fails the command. The tests of what the refresh rules choose (marked `rules`:
# techniques, files, partials — decided above the Spark adapter) run in the classic pass alone: they
# were a quarter of the Connect pass (510 of 1871 s), and over Connect the stateful test of every shape
# drives each rule through the adapter. Every JVM the
# tests start runs with the quick compiler only, a larger code cache and the serial collector, and
# starts from the archive of Spark's classes built below (SPARK_SUBMIT_OPTS, set in tests/conftest.py,
# where the reasons and figures are).
TEST_ENV := SPARK_LOCAL_IP=127.0.0.1 PYSPARK_PYTHON=$(CURDIR)/$(BIN)/python
# The archive of Spark's classes every test JVM starts from (tests/spark_classes.py says why); made
# again when the pinned packages change (an archive that no longer fits is ignored, so only slower).
ARCHIVE := build/spark-classes.jsa
$(ARCHIVE): tests/spark_classes.py pyproject.toml | setup
	rm -f $@; $(TEST_ENV) $(BIN)/python tests/spark_classes.py $@
# Its set-up steps run side by side (Chromium and the npm packages download, and the extension is
# built, while pip installs and the archive is built: the archive waits for the packages alone),
# then the layer rules are checked.
PREREQUISITES := setup chromium $(BROWSER)/node_modules/.package-lock.json $(ARCHIVE) labextension
test:
	$(MAKE) --no-print-directory -j4 $(PREREQUISITES)
	$(BIN)/lint-imports --no-cache
	log=$$(mktemp); connect_log=$$(mktemp); \
	$(TEST_ENV) IPYTHONDIR=$$(mktemp -d) $(BIN)/python -m pytest -q -m 'processes or long' \
	  --basetemp=$$(mktemp -d) >$$log 2>&1 & processes=$$!; \
	$(TEST_ENV) IPYTHONDIR=$$(mktemp -d) MT_MAGIC_SPARK_REMOTE='local[2]' $(BIN)/python -m pytest -q \
	  -m 'not processes and not rules' tests >$$connect_log 2>&1 & connect=$$!; \
	$(TEST_ENV) IPYTHONDIR=$$(mktemp -d) $(BIN)/python -m pytest -q -m 'not processes and not long'; classic=$$?; \
	wait $$connect; connect_passed=$$?; wait $$processes; separate=$$?; \
	echo "--- the Connect pass:"; cat $$connect_log; \
	echo "--- tests that start their own processes:"; cat $$log; \
	test $$classic -eq 0 -a $$connect_passed -eq 0 -a $$separate -eq 0

benchmark: setup
	SPARK_LOCAL_IP=127.0.0.1 $(BIN)/python benchmarks/full_refresh.py
	SPARK_LOCAL_IP=127.0.0.1 $(BIN)/python benchmarks/rewrite_refresh.py
	SPARK_LOCAL_IP=127.0.0.1 $(BIN)/python benchmarks/continuous_lag.py
	SPARK_LOCAL_IP=127.0.0.1 $(BIN)/python benchmarks/notebook_overhead.py
	SPARK_LOCAL_IP=127.0.0.1 $(BIN)/python benchmarks/connect_modes.py
	SPARK_LOCAL_IP=127.0.0.1 $(BIN)/python benchmarks/service.py
	SPARK_LOCAL_IP=127.0.0.1 $(BIN)/python benchmarks/changes.py
	SPARK_LOCAL_IP=127.0.0.1 $(BIN)/python benchmarks/history.py
	SPARK_LOCAL_IP=127.0.0.1 $(BIN)/python benchmarks/tpch.py
	SPARK_LOCAL_IP=127.0.0.1 $(BIN)/python benchmarks/incremental.py
	SPARK_LOCAL_IP=127.0.0.1 $(BIN)/python benchmarks/completion.py
	SPARK_LOCAL_IP=127.0.0.1 $(BIN)/python benchmarks/catalog_scale.py
