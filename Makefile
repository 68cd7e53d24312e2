# The two commands a fresh machine needs: `make demo` (the main job) and `make test`.
#
# Installing is done once per interpreter and redone only when pyproject.toml changes (a stamp
# file under build/), or when the package is no longer installed. torch is never replaced: a torch
# that imports is kept as it is (pip is told to keep its version); only when none imports is
# torch==$(TORCH_VERSION) installed by name from the package index pip is set up with (its own
# dependencies then come with the package's).
PYTHON ?= python3
PIP = $(PYTHON) -m pip
TORCH_VERSION ?= 2.13.0

STAMP_DIR = build
STAMP_TAG := $(subst /,_,$(PYTHON))
INSTALLED = $(STAMP_DIR)/.installed-$(STAMP_TAG)
INSTALLED_TEST = $(STAMP_DIR)/.installed-test-$(STAMP_TAG)

# A stamp is stale when what it stands for is gone (the package or pytest uninstalled).
has_dists = $(shell $(PYTHON) -c "import importlib.metadata as m; [m.version(d) for d in '$(1)'.split()]" >/dev/null 2>&1 && echo yes)
ifneq ($(call has_dists,constrained-spec torch),yes)
$(INSTALLED): FORCE
endif
ifneq ($(call has_dists,constrained-spec torch pytest pytest-xdist),yes)
$(INSTALLED_TEST): FORCE
endif

# The torch that is there must be one pyproject.toml allows (make will not upgrade it for you).
define TORCH_CHECK
import importlib.metadata as m, re, sys
v = m.version("torch")
if tuple(int(x) for x in re.findall(r"\d+", v)[:2]) < (2, 4):
    sys.exit(f"torch {v} is installed; constrained-spec needs torch>=2.4. make does not replace your torch: upgrade it yourself, or use another PYTHON")
endef
export TORCH_CHECK

DEMO_PROMPT = Extract the order: order ORD-482913 for Ada Lovelace, 12 Analytical Row, London, zip 10115, already shipped.

.PHONY: install install-test install-llamacpp demo test test-slow lint fetch-models FORCE

# The tests run on TEST_WORKERS processes (pytest-xdist; 0 runs them in this process). loadgroup keeps
# the tests of one xdist_group (a module whose module-scoped fixture is costly) on one worker.
TEST_WORKERS ?= 2
PYTEST_PARALLEL = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadgroup)

install: $(INSTALLED)

install-test: $(INSTALLED_TEST)

$(INSTALLED): pyproject.toml
	@if ! $(PYTHON) -c "import torch" >/dev/null 2>&1; then \
	  echo "torch does not import: installing torch==$(TORCH_VERSION) from the configured package index"; \
	  $(PIP) install --quiet --no-deps "torch==$(TORCH_VERSION)"; \
	fi
	@$(PYTHON) -c "$$TORCH_CHECK"
	$(PIP) install --quiet -e . "torch==$$($(PYTHON) -c 'import importlib.metadata as m; print(m.version("torch"))')"
	@mkdir -p $(STAMP_DIR) && touch $@

$(INSTALLED_TEST): $(INSTALLED) pyproject.toml
	$(PIP) install --quiet -e ".[test]" "torch==$$($(PYTHON) -c 'import importlib.metadata as m; print(m.version("torch"))')"
	@mkdir -p $(STAMP_DIR) && touch $@

# llama-cpp-python (the llamacpp runtime) built from source, patched (scripts/llamacpp-batch-invariant.patch: batch-invariant
# verify), with portable flags: GGML_NATIVE=OFF, the AVX2-level
# extensions named, AMX off (see scripts/install_llamacpp.sh for the CMAKE_ARGS; 3.5 min on 2 idle cores, 3 s from the kept wheel, measured 2026-12-04).
# Skipped when llama_cpp $(LLAMACPP_VERSION) already imports.
LLAMACPP_VERSION ?= 0.3.36
install-llamacpp: install
	@if $(PYTHON) -c "import llama_cpp, sys; import hashlib, os; stamp = os.path.join(os.path.dirname(llama_cpp.__file__), 'lib', 'constrained-spec-patch.sha256'); \
	  sys.exit(llama_cpp.__version__ != '$(LLAMACPP_VERSION)' or not os.path.exists(stamp) or open(stamp).read().strip() != hashlib.sha256(open('scripts/llamacpp-batch-invariant.patch', 'rb').read()).hexdigest())" >/dev/null 2>&1; then \
	  echo "llama-cpp-python $(LLAMACPP_VERSION) is installed (with scripts/llamacpp-batch-invariant.patch)"; \
	else \
	  LLAMACPP_VERSION=$(LLAMACPP_VERSION) scripts/install_llamacpp.sh $(PYTHON); \
	fi

fetch-models: install
	$(PYTHON) -m constrained_spec.cli fetch-models

demo: install-llamacpp
	$(PYTHON) -m constrained_spec.cli generate --schema schemas/order.json --stats --prompt "$(DEMO_PROMPT)"

lint: install-test
	$(PYTHON) -m ruff check constrained_spec tests benchmarks examples
	$(PYTHON) -m mypy

test: install-test install-llamacpp
	$(PYTHON) -m constrained_spec.models.store.tokenizer_assets gpt-2 llama-bpe llama-spm qwen2 >/dev/null
	CONSTRAINED_SPEC_REQUIRE_ASSETS=1 $(PYTHON) -m pytest -q $(PYTEST_PARALLEL)

# The long statistical sweeps (marker slow), which `make test` leaves out; .ci/run runs them after it.
test-slow: install-test install-llamacpp
	$(PYTHON) -m constrained_spec.models.store.tokenizer_assets gpt-2 llama-bpe llama-spm qwen2 >/dev/null
	CONSTRAINED_SPEC_REQUIRE_ASSETS=1 $(PYTHON) -m pytest -q $(PYTEST_PARALLEL) -m 'slow and not real_models and not ray'

FORCE:
