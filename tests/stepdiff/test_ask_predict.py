"""`vi ask` and `vi predict --method stepdiff`: a trained StepDiff model answering about clips.

One tiny run is trained here (vi train stepdiff, 2 steps, SmolLM2) on the patch tokens of a tiny
random open_clip ViT, stored for four clips of two solid-colour videos; the commands are checked
against the model called directly (StepDiffModel.generate / scores on prompts written out here),
and their predictions against `vi eval`.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import jsonl, run_vi
from test_frame_scorers import make_tiny_clip
from test_predict import BLUE_B, CAP, COLOUR, GREEN_A, RANK, RED_A, RED_B, VIDEOS, write_jsonl
from test_predict import MCQ as BASELINE_MCQ
from vi.core.devices import resolve_placement
from vi.core.features import FeatureStore, FeatureWriter
from vi.core.seeding import record_seed
from vi.evaluation.stepdiff import model_predict as smp
from vi.evaluation.stepdiff.predict import annotation_style
from vi.pipelines.stepdiff import ask
from vi.pipelines.stepdiff.train import latest_checkpoint
from vi.core.models.video_encoder import resolve_video_encoder
from vi.pipelines.stepdiff.video_encoder import encode_video, load_video_encoder

CPU = resolve_placement("cpu", "float32")
# The videos, clip ids, DiffRank and DiffCap rows of the baselines' tests (test_predict), shared; the
# DiffMCQ rows are two of its three.
CLIPS = {RED_A: ("vid_A", 0, 3), GREEN_A: ("vid_A", 3, 6), BLUE_B: ("vidB", 0, 3), RED_B: ("vidB", 3, 6)}
QUESTION = "What colour is the second video?"
MCQ = [BASELINE_MCQ[0], BASELINE_MCQ[2]]  # the green-for-red and red-card rows


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    """Videos, a feature store of their four clips (float32, so encoding again gives the same
    tokens), and a run folder trained on pair questions about them."""
    root = tmp_path_factory.mktemp("ask")
    videos = root / "videos"
    videos.mkdir()
    for name, (first, second) in VIDEOS.items():
        subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-f", "lavfi", "-i", f"color={first}:s=96x64:d=3:r=10",
                        "-f", "lavfi", "-i", f"color={second}:s=96x64:d=3:r=10", "-filter_complex",
                        "[0][1]concat=n=2:v=1", "-pix_fmt", "yuv420p", str(videos / f"{name}.mp4")], check=True)
    repo = make_tiny_clip(root / "clip")["repo"]
    encoder = load_video_encoder(resolve_video_encoder(f"open_clip:{repo}", None, 2), CPU)
    tokens = {clip: encode_video(encoder, videos / f"{video}.mp4", start, end)
              for clip, (video, start, end) in CLIPS.items()}
    FeatureWriter(root / "store", encoder.info, "float32").write(tokens)
    pairs = [{"id": f"{a}__{b}", "reference": {"id": a}, "candidate": {"id": b},
              "qa": [{"type": 1, "q": QUESTION, "a": COLOUR[b]}]} for a in CLIPS for b in CLIPS if a != b]
    write_jsonl(root / "train.jsonl", pairs)
    run_vi("train", "stepdiff", "-o", str(root / "run"), "--data", f"pair_qa:{root / 'train.jsonl'}", "--features",
           str(root / "store"), "--steps", "2", "--batch-size", "2", "--latents", "4", "--projector-dim", "32",
           "--heads", "4", "--save-every", "2", "-q", "--device", "cpu", check=True)
    gt = {"diffmcq": write_jsonl(root / "mcq.jsonl", MCQ), "diffrank": write_jsonl(root / "rank.jsonl", RANK),
          "diffcap": write_jsonl(root / "cap.jsonl", CAP)}
    return {"root": root, "videos": videos, "store": root / "store", "run": root / "run", "encoder": encoder,
            "gt": gt}


@pytest.fixture(scope="module")
def model(run):
    return ask.load_model(latest_checkpoint(run["run"]), CPU)


@pytest.fixture(scope="module")
def store(run) -> FeatureStore:
    return FeatureStore(run["store"])


def stepdiff(run, task: str, *extra: str, check: bool = True):
    return run_vi("predict", task, "--gt", str(run["gt"][task]), "--method", "stepdiff", "--checkpoint", str(run["run"]),
                  "--device", "cpu", "-q", *extra, check=check)


def by_id(text: str) -> dict[str, dict]:
    return {r["id"]: r for r in jsonl(text)}


# --- vi ask ----------------------------------------------------------------------------------------

def test_ask_answers_as_the_model_generates_and_a_bad_record_fails_alone(run, model, store):
    video_a = str(run["videos"] / "vid_A.mp4")
    records = [
        {"id": "ids", "reference": RED_A, "candidate": BLUE_B, "question": QUESTION},
        {"id": "path", "reference": video_a, "candidate": GREEN_A, "question": QUESTION, "seed": "The second video"},
        {"id": "clip", "reference": {"id": "not-stored", "video": video_a, "start": 0, "end": 3},
         "candidate": {"id": BLUE_B}, "question": QUESTION},
        {"id": "no-question", "reference": RED_A, "candidate": BLUE_B},
        {"id": "unknown", "reference": RED_A, "candidate": "vidC_0_3", "question": QUESTION},
        {"id": "no-video", "reference": {"video": str(run["videos"] / "gone.mp4")}, "candidate": BLUE_B,
         "question": QUESTION},
    ]
    done = run_vi("ask", "--checkpoint", str(run["run"]), "--features", str(run["store"]), "--device", "cpu",
                  "--max-new-tokens", "12", "-q", stdin="".join(json.dumps(r) + "\n" for r in records))
    assert done.returncode == 3, done.stderr  # some records failed, the others were answered
    out = by_id(done.stdout)
    assert list(out) == [r["id"] for r in records]

    def generate(reference, candidate, seed: str = "") -> str:
        sequence, _ = model.format.pair_question(QUESTION, ("r", "c"), seed=seed)
        return model.generate(sequence, {"r": reference, "c": candidate}, max_new_tokens=12)

    expected = generate(store.get(RED_A), store.get(BLUE_B))
    assert expected == generate(store.get(RED_A), store.get(BLUE_B))  # greedy: the same every time
    assert out["ids"]["answer"] == expected.strip() and expected.strip()
    whole_video = encode_video(run["encoder"], video_a)
    assert out["path"]["answer"] == ("The second video" + generate(whole_video, store.get(GREEN_A),
                                                                   "The second video")).strip()
    assert out["clip"]["answer"] == out["ids"]["answer"]  # encoded here: the stored clip's tokens
    errors = {key: out[key]["errors"][-1] for key in ("no-question", "unknown", "no-video")}
    assert [e["kind"] for e in errors.values()] == ["missing_field", "unknown_clip", "missing_media"]
    assert errors["no-question"]["message"].startswith("question")
    assert errors["unknown"]["message"].startswith("candidate 'vidC_0_3' is neither a clip id of --features")
    assert errors["no-video"]["message"].startswith("reference: ") and "gone.mp4" in errors["no-video"]["message"]
    assert all("answer" not in out[key] for key in errors)


def test_sampled_answers_follow_the_seed_and_the_positional_form_prints_one_record(run, model):
    videos = [str(run["videos"] / "vid_A.mp4"), str(run["videos"] / "vidB.mp4")]
    done = run_vi("ask", *videos, QUESTION, "--checkpoint", str(run["run"]), "--sample", "--seed", "3",
                  "--max-new-tokens", "12", "--device", "cpu", stdin="not a record: stdin is not read\n", check=True)
    records = jsonl(done.stdout)
    assert len(records) == 1 and set(records[0]) == {"id", "reference", "candidate", "question", "answer",
                                                     "provenance"}  # the stage's configuration (docs/records.md)
    record = records[0]
    assert record["id"] == "ask" and [record["reference"], record["candidate"]] == videos
    assert "Answer: " + " ".join(record["answer"].split()) in " ".join(done.stderr.split())

    features = {"r": encode_video(run["encoder"], videos[0]), "c": encode_video(run["encoder"], videos[1])}
    sequence, _ = model.format.pair_question(QUESTION, ("r", "c"))

    def sampled(seed: int) -> str:
        return model.generate(sequence, features, max_new_tokens=12, sample=True, seed=seed).strip()

    # The record's seed is derived from --seed and its id, in any process.
    assert record["answer"] == sampled(record_seed(3, "ask")) == sampled(record_seed(3, "ask"))
    assert len({sampled(seed) for seed in range(4)}) > 1  # ... and it is what decides the sample


def test_a_store_of_another_encoder_and_options_no_method_reads_are_refused(run, tmp_path):
    other = tmp_path / "other"
    FeatureWriter(other, {"encoder": "synthetic", "kind": "test", "dim": 16, "frames": 2, "tokens_per_frame": 4},
                  "float32").write({RED_A: torch.zeros(2, 4, 16)})
    refused = [
        (stepdiff(run, "diffmcq", "--features", str(other), check=False),
         (r"--features .*other holds features of encoder 'synthetic' \(dim=16, encoder='synthetic', kind='test', "
          r"tokens_per_frame=4\), but the checkpoint .*step-0000002 was trained on 'open_clip:")),
        (run_vi("ask", "--checkpoint", str(run["run"]), "--features", str(other), "--device", "cpu",
                stdin=json.dumps({"id": "x", "reference": RED_A, "candidate": RED_B, "question": QUESTION})),
         "holds features of encoder 'synthetic'"),
        (run_vi("ask", "--checkpoint", str(tmp_path), stdin=""), "neither a checkpoint"),
        (stepdiff(run, "diffmcq", "--features", str(run["store"]), "--llm", "x", "--frames", "4", check=False),
         "--frames, --llm: not read by --method stepdiff"),
        (run_vi("predict", "diffmcq", "--gt", str(run["gt"]["diffmcq"]), "--method", "socratic", "--video-root",
                str(run["videos"]), "--checkpoint", str(run["run"]), "--features", str(run["store"])),
         "--checkpoint, --features: not read by --method socratic"),
        (run_vi("predict", "diffmcq", "--gt", str(run["gt"]["diffmcq"]), "--method", "stepdiff", "--features",
                str(run["store"])), "stepdiff needs the trained model: give --checkpoint"),
    ]
    for done, message in refused:
        assert done.returncode == 2 and done.stdout == "", done.stderr
        assert re.search(message, " ".join(done.stderr.split())), done.stderr


# --- vi predict --method stepdiff ------------------------------------------------------------------

def test_diffmcq_scores_are_batched_caption_likelihoods_and_vi_eval_takes_them(run, model, store, tmp_path):
    pred = tmp_path / "mcq.jsonl"
    stepdiff(run, "diffmcq", "--features", str(run["store"]), "-o", str(pred))
    predicted = [row["scores"] for row in jsonl(pred.read_text())]

    # The prompt written out: log P(" " + caption, first letter lowered) after "In Video 2,".
    questions = ["What is the main difference in visuals between the two videos?",
                 "What is the main difference in tools/equipment between the two videos?"]
    answers = [" green is used instead of red.", " a red card."]
    method = smp.StepDiffPredictor(model, store.get)
    for row, question, answer, scores in zip(MCQ, questions, answers, predicted):
        by_hand = [model.scores([model.format.pair_question(question, (ref, cand), seed="In Video 2,", answer=answer)[0]],
                                {ref: store.get(ref), cand: store.get(cand)})[0] for ref, cand in row["options"]]
        unbatched = [method.option_score(ref, cand, row["difference"], row["category"]) for ref, cand in row["options"]]
        assert method.option_scores(row) == pytest.approx(unbatched, abs=1e-4)
        assert scores == pytest.approx(by_hand, abs=1e-4) and unbatched == pytest.approx(by_hand, abs=1e-4)
        assert all(s < 0 for s in scores)
    # Options of the same two colours are the same pixels, hence the same score.
    assert predicted[0][0] == pytest.approx(predicted[0][3], abs=1e-4)
    scored = run_vi("eval", "diffmcq", "--gt", str(run["gt"]["diffmcq"]), "--pred", str(pred), check=True)
    assert json.loads(scored.stdout)["rows"] == len(MCQ)


def test_diffrank_scores_are_p_yes_from_clips_encoded_from_the_video_root(run, model, store, tmp_path, monkeypatch):
    pred = tmp_path / "rank.jsonl"
    stepdiff(run, "diffrank", "--video-root", str(run["videos"]), "-o", str(pred))  # no store: encoded here
    predicted = [row["scores"] for row in jsonl(pred.read_text())]

    questions = ["Do these two videos show the same visuals? Answer YES or NO.",
                 "Do these two videos show the same actions? Answer YES or NO."]
    method = smp.StepDiffPredictor(model, store.get)
    assert not method.single_token_answers  # SmolLM2 reads "YES" as "Y" + "ES": whole answers are scored
    for row, question, scores in zip(RANK, questions, predicted):
        by_hand = []
        for target in row["targets"]:
            features = {row["reference"]: store.get(row["reference"]), target: store.get(target)}
            log_yes, log_no = (model.scores([model.format.pair_question(question, (row["reference"], target),
                                                                        answer=answer)[0]], features)[0]
                               for answer in ("YES", "NO"))
            by_hand.append(1 / (1 + math.exp(log_no - log_yes)))
        assert scores == pytest.approx(by_hand, abs=1e-4)
        assert method.target_scores(row) == pytest.approx(by_hand, abs=1e-4)
        assert [method.target_score(row["reference"], t, row["category"]) for t in row["targets"]] == pytest.approx(
            by_hand, abs=1e-4)
    # Answers that are one token each are read off the next-token distribution, to the same values.
    monkeypatch.setattr(smp, "YES", "Yes")
    monkeypatch.setattr(smp, "NO", "No")
    single = smp.StepDiffPredictor(model, store.get)
    whole = smp.StepDiffPredictor(model, store.get)
    whole.single_token_answers = False
    assert single.single_token_answers
    for row in RANK:
        assert single.target_scores(row) == pytest.approx(whole.target_scores(row), abs=1e-4)
    scored = run_vi("eval", "diffrank", "--gt", str(run["gt"]["diffrank"]), "--pred", str(pred), check=True)
    assert json.loads(scored.stdout)["rows"] == len(RANK)


def test_diffcap_is_the_seeded_greedy_continuation_in_the_annotation_style(run, model, store, tmp_path):
    pred = tmp_path / "cap.jsonl"
    stepdiff(run, "diffcap", "--features", str(run["store"]), "--max-new-tokens", "16", "-o", str(pred))
    sequence, _ = model.format.pair_question("What is the main difference in ingredients between the two videos?",
                                             (RED_A, BLUE_B), seed="The main difference in ingredients is that in "
                                             "Video 2,")
    expected = annotation_style(model.generate(sequence, {RED_A: store.get(RED_A), BLUE_B: store.get(BLUE_B)},
                                               max_new_tokens=16))
    assert jsonl(pred.read_text()) == [{"generated_text": expected}]
    scored = run_vi("eval", "diffcap", "--gt", str(run["gt"]["diffcap"]), "--pred", str(pred), check=True)
    assert json.loads(scored.stdout)["rows"] == 1


@pytest.mark.slow
def test_encode_videos_piped_into_train_stepdiff_trains_on_the_stream_and_records_the_encoder(run, tmp_path):
    """`vi encode-videos | vi train stepdiff --data caption:-`: the store comes from the records themselves."""
    from vi.core.features import read_info

    narration = {RED_A: "Now the screen turns red.", GREEN_A: "Then it is green.", BLUE_B: "This one starts blue.",
                 RED_B: "And it ends red."}
    clips = [{"id": clip, "video": str(run["videos"] / f"{video}.mp4"), "start": start, "end": end,
              "narration": narration[clip]} for clip, (video, start, end) in CLIPS.items()]
    store, out = tmp_path / "store", tmp_path / "run"
    vi = str(Path(sys.executable).parent / "vi")
    command = (f"{vi} encode-videos --store {store} --encoder open_clip:{run['root'] / 'clip' / 'repo'} --frames 2 "
               f"--device cpu -q | {vi} train stepdiff --data caption:- --data pair_qa:{run['root'] / 'train.jsonl'} "
               f"--val-fraction 0.3 --steps 2 --batch-size 2 --latents 4 --projector-dim 32 --heads 4 --eval-every 2 "
               f"--device cpu -q -o {out}")
    done = subprocess.run(["bash", "-o", "pipefail", "-c", command], input="".join(json.dumps(c) + "\n" for c in clips),
                          capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, check=False)
    assert done.returncode == 0, done.stderr
    assert re.search(r"caption:- \(\d samples\)", done.stderr)  # the stream was read, minus the held-out part
    checkpoint = latest_checkpoint(out)
    assert checkpoint.name == "step-0000002"
    assert json.loads((checkpoint / "model.json").read_text())["encoder"] == read_info(store)
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [e["step"] for e in log if e["split"] == "val"] == [0, 2]
