#!/bin/bash
# One shard of the ShowHowTo dataset pipeline, stage by stage, each stage's output kept:
#   probe -> transcribe -> filter-instructional -> extract-steps -> align-frames -> export
# Run it again after a kill or a failure and every stage resumes where it stopped (--resume:
# ids already in a stage's output are not redone). `make showhowto-dataset` runs N of these
# in parallel; cli/examples/slurm_showhowto.sbatch runs one per Slurm array task.
#
#   showhowto_dataset.sh VIDEOS.txt OUTDIR [SHARD NSHARDS]
#
# OUTDIR/work/<stage>.<I>-of-<N>.jsonl   every stage's records (errors included)
# OUTDIR/work/not_instructional.<I>-of-<N>.jsonl   videos the filter set aside
# OUTDIR/frames/<id>/NN.jpg               the chosen frame of each step
# OUTDIR/dataset/{prompts.json,imgseqs-<I>-of-<N>/}   ShowHowTo's training layout
#
# Models and options come from the environment: ASR_MODEL, LLM_MODEL, CLIP_MODEL, LLM_THREADS
# (llama.cpp's --threads; `make showhowto-dataset` gives each of its SHARDS side-by-side shards
# its share of the cores, as it does torch's through OMP_NUM_THREADS), VI (the vi command), VI_STAGE_ARGS (added to every model stage, e.g. "--device cuda:0"; all of them
# take --device, only transcribe and align-frames take --dtype). Without SHARD NSHARDS, a
# Slurm array task takes its own shard: (TASK_ID - TASK_MIN) / TASK_STEP of TASK_COUNT.
set -euo pipefail
videos=${1:?usage: showhowto_dataset.sh VIDEOS.txt OUTDIR [SHARD NSHARDS]}
out=${2:?usage: showhowto_dataset.sh VIDEOS.txt OUTDIR [SHARD NSHARDS]}
slurm_shard=$(( (${SLURM_ARRAY_TASK_ID:-0} - ${SLURM_ARRAY_TASK_MIN:-0}) / ${SLURM_ARRAY_TASK_STEP:-1} ))
shard=${3:-$slurm_shard}
nshards=${4:-${SLURM_ARRAY_TASK_COUNT:-1}}
vi=${VI:-vi}
tag="$shard-of-$nshards"
work="$out/work"
mkdir -p "$work" "$out/frames" "$out/dataset"
read -r -a extra <<< "${VI_STAGE_ARGS:-}"
llm_extra=(${LLM_THREADS:+--threads "$LLM_THREADS"})

# Exit code 3 means some records failed: they are in the output with their `errors`, and
# the next stage passes them through, so the pipeline goes on.
run() { "$@" || { rc=$?; [ "$rc" -eq 3 ] || exit "$rc"; }; }

common=(--shard "$shard/$nshards" --resume --quiet)
run "$vi" probe --list "$videos" -o "$work/probe.$tag.jsonl" "${common[@]}"
run "$vi" transcribe -i "$work/probe.$tag.jsonl" -o "$work/transcripts.$tag.jsonl" \
  --model "${ASR_MODEL:-whisper-tiny.en}" "${common[@]}" ${extra[@]+"${extra[@]}"}
run "$vi" filter-instructional -i "$work/transcripts.$tag.jsonl" -o "$work/instructional.$tag.jsonl" \
  --drop --rejects "$work/not_instructional.$tag.jsonl" \
  --model "${LLM_MODEL:-qwen2.5-coder-1.5b}" "${common[@]}" ${llm_extra[@]+"${llm_extra[@]}"} ${extra[@]+"${extra[@]}"}
run "$vi" extract-steps -i "$work/instructional.$tag.jsonl" -o "$work/steps.$tag.jsonl" \
  --model "${LLM_MODEL:-qwen2.5-coder-1.5b}" "${common[@]}" ${llm_extra[@]+"${llm_extra[@]}"} ${extra[@]+"${extra[@]}"}
run "$vi" align-frames -i "$work/steps.$tag.jsonl" -o "$work/aligned.$tag.jsonl" \
  --model "${CLIP_MODEL:-auto}" --frames-dir "$out/frames" "${common[@]}" ${extra[@]+"${extra[@]}"}
run "$vi" export showhowto -i "$work/aligned.$tag.jsonl" --out "$out/dataset" \
  --shard "$shard/$nshards" --resume --quiet
echo "shard $tag done: $out/dataset" >&2
