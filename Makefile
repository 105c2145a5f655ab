# The two commands of the README. Both set up a virtual environment first.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
BROWSER := tests/browser

.PHONY: setup demo test benchmark chromium

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

demo: setup
	SPARK_LOCAL_IP=127.0.0.1 $(BIN)/python -m mt_magic.demo

# The whole suite twice: on a classic SparkSession, then as a client of a local Spark Connect server
# (the example notebooks: nbval on a classic session, test_notebooks over Connect).
# The tests that start their own processes (services, kernels, killed workers; marked `processes`) run
# once, beside the passes: they mostly wait for their processes, and either pass alone leaves part
# of the machine idle (measured: a third beside the classic pass, a fifth beside the Connect pass) —
# the notebooks' kernels and the killed refreshes beside the Connect pass, the others from the start,
# beside the classic pass (measured in one run: the classic pass, 15:44, beside 12:21 of those left the
# machine idle under 6 % of the time; the Connect pass, 13:03, beside the notebooks' 2:47, 46-74 % of
# some minutes: the SIGKILL tests, four of those 12 minutes, moved there).
# Their output follows the Connect pass's; any pass failing fails the command. Those share the
# machine's two cores, so their JVMs compile with the quick compiler only (SPARK_SUBMIT_OPTS;
# measured: a service-like process of seconds to a minute spends 45 % less CPU; the classic pass's
# JVM, on two test files, 13 % less at the same speed alone). The Connect pass keeps the default
# compiler (on those files: 8 % more CPU but 5 % faster). (All three passes at once took longer: the
# machine's two cores are busy either way.)
TEST_ENV := SPARK_LOCAL_IP=127.0.0.1 PYSPARK_PYTHON=$(CURDIR)/$(BIN)/python
QUICK := SPARK_SUBMIT_OPTS=-XX:TieredStopAtLevel=1
BESIDE_CONNECT := tests/test_notebooks.py tests/test_kill.py
test: setup chromium $(BROWSER)/node_modules/.package-lock.json
	$(BIN)/lint-imports --no-cache
	log=$$(mktemp); later=$$(mktemp); \
	$(TEST_ENV) $(QUICK) IPYTHONDIR=$$(mktemp -d) $(BIN)/python -m pytest -q -m processes \
	  $(BESIDE_CONNECT:%=--ignore=%) --basetemp=$$(mktemp -d) >$$log 2>&1 & processes=$$!; \
	$(TEST_ENV) $(QUICK) IPYTHONDIR=$$(mktemp -d) $(BIN)/python -m pytest -q -m 'not processes'; classic=$$?; \
	$(TEST_ENV) $(QUICK) IPYTHONDIR=$$(mktemp -d) $(BIN)/python -m pytest -q -m processes $(BESIDE_CONNECT) \
	  --basetemp=$$(mktemp -d) >$$later 2>&1 & beside_connect=$$!; \
	$(TEST_ENV) IPYTHONDIR=$$(mktemp -d) MT_MAGIC_SPARK_REMOTE='local[2]' $(BIN)/python -m pytest -q \
	  -m 'not processes' tests; connect=$$?; \
	wait $$processes; separate=$$?; wait $$beside_connect; later_passed=$$?; \
	echo "--- tests that start their own processes:"; cat $$log $$later; \
	test $$classic -eq 0 -a $$connect -eq 0 -a $$separate -eq 0 -a $$later_passed -eq 0

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
