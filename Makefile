# Two entry points (see README): `make demo` runs the main job, `make test` the test suite.
# Both create .venv in the checkout on first use and reuse it afterwards.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

# Installing also builds TLP's compiled trace reader (else the first tuning run builds it inside its clock, 3-4 s).
$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,hf]'
	$(BIN)/python -c "from tlp._tvm import native_trace_reader; native_trace_reader()"
	touch $@

.PHONY: demo test
demo: $(BIN)/.installed
	$(BIN)/tlp tune bert_tiny --trials 184 --work-dir runs/quickstart

test: $(BIN)/.installed
	$(BIN)/python -m pytest -q
