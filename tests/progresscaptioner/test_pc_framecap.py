"""`vi eval framecap`: FrameCapEval's Prog (balanced accuracy) and Cap (sequence-level matching accuracy)."""

from __future__ import annotations

import json

import pytest
from conftest import run_vi
from vi.evaluation.progresscaptioner import framecap as fc


def judged(rid, letters, labels=None, *, source=None, verdict="good", model="cap-a", prompt="eval",
           field="captions", judges=None):
    """A record as vi judge progression --prompt eval and vi judge match leave it, one captioner."""
    n = len(letters) + 1
    judges = judges or {"j1": None}
    pairs = []
    for i, letter in enumerate(letters):
        answers = {j: (letter if given is None else given[i]) for j, given in judges.items()}
        pairs.append({"frames": [i, i + 1], "answers": {field: answers}, "consensus": letter,
                      "change": {"A": True, "B": False}.get(letter)})
    record = {"id": rid, "frames": [{"time": float(t), "path": f"{t}.png"} for t in range(n)],
              field: {"model": model, "kind": "vlm", "window": n,
                      "items": [{"frame": t, "text": f"caption {t}"} for t in range(n)]},
              "progression": {"prompt": prompt, "judges": list(judges), "captioners": [field], "pairs": pairs,
                              "distinct": [0]}}
    if verdict is not None:
        record["matching"] = {field: {"frames": [{"frame": t, "correct": verdict == "good"} for t in range(n)],
                                      "verdict": verdict}}
    if source:
        record["source"] = source
    if labels is not None:
        record["progress_labels"] = labels
    return record


def test_balanced_accuracy_matches_the_hand_computed_value():
    # labels 1 1 0 0 1, answers A B B A A -> predicted 1 0 0 1 1: TPR 2/3, TNR 1/2, balanced (2/3 + 1/2) / 2
    result = fc.evaluate([judged("s1", "ABBAA", [1, 1, 0, 0, 1])], ["captions"])
    overall = result["rows"]["cap-a"]["overall"]
    assert overall["prog"] == pytest.approx((2 / 3 + 1 / 2) / 2, abs=1e-4)
    assert overall["prog_answered"] == overall["prog"] and overall["coverage"] == 1.0
    assert (overall["pairs"], overall["positives"]) == (5, 3)


def test_uncertain_answers_count_as_wrong_and_the_answered_score_says_so():
    # labels 1 0 1 0; answers C B A C: forced predictions 0 0 1 1 -> TPR 1/2, TNR 1/2 = 0.5;
    # over the A/B answers only (pairs 2, 3: labels 0 1, predicted 0 1) it is 1.0, on half the pairs.
    overall = fc.evaluate([judged("s1", "CBAC", [1, 0, 1, 0])], ["captions"])["rows"]["cap-a"]["overall"]
    assert overall["prog"] == 0.5
    assert overall["prog_answered"] == 1.0
    assert (overall["coverage"], overall["uncertain"], overall["pairs_missing"]) == (0.5, 2, 0)


def test_a_pair_the_judge_never_answered_counts_as_wrong():
    record = judged("s1", "AB", [1, 0, 1])  # 3 labelled pairs, only 2 judged
    record["frames"].append({"time": 3.0, "path": "3.png"})
    overall = fc.evaluate([record], ["captions"])["rows"]["cap-a"]["overall"]
    assert (overall["pairs"], overall["pairs_missing"], overall["uncertain"]) == (3, 1, 0)
    assert overall["prog"] == pytest.approx((1 / 2 + 1) / 2)  # positives: 1 right of 2; negative right


def test_judges_vote_per_captioner_and_a_tie_is_uncertain():
    record = judged("s1", "AA", [1, 1], judges={"j1": "AA", "j2": "AB", "j3": "AB"})  # pair 2: B wins 2-1
    assert fc.predicted_changes(record, "captions") == {0: True, 1: False}
    tie = judged("s2", "A", [1], judges={"j1": "A", "j2": "B"})
    assert fc.predicted_changes(tie, "captions") == {0: None}


def test_caption_matching_is_sequence_level():
    records = [judged("good", "A", [1]), judged("rejected", "A", [1], verdict="rejected"),
               judged("neither", "A", [1], verdict="neither")]
    all_correct = judged("no-verdict", "A", [1])
    del all_correct["matching"]["captions"]["verdict"]  # all frames correct counts as good
    one_wrong = judged("one-wrong", "AB", [1, 0])
    del one_wrong["matching"]["captions"]["verdict"]
    one_wrong["matching"]["captions"]["frames"][2]["correct"] = False
    subset = judged("distinct-only", "BB", [0, 0])  # matched after progression: only the distinct frame 0
    subset["matching"]["captions"]["frames"] = subset["matching"]["captions"]["frames"][:1]
    overall = fc.evaluate([*records, all_correct, one_wrong, subset], ["captions"])["rows"]["cap-a"]["overall"]
    assert (overall["cap"], overall["cap_sequences"], overall["matching_subset"]) == (0.4, 5, 1)


def test_scores_per_source_and_overall_in_table_order():
    records = [judged("COIN/1", "A", [1], source="COIN", verdict="rejected"),
               judged("x", "B", [1], source="howtochange"),
               judged("PennAction/7", "A", [1]),  # the source from a FrameCapEval id
               judged("Kinetics/2", "B", [0]),
               judged("elsewhere", "A", [1])]
    row = fc.evaluate(records, ["captions"])["rows"]["cap-a"]
    assert list(row["per_source"]) == ["HTC", "COIN", "Penn&K", "unknown"]
    assert row["per_source"]["COIN"]["cap"] == 0.0 and row["per_source"]["HTC"]["cap"] == 1.0
    assert row["per_source"]["HTC"]["prog"] == 0.0  # label 1, answered B
    assert row["per_source"]["Penn&K"]["sequences"] == 2 and row["per_source"]["Penn&K"]["prog"] == 1.0
    assert row["overall"]["sequences"] == 5 and row["overall"]["cap"] == 0.8


def test_rows_per_captioning_model():
    a, b = judged("s1", "A", [1], model="model-a"), judged("s1", "B", [1], model="model-b", field="captions_b")
    record = {**a, "captions_b": b["captions_b"],
              "progression": {**a["progression"], "captioners": ["captions", "captions_b"],
                              "pairs": [{**a["progression"]["pairs"][0],
                                         "answers": {"captions": {"j1": "A"}, "captions_b": {"j1": "B"}}}]},
              "matching": {**a["matching"], **b["matching"]}}
    rows = fc.evaluate([record], ["captions", "captions_b"])["rows"]
    assert rows["model-a"]["overall"]["prog"] == 1.0 and rows["model-b"]["overall"]["prog"] == 0.0
    sources, cells = fc.table_cells({"rows": rows})
    assert sources == ["unknown"] and cells[0] == ("model-a", ["100.0", "100.0", "100.0", "100.0"])


def test_wrong_length_labels_name_the_record_expected_and_found():
    with pytest.raises(ValueError, match=r"record s1: 2 progression labels, expected 3 .*4 frames"):
        fc.evaluate([judged("s1", "AAB", [1, 0])], ["captions"])
    with pytest.raises(ValueError, match=r"label 2 is 'yes'"):
        fc.evaluate([judged("s1", "AB", [1, "yes"])], ["captions"])


def test_missing_progression_matching_or_labels_are_counted_not_fatal():
    no_prog = judged("p", "A", [1])
    del no_prog["progression"]
    pseudo = judged("q", "B", [1], prompt="pseudo")
    records = [no_prog, judged("m", "A", [1], verdict=None), judged("l", "A"), pseudo,
               {"id": "broken", "errors": [{"stage": "caption-frames", "kind": "x", "message": "y"}]}]
    result = fc.evaluate(records, ["captions"])
    overall = result["rows"]["cap-a"]["overall"]
    assert (overall["prog_missing"], overall["cap_missing"], overall["labels_missing"]) == (1, 1, 0 + 1)
    assert overall["pseudo_prompt"] == 1 and overall["pairs"] == 1  # only record m is scored for Prog
    assert (overall["cap"], overall["cap_sequences"]) == (1.0, 3)
    assert result["records_with_errors"] == 1 and result["records"] == 4


def test_labels_files_jsonl_and_the_release_format(tmp_path):
    records = [judged("COIN/0004", "AB", None), {**judged("seq-9", "BB", None), "idx": "0009", "source": "HTC"}]
    jsonl = tmp_path / "labels.jsonl"
    jsonl.write_text('{"id": "COIN/0004", "labels": [1, 0]}\n{"id": "HTC/0009", "labels": [true, false]}\n')
    release = tmp_path / "coin_valhs_seq.json"
    release.write_text(json.dumps([{"idx": "0004", "action_label": "PrepareSumiInk", "n_frames": 3,
                                    "labels": [1, 0]}]))
    assert fc.read_labels(jsonl) == {"COIN/0004": [1, 0], "HTC/0009": [1, 0]}
    assert fc.read_labels(release) == {"COIN/0004": [1, 0]}
    twins = tmp_path / "coin_twins.json"  # an idx given to two videos, as the release does: vi frames' ids
    twins.write_text(json.dumps([{"idx": "0070", "image_files": [f"coin/{v}/frame001.png"], "labels": [k]}
                                 for k, v in enumerate(["uMM0lRfX6YI", "7l6ts1YwnfU"])]
                                + [{"idx": "0071", "source": "HTC", "image_files": ["htc/x/f.png"], "labels": [1]}]))
    assert fc.read_labels(twins) == {"COIN/0070/uMM0lRfX6YI": [0], "COIN/0070/7l6ts1YwnfU": [1], "HTC/0071": [1]}
    result = fc.evaluate(records, ["captions"], fc.read_labels(jsonl))
    assert result["rows"]["cap-a"]["per_source"]["HTC"]["prog"] == 0.5  # label 1 0, answered B B
    assert result["rows"]["cap-a"]["per_source"]["COIN"]["prog"] == 1.0 and result["labels_unused"] == 0
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "labels": [1]}\n{"labels": [1]}\n')
    with pytest.raises(ValueError, match="bad.jsonl:2"):
        fc.read_labels(bad)


def test_the_command_prints_json_and_the_table(tmp_path):
    pred = tmp_path / "pred.jsonl"
    pred.write_text("\n".join(json.dumps(r) for r in [judged("COIN/1", "AB", [1, 0], source="COIN"),
                                                       judged("HTC/1", "BB", [1, 0], source="HTC")]) + "\n")
    done = run_vi("eval", "framecap", "--pred", str(pred), check=True, env={"COLUMNS": "200"})
    result = json.loads(done.stdout)
    assert result["rows"]["cap-a"]["per_source"]["COIN"]["prog"] == 1.0
    assert result["rows"]["cap-a"]["overall"]["prog"] == 0.75
    assert "HTC" in done.stderr and "Prog" in done.stderr and "GPT-4o (paper)" in done.stderr
    labels = tmp_path / "labels.jsonl"
    labels.write_text('{"id": "COIN/1", "labels": [1]}\n')
    done = run_vi("eval", "framecap", "--labels", str(labels), stdin=pred.read_text())
    assert done.returncode == 2 and done.stdout == ""
    assert "record COIN/1: 1 progression labels, expected 2" in done.stderr
