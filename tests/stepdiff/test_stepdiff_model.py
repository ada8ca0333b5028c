"""StepDiff's model: the Perceiver projector, the prompt with video slots, the data mixture, and
training with the real SmolLM2-135M (dequantized from its embedded GGUF) on a learnable task."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from conftest import run_vi
from stepdiff_fixtures import COLOURS, ENCODER, QUESTION, TINY_PROJECTOR, make_colour_task
from vi.core.models.perceiver import PerceiverResampler, ProjectorConfig
from vi.pipelines.stepdiff.train_data import Dataset, Mixture, Sample, make_dataset
from vi.pipelines.stepdiff.prompt import IGNORE, PAIR_SYSTEM, PromptFormat

# --- the projector --------------------------------------------------------------------------------


def test_the_perceiver_maps_any_number_of_tokens_to_latents_in_the_llm_width_and_sees_frame_order():
    torch.manual_seed(0)
    projector = PerceiverResampler(ProjectorConfig(input_dim=16, output_dim=24, latents=5, layers=2, dim=32, heads=4))
    torch.nn.init.normal_(projector.frame_embed, std=0.5)  # as after training: zeros at initialisation
    tokens = torch.randn(3, 4, 7, 16)
    out = projector(tokens)
    assert out.shape == (3, 5, 24)
    assert projector(torch.randn(2, 1, 50, 16)).shape == (2, 5, 24)  # spatio-temporal tokens: one "frame"
    swapped = tokens[:, [1, 0, 2, 3]]
    assert not torch.allclose(projector(swapped), out, atol=1e-4)  # frame order is seen
    shuffled = tokens[:, :, torch.randperm(7)]
    assert torch.allclose(projector(shuffled), out, atol=1e-5)  # order within a frame is not (attention is a set op)


# --- the prompt ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def llm():
    from vi.core.devices import resolve_placement
    from vi.core.models.causal_lm import load_causal_lm, resolve_causal_lm

    return load_causal_lm(resolve_causal_lm("smollm2-135m"), resolve_placement("cpu"))


def _text(tokenizer, sequence, counted_only=False) -> str:
    out = []
    for part, labels in zip(sequence.parts, sequence.labels):
        if isinstance(part, int):
            out.append(f"<V{part}>")
        else:
            out.append(tokenizer.decode([t for t, lab in zip(part, labels) if not counted_only or lab != IGNORE]))
    return "".join(out)


@pytest.mark.slow
def test_the_pair_prompt_uses_the_chat_template_with_both_video_slots_and_counts_only_the_answer(llm):
    fmt = PromptFormat(llm.tokenizer)
    assert fmt.template == "chat" and fmt.turn_end == "<|im_end|>"
    sequence, _ = fmt.pair_question("What differs?", ("a", "b"), answer="Video 2 uses a knife.")
    sequence = fmt.finished(sequence)
    text = _text(llm.tokenizer, sequence)
    system = PAIR_SYSTEM.format(reference="<V0>", candidate="<V1>")
    assert text.startswith(f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\nWhat differs?<|im_end|>\n"
                           "<|im_start|>assistant\n")
    assert text.endswith("Video 2 uses a knife.<|im_end|>")
    assert _text(llm.tokenizer, sequence, counted_only=True).replace("<V0>", "").replace("<V1>", "") == \
        "Video 2 uses a knife.<|im_end|>"


@pytest.mark.slow
def test_the_llama2_template_is_the_papers_and_a_seed_is_not_counted(llm):
    fmt = PromptFormat(llm.tokenizer, "llama2")
    sequence, _ = fmt.pair_question("What differs?", ("a", "b"), seed="In Video 2,", answer=" the person peels.")
    text = _text(llm.tokenizer, sequence)
    assert "[INST] <<SYS>>\nYou are a helpful AI assistant that answers questions about a pair of videos." in text
    assert "Here is the first video: <V0>. Here is the second video: <V1>.\n<</SYS>>\n\nWhat differs? [/INST] " \
           "In Video 2, the person peels." in text
    counted = _text(llm.tokenizer, sequence, counted_only=True).replace("<V0>", "").replace("<V1>", "")
    assert counted.strip() == "the person peels."


# --- the data --------------------------------------------------------------------------------------

def _dataset(name: str, count: int) -> Dataset:
    return Dataset(name, "caption", [Sample(f"{name}{i}", "caption", (f"{name}{i}",), ("t",)) for i in range(count)])


def test_round_robin_alternates_datasets_and_each_epoch_is_a_fresh_permutation():
    mixture = Mixture([_dataset("a", 3), _dataset("b", 5)], seed=1)
    drawn = [s.id for s in mixture.take(12)]
    assert [d[0] for d in drawn] == list("abababababab")
    a = [d for d in drawn if d[0] == "a"]
    assert sorted(a[:3]) == ["a0", "a1", "a2"] and sorted(a[3:6]) == ["a0", "a1", "a2"]  # without replacement
    assert sorted([d for d in drawn if d[0] == "b"][:5]) == ["b0", "b1", "b2", "b3", "b4"]


def test_weights_set_the_mixture_and_a_restored_state_continues_the_same_stream():
    mixture = Mixture([_dataset("a", 4), _dataset("b", 4)], weights=[3, 1], seed=0)
    first = [s.id for s in mixture.take(400)]
    assert 0.68 < sum(d[0] == "a" for d in first) / 400 < 0.82
    state = json.loads(json.dumps(mixture.state()))  # as a checkpoint keeps it
    expected = [s.id for s in mixture.take(50)]
    again = Mixture([_dataset("a", 4), _dataset("b", 4)], weights=[3, 1], seed=0)
    again.load_state(state)
    assert [s.id for s in again.take(50)] == expected
    with pytest.raises(ValueError, match="same --data"):
        Mixture([_dataset("b", 4), _dataset("a", 4)]).load_state(state)
    with pytest.raises(ValueError, match="samples of a changed"):  # same file name, other contents
        Mixture([_dataset("a", 5), _dataset("b", 4)], weights=[3, 1], seed=0).load_state(state)


def test_a_pairs_questions_and_a_videos_windows_fall_on_one_side_of_the_held_out_split():
    from vi.pipelines.stepdiff.train import split_held_out

    pairs = [{"id": f"p{i}", "reference": {"id": f"r{i}"}, "candidate": {"id": f"c{i}"},
              "qa": [{"q": f"Q{k}?", "a": "A"} for k in range(4)]} for i in range(20)]
    clips = [{"id": f"v{v}_{i}", "source_id": f"v{v}", "start": float(i), "narration": "t"}
             for v in range(10) for i in range(5)]
    datasets = [make_dataset("pair_qa:qa.jsonl", pairs), make_dataset("interleaved:clips.jsonl", clips)]
    train, val = split_held_out(datasets, 0.3, seed=0)
    held = {s.group for s in val}
    assert held and all(s.group not in held for d in train for s in d.samples)
    assert len(val) + sum(len(d.samples) for d in train) == 80 + 30


def test_interleaved_samples_are_three_consecutive_narrated_clips_of_one_video_and_bad_records_are_counted():
    clips = [{"id": f"v{v}_{i}", "source_id": f"v{v}", "start": float(10 - i), "narration": f"step {i}"}
             for v in range(2) for i in range(4)]
    clips += [{"id": "x", "errors": [{"stage": "clips"}]}, {"id": "y", "source_id": "v0", "start": 0.5}]
    dataset = make_dataset("interleaved:clips.jsonl", clips)
    assert len(dataset.samples) == 4  # 2 windows per 4-clip video
    assert dataset.samples[0].clips == ("v0_3", "v0_2", "v0_1")  # by start time
    assert dataset.samples[0].texts == ("step 3", "step 2", "step 1")
    assert dataset.skipped == {"error record": 1, "no narration/caption": 1}
    qa = make_dataset("pair_qa:qa.jsonl", [{"id": "p", "reference": {"id": "r"}, "candidate": {"id": "c"},
                                            "qa": [{"q": "Which?", "a": "Video 1"}, {"q": "", "a": "x"}]}])
    assert [(s.clips, s.texts) for s in qa.samples] == [(("r", "c"), ("Which?", "Video 1"))]


# --- scoring against transformers itself -------------------------------------------------------------

@pytest.mark.slow
def test_scores_equal_the_log_likelihood_from_the_llms_full_logits(llm, tmp_path):
    from vi.core.devices import resolve_placement
    from vi.pipelines.stepdiff.model import StepDiffModel

    torch.manual_seed(0)
    model = StepDiffModel.build("smollm2-135m", ENCODER, resolve_placement("cpu"), latents=4, dim=32, heads=4)
    features = {c: torch.randn(2, 4, 16) for c in ("a", "b", "c")}
    answers = (" the red", " the dark green")
    sequences = [model.format.pair_question(QUESTION, pair, seed="In Video 2,", answer=answer)[0]
                 for pair, answer in zip((("a", "b"), ("c", "a")), answers)]
    batched = model.scores(sequences, features)
    with torch.no_grad():  # the plain way: whole-sequence logits, one sequence at a time
        for sequence, score, answer in zip(sequences, batched, answers):
            embeds, mask, labels = model.inputs([sequence], features)
            logits = model.llm.model(inputs_embeds=embeds, attention_mask=mask).logits[0]
            log_probs = torch.log_softmax(logits[:-1].float(), -1)
            targets = labels[0, 1:]
            keep = targets != IGNORE
            expected = log_probs[keep].gather(1, targets[keep].unsqueeze(1)).sum().item()
            assert score == pytest.approx(expected, abs=1e-3)
            assert int(keep.sum()) == len(model.llm.tokenizer(answer, add_special_tokens=False)["input_ids"])


@pytest.mark.slow
def test_greedy_generation_stays_greedy_whatever_the_llms_own_generation_config_says(llm):
    from vi.core.devices import resolve_placement
    from vi.pipelines.stepdiff.model import StepDiffModel

    torch.manual_seed(0)
    model = StepDiffModel.build("smollm2-135m", ENCODER, resolve_placement("cpu"), latents=4, dim=32, heads=4)
    features = {c: torch.randn(2, 4, 16) for c in ("a", "b")}
    sequence, _ = model.format.pair_question(QUESTION, ("a", "b"), seed="The second video is")
    defaults = model.llm.model.generation_config
    saved = (defaults.do_sample, defaults.temperature, defaults.top_k)
    defaults.do_sample, defaults.temperature, defaults.top_k = True, 5.0, 0  # as a generation_config.json may say
    try:
        answers = {model.generate(sequence, features, max_new_tokens=8, seed=seed) for seed in (1, 2, 3)}
        sampled = {model.generate(sequence, features, max_new_tokens=8, sample=True, temperature=5.0, seed=seed)
                   for seed in (1, 2, 3)}
    finally:
        defaults.do_sample, defaults.temperature, defaults.top_k = saved
    assert len(answers) == 1  # greedy: one answer
    assert len(sampled) > 1  # the same prompt sampled hot: not one answer


# --- training ----------------------------------------------------------------------------------------

# --log-every 6 does not divide --save-every 20: the resumed run must carry the train-loss window over.
TRAIN = ("--steps", "40", "--batch-size", "4", "--lr", "2e-3", "--warmup-steps", "3", "--eval-every", "10",
         "--save-every", "20", "--log-every", "6", "--device", "cpu", "-q", *TINY_PROJECTOR)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("stepdiff")
    task = make_colour_task(folder)
    run = folder / "run"
    done = run_vi("train", "stepdiff", "-o", str(run), "--data", f"pair_qa:{task['train']}",
                  "--val", f"pair_qa:{task['val']}", "--features", str(task["store"]), *TRAIN)
    assert done.returncode == 0, done.stderr
    return {**task, "run": run, "stderr": done.stderr}


def _log(run, split):
    return [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines() if f'"{split}"' in line]


@pytest.mark.slow
def test_training_on_pair_qa_lowers_the_held_out_loss_clearly(trained):
    val = _log(trained["run"], "val")
    assert [v["step"] for v in val] == [0, 10, 20, 30, 40]
    assert val[-1]["loss"] < 0.6 * val[0]["loss"], val
    train = _log(trained["run"], "train")
    assert train[-1]["lr"] == pytest.approx(0.0, abs=1e-9)  # cosine decay to zero at the last step
    assert max(t["lr"] for t in train) <= 2e-3
    assert "18 held out" in trained["stderr"]


@pytest.mark.slow
def test_a_resumed_run_reproduces_the_loss_curve_after_its_last_checkpoint(trained, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(trained["run"], run)
    shutil.rmtree(run / "checkpoints" / "step-0000040")  # killed after the checkpoint of step 20
    done = run_vi("train", "stepdiff", "-o", str(run), "--data", f"pair_qa:{trained['train']}",
                  "--val", f"pair_qa:{trained['val']}", "--features", str(trained["store"]), "--resume", *TRAIN)
    assert done.returncode == 0, done.stderr
    assert "resumed from" in done.stderr and "(step 20)" in done.stderr
    for split in ("train", "val"):
        original, resumed = _log(trained["run"], split), _log(run, split)
        assert [e["step"] for e in resumed] == [e["step"] for e in original]
        for a, b in zip(original, resumed):
            assert b["loss"] == pytest.approx(a["loss"], abs=1e-4), (split, a, b)


@pytest.mark.slow
def test_the_trained_model_scores_the_answer_it_was_taught_above_one_it_never_saw(trained):
    from vi.core.devices import resolve_placement
    from vi.core.features import FeatureStore
    from vi.pipelines.stepdiff.model import StepDiffModel

    store = FeatureStore(trained["store"])
    ranked = {}
    for name in ("step-0000020", "step-0000040"):
        model = StepDiffModel.from_checkpoint(trained["run"] / "checkpoints" / name, resolve_placement("cpu"))
        wins = total = 0
        for line in trained["train"].read_text().splitlines()[:30]:
            record = json.loads(line)
            ref, cand, seen = record["reference"]["id"], record["candidate"]["id"], record["qa"][0]["a"]
            unseen = next(c for c in COLOURS if c not in (seen, ref.split("_")[0]))
            sequences = [model.format.pair_question(QUESTION, (ref, cand), answer=a)[0] for a in (seen, unseen)]
            scores = model.scores(sequences, {ref: store.get(ref), cand: store.get(cand)})
            wins, total = wins + (scores[0] > scores[1]), total + 1
        ranked[name] = wins / total
    assert ranked["step-0000040"] >= 0.8, ranked  # chance: 0.5


def test_bad_training_options_are_refused_with_the_option_named(tmp_path):
    task = make_colour_task(tmp_path / "task", copies=1)
    done = run_vi("train", "stepdiff", "-o", str(tmp_path / "r"), "--data", f"qa:{task['train']}")
    assert done.returncode == 2 and "KIND:PATH" in done.stderr
    done = run_vi("train", "stepdiff", "-o", str(tmp_path / "r"), "--data", f"pair_qa:{task['train']}")
    assert done.returncode == 2 and "--features" in done.stderr
    done = run_vi("train", "stepdiff", "-o", str(tmp_path / "r"), "--data", f"pair_qa:{task['train']}",
                  "--features", str(task["store"]), "--weights", "1,2")
    assert done.returncode == 2 and "one per --data" in done.stderr
    (tmp_path / "r").mkdir(exist_ok=True)
    (tmp_path / "r" / "log.jsonl").write_text('{"split": "train", "step": 1, "loss": 1.0}\n')
    done = run_vi("train", "stepdiff", "-o", str(tmp_path / "r"), "--data", f"pair_qa:{task['train']}",
                  "--features", str(task["store"]))
    assert done.returncode == 2 and "--resume" in done.stderr and "--overwrite" in done.stderr
