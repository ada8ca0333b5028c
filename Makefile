# vi: set-up, demo, tests and benchmarks. Every target sets up what it needs first.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(abspath $(VENV))/bin
VI := $(BIN)/vi
STAMPS := $(VENV)/.stamps
OUT ?= out
PYTEST_ARGS ?=

.PHONY: install install-models-extra system-deps sample demo test test-fast bench wheel-check clean help

help:
	@echo "make demo    set up if needed, then run the pipeline on the bundled sample"
	@echo "make test    set up if needed, then run the whole test suite (slow tests included)"
	@echo "make bench   benchmarks: vi stages against the raw libraries, as ratios"
	@echo "make install / install-models-extra / clean"

install: $(STAMPS)/install

# System packages: ffmpeg (media), espeak-ng (makes the narrated sample), pocketsphinx test
# clips (real narrated audio for the tests). Installed with apt only when missing and root.
system-deps:
	@missing=""; \
	for cmd in ffmpeg:ffmpeg ffprobe:ffmpeg espeak-ng:espeak-ng; do \
	  command -v $${cmd%%:*} >/dev/null || missing="$$missing $${cmd##*:}"; done; \
	[ -d /usr/share/pocketsphinx/test/data/librivox ] || missing="$$missing pocketsphinx-testdata"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing system packages:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else \
	    echo "missing system packages:$$missing -- install them (e.g. sudo apt-get install$$missing)"; \
	    case "$$missing" in *ffmpeg*|*espeak*) exit 1;; esac; \
	  fi; \
	fi

# The venv: torch 2.8 comes with whisperx (~4 GB); llama-cpp-python compiles from source the
# first time (~7 min on 2 cores; pip caches the wheel after that). The stamp makes it idempotent.
$(STAMPS)/install: pyproject.toml
	@$(MAKE) --no-print-directory system-deps
	@[ -x $(BIN)/python ] || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -e '.[models,dev]'
	@mkdir -p $(STAMPS) && touch $@

install-models-extra: $(STAMPS)/install
	$(BIN)/python -m pip install -e '.[models,models-extra,dev]'

sample: $(STAMPS)/install
	$(BIN)/python -m vi.evaluation.samples $(OUT)/sample

demo: sample
	@echo "== vi probe | vi transcribe on the bundled narrated sample"
	$(VI) probe $(OUT)/sample/tea.mp4 | $(VI) transcribe --output $(OUT)/demo/transcripts.jsonl --overwrite
	@$(BIN)/python -m vi.evaluation.show_transcript $(OUT)/demo/transcripts.jsonl

test: $(STAMPS)/install
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-fast: $(STAMPS)/install
	$(BIN)/python -m pytest -m "not slow" $(PYTEST_ARGS)

bench: sample
	$(BIN)/python -m vi.evaluation.bench --sample $(OUT)/sample --out $(OUT)/bench

clean:
	rm -rf $(OUT) build dist *.egg-info .pytest_cache
