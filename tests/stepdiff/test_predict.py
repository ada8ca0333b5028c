"""`vi predict`: StepDiff's VLEmbed and Socratic baselines, in the official prediction formats.

VLEmbed runs a tiny random open_clip model and is checked against open_clip called directly;
Socratic runs the embedded SmolLM2 and is checked against llama.cpp's own logits.
"""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import jsonl, run_vi
from test_frame_scorers import make_tiny_clip
from vi.evaluation.stepdiff import socratic
from vi.evaluation.stepdiff import predict as sp
from vi.evaluation.stepdiff.metrics import BenchmarkFileError

SMOL = "smollm2-135m"
# Two videos of two solid-colour halves (3 s each): a clip's frames are all one colour, so any
# resizing gives the same pixels, and VLEmbed can be compared with open_clip exactly.
VIDEOS = {"vid_A": ("red", "green"), "vidB": ("blue", "red")}
RED_A, GREEN_A, BLUE_B, RED_B = "vid_A_0_3", "vid_A_3_6", "vidB_0_3", "vidB_3_6"
COLOUR = {RED_A: "red", GREEN_A: "green", BLUE_B: "blue", RED_B: "red"}
MCQ = [
    {"difference": "Green is used instead of red.", "category": "Visuals",
     "options": [[RED_A, GREEN_A], [BLUE_B, RED_B], [RED_A, BLUE_B], [RED_B, GREEN_A]], "answer": [RED_A, GREEN_A]},
    {"difference": "Blue paint instead of red paint.", "category": "Ingredients",
     "options": [[RED_A, BLUE_B], [BLUE_B, RED_B], [RED_A, GREEN_A], [RED_B, GREEN_A]], "answer": [RED_A, BLUE_B]},
    {"difference": "A red card.", "category": "Tools/Equipment",
     "options": [[GREEN_A, RED_B], [BLUE_B, RED_B], [RED_A, GREEN_A], [RED_B, RED_A]], "answer": [RED_B, RED_A]},
]
RANK = [{"reference": RED_A, "targets": [GREEN_A, RED_B, BLUE_B, RED_A], "category": "Visuals", "scores": [1, 4, 0, 5]},
        {"reference": BLUE_B, "targets": [GREEN_A, RED_B, BLUE_B, RED_A], "category": "Actions", "scores": [1, 1, 5, 1]}]
CAP = [{"reference": RED_A, "candidate": BLUE_B, "category": "Ingredients",
        "text": ["The person peels a plum instead of chopping an apple."]}]
DESCRIPTIONS = {RED_A: "A person chops a red apple with a large knife on a wooden board.",
                GREEN_A: "A person slices a green pear with a small knife on a plate.",
                BLUE_B: "A person peels a blue plum by hand over a bowl.",
                RED_B: "A person chops a red apple with scissors on a wooden board."}


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def bench(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("predict")
    videos = root / "videos"
    videos.mkdir()
    for name, (first, second) in VIDEOS.items():
        subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-f", "lavfi", "-i", f"color={first}:s=96x64:d=3:r=10",
                        "-f", "lavfi", "-i", f"color={second}:s=96x64:d=3:r=10", "-filter_complex",
                        "[0][1]concat=n=2:v=1", "-pix_fmt", "yuv420p", str(videos / f"{name}.mp4")], check=True)
    descriptions = write_jsonl(root / "described.jsonl",
                               [{"id": c, "description": {"step": t}} for c, t in DESCRIPTIONS.items()])
    return {"root": root, "videos": videos, "clip": make_tiny_clip(root / "clip")["repo"], "descriptions": descriptions,
            "diffmcq": write_jsonl(root / "mcq.jsonl", MCQ), "diffrank": write_jsonl(root / "rank.jsonl", RANK),
            "diffcap": write_jsonl(root / "cap.jsonl", CAP)}


def vlembed(bench, task: str, *extra: str, check: bool = True):
    return run_vi("predict", task, "--gt", str(bench[task]), "--method", "vlembed", "--clip-model", str(bench["clip"]),
                  "--video-root", str(bench["videos"]), "-q", *extra, check=check)


# --- the shared pieces ---------------------------------------------------------------------

@pytest.mark.parametrize("generated, expected", [
    (" the person is peeling a plum, whereas in Video 1, the person is chopping an apple. More.",
     "The person is peeling a plum instead of chopping an apple."),
    (" they use scissors while in video 1 they use a knife", "They use scissors instead of use a knife."),
    (" In Video 2, the person adds salt.", "The person adds salt."),
    ("   ", ""),
])
def test_generated_differences_are_rewritten_in_the_annotation_style(generated, expected):
    assert sp.annotation_style(generated) == expected


def test_shards_are_contiguous_blocks_that_concatenate_to_the_whole_file():
    rows = [sp.BenchmarkRow(i, {}) for i in range(10)]
    for count in (1, 3, 4, 10, 11):
        parts = [sp.shard_rows(rows, i, count) for i in range(count)]
        assert [r for part in parts for r in part] == rows


def test_descriptions_come_from_describe_records_and_a_missing_clip_is_named(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [
        {"id": "a_0_1", "description": {"step": "  Chops  an apple. "}},
        {"id": "b_0_1", "error": {"kind": "nothing_to_describe"}},
        {"id": "c_0_1", "description": "A plain string of my own captioner."},
        {"id": "unused_0_1", "description": {"step": "x"}}])
    found, empty = socratic.read_descriptions(path, {"a_0_1", "b_0_1", "c_0_1"})
    assert found == {"a_0_1": "Chops an apple.", "b_0_1": socratic.NOT_AVAILABLE,
                     "c_0_1": "A plain string of my own captioner."}
    assert empty == ["b_0_1"]
    with pytest.raises(BenchmarkFileError, match="no description of 1 clips.*d_0_1"):
        socratic.read_descriptions(path, {"a_0_1", "d_0_1"})


# --- VLEmbed -----------------------------------------------------------------------------------

def raw_open_clip_embeddings(bench) -> tuple[dict[str, np.ndarray], callable]:
    """Each clip's VLEmbed embedding computed with decord and open_clip directly."""
    import open_clip
    import torch
    from decord import VideoReader
    from PIL import Image

    model, _, preprocess = open_clip.create_model_and_transforms(f"local-dir:{bench['clip']}")
    tokenizer = open_clip.get_tokenizer(f"local-dir:{bench['clip']}")
    model.eval()
    out = {}
    for clip in COLOUR:
        video, start, end = sp.parse_clip_id(clip)
        reader = VideoReader(str(bench["videos"] / f"{video}.mp4"))
        times = [start + (end - start) * (k + 0.5) / 8 for k in range(8)]
        frames = reader.get_batch([round(t * reader.get_avg_fps()) for t in times]).asnumpy()
        with torch.no_grad():
            feats = model.encode_image(torch.stack([preprocess(Image.fromarray(f)) for f in frames]), normalize=True)
        mean = feats.mean(0).numpy().astype(np.float64)
        out[clip] = mean / np.linalg.norm(mean)

    def text(caption: str) -> np.ndarray:
        with torch.no_grad():
            return model.encode_text(tokenizer([caption]), normalize=True)[0].numpy().astype(np.float64)
    return out, text


def unit(v):
    return v / np.linalg.norm(v)


def test_vlembed_scores_are_open_clip_cosines_for_each_pair_embedding(bench):
    clips, text = raw_open_clip_embeddings(bench)
    pair_of = {"both": lambda r, c: unit(clips[r] + clips[c]), "reference": lambda r, c: clips[r],
               "candidate": lambda r, c: clips[c]}
    for mode, pair in pair_of.items():
        predicted = [row["scores"] for row in jsonl(vlembed(bench, "diffmcq", "--pair", mode).stdout)]
        expected = [[float(pair(r, c) @ text(row["difference"])) for r, c in row["options"]] for row in MCQ]
        np.testing.assert_allclose(predicted, expected, atol=2e-4)
    ranked = [row["scores"] for row in jsonl(vlembed(bench, "diffrank").stdout)]
    np.testing.assert_allclose(ranked, [[clips[r["reference"]] @ clips[t] for t in r["targets"]] for r in RANK],
                               atol=2e-4)
    # A target that looks the same as the reference (the same colour, in another video too) ranks first.
    assert ranked[0][1] == pytest.approx(1.0, abs=1e-5) and ranked[0][3] == pytest.approx(1.0, abs=1e-5)
    assert max(ranked[0][0], ranked[0][2]) < 0.999


def test_vlembed_predictions_are_scored_by_vi_eval_and_saved_features_replace_the_videos(bench, tmp_path):
    features = tmp_path / "clips.npz"
    first = vlembed(bench, "diffmcq", "-o", str(tmp_path / "p.jsonl"), "--save-clip-features", str(features))
    assert first.stdout == ""
    with np.load(features) as saved:
        assert sorted(saved["id"]) == sorted(COLOUR) and saved["embedding"].shape[0] == 4
    again = run_vi("predict", "diffmcq", "--gt", str(bench["diffmcq"]), "--method", "vlembed", "--clip-model",
                   str(bench["clip"]), "--clip-features", str(features), "-q", check=True)
    assert jsonl(again.stdout) == jsonl((tmp_path / "p.jsonl").read_text())
    scored = run_vi("eval", "diffmcq", "--gt", str(bench["diffmcq"]), "--pred", str(tmp_path / "p.jsonl"), check=True)
    assert json.loads(scored.stdout)["rows"] == len(MCQ)
    negatives = run_vi("eval", "mcq-negatives", "-i", str(bench["diffcap"]), "--clip-features", str(features),
                       "--text-model", "minilm-l6")
    assert negatives.returncode == 0, negatives.stderr  # the saved features are what mcq-negatives reads


def test_a_clip_cut_to_its_own_file_is_read_whole(bench, tmp_path):
    root = tmp_path / "videos"
    root.mkdir()
    for video in VIDEOS:
        (root / f"{video}.mp4").symlink_to(bench["videos"] / f"{video}.mp4")
    # RED_A as its own file, but blue: the clip file must win over cutting vid_A.mp4.
    subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-i", str(bench["videos"] / "vidB.mp4"), "-t", "3",
                    str(root / f"{RED_A}.mp4")], check=True)
    done = run_vi("predict", "diffrank", "--gt", str(bench["diffrank"]), "--method", "vlembed", "--clip-model",
                  str(bench["clip"]), "--video-root", str(root), "-q", check=True)
    scores = jsonl(done.stdout)[0]["scores"]  # RED_A is now blue: like BLUE_B, unlike RED_B
    assert scores[2] == pytest.approx(1.0, abs=1e-5) and scores[1] < 0.999


def test_shards_concatenate_to_the_full_prediction_and_resume_finishes_a_torn_file(bench, tmp_path):
    full = vlembed(bench, "diffmcq").stdout
    parts = [vlembed(bench, "diffmcq", "--shard", f"{i}/2").stdout for i in range(2)]
    assert "".join(parts) == full and all(parts)
    out = tmp_path / "p.jsonl"
    lines = full.splitlines(keepends=True)
    out.write_text(lines[0] + lines[1][:20])  # killed while writing the second line
    vlembed(bench, "diffmcq", "-o", str(out), "--resume")
    assert out.read_text() == full
    refused = vlembed(bench, "diffmcq", "-o", str(out), check=False)
    assert refused.returncode == 2 and "--resume" in refused.stderr


def test_unusable_input_is_refused_before_any_model_with_the_line_named(bench, tmp_path):
    outside = write_jsonl(tmp_path / "outside.jsonl", [RANK[0], {**RANK[1], "reference": "vidB_4_9.5"}])
    missing = write_jsonl(tmp_path / "missing.jsonl", [{**RANK[0], "targets": [GREEN_A, "nope_0_2", BLUE_B, RED_A]}])
    unknown = write_jsonl(tmp_path / "unknown.jsonl", [{**RANK[0], "category": "Colour"}])
    late = write_jsonl(tmp_path / "late.jsonl", [{**RANK[0], "reference": "vidB_6.1_6.4"}])
    silent = tmp_path / "silent"
    silent.mkdir()
    subprocess.run(["ffmpeg", "-loglevel", "error", "-f", "lavfi", "-i", "anullsrc=d=6", str(silent / "vidB.mp4")],
                   check=True)
    for video in ("vid_A.mp4",):
        (silent / video).symlink_to(bench["videos"] / video)
    cases = [
        (late, "diffrank", [], r"line 1: clip vidB_6.1_6.4 \(6.1-6.4 s\) is not inside"),
        (bench["diffrank"], "diffrank", ["--video-root", str(silent)], r"line 1: .*vidB.mp4 has no video stream"),
        (bench["diffrank"], "diffrank", ["--llm", SMOL], "--llm: not read by --method vlembed"),
        (bench["diffmcq"], "diffmcq", ["--pair", "both_clips"], "both_clips"),
        (bench["diffrank"], "diffrank", ["-o", str(tmp_path / "x.jsonl"), "--resume", "--overwrite"], "give one"),
        (outside, "diffrank", [], r"line 2: clip vidB_4_9.5 \(4-9.5 s\) is not inside .*vidB.mp4, whose frames end at 6.00 s"),
        (missing, "diffrank", [], r"line 1: .*nope\.mp4"),
        (unknown, "diffrank", [], r"line 1: unknown category 'Colour'"),
        (bench["diffcap"], "diffcap", [], "use --method socratic"),
        (bench["diffrank"], "diffrank", ["--pair", "reference"], "--pair"),
    ]
    for gt, task, extra, message in cases:
        root = [] if "--video-root" in extra else ["--video-root", str(bench["videos"])]
        done = run_vi("predict", task, "--gt", str(gt), "--method", "vlembed", "--clip-model", "/no/such/model",
                      *root, *extra)
        assert done.returncode == 2 and done.stdout == "", (gt, done.stderr)
        assert __import__("re").search(message, " ".join(done.stderr.split())), done.stderr


# --- Socratic ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def smol():
    from vi.core.models.llm import load_chat_llm

    return load_chat_llm(SMOL, n_ctx=1024, device="cpu")


def test_continuation_likelihoods_match_llama_cpp_with_every_logit_kept(smol):
    import llama_cpp
    from vi.core.models.llm import chat_prompt_tokens, continuation_log_probs

    model = socratic.Socratic(smol, DESCRIPTIONS)
    messages = model.messages(RED_A, BLUE_B, "What is the main difference in ingredients between the two videos?")
    caption = " the person peels a plum instead of chopping an apple."
    ours = continuation_log_probs(smol, messages, caption, "In Video 2,")
    other = continuation_log_probs(smol, model.messages(RED_A, RED_B, "Why?"), caption, "In Video 2,")
    assert continuation_log_probs(smol, messages, caption, "In Video 2,") == pytest.approx(ours, abs=1e-4)
    reference = llama_cpp.Llama(model_path=str(smol.path), n_ctx=1024, logits_all=True, verbose=False, n_threads=2)
    context = chat_prompt_tokens(smol, messages, "In Video 2,")
    target = reference.tokenize(caption.encode(), add_bos=False)
    reference.eval(context + target)
    expected = [reference.logits_to_logprobs(reference.scores[len(context) - 1 + i])[t] for i, t in enumerate(target)]
    reference.close()  # now, not at interpreter exit, where llama-cpp-python's finaliser fails noisily
    assert len(ours) == len(target) and np.allclose(ours, expected, atol=1e-3)
    assert not np.allclose(ours, other, atol=0.02)  # the descriptions are read, not ignored


def test_a_prompt_longer_than_the_context_stops_the_run_naming_the_line(bench, tmp_path):
    long = write_jsonl(tmp_path / "long.jsonl", [{"id": c, "description": {"step": " ".join([t] * 40)}}
                                                 for c, t in DESCRIPTIONS.items()])
    done = run_vi("predict", "diffrank", "--gt", str(bench["diffrank"]), "--descriptions", str(long), "--llm", SMOL,
                  "--n-ctx", "1024", "--device", "cpu", "-q")
    assert done.returncode == 2 and done.stdout == ""
    assert f"{bench['diffrank']} line 1: prompt and answer take" in " ".join(done.stderr.split())
    refused = run_vi("predict", "diffrank", "--gt", str(bench["diffrank"]), "--descriptions", str(long),
                     "--vlm", "none", "--llm", SMOL)
    assert refused.returncode == 2 and "--vlm is about describing clips from --video-root" in refused.stderr


def test_socratic_predictions_on_all_three_tasks_with_smollm2(bench, smol, tmp_path):
    runs = {task: run_vi("predict", task, "--gt", str(bench[task]), "--descriptions", str(bench["descriptions"]),
                         "--llm", SMOL, "--n-ctx", "1024", "--device", "cpu", "-q", check=True)
            for task in ("diffcap", "diffmcq", "diffrank")}
    caption = jsonl(runs["diffcap"].stdout)[0]["generated_text"]
    assert caption and caption[0].isupper() and caption.endswith(".") and "Video 1" not in caption
    mcq = [row["scores"] for row in jsonl(runs["diffmcq"].stdout)]
    rank = [row["scores"] for row in jsonl(runs["diffrank"].stdout)]
    assert len(mcq) == len(MCQ) and all(s < 0 and math.isfinite(s) for row in mcq for s in row)
    assert len(rank) == len(RANK) and all(0 < s < 1 for row in rank for s in row)
    # Same descriptions, same question: the same probability wherever the pair repeats.
    assert rank[0][3] == pytest.approx(socratic.Socratic(smol, DESCRIPTIONS).target_score(RED_A, RED_A, "Visuals"),
                                       abs=1e-4)
    for task, done in runs.items():
        pred = tmp_path / f"{task}.jsonl"
        pred.write_text(done.stdout)
        assert run_vi("eval", task, "--gt", str(bench[task]), "--pred", str(pred)).returncode == 0


@pytest.mark.slow
def test_qwen_socratic_ranks_the_target_described_like_the_reference_first(bench):
    done = run_vi("predict", "diffrank", "--gt", str(bench["diffrank"]), "--descriptions", str(bench["descriptions"]),
                  "-q", check=True)
    scores = jsonl(done.stdout)[0]["scores"]  # targets: pear, apple with scissors, plum, the reference itself
    assert scores[3] == max(scores)
    assert scores[1] > scores[2]  # an apple chopped on a board is nearer to it than a plum peeled by hand


@pytest.mark.slow
def test_socratic_describes_clips_from_the_video_root_and_saved_sentences_give_the_same_predictions(bench, tmp_path):
    saved = tmp_path / "sentences.jsonl"
    common = ("predict", "diffrank", "--gt", str(bench["diffrank"]), "--llm", SMOL, "--n-ctx", "1024", "--device", "cpu",
              "-q")
    here = run_vi(*common, "--video-root", str(bench["videos"]), "--vlm", "none", "--save-descriptions", str(saved),
                  check=True)
    sentences = jsonl(saved.read_text())
    assert sorted(s["id"] for s in sentences) == sorted(COLOUR)
    assert all(isinstance(s["description"], str) and s["description"] for s in sentences)
    again = run_vi(*common, "--descriptions", str(saved), check=True)
    np.testing.assert_allclose([r["scores"] for r in jsonl(again.stdout)], [r["scores"] for r in jsonl(here.stdout)],
                               atol=1e-6)


def test_clip_features_of_another_model_are_refused_naming_the_file(bench, tmp_path):
    features = tmp_path / "other.npz"
    np.savez(features, id=np.array(list(COLOUR)), embedding=np.ones((4, 7), np.float32))
    done = run_vi("predict", "diffrank", "--gt", str(bench["diffrank"]), "--method", "vlembed", "--clip-model",
                  str(bench["clip"]), "--clip-features", str(features), "-q")
    assert done.returncode == 2 and f"--clip-features {features} comes from another model" in " ".join(
        done.stderr.split())
