#!/bin/bash
# ProgressCaptioner's two-stage training recipe (CVPR 2025, Sec. 3.2), stage by stage, every output kept:
#
#   Stage I   2-frame windows of the tune sequences, captioned by K captioners -> vi judge progression
#             (pseudo prompt: majority of the LLM judges) | vi judge match -> vi captioner-data (pairs)
#             -> vi train captioner --method sft -> --method dpo
#   Stage II  the tune sequences captioned by the stage-I model (2-frame sliding window) and by the other
#             captioners (2-frame and full-T contexts) -> vi judge progression (the M distinct frames)
#             | vi judge match (over those M) -> vi captioner-data (stage-I pairs + stage-II sequences)
#             -> SFT -> DPO from the stage-I model
#   Eval      the measure sequences captioned by the stage-II model -> vi judge match | vi judge
#             progression --prompt eval -> vi eval framecap against the known labels
#
#   progresscaptioner_recipe.sh SAMPLE_DIR OUT_DIR      (SAMPLE_DIR from vi.evaluation.progresscaptioner.samples)
#
# Environment (`make progresscaptioner-train` sets them):
#   BASE_VLM     the VLM to train: a transformers folder or cached hub id (the paper: LLaVA-OneVision-7B,
#                llava-hf/llava-onevision-qwen2-7b-ov-hf). Empty: a tiny RANDOM LLaVA-OneVision is built in
#                OUT_DIR/base (no VLM weights exist on a machine without a hub): the chain then runs for
#                real but the model learns little in a few CPU steps, and its captions mostly fail to parse
#                (they are kept as `missing`, --missing keep), so its own stage-II samples are few or none.
#   CAPTIONERS   the other captioners, space-separated FIELD=VLM[:ARGS] entries; ARGS are extra vi
#                caption-frames options joined by commas. Default: three offline captioners made from the
#                embedded models (marked offline-imagenet-labels in the records): one sensible (3 labels, view
#                change above 0.15), one that claims change where there is none (0.02: temporal hallucination)
#                and one too coarse to tell frames apart (1 label): the paper's two failure modes. Measured on
#                the samples, caption matching separates the coarse one on some pairs (DPO pairs) while the
#                1.5 B judge says "change" on every pair, so the hallucinating one passes.
#                On a GPU: e.g. "captions_qwen=Qwen/Qwen2-VL-7B-Instruct captions_ov=openai:ov@http://...".
#   JUDGE_LLM    the progression judge(s), space-separated --llm values (default qwen2.5-coder-1.5b;
#                SmolLM2-135M answers C on every pair, measured, so nothing would pass).
#   SFT_STEPS DPO_STEPS SFT_LR DPO_LR TRAIN_ARGS   passed to vi train captioner (empty LR: the paper's).
#   STAGE2_WINDOWS   the contexts the other captioners caption stage II's sequences with (default "2 full",
#                the paper's; each adds one caption field per captioner, and as many judge calls).
#   EVAL_SEQUENCES   how many measure sequences are captioned for the evaluation (default 3).
#   VI (the vi command), VI_STAGE_ARGS (added to every model stage, e.g. "--device cuda").
set -euo pipefail
sample=${1:?usage: progresscaptioner_recipe.sh SAMPLE_DIR OUT_DIR}
out=${2:?usage: progresscaptioner_recipe.sh SAMPLE_DIR OUT_DIR}
vi=${VI:-vi}
py=${PYTHON:-python}
read -r -a extra <<< "${VI_STAGE_ARGS:-}"
read -r -a captioners <<< "${CAPTIONERS:-captions_offline=offline:--change-threshold,0.15 captions_eager=offline:--change-threshold,0.02 captions_coarse=offline:--top-k,1}"
judges=()
for llm in ${JUDGE_LLM:-qwen2.5-coder-1.5b}; do judges+=(--llm "$llm"); done
read -r -a train_extra <<< "${TRAIN_ARGS:-}"
mkdir -p "$out"

# Exit code 3 means some records failed: they are in the output with their `errors`, the chain goes on.
run() { "$@" || { rc=$?; [ "$rc" -eq 3 ] || exit "$rc"; }; }
# caption_all WINDOW SUFFIX IN OUT: every captioner of $captioners in turn (window WINDOW, field FIELD+SUFFIX),
# each reading the previous one's output file; --missing keep: a weak captioner costs only its own captions
caption_all() {
  local window=$1 suffix=$2 from=$3 to=$4 entry field ref args k=0
  for entry in "${captioners[@]}"; do
    field=${entry%%=*}; ref=${entry#*=}; args=""
    case "$ref" in offline:*) args=${ref#offline:}; ref=offline;; esac
    read -r -a opts <<< "${args//,/ }"
    k=$((k + 1))
    run "$vi" caption-frames -i "$from" -o "$to.$k" --overwrite --vlm "$ref" --window "$window" \
      --into "$field$suffix" --missing keep -q ${opts[@]+"${opts[@]}"} ${extra[@]+"${extra[@]}"}
    from="$to.$k"
  done
  mv "$from" "$to"; rm -f "$to".[0-9]*
}
split() { grep -F "\"split\": \"$1\"" "$sample/sequences.jsonl" || true; }

base=${BASE_VLM:-}
lr_args=()
if [ -z "$base" ]; then
  base="$out/base"
  [ -f "$base/config.json" ] || "$py" -m vi.evaluation.progresscaptioner.caption_bench tiny llava_onevision "$base"
  echo "base VLM: a tiny RANDOM LLaVA-OneVision in $base (no VLM weights here); learning rates raised for it" >&2
  lr_args=(--lr "${SFT_LR:-1e-3}" --vision-lr "${SFT_LR:-1e-3}")
  dpo_lr_args=(--lr "${DPO_LR:-1e-4}" --vision-lr "${DPO_LR:-1e-4}")
else
  [ -n "${SFT_LR:-}" ] && lr_args=(--lr "$SFT_LR")
  dpo_lr_args=(); [ -n "${DPO_LR:-}" ] && dpo_lr_args=(--lr "$DPO_LR")
fi
train() {  # METHOD DATA MODEL RUN STEPS LR_ARGS...
  local method=$1 data=$2 model=$3 dir=$4 steps=$5; shift 5
  if ! grep -q '"split": "train"' "$data" 2>/dev/null; then
    # few samples can give no accepted (or no rejected) captions: say so, and go on from the model as it is
    echo "recipe: $data has no training samples; $dir is $model unchanged (--method $method skipped)" >&2
    rm -rf "$dir"; mkdir -p "$(dirname "$dir")"; ln -s "$(cd "$model" && pwd)" "$dir"
    return 0
  fi
  "$vi" train captioner --method "$method" --data "$data" --model "$model" -o "$dir" --max-steps "$steps" \
    --eval-every "$(( steps / 4 > 0 ? steps / 4 : 1 ))" --save-every "$steps" --overwrite "$@" \
    ${train_extra[@]+"${train_extra[@]}"} ${extra[@]+"${extra[@]}"}
}

echo "== stage I: 2-frame windows of the tune sequences, ${#captioners[@]} captioners, judged" >&2
split tune > "$out/tune.jsonl"
run "$vi" frames -i "$out/tune.jsonl" --select window --window 2 -q -o "$out/stage1_pairs.jsonl" --overwrite
caption_all full "" "$out/stage1_pairs.jsonl" "$out/stage1_captioned.jsonl"
# every frame is matched (judge match first), as stage I asks both frames of a pair to match
{ run "$vi" judge match -i "$out/stage1_captioned.jsonl" -q ${extra[@]+"${extra[@]}"}; } \
  | { run "$vi" judge progression --prompt pseudo "${judges[@]}" -q; } > "$out/stage1_judged.jsonl"
run "$vi" captioner-data -i "$out/stage1_judged.jsonl" -o "$out/stage1_data"
train sft "$out/stage1_data/sft.jsonl" "$base" "$out/runs/stage1_sft" "${SFT_STEPS:-30}" "${lr_args[@]}"
train dpo "$out/stage1_data/dpo.jsonl" "$out/runs/stage1_sft" "$out/runs/stage1_dpo" "${DPO_STEPS:-20}" \
  ${dpo_lr_args[@]+"${dpo_lr_args[@]}"}

echo "== stage II: the tune sequences, the stage-I model (2-frame windows) beside the others" >&2
run "$vi" caption-frames -i "$out/tune.jsonl" -o "$out/stage2_stage1model.jsonl" --overwrite \
  --vlm "$out/runs/stage1_dpo" --window 2 --into captions_stage1 --missing keep -q ${extra[@]+"${extra[@]}"}
from="$out/stage2_stage1model.jsonl"
for window in ${STAGE2_WINDOWS:-2 full}; do
  suffix=$([ "$window" = full ] && echo "" || echo "_w$window")
  caption_all "$window" "$suffix" "$from" "$out/stage2_captioned_w$window.jsonl"
  from="$out/stage2_captioned_w$window.jsonl"
done
cp "$from" "$out/stage2_captioned.jsonl"
# the judges find the M distinct frames first; caption matching then runs over those M (the paper's order)
{ run "$vi" judge progression -i "$out/stage2_captioned.jsonl" --prompt pseudo "${judges[@]}" -q; } \
  | { run "$vi" judge match -q ${extra[@]+"${extra[@]}"}; } > "$out/stage2_judged.jsonl"
cat "$out/stage1_judged.jsonl" "$out/stage2_judged.jsonl" | { run "$vi" captioner-data -o "$out/stage2_data"; }
train sft "$out/stage2_data/sft.jsonl" "$out/runs/stage1_dpo" "$out/runs/stage2_sft" "${SFT_STEPS:-30}" \
  "${lr_args[@]}"
train dpo "$out/stage2_data/dpo.jsonl" "$out/runs/stage2_sft" "$out/runs/stage2_dpo" "${DPO_STEPS:-20}" \
  ${dpo_lr_args[@]+"${dpo_lr_args[@]}"}

echo "== eval: the stage-II model on ${EVAL_SEQUENCES:-3} measure sequences, vi eval framecap" >&2
split measure | head -n "${EVAL_SEQUENCES:-3}" > "$out/measure.jsonl"
{ run "$vi" caption-frames -i "$out/measure.jsonl" --vlm "$out/runs/stage2_dpo" --into captions --missing keep -q \
    ${extra[@]+"${extra[@]}"}; } \
  | { run "$vi" judge match -q ${extra[@]+"${extra[@]}"}; } \
  | { run "$vi" judge progression --prompt eval "${judges[@]}" -q; } > "$out/eval_judged.jsonl"
"$vi" eval framecap --pred "$out/eval_judged.jsonl" --labels "$sample/sequences_labels.jsonl" > "$out/framecap.json"
echo "recipe done: data $out/stage{1,2}_data, models $out/runs/stage{1,2}_{sft,dpo}, scores $out/framecap.json" >&2
