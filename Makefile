# vi: set-up, demo, tests and benchmarks. Every target sets up what it needs first.
SHELL := /bin/bash
# A failed stage in a pipe (vi transcribe | vi extract-steps) fails the target.
.SHELLFLAGS := -o pipefail -ec
PYTHON ?= python3
VENV ?= .venv
BIN := $(abspath $(VENV))/bin
VI := $(BIN)/vi
STAMPS := $(VENV)/.stamps
OUT ?= out
PYTEST_ARGS ?=
# The suite runs in TEST_WORKERS pytest-xdist processes (one per core, at most 4: each may hold a
# 1.5 B LLM), a test file per worker so a module's fixtures are built once; tests/conftest.py pins
# each worker to its share of the cores, so its models' threads do not fight the other's.
# TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= $(shell n=$$(nproc); [ $$n -gt 4 ] && n=4; echo $$n)
TEST_PARALLEL = $(if $(filter 0 1,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)

.PHONY: install install-models-extra system-deps sample demo demo-transcribe showhowto-dataset showhowto-rebuild stepdiff-demo \
	stepdiff-baselines stepdiff-model progresscaptioner-demo progresscaptioner-train showhowto-generator test test-fast bench wheel-check clean help

help:
	@echo "make demo    set up if needed, then run the ShowHowTo pipeline on the bundled sample"
	@echo "make showhowto-dataset VIDEOS=list.txt OUT=dir [SHARDS=N]   the pipeline on your videos"
	@echo "make showhowto-rebuild KEYFRAMES=... PROMPTS=... IDS=ids.txt   ShowHowTo's release from YouTube"
	@echo "make stepdiff-demo   StepDiff's clips | describe | pair | pair-qa on two sample fruit salads"
	@echo "make stepdiff-baselines   then vi predict (Socratic) + vi eval on a benchmark of those clips"
	@echo "make stepdiff-model   then vi encode-videos | vi train stepdiff, vi ask, vi predict + vi eval"
	@echo "make progresscaptioner-demo   vi frames | caption-frames | judge progression | judge match, eval framecap, keyframes"
	@echo "make progresscaptioner-train   the two-stage SFT + DPO recipe (vi captioner-data, vi train captioner)"
	@echo "make showhowto-generator   ShowHowTo's generator: vi train showhowto, vi generate, vi eval showhowto (tiny model)"
	@echo "make test    set up if needed, then run the whole test suite (slow tests included)"
	@echo "make bench   benchmarks: vi stages against the raw libraries, as ratios"
	@echo "make install / install-models-extra / clean"

install: $(STAMPS)/install

# System packages: ffmpeg (media), espeak-ng (makes the narrated sample), pocketsphinx test
# clips (real narrated audio for the tests), opencv-doc (real photos for the how-to
# samples), chromium (vi view's browser tests; they skip without it). Installed with apt only
# when missing and root.
system-deps:
	@missing=""; \
	for cmd in ffmpeg:ffmpeg ffprobe:ffmpeg espeak-ng:espeak-ng; do \
	  command -v $${cmd%%:*} >/dev/null || missing="$$missing $${cmd##*:}"; done; \
	[ -d /usr/share/pocketsphinx/test/data/librivox ] || missing="$$missing pocketsphinx-testdata"; \
	[ -f /usr/share/doc/opencv-doc/examples/data/orange.jpg ] || missing="$$missing opencv-doc"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
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
# first time (~7 min on 2 cores; the wheelhouse keeps the wheel after that). The stamp makes it idempotent.
# llama.cpp is built with GGML_NATIVE=OFF: a native build compiles in every instruction set the CPU
# reports, AMX included, and where the kernel or a sandbox does not enable AMX (a Sapphire Rapids
# Xeon in a container) the first model call dies with 'Illegal instruction'. OFF builds ggml's x86-64
# set (SSE4.2, AVX, AVX2, BMI2, FMA, F16C), which every x86-64 server of the last decade runs. The
# wheel is built once into a wheelhouse named by the version and the flags: pip's own wheel cache
# would hand back a wheel built with other flags. (The wheelhouse is added to PIP_FIND_LINKS, not
# replacing it: a machine may name its own.)
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF
LLAMA_VERSION := $(shell sed -n 's/.*"llama-cpp-python==\([^"]*\)".*/\1/p' pyproject.toml)
WHEELHOUSE := $(HOME)/.cache/vi/wheels/llama-cpp-python-$(LLAMA_VERSION)-$(shell echo '$(LLAMA_CMAKE_ARGS)' | cksum | cut -d' ' -f1)
$(STAMPS)/install: pyproject.toml
	@$(MAKE) --no-print-directory system-deps
	@[ -x $(BIN)/python ] || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	@ls $(WHEELHOUSE)/llama_cpp_python-*.whl >/dev/null 2>&1 || { echo "building llama-cpp-python $(LLAMA_VERSION) ($(LLAMA_CMAKE_ARGS)), about 7 min"; \
	  CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/python -m pip wheel -q --no-cache-dir --no-deps -w $(WHEELHOUSE) llama-cpp-python==$(LLAMA_VERSION); }
	PIP_FIND_LINKS="$(WHEELHOUSE) $${PIP_FIND_LINKS:-}" $(BIN)/python -m pip install -e '.[models,dev]'
	@mkdir -p $(STAMPS) && touch $@

install-models-extra: $(STAMPS)/install
	PIP_FIND_LINKS="$(WHEELHOUSE) $${PIP_FIND_LINKS:-}" $(BIN)/python -m pip install -e '.[models,models-extra,dev]'

sample: $(STAMPS)/install
	$(BIN)/python -m vi.evaluation.demo.samples $(OUT)/sample

# The ShowHowTo pipeline on the bundled how-to sample, with the embedded models only.
DEMO := $(OUT)/demo
demo: sample
	@echo "== vi probe | transcribe | filter-instructional | extract-steps | align-frames, then export"
	$(VI) probe $(OUT)/sample/fruit_salad.mp4 | $(VI) transcribe | $(VI) filter-instructional \
	  | $(VI) extract-steps | $(VI) align-frames --frames-dir $(DEMO)/frames \
	  --output $(DEMO)/steps.jsonl --overwrite
	$(VI) export showhowto --input $(DEMO)/steps.jsonl --out $(DEMO)/showhowto --overwrite
	@$(BIN)/python -m vi.evaluation.demo.show_steps $(DEMO)/steps.jsonl $(DEMO)/showhowto
	@echo "== vi view: the steps, their frames and the transcript, as a page"
	@$(VI) view $(DEMO)/steps.jsonl -o $(DEMO)/report -q --title "make demo: ShowHowTo steps" \
	  | sed 's|^|report: open |'

# StepDiff on the samples: the clips of one keystep in two videos (fruit_salad and
# fruit_salad_peeler: another fruit, another tool), described, paired across the videos and
# compared by question-answer pairs, with the embedded models; every stage's output is kept.
# The keysteps come annotated (sample/stepdiff_keysteps.jsonl: labels, as HT-Step gives them)
# and go through vi probe | vi transcribe, so each clip carries the narration whisper heard.
# Not the other chains, because both lose what the pairs compare:
# - vi clips --from-segments (without --transcripts): no narration, and offline vi describe
#   then has only ImageNet labels ("orange, lemon, croquet ball" became "a person playing a
#   game with a croquet ball");
# - extract-steps | clips | pair --match embedding: step texts group by the fruit they name,
#   not by keystep (MiniLM: "Peel an orange ..." and "Peel a green apple with a peeler" 0.46,
#   "Peel an orange ..." and "Cut an orange into cubes ..." 0.72), so no reliable pairs.
# --vlm none: the offline describe even where the hub cache holds a VLM, the same everywhere;
# --top-k 1: a clip shows one photo of one fruit, labelled at 67-76%; the LLM would put the
# next labels (vase, carved pumpkin: 4%) into the description too.
STEPDIFF := $(OUT)/stepdiff-demo
STEPDIFF_LLM ?= qwen2.5-coder-1.5b
stepdiff-demo: sample
	@echo "== vi probe | transcribe | clips | describe | pair | pair-qa on two fruit salads"
	@mkdir -p $(STEPDIFF)
	$(VI) probe --list $(OUT)/sample/stepdiff_keysteps.jsonl | $(VI) transcribe \
	  | tee $(STEPDIFF)/transcribed.jsonl | $(VI) clips | tee $(STEPDIFF)/clips.jsonl \
	  | $(VI) describe --vlm none --top-k 1 --llm $(STEPDIFF_LLM) | tee $(STEPDIFF)/described.jsonl \
	  | $(VI) pair | tee $(STEPDIFF)/pairs.jsonl \
	  | $(VI) pair-qa --llm $(STEPDIFF_LLM) --output $(STEPDIFF)/pair_qa.jsonl --overwrite
	@$(BIN)/python -m vi.evaluation.demo.show_pairs $(STEPDIFF)/pair_qa.jsonl
	@$(VI) view $(STEPDIFF)/pair_qa.jsonl $(STEPDIFF)/described.jsonl -o $(STEPDIFF)/report -q \
	  --title "make stepdiff-demo: pairs and clips" | sed 's|^|report: open |'

# The Socratic baseline end to end on a benchmark of the demo's clips whose differences are
# known (evaluation/stepdiff/sample_benchmark.py): vi predict writes official-format predictions
# from the demo's descriptions, vi eval scores them.
stepdiff-baselines: stepdiff-demo
	$(BIN)/python -m vi.evaluation.stepdiff.sample_benchmark $(OUT)/sample $(STEPDIFF)/bench
	for task in diffcap diffmcq diffrank; do \
	  $(VI) predict $$task --gt $(STEPDIFF)/bench/$$task.jsonl --method socratic --llm $(STEPDIFF_LLM) \
	    --descriptions $(STEPDIFF)/described.jsonl --output $(STEPDIFF)/bench/socratic_$$task.jsonl --overwrite; \
	  $(VI) eval $$task --gt $(STEPDIFF)/bench/$$task.jsonl --pred $(STEPDIFF)/bench/socratic_$$task.jsonl \
	    > $(STEPDIFF)/bench/socratic_$$task.scores.json; \
	done

# StepDiff's model on the demo's clips, from a fresh clone: EfficientNet-Lite0 tokens (the embedded
# image model; a CLIP ViT where one is cached), SmolLM2-135M as the frozen LLM, the projector trained
# on the demo's pair QA and the clips' narration (a quarter held out), then asked, and run on the
# sample benchmark. A smoke run of the whole path: 25 samples teach a model nothing general.
STEPDIFF_MODEL := $(STEPDIFF)/model
STEPDIFF_STEPS ?= 60
STEPDIFF_MODEL_LLM ?= smollm2-135m
stepdiff-model: stepdiff-demo
	@echo "== vi encode-videos | vi train stepdiff on the demo's clips and pair QA"
	$(VI) encode-videos --encoder efficientnet-lite0 --store $(STEPDIFF)/features -i $(STEPDIFF)/clips.jsonl -q \
	  | tee $(STEPDIFF)/encoded.jsonl \
	  | $(VI) train stepdiff --data caption:- --data pair_qa:$(STEPDIFF)/pair_qa.jsonl --val-fraction 0.25 \
	    --llm $(STEPDIFF_MODEL_LLM) --steps $(STEPDIFF_STEPS) --batch-size 4 --lr 1e-3 --warmup-steps 5 \
	    --projector-dim 256 --eval-every 20 --save-every 20 --log-every 10 -o $(STEPDIFF_MODEL) --overwrite -q
	@grep '"val"' $(STEPDIFF_MODEL)/log.jsonl
	@echo "== vi ask"
	$(VI) ask $(OUT)/sample/fruit_salad.mp4 $(OUT)/sample/fruit_salad_peeler.mp4 \
	  "Which video shows the person peeling a fruit?" --checkpoint $(STEPDIFF_MODEL) -q
	@echo "== vi predict --method stepdiff + vi eval on the sample benchmark"
	$(BIN)/python -m vi.evaluation.stepdiff.sample_benchmark $(OUT)/sample $(STEPDIFF)/bench
	for task in diffcap diffmcq diffrank; do \
	  $(VI) predict $$task --gt $(STEPDIFF)/bench/$$task.jsonl --method stepdiff --checkpoint $(STEPDIFF_MODEL) \
	    --video-root $(OUT)/sample --output $(STEPDIFF)/bench/stepdiff_$$task.jsonl --overwrite -q; \
	  $(VI) eval $$task --gt $(STEPDIFF)/bench/$$task.jsonl --pred $(STEPDIFF)/bench/stepdiff_$$task.jsonl \
	    > $(STEPDIFF)/bench/stepdiff_$$task.scores.json; \
	done

# ProgressCaptioner on samples whose progression is known (evaluation/progresscaptioner/samples.py:
# real photos, each stage held 2-3 s with small jitter so that same-stage frames are not identical):
# 1. PROGRESS_SEQUENCES image sequences of 2-6 frames, as FrameCapEval's: captioned (a VLM when one is
#    cached, else the offline captioner from the embedded models, which says so), caption-matched on
#    every frame (FrameCapEval's Cap; vi judge match before vi judge progression, which would narrow it
#    to the distinct frames as pseudo-labelling does), judged with FrameCapEval's prompt, and scored
#    against the known labels;
# 2. the clip at 1 FPS: keyframes by progress (captions of each 2-frame window, the LLM judge).
# The judge is Qwen2.5-Coder-1.5B: SmolLM2-135M answers C (uncertain) on every pair (measured).
PROGRESS := $(OUT)/progress
PROGRESS_LLM ?= qwen2.5-coder-1.5b
PROGRESS_SEQUENCES ?= 6
progresscaptioner-demo: $(STAMPS)/install
	$(BIN)/python -m vi.evaluation.progresscaptioner.samples $(PROGRESS)/sample $(PROGRESS_SEQUENCES)
	@echo "== vi caption-frames | vi judge match | vi judge progression --prompt eval, then vi eval framecap"
	$(VI) caption-frames -i $(PROGRESS)/sample/sequences.jsonl -q \
	  | $(VI) judge match -q \
	  | $(VI) judge progression --prompt eval --llm $(PROGRESS_LLM) -q --output $(PROGRESS)/judged.jsonl --overwrite
	$(VI) eval framecap --pred $(PROGRESS)/judged.jsonl --labels $(PROGRESS)/sample/sequences_labels.jsonl \
	  > $(PROGRESS)/framecap.json
	@echo "== vi frames | vi keyframes --method progress on the clip"
	$(VI) frames -i $(PROGRESS)/sample/progress_record.jsonl --frames-dir $(PROGRESS)/frames -q \
	  | $(VI) keyframes --method progress --captioner offline --llm $(PROGRESS_LLM) -q \
	    --output $(PROGRESS)/keyframes.jsonl --overwrite
	@$(BIN)/python -c "import json; r = json.loads(open('$(PROGRESS)/keyframes.jsonl').readline()); \
	  t = json.load(open('$(PROGRESS)/sample/progress.json')); \
	  print('keyframes: frames', [k['index'] for k in r.get('keyframes', [])], 'of', len(r.get('frames', [])), \
	        'frames; true stages start at frames', t['distinct_frames'])"
	@$(VI) view $(PROGRESS)/judged.jsonl $(PROGRESS)/keyframes.jsonl -o $(PROGRESS)/report -q \
	  --title "make progresscaptioner-demo: captions, judges, keyframes" | sed 's|^|report: open |'

# ProgressCaptioner's two-stage training recipe on the same kind of samples (cli/examples/
# progresscaptioner_recipe.sh says each step): stage-I pair data from K captioners and the judges -> SFT ->
# DPO -> the stage-I model captions the sequences beside the others -> stage-II data -> SFT -> DPO ->
# vi eval framecap on measure sequences. BASE_VLM empty: a tiny random LLaVA-OneVision (no VLM weights here),
# so the chain runs for real but the model learns little; on a GPU give BASE_VLM=llava-hf/llava-onevision-
# qwen2-7b-ov-hf, real CAPTIONERS, and VI_STAGE_ARGS="--device cuda".
PROGRESS_TRAIN := $(OUT)/progress_train
PROGRESS_TRAIN_SEQUENCES ?= 10
progresscaptioner-train: $(STAMPS)/install
	$(BIN)/python -m vi.evaluation.progresscaptioner.samples $(PROGRESS_TRAIN)/sample $(PROGRESS_TRAIN_SEQUENCES)
	VI=$(VI) PYTHON=$(BIN)/python JUDGE_LLM="$${JUDGE_LLM:-$(PROGRESS_LLM)}" \
	  cli/examples/progresscaptioner_recipe.sh $(PROGRESS_TRAIN)/sample $(PROGRESS_TRAIN)
	@$(BIN)/python -c "import json; r = json.load(open('$(PROGRESS_TRAIN)/framecap.json')); \
	  print(json.dumps(r.get('rows', r), indent=1)[:1500])"

# ShowHowTo's generator end to end on the three how-to samples: a dataset of their frames at their
# annotated steps (vi align-frames | vi export showhowto; make demo shows the LLM stages that find the
# steps), a tiny random generator in the release's format at 16x16 (no diffusion, CLIP or DINOv2 weights
# reach this machine),
# vi train showhowto, vi generate of every sequence from its first frame, then vi eval showhowto of the
# result and of the copy / random / source baselines (offline: the embedded models stand in for
# DFN-CLIP and DINOv2). A smoke run of the whole path: three videos teach a tiny model nothing general.
GENERATOR := $(OUT)/showhowto-generator
GENERATOR_STEPS ?= 200
showhowto-generator: sample
	@mkdir -p $(GENERATOR)
	$(BIN)/python -m vi.evaluation.showhowto.generator_tiny steps $(OUT)/sample \
	  | $(VI) align-frames --frames-dir $(GENERATOR)/frames -q \
	  | $(VI) export showhowto --out $(GENERATOR)/dataset --overwrite
	$(BIN)/python -m vi.evaluation.showhowto.generator_tiny model $(GENERATOR)/tiny --size 16
	$(VI) train showhowto --data $(GENERATOR)/dataset --init $(GENERATOR)/tiny/tiny.pt -o $(GENERATOR)/run \
	  --overwrite --steps $(GENERATOR_STEPS) --batch-size 2 --lr 1e-3 --warmup-steps 0 --max-frames 4 \
	  --cache-latents --eval-every 50 --save-every 100 -q
	$(VI) generate --dataset $(GENERATOR)/dataset --model $(GENERATOR)/run --out $(GENERATOR)/generated \
	  --steps 20 -o $(GENERATOR)/generated.jsonl --overwrite -q
	$(VI) eval showhowto --dataset $(GENERATOR)/dataset --generated $(GENERATOR)/generated.jsonl \
	  > $(GENERATOR)/scores.json
	for method in copy random source; do \
	  $(VI) eval showhowto --dataset $(GENERATOR)/dataset --method $$method > $(GENERATOR)/scores.$$method.json; \
	done
	@echo "generated: $(GENERATOR)/generated/*/strip.jpg; scores: $(GENERATOR)/scores*.json"
	@$(VI) view $(GENERATOR)/generated.jsonl -o $(GENERATOR)/report -q --title "make showhowto-generator" \
	  | sed 's|^|report: open |'

demo-transcribe: sample
	$(VI) probe $(OUT)/sample/tea.mp4 | $(VI) transcribe --output $(DEMO)/transcripts.jsonl --overwrite
	@$(BIN)/python -m vi.evaluation.demo.show_transcript $(DEMO)/transcripts.jsonl

# The whole pipeline on a list of videos, SHARDS shards in parallel (each loads its own
# models); every stage's output is kept under OUT/work, so running it again resumes. Side by
# side on one machine, each shard gets its share of the cores (SHARD_THREADS, default cores /
# SHARDS) for llama.cpp and torch: threads that outnumber the cores wait on each other.
SHARDS ?= 1
showhowto-dataset: $(STAMPS)/install
	@[ -n "$(VIDEOS)" ] || { echo "usage: make showhowto-dataset VIDEOS=list.txt OUT=dir [SHARDS=N]"; exit 2; }
	threads=$${SHARD_THREADS:-$$(( $$(nproc) / $(SHARDS) ))}; [ "$$threads" -ge 1 ] || threads=1; \
	seq 0 $$(( $(SHARDS) - 1 )) | xargs -P $(SHARDS) -I{} \
	  env VI=$(VI) LLM_THREADS=$$threads OMP_NUM_THREADS=$$threads \
	  cli/examples/showhowto_dataset.sh $(VIDEOS) $(OUT) {} $(SHARDS)
	cat $(OUT)/work/aligned.*-of-$(SHARDS).jsonl > $(OUT)/aligned.jsonl
	$(VI) export showhowto --out $(OUT)/dataset --index-only
	@echo "dataset: $(OUT)/dataset (prompts.json + imgseqs*/); records: $(OUT)/aligned.jsonl"

# ShowHowTo's released dataset rebuilt from the original videos (docs/datasets.md): vi download fetches
# the YouTube ids of IDS into $(OUT)/videos, vi rebuild showhowto cuts the release's keyframes out of
# them into $(OUT)/ShowHowTo (prompts.json + imgseqs*/). Both resume: run it again after a kill. SHARD=I/N
# does one shard of each (a Slurm array task: SHARD=$$SLURM_ARRAY_TASK_ID/$$SLURM_ARRAY_TASK_COUNT).
# Exit 3 (some videos failed: their records say why) does not stop it.
REBUILD_TAG = $(if $(SHARD),.$(subst /,-of-,$(SHARD)))
showhowto-rebuild: $(STAMPS)/install
	@[ -n "$(KEYFRAMES)" ] && [ -n "$(PROMPTS)" ] && [ -n "$(IDS)" ] || { echo "usage: make showhowto-rebuild \
	KEYFRAMES=keyframes.json|dir PROMPTS=prompts.json IDS=ids.txt [OUT=dir] [SHARD=I/N]"; exit 2; }
	mkdir -p $(OUT)/rebuild
	$(VI) download -i $(IDS) --out $(OUT)/videos $(if $(SHARD),--shard $(SHARD)) --resume --retry-errors \
	  -o $(OUT)/rebuild/downloaded$(REBUILD_TAG).jsonl || [ $$? = 3 ]
	$(VI) rebuild showhowto -i $(OUT)/rebuild/downloaded$(REBUILD_TAG).jsonl --keyframes $(KEYFRAMES) \
	  --prompts $(PROMPTS) --out $(OUT)/ShowHowTo $(if $(SHARD),--shard $(SHARD)) --resume \
	  -o $(OUT)/rebuild/rebuilt$(REBUILD_TAG).jsonl || [ $$? = 3 ]
	@echo "dataset: $(OUT)/ShowHowTo (prompts.json + imgseqs*/); records: $(OUT)/rebuild/"

test: $(STAMPS)/install
	$(BIN)/python -m pytest $(TEST_PARALLEL) $(PYTEST_ARGS)

test-fast: $(STAMPS)/install
	$(BIN)/python -m pytest -m "not slow" $(TEST_PARALLEL) $(PYTEST_ARGS)

# make bench ONLY=a,m: those sections alone (letters as in evaluation/bench/run.py)
bench: sample
	$(BIN)/python -m vi.evaluation.bench.run --sample $(OUT)/sample --out $(OUT)/bench $(if $(ONLY),--only $(ONLY))

clean:
	rm -rf $(OUT) build dist *.egg-info .pytest_cache
