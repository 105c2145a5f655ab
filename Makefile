# The two commands of the README. Both set up a virtual environment first.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup demo test benchmark

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

setup: $(BIN)/python
	$(BIN)/pip install -q -e '.[test]'

demo: setup
	SPARK_LOCAL_IP=127.0.0.1 $(BIN)/python -m mt_magic.demo

test: setup
	SPARK_LOCAL_IP=127.0.0.1 $(BIN)/python -m pytest -q

benchmark: setup
	SPARK_LOCAL_IP=127.0.0.1 $(BIN)/python benchmarks/full_refresh.py
	SPARK_LOCAL_IP=127.0.0.1 $(BIN)/python benchmarks/continuous_lag.py
