# The two commands a fresh machine needs: `make demo` (the main job) and `make test`.
PYTHON ?= python3
PIP = $(PYTHON) -m pip

.PHONY: install install-test demo test fetch-models

install:
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet -e .

install-test: install
	$(PIP) install --quiet -e ".[test]"
	$(PYTHON) -m constrained_spec.tokenizer_assets gpt-2 llama-bpe llama-spm qwen2

fetch-models: install
	constrained-spec fetch-models

demo: install
	constrained-spec generate --schema schemas/order.json --stats \
	  --prompt "Extract the order: order ORD-482913 for Ada Lovelace, 12 Analytical Row, London, zip 10115, already shipped."

test: install-test
	CONSTRAINED_SPEC_REQUIRE_ASSETS=1 $(PYTHON) -m pytest -q
