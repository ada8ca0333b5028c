"""StepDiff evaluation: the official numbers on the real DiffRank file, small DiffCap and DiffMCQ
files cross-checked against pycocoevalcap and numpy, every bad input, and DiffMCQ negatives."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest
from conftest import jsonl, run_vi, shared
from scipy.stats import kendalltau
from vi.evaluation.stepdiff import mcq_negatives as negatives
from vi.evaluation.stepdiff import metrics
from vi.evaluation.stepdiff.metrics import BenchmarkFileError, evaluate_files, parse_clip_id


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def diffrank() -> tuple[Path, list[dict]]:
    path = shared("stepdiff", "diffrank_dataset.jsonl")
    return path, [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def official_taus(predicted: list[list], rows: list[dict]) -> list[float]:
    return [kendalltau(p, row["scores"]).correlation for p, row in zip(predicted, rows)]


def same(a: float | None, b: float) -> bool:
    """Exact equality, with vi's null standing for the official NaN."""
    return (a is None and math.isnan(b)) or a == b


# --- the real DiffRank file ---------------------------------------------------------------

def test_real_diffrank_categories_and_clip_ids(diffrank):
    _, rows = diffrank
    assert len(rows) == 4080
    assert {row["category"] for row in rows} == set(metrics.KNOWN_CATEGORIES)
    clips = {row["reference"] for row in rows} | {t for row in rows for t in row["targets"]}
    parsed = [parse_clip_id(clip) for clip in clips]
    assert any("_" in video for video, _, _ in parsed)  # YouTube ids with `_` split from the right
    assert all(start < end for _, start, end in parsed)


def test_real_diffrank_random_and_constant_rows_match_scipy(diffrank, tmp_path):
    path, rows = diffrank
    rng = random.Random(7)
    predicted = [[rng.random() for _ in range(4)] for _ in rows]
    for i in range(0, len(rows), 9):
        predicted[i] = [0.25] * 4  # no ranking at all: scipy's tau is NaN
    for i in range(4, len(rows), 9):
        predicted[i] = [0.1, 0.1, 0.9, 0.9]  # partial ties: tau-b is defined
    taus = official_taus(predicted, rows)
    result = evaluate_files("diffrank", path, write_jsonl(tmp_path / "p.jsonl", [{"scores": p} for p in predicted]))
    assert math.isnan(np.mean(taus)) and result["ktau_official"] is None
    assert result["ktau"] == np.mean([0.0 if math.isnan(t) else t for t in taus])
    assert result["constant_pred_rows"] == len(range(0, len(rows), 9)) == sum(map(math.isnan, taus))
    assert result["constant_gt_rows"] == 0 and result["rows"] == 4080
    for category, values in result["per_category"].items():
        keep = [i for i, row in enumerate(rows) if row["category"] == category]
        assert values["rows"] == len(keep)
        assert values["ktau"] == np.mean([0.0 if math.isnan(taus[i]) else taus[i] for i in keep])
    assert sum(v["constant_pred_rows"] for v in result["per_category"].values()) == result["constant_pred_rows"]

    # The same predictions without the constant rows: vi's official value is scipy's mean, exactly.
    taus = [t for i, t in enumerate(taus) if i % 9]
    kept = [row for i, row in enumerate(rows) if i % 9]
    gt = write_jsonl(tmp_path / "gt.jsonl", kept)
    pred = write_jsonl(tmp_path / "p2.jsonl", [{"scores": p} for i, p in enumerate(predicted) if i % 9])
    result = evaluate_files("diffrank", gt, pred)
    assert result["ktau_official"] == np.mean(taus) == result["ktau"]
    assert result["constant_pred_rows"] == 0
    for category, values in result["per_category"].items():
        assert values["ktau_official"] == np.mean([t for t, row in zip(taus, kept) if row["category"] == category])


def test_real_diffrank_perfect_and_reversed(diffrank, tmp_path):
    path, rows = diffrank
    assert sum(len(set(row["scores"])) < 4 for row in rows) > 1000  # annotated ties: tau-b, not tau-a
    perfect = official_taus([row["scores"] for row in rows], rows)
    done = run_vi("eval", "diffrank", "--gt", str(path), "--pred",
                  str(write_jsonl(tmp_path / "perfect.jsonl", [{"scores": row["scores"]} for row in rows])))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["ktau_official"] == np.mean(perfect) == result["ktau"]
    assert result["ktau"] == pytest.approx(1.0)
    assert "Serving / Presentation" in done.stderr and "ktau" in done.stderr  # the table
    reversed_ = evaluate_files("diffrank", path, write_jsonl(
        tmp_path / "reversed.jsonl", [{"scores": [-s for s in row["scores"]]} for row in rows]))
    assert reversed_["ktau_official"] == pytest.approx(-result["ktau_official"], abs=1e-12)


# --- DiffCap and DiffMCQ on small files ---------------------------------------------------

CLIPS = ["vwDbNixns_4_66.35833_77.7176", "A2cOC62Ui3o_265_294", "-dSL1P7MUHw_122.79905_141.76286",
         "48pUN8U_Ekw_73.85349_96.37585", "UFxKtiyPiyY_108.395_121.399", "XWzqkXJGYpU_184.99244_204.5"]
CAPTIONS = [("Ingredients", ["the person chopped small red chili as opposed to long red chili",
                             "the person diced the whole chili rather than half of it"]),
            ("Technique", ["the rib eye was seasoned all around instead of just the top"]),
            ("Ingredients", ["uses a red bell pepper instead of a red chili pepper", "red pepper not chili"]),
            ("Tools/Equipment", ["a wooden spoon instead of a whisk"])]
GENERATED = ["the person chopped red chili instead of long chili", "the steak was seasoned on top",
             "", "a whisk instead of a spoon"]


def test_diffcap_matches_pycocoevalcap(tmp_path):
    from pycocoevalcap.bleu.bleu import Bleu
    from pycocoevalcap.cider.cider import Cider
    from pycocoevalcap.rouge.rouge import Rouge

    gt = write_jsonl(tmp_path / "gt.jsonl", [{"reference": CLIPS[i], "candidate": CLIPS[i + 1], "category": c,
                                              "text": t} for i, (c, t) in enumerate(CAPTIONS)])
    pred = write_jsonl(tmp_path / "pred.jsonl", [{"generated_text": g} for g in GENERATED])
    result = evaluate_files("diffcap", gt, pred)

    def direct(keep):  # the official script's calls
        hypothesis = {str(i): [GENERATED[k]] for i, k in enumerate(keep)}
        reference = {str(i): CAPTIONS[k][1] for i, k in enumerate(keep)}
        return {"bleu_1": Bleu().compute_score(reference, hypothesis)[0][0],
                "cider_d": Cider().compute_score(reference, hypothesis)[0],
                "rouge_l": Rouge().compute_score(reference, hypothesis)[0]}

    assert {k: result[k] for k in ("bleu_1", "cider_d", "rouge_l")} == direct([0, 1, 2, 3])
    assert result["bleu_1"] > 0 and result["cider_d"] > 0
    assert list(result["per_category"]) == ["Ingredients", "Tools/Equipment", "Technique"]
    ingredients = result["per_category"]["Ingredients"]
    assert ingredients == {"rows": 2, **direct([0, 2])}


def mcq_row(answer: int, category: str = "Technique") -> dict:
    options = [[CLIPS[k], CLIPS[(k + 1) % 6]] for k in range(4)]
    return {"difference": "seasoned all around", "category": category, "options": options,
            "answer": options[answer]}


def test_diffmcq_matches_numpy_and_ties_go_first(tmp_path):
    answers = [0, 1, 3, 2, 2]
    scores = [[0.5, 0.5, 0.1, 0.0],   # tie: argmax picks option 0, the answer
              [0.5, 0.5, 0.1, 0.0],   # tie: picks option 0, not the answer 1
              [0.1, 0.2, 0.3, 0.4],
              [3, 1, 2, 0],
              [0.0, 0.0, 0.0, 0.0]]   # all tied: option 0
    gt = write_jsonl(tmp_path / "gt.jsonl", [mcq_row(a, "Actions" if i < 2 else "Visuals")
                                             for i, a in enumerate(answers)])
    pred = write_jsonl(tmp_path / "pred.jsonl", [{"scores": s} for s in scores])
    result = evaluate_files("diffmcq", gt, pred)
    official = (np.array(scores).argmax(1) == np.array(answers)).mean()
    assert result["accuracy"] == official == 2 / 5
    assert result["tied_top_rows"] == 3
    assert result["per_category"]["Actions"] == {"rows": 2, "accuracy": 0.5, "tied_top_rows": 2}
    assert result["per_category"]["Visuals"]["accuracy"] == pytest.approx(1 / 3)


def test_diffmcq_without_numpy_is_numpy_on_ties_ints_floats_and_huge_ints():
    """diffmcq_metrics compares plain floats (a run imports no numpy): the same as the official numpy
    argmax on rows of ints, floats, both, infinities, -0.0, NaN, ties and ints past 2**53."""
    rng = random.Random(0)
    values = [0, 1, 2, -1, 0.5, 1.0, -0.0, 0.0, 2.0, float("inf"), float("-inf"), 2**53, 2**53 - 1, 1e300,
              float("nan")]
    huge = [2**53 + 1, 2**63 - 1, 2**63, 2**70, -(2**64)]
    matrices = [[[rng.choice(values) for _ in range(4)] for _ in range(rng.randint(1, 6))] for _ in range(2000)]
    matrices += [[[rng.choice([*values[:4], *huge]) for _ in range(4)] for _ in range(3)] for _ in range(300)]
    matrices += [[[2**53 + 1, 2**53, 0, 0], [0.5, 0, 0, 0]], [[2**63, 2**63 - 1, 0, 0]], [[3, 1, 2, 0]]]
    for scores in matrices:
        answers = [rng.randrange(4) for _ in scores]
        matrix = np.array(scores)
        tied = (matrix == matrix.max(1, keepdims=True)).sum(1) > 1
        official = {"accuracy": float((matrix.argmax(1) == np.array(answers)).mean()),
                    "tied_top_rows": int(tied.sum())}
        assert metrics.diffmcq_metrics(answers, scores) == official, scores


# --- bad input ----------------------------------------------------------------------------

def rank_row(**changes) -> dict:
    row = {"reference": CLIPS[0], "targets": CLIPS[1:5], "category": "Ingredients", "scores": [5, 2, 0, 3]}
    return {**row, **changes}


BAD_GT = [
    ("diffrank", '{"reference": ', "not JSON"),
    ("diffrank", "[1, 2, 3, 4]", "not a JSON object"),
    ("diffrank", {k: v for k, v in rank_row().items() if k != "scores"}, "missing field 'scores'"),
    ("diffrank", rank_row(scores=[5, 2, 0]), "'scores' has 3 entries"),
    ("diffrank", rank_row(scores=[5, 2, "high", 0]), "scores[2] is \"high\", not a number"),
    ("diffrank", rank_row(scores=[5, 2, True, 0]), "scores[2] is true, not a number"),
    ("diffrank", json.dumps(rank_row(scores=[1, 0.5, 2, 3])).replace("0.5", "NaN"), "scores[1] is NaN"),
    ("diffrank", rank_row(targets=CLIPS[1:4]), "'targets' has 3 entries"),
    ("diffrank", rank_row(targets=[CLIPS[1], CLIPS[2], "not-a-clip", CLIPS[3]]), "targets[2]: 'not-a-clip' is not"),
    ("diffrank", rank_row(reference="abc_12.5_3"), "reference: clip id 'abc_12.5_3' starts at 12.5 s"),
    ("diffrank", rank_row(category="Colour"), "unknown category 'Colour'"),
    ("diffmcq", {**mcq_row(0), "options": mcq_row(0)["options"][:3]}, "'options' has 3 entries"),
    ("diffmcq", {**mcq_row(0), "answer": [CLIPS[5], CLIPS[0]]}, "is not one of the options"),
    ("diffmcq", {**mcq_row(0), "options": [[CLIPS[0]], *mcq_row(0)["options"][1:]]}, "options[0] must be a pair"),
    ("diffcap", {"reference": CLIPS[0], "candidate": CLIPS[1], "category": "Actions", "text": []},
     "'text' must be a non-empty list"),
    ("diffcap", {"reference": CLIPS[0], "candidate": CLIPS[1], "category": "Actions"}, "missing field 'text'"),
]
GOOD_GT = {"diffrank": rank_row(), "diffmcq": mcq_row(1),
           "diffcap": {"reference": CLIPS[0], "candidate": CLIPS[1], "category": "Actions", "text": ["a b"]}}
GOOD_PRED = {"diffrank": {"scores": [1, 2, 3, 4]}, "diffmcq": {"scores": [1, 2, 3, 4]},
             "diffcap": {"generated_text": "a b"}}


@pytest.mark.parametrize(("task", "bad", "message"), BAD_GT, ids=[m for _, _, m in BAD_GT])
def test_bad_ground_truth_names_file_and_line(tmp_path, task, bad, message):
    gt = write_jsonl(tmp_path / "gt.jsonl", [GOOD_GT[task], "", bad, GOOD_GT[task]])  # line 3: blank lines count
    pred = write_jsonl(tmp_path / "pred.jsonl", [GOOD_PRED[task]] * 3)
    with pytest.raises(BenchmarkFileError) as caught:
        evaluate_files(task, gt, pred)
    assert f"{gt} line 3: " in str(caught.value) and message in str(caught.value)


BAD_PRED = [
    ("diffrank", {"score": [1, 2, 3, 4]}, "missing field 'scores'"),
    ("diffrank", {"scores": [1, 2, 3, 4, 5]}, "'scores' has 5 entries"),
    ("diffmcq", '{"scores": [1, 2, NaN, 4]}', "scores[2] is NaN"),
    ("diffmcq", "not json", "not JSON"),
    ("diffcap", {"generated_text": ["a list"]}, "'generated_text' must be a string"),
]


@pytest.mark.parametrize(("task", "bad", "message"), BAD_PRED, ids=[m for _, _, m in BAD_PRED])
def test_bad_predictions_name_file_and_line(tmp_path, task, bad, message):
    gt = write_jsonl(tmp_path / "gt.jsonl", [GOOD_GT[task]] * 3)
    pred = write_jsonl(tmp_path / "pred.jsonl", [GOOD_PRED[task], bad, GOOD_PRED[task]])
    with pytest.raises(BenchmarkFileError) as caught:
        evaluate_files(task, gt, pred)
    assert f"{pred} line 2: " in str(caught.value) and message in str(caught.value)


def test_prediction_count_must_match_and_unknown_categories_can_be_allowed(tmp_path):
    gt = write_jsonl(tmp_path / "gt.jsonl", [rank_row(), rank_row(category="Colour"), rank_row()])
    pred = write_jsonl(tmp_path / "pred.jsonl", [{"scores": [1, 2, 3, 4]}] * 2 + [""])
    with pytest.raises(BenchmarkFileError, match=r"has 2 predictions but .*gt.jsonl has 3 rows"):
        evaluate_files("diffrank", gt, pred, allow_unknown_categories=True)
    write_jsonl(pred, [{"scores": [1, 2, 3, 4]}, {"scores": [4, 3, 2, 1]}, {"scores": [0, 0, 0, 0]}])
    result = evaluate_files("diffrank", gt, pred, allow_unknown_categories=True)
    assert list(result["per_category"]) == ["Ingredients", "Colour"]
    assert result["per_category"]["Colour"]["ktau"] == kendalltau([4, 3, 2, 1], [5, 2, 0, 3]).correlation
    assert result["constant_pred_rows"] == 1 and result["ktau_official"] is None


@pytest.mark.parametrize(("text", "expected"), [
    ("vwDbNixns_4_66.35833_77.7176", ("vwDbNixns_4", 66.35833, 77.7176)),
    ("A2cOC62Ui3o_265_294", ("A2cOC62Ui3o", 265.0, 294.0)),
    ("_S2XKrkHT3k_117.10915_138.07669", ("_S2XKrkHT3k", 117.10915, 138.07669)),
])
def test_parse_clip_id(text, expected):
    assert parse_clip_id(text) == expected


@pytest.mark.parametrize("text", ["abc", "abc_1", "_1_2", "x_5_3", "x_3_3", "x_-1_3", "x_nan_3", "x_1_inf",
                                  "x y_1_2", 17])
def test_parse_clip_id_refuses(text):
    with pytest.raises(ValueError, match="clip id"):
        parse_clip_id(text)


# --- the CLI ------------------------------------------------------------------------------

def test_cli_scores_and_refuses(tmp_path):
    gt = write_jsonl(tmp_path / "gt.jsonl", [mcq_row(1), mcq_row(2, "Actions")])
    pred = write_jsonl(tmp_path / "pred.jsonl", [{"scores": [0, 1, 0, 0]}, {"scores": [1, 0, 0, 0]}])
    done = run_vi("eval", "diffmcq", "--gt", str(gt), "--pred", str(pred))
    assert done.returncode == 0, done.stderr
    assert jsonl(done.stdout) == [{"task": "diffmcq", "rows": 2, "accuracy": 0.5, "tied_top_rows": 0, "per_category": {
        "Technique": {"rows": 1, "accuracy": 1.0, "tied_top_rows": 0},
        "Actions": {"rows": 1, "accuracy": 0.0, "tied_top_rows": 0}}}]

    write_jsonl(pred, [{"scores": [0, 1, 0, 0]}])
    done = run_vi("eval", "diffmcq", "--gt", str(gt), "--pred", str(pred))
    assert done.returncode == 2 and done.stdout == ""
    assert "has 1 predictions but" in done.stderr and "has 2 rows" in done.stderr
    done = run_vi("eval", "diffrank", "--gt", str(gt), "--pred", str(pred))  # a DiffMCQ file is not DiffRank
    assert done.returncode == 2 and "line 1: missing field 'reference'" in done.stderr
    done = run_vi("eval", "diffcap", "--gt", str(gt), "--pred", str(tmp_path / "absent.jsonl"))
    assert done.returncode == 2 and done.stdout == ""


# --- DiffMCQ negatives --------------------------------------------------------------------

ANGLES = {"A": 0, "B": 0, "C": 10, "L": 20, "D": 15, "E": 15, "F": 30, "G": 30, "H": 45, "I": 45,
          "J": 60, "K": 60, "M": 90, "N": 90}  # degrees: a pair's mean embedding is easy to place


def clip(name: str) -> str:
    return f"{name}xYz_4_{ANGLES[name]}.5_99"


def clip_features() -> dict[str, np.ndarray]:
    return {clip(n): np.array([math.cos(math.radians(a)), math.sin(math.radians(a))]) for n, a in ANGLES.items()}


ONION = "red onion instead of white onion"
ANNOTATIONS = [  # (reference, candidate, category, captions); P = the pair's distance rank from (A, B)
    ("A", "B", "Ingredients", [ONION, "diced onion not sliced"]),  # the positive of the tests
    ("A", "C", "Ingredients", ["butter instead of oil"]),           # 1st nearest, shares A
    ("A", "D", "Ingredients", ["onion, red not white"]),            # 2nd, shares A, says ONION again
    ("B", "L", "Actions", ["stirs instead of shakes"]),             # 3rd, shares B
    ("D", "E", "Ingredients", ["a red onion rather than a white one"]),  # 4th, says ONION again
    ("F", "G", "Ingredients", ["garlic instead of ginger"]),        # 5th
    ("H", "I", "Visuals", [ONION]),                                 # 6th: ONION, but as a visual difference
    ("J", "K", "Technique", ["fried not boiled"]),                  # 7th
    ("M", "N", "Actions", ["pours slowly"]),                        # 8th
    ("B", "A", "Visuals", ["the bowl is blue rather than red"]),    # the positive pair again, reversed
]
SIMILAR = {"onion, red not white": 0.85, "a red onion rather than a white one": 0.9}  # cosine to ONION


def fake_embed(texts: list[str]) -> np.ndarray:
    """One axis per distinct text, except the look-alikes of ONION, which lean towards its axis."""
    names = [ONION, *sorted({c for *_, caps in ANNOTATIONS for c in caps} - {ONION})]
    out = np.zeros((len(texts), len(names)))
    for row, text in enumerate(texts):
        cos = SIMILAR.get(text)
        out[row, names.index(text)] = 1.0 if cos is None else math.sqrt(1 - cos**2)
        out[row, 0] += cos or 0.0
    return out * 3.0  # not unit length: build_instances normalises


def annotations() -> list[negatives.Annotation]:
    return [negatives.Annotation(clip(r), clip(c), cat, tuple(caps), line)
            for line, (r, c, cat, caps) in enumerate(ANNOTATIONS, start=1)]


def options_of(rows: list[dict], caption: str, category: str = "Ingredients") -> tuple[set, list]:
    (row,) = [r for r in rows if r["difference"] == caption and r["category"] == category]
    metrics.check_diffmcq_row(row)  # an official DiffMCQ row
    index = row["options"].index(row["answer"])
    assert [o for o in row["options"] if set(o) == set(row["answer"])] == [row["answer"]]
    negative = [o for k, o in enumerate(row["options"]) if k != index]
    return {frozenset(o) for o in negative}, row["answer"]


def pairs(*names: str) -> set:
    return {frozenset((clip(a), clip(b))) for a, b in names}


@pytest.mark.parametrize(("variant", "caption", "expected"), [
    ("v1", ONION, ("FG", "HI", "JK")),                # DE says the same: refused; HI says it as a visual
    ("v1", "diced onion not sliced", ("DE", "FG", "HI")),
    ("v2", ONION, ("AC", "BL", "FG")),                # AD and DE say the same
    ("v2", "diced onion not sliced", ("AC", "AD", "BL")),
])
def test_visual_negatives_nearest_allowed_first(variant, caption, expected):
    rows, short = negatives.build_instances(annotations(), variant, fake_embed, clip_features(), seed=5)
    assert short == [] and len(rows) == sum(len(caps) for *_, caps in ANNOTATIONS)
    found, answer = options_of(rows, caption)
    assert answer == [clip("A"), clip("B")] and found == pairs(*expected)
    for row in rows:  # never the positive, reversed or not; v1 never shares a clip with it
        options = {frozenset(o) for o in row["options"]}
        assert len(options) == 4 and frozenset(row["answer"]) in options
        if variant == "v1":
            assert all(not set(o) & set(row["answer"]) for o in options - {frozenset(row["answer"])})


def test_similarity_threshold_and_shortage():
    rows, _ = negatives.build_instances(annotations(), "v1", fake_embed, clip_features(), threshold=0.95)
    assert options_of(rows, ONION)[0] == pairs("DE", "FG", "HI")  # 0.9 is not above 0.95
    few = annotations()[:2] + annotations()[4:6]  # AB, AC, DE, FG
    rows, short = negatives.build_instances(few, "v1", fake_embed, clip_features())
    assert [row["answer"] for row in rows] == [[clip("F"), clip("G")]]
    assert short == ["annotations line 1 caption 0: only 1 of 3 negatives (v1)",  # DE refused, AC shares
                     "annotations line 1 caption 1: only 2 of 3 negatives (v1)",
                     "annotations line 2 caption 0: only 2 of 3 negatives (v1)",
                     "annotations line 5 caption 0: only 2 of 3 negatives (v1)"]  # AB refused: it says ONION


def test_random_negatives_keep_the_reference():
    seen = set()
    for seed in range(30):
        rows, short = negatives.build_instances(annotations(), "v3", fake_embed, seed=seed)
        assert short == []
        found, _ = options_of(rows, ONION)
        assert all(clip("A") in pair and clip("B") not in pair for pair in found)
        seen |= {c for pair in found for c in pair} - {clip("A")}
    # D is refused (A, D says the same thing); every other clip but the answer's turns up
    assert seen == {clip(n) for n in ANGLES} - {clip("A"), clip("B"), clip("D")}


@pytest.mark.parametrize("variant", negatives.VARIANTS)
def test_negatives_are_deterministic_per_seed(variant):
    def build(seed):
        return negatives.build_instances(annotations(), variant, fake_embed, clip_features(), seed=seed)[0]

    assert build(3) == build(3)
    assert build(3) != build(4)  # the option order (and v3's draws) follow the seed
    first, *rest = annotations()
    reordered = negatives.build_instances([*rest[:6][::-1], first, *rest[6:]], variant, fake_embed, clip_features(),
                                          seed=3)[0]
    assert sorted(map(json.dumps, reordered)) == sorted(map(json.dumps, build(3)))  # an instance is its own


def test_clip_features_files_and_their_errors(tmp_path):
    features = clip_features()
    as_jsonl = write_jsonl(tmp_path / "f.jsonl", [{"id": k, "embedding": v.tolist()} for k, v in features.items()])
    np.savez(tmp_path / "f.npz", id=np.array(list(features)), embedding=np.stack(list(features.values())))
    for path in (as_jsonl, tmp_path / "f.npz"):
        loaded = negatives.read_clip_features(path)
        assert list(loaded) == list(features) and all((loaded[k] == v).all() for k, v in features.items())
    write_jsonl(as_jsonl, [{"id": clip("A"), "embedding": [1, 0]}, {"id": clip("B"), "embedding": [1, 0, 0]}])
    with pytest.raises(BenchmarkFileError, match=r"f.jsonl line 2: the embedding of .* same length"):
        negatives.read_clip_features(as_jsonl)
    partial = {k: v for k, v in features.items() if k != clip("G")}
    with pytest.raises(BenchmarkFileError, match=r"annotations line 6: clip 'GxYz_4_30.5_99' has no visual"):
        negatives.build_instances(annotations(), "v2", fake_embed, partial)
    with pytest.raises(ValueError, match="--clip-features"):
        negatives.build_instances(annotations(), "v1", fake_embed)


@pytest.mark.slow
def test_cli_mcq_negatives_with_minilm(tmp_path):
    """End to end with the real embedded sentence model: a paraphrase of the caption is refused."""
    texts = {ONION: "The person chops a red onion instead of a white onion.",
             "a red onion rather than a white one": "The person is chopping a red onion rather than a white one.",
             "garlic instead of ginger": "They stir with a wooden spoon instead of a whisk."}
    rows = [{"reference": clip(r), "candidate": clip(c), "category": cat, "text": [texts.get(t, t) for t in caps]}
            for r, c, cat, caps in ANNOTATIONS]
    ann = write_jsonl(tmp_path / "ann.jsonl", rows)
    feats = write_jsonl(tmp_path / "clips.jsonl", [{"id": k, "embedding": v.tolist()}
                                                   for k, v in clip_features().items()])
    done = run_vi("eval", "mcq-negatives", "-i", str(ann), "--variant", "v2")
    assert done.returncode == 2 and "--clip-features" in done.stderr
    args = ["eval", "mcq-negatives", "-i", str(ann), "--variant", "v1", "--clip-features", str(feats),
            "--text-model", "minilm-l6", "--seed", "2", "--device", "cpu"]
    done = run_vi(*args)
    assert done.returncode == 0, done.stderr
    out = jsonl(done.stdout)
    assert len(out) == 11 and "11 v1 instances from 11 captions" in done.stderr
    assert options_of(out, texts[ONION])[0] == pairs("FG", "HI", "JK")  # DE's paraphrase is refused
    assert options_of(out, "diced onion not sliced")[0] == pairs("DE", "FG", "HI")
