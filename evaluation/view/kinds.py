"""What `vi view` shows of one record: its kind, recognised by its fields, as a list of blocks.

The page's script draws a small vocabulary of blocks, so everything a kind means is decided
here, in pure functions that tests can call:
- `frames`: a row of pictures, each with a heading, lines of (who, text) and a highlight;
- `table`: a header and rows of text cells (a row may carry a class: kept, dropped, ...);
- `text`: a labelled paragraph;  `kv`: short facts on one line;  `errors`: the record's errors;
- `legend`: what the letters and words of a block mean (term, meaning) pairs; the page's text filter
  skips it, since every record of a kind carries the same legend.
Every string is drawn as text by the page (never as HTML), so record content cannot inject markup.

Kinds, first match wins (a record with errors keeps its kind, and its errors are shown first):
- generated: ShowHowTo generator output (`generated`): scene, prompts, generated frames, source strip;
- captions: ProgressCaptioner (`captions*`, `progression`, `matching`, `keyframes`) over `frames`;
- pair: StepDiff (`reference` + `candidate`, with `qa` from vi pair-qa);
- clip: one StepDiff clip (`video`, `start`, `end`; its `description` from vi describe);
- steps: ShowHowTo data (`steps.items`, with `frame` from vi align-frames) beside the transcript;
- transcript: vi transcribe's output (and vi filter-instructional's label), line by line;
- other: whatever else, its fields collapsed (always there under "record").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vi.evaluation.view.thumbs import STRIP_BOX, Thumbnails

Record = dict[str, Any]


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _t(value: Any) -> str:
    number = _num(value)
    return "" if number is None else f"{number:.1f}s"


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else str(value)


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def kv(*pairs: tuple[str, Any]) -> dict:
    return {"t": "kv", "items": [[k, _text(v)] for k, v in pairs if v not in (None, "", [], {})]}


def text(label: str, value: Any) -> dict:
    return {"t": "text", "label": label, "text": _text(value)}


def table(label: str, head: list[str], rows: list[list[Any]], classes: list[str] | None = None) -> dict:
    return {"t": "table", "label": label, "head": head, "rows": [[_text(c) for c in row] for row in rows],
            **({"classes": classes} if classes else {})}


def legend(label: str, items: list[tuple[str, str]]) -> dict:
    return {"t": "legend", "label": label, "items": [[term, meaning] for term, meaning in items]}


def _compact(value: Any, width: int = 120) -> str:
    """A value of a field the view does not know, on one line: a string as it is, else its JSON."""
    import json

    shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return shown if len(shown) <= width else shown[:width - 1] + "…"


def frame(picture, head: str, lines: list[tuple[str, Any]] = (), mark: str | None = None) -> dict:
    item = {**picture.as_json(), "head": head, "lines": [[who, _text(t)] for who, t in lines if _text(t)]}
    if mark:
        item["mark"] = mark
    return item


def frames(label: str, items: list[dict], wide: bool = False) -> dict:
    return {"t": "frames", "label": label, "items": items, **({"wide": True} if wide else {})}


def caption_fields(record: Record) -> list[str]:
    return [k for k, v in record.items() if (k == "captions" or k.startswith("captions_"))
            and isinstance(v, dict) and isinstance(v.get("items"), list)]


def recognise(record: Record) -> str:
    if isinstance(record.get("generated"), dict):
        return "generated"
    if caption_fields(record) or any(isinstance(record.get(k), (dict, list)) and record.get(k)
                                     for k in ("progression", "matching", "keyframes")):
        return "captions"
    if isinstance(record.get("reference"), dict) and isinstance(record.get("candidate"), dict):
        return "pair"
    if isinstance(record.get("steps"), dict) and isinstance(record["steps"].get("items"), list):
        return "steps"
    if isinstance(record.get("video"), str) and _num(record.get("start")) is not None \
            and _num(record.get("end")) is not None:
        return "clip"
    if isinstance(record.get("transcript"), dict) and isinstance(record["transcript"].get("segments"), list):
        return "transcript"
    return "other"


def title_of(record: Record, kind: str) -> str:
    for value in (_dict(record.get("steps")).get("title"), record.get("title"), record.get("keystep"),
                  record.get("action"), record.get("action_label")):
        if isinstance(value, str) and value.strip():
            return value.strip()
    return ""


def _span(value: Any) -> tuple[int, int] | None:
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) and not isinstance(v, bool)
                                                           for v in value) and 0 <= value[0] <= value[1]:
        return value[0], value[1]
    return None


# --- ShowHowTo data --------------------------------------------------------------------------

def steps_blocks(record: Record, thumbs: Thumbnails, roots: list[Path]) -> list[dict]:
    steps = record["steps"]
    items = [i for i in steps["items"] if isinstance(i, dict)]
    row = []
    for n, item in enumerate(items, 1):
        found = _dict(item.get("frame"))
        if found.get("path"):
            picture = thumbs.image(found["path"], roots)
        elif found:
            picture = thumbs.video_frame(record.get("video"), found.get("time"), roots)
        else:
            picture = thumbs.image(None)
            picture.missing = "no frame aligned"
        score = _num(found.get("score"))
        head = f"step {n} · frame at {_t(found.get('time'))}" if found else f"step {n}"
        row.append(frame(picture, head, [("", item.get("text")),
                                          ("score", None if score is None else f"{score:.3f}")]))
    blocks = [kv(("video", record.get("video")), ("duration", _t(record.get("duration"))),
                 ("steps by", steps.get("model")), ("frames by", _dict(record.get("alignment")).get("model")),
                 ("instructional", _dict(record.get("instructional")).get("label"))),
              frames("steps and their frames", row)]
    # `lines` is [first, last]: indices into transcript.segments, from 0 (docs/records.md). The view
    # shows the same numbers, as "segment N", so a number read here is `transcript.segments[N]`.
    spans = [_span(item.get("lines")) for item in items]
    cited: dict[int, list[str]] = {}
    for n, span in enumerate(spans, 1):
        for k in range(span[0], span[1] + 1) if span else ():
            cited.setdefault(k, []).append(str(n))
    step_rows = [[n, f"{_t(i.get('start'))}–{_t(i.get('end'))}", i.get("text"),
                  "" if span is None else str(span[0]) if span[0] == span[1] else f"{span[0]}–{span[1]}"]
                 for n, (i, span) in enumerate(zip(items, spans), 1)]
    blocks.append(table("steps", ["#", "time", "step", "segments"], step_rows))
    blocks += transcript_table(record, cited)
    blocks.append(legend("numbering", [("segment N", "transcript.segments[N], counted from 0: the numbers of "
                                                     "the steps' `lines` and of the repairs")]))
    if steps.get("repairs"):
        blocks.append(table("repairs to the LLM's reply", ["repair"], [[r] for r in _list(steps["repairs"])]))
    return blocks


def transcript_table(record: Record, cited: dict[int, list[str]] | None = None) -> list[dict]:
    raw = _list(_dict(record.get("transcript")).get("segments"))
    # numbered as records number them: index k of transcript.segments (steps' `lines`, `line_labels`),
    # a segment that is not an object keeping its number
    segments = [(k, s) for k, s in enumerate(raw) if isinstance(s, dict)]
    if not segments:
        return []
    rows = [[k, f"{_t(s.get('start'))}–{_t(s.get('end'))}", s.get("text")] for k, s in segments]
    if cited is None:
        return [table("transcript", ["segment", "time", "said"], rows)]
    labels = _list(_dict(record.get("steps")).get("line_labels"))  # the label pass's, one per segment
    head = ["segment", "time", "said", "step"] + (["label"] if labels else [])
    rows = [[*row, ", ".join(cited.get(k, [])), *([labels[k] if k < len(labels) else None] if labels else [])]
            for (k, _), row in zip(segments, rows)]
    return [table("transcript", head, rows, ["cited" if r[3] else "" for r in rows])]


def transcript_blocks(record: Record, thumbs: Thumbnails, roots: list[Path]) -> list[dict]:
    transcript, label = record["transcript"], _dict(record.get("instructional"))
    return [kv(("video", record.get("video")), ("duration", _t(record.get("duration"))),
               ("transcribed by", transcript.get("model")), ("language", transcript.get("language")),
               ("instructional", label.get("label")), ("why", label.get("reason")),
               ("decided by", _dict(label.get("decision")).get("method"))),
            *transcript_table(record)]


# --- StepDiff ----------------------------------------------------------------------------------

def clip_frames(clip: Record, thumbs: Thumbnails, roots: list[Path], count: int = 3) -> list[dict]:
    start, end = _num(clip.get("start")), _num(clip.get("end"))
    if start is None or end is None or end < start:
        return [frame(thumbs.image(None), "no clip times")]
    times = [start + (end - start) * (k + 0.5) / count for k in range(count)]
    return [frame(thumbs.video_frame(clip.get("video"), round(t, 2), roots), _t(t)) for t in times]


def clip_text_blocks(clip: Record, who: str) -> list[dict]:
    description = clip.get("description")
    d = _dict(description)
    objects = ", ".join(f"{o.get('name')}" + (f" ({_num(o.get('score')):.2f})" if _num(o.get('score')) is not None
                                               else "") for o in _list(d.get("objects")) if isinstance(o, dict))
    return [kv((f"{who}", clip.get("id")), ("video", clip.get("video")),
               ("time", f"{_t(clip.get('start'))}–{_t(clip.get('end'))}"), ("keystep", clip.get("keystep"))),
            text("description", d.get("step") if d else description),
            *([text("action", d["action"])] if d.get("action") else []),
            *([text("objects", objects)] if objects else []),
            *([text("narration", clip.get("narration"))] if clip.get("narration") else [])]


def clip_blocks(record: Record, thumbs: Thumbnails, roots: list[Path]) -> list[dict]:
    return [frames("key frames", clip_frames(record, thumbs, roots)), *clip_text_blocks(record, "clip")]


def pair_blocks(record: Record, thumbs: Thumbnails, roots: list[Path]) -> list[dict]:
    ref, cand = record["reference"], record["candidate"]
    blocks = [kv(("keystep", record.get("keystep")), ("similarity", record.get("similarity"))),
              {"t": "columns", "columns": [
                  [frames("Video 1 (reference)", clip_frames(ref, thumbs, roots)), *clip_text_blocks(ref, "clip")],
                  [frames("Video 2 (candidate)", clip_frames(cand, thumbs, roots)), *clip_text_blocks(cand, "clip")]]}]
    stats = _dict(record.get("qa_stats"))
    rows, classes = [], []
    for qa in _list(record.get("qa")):
        if isinstance(qa, dict):
            rows.append([qa.get("type"), qa.get("q"), qa.get("a"), "kept"])
            classes.append("kept")
    for qa in _list(stats.get("dropped_items")):
        if isinstance(qa, dict):
            rows.append([qa.get("type"), qa.get("q"), qa.get("a"), f"dropped: {qa.get('reason')}"])
            classes.append("dropped")
    if "qa" in record:
        blocks.append(table("question-answer pairs", ["type", "question", "answer", "filter"], rows, classes))
        counts = [v for v in _dict(stats.get("generated")).values() if isinstance(v, int)]
        dropped = ", ".join(f"{k} {v}" for k, v in _dict(stats.get("dropped")).items())
        blocks.append(kv(("QA by", stats.get("model")), ("generated", sum(counts) if counts else None),
                         ("kept", len(_list(record.get("qa")))), ("dropped", dropped)))
    return blocks


# --- ProgressCaptioner -----------------------------------------------------------------------

def _first_captions(field: dict) -> dict[int, str]:
    out: dict[int, str] = {}
    for item in _list(field.get("items")):
        if isinstance(item, dict) and isinstance(item.get("frame"), int):
            out.setdefault(item["frame"], _text(item.get("text")))  # a frame's first item is its caption
    return out


def _count_frames(record: Record, captions: dict[str, dict[int, str]]) -> int:
    listed = len(_list(record.get("frames")))
    seen = [i for c in captions.values() for i in c] + [k.get("index") for k in _list(record.get("keyframes"))
                                                        if isinstance(k, dict) and isinstance(k.get("index"), int)]
    return max([listed, *[i + 1 for i in seen]])


def captions_blocks(record: Record, thumbs: Thumbnails, roots: list[Path]) -> list[dict]:
    fields = caption_fields(record)
    captions = {name: _first_captions(record[name]) for name in fields}
    # Each caption line is labelled by its field (short); the header says which model wrote each.
    models = "; ".join(f"{name}: {_text(record[name].get('model')) or '?'}" for name in fields)
    keyframes = {k["index"]: k for k in _list(record.get("keyframes")) if isinstance(k, dict)
                 and isinstance(k.get("index"), int)}
    progression = _dict(record.get("progression"))
    change_into = {p["frames"][1]: p for p in _list(progression.get("pairs"))
                   if isinstance(p, dict) and len(_list(p.get("frames"))) == 2 and isinstance(p["frames"][1], int)}
    matching = {name: {e.get("frame"): e for e in _list(_dict(m).get("frames")) if isinstance(e, dict)}
                for name, m in _dict(record.get("matching")).items()}
    listed = _list(record.get("frames"))
    row = []
    for i in range(_count_frames(record, captions)):
        info = _dict(listed[i]) if i < len(listed) else {}
        picture = thumbs.image(info.get("path"), roots) if info.get("path") else \
            thumbs.video_frame(record.get("video"), info.get("time"), roots)
        lines = [(name, captions[name].get(i)) for name in fields]
        if i in keyframes and keyframes[i].get("caption") and not fields:  # vi keyframes' own captions
            lines.append(("caption", keyframes[i]["caption"]))
        pair = change_into.get(i)
        if pair:
            changed = "progressed" if progression.get("prompt") == "eval" else "changed"
            verdict = {True: changed, False: "no change", None: "uncertain"}.get(pair.get("change"), "")
            lines.append(("from the frame before", f"{verdict} (consensus {_text(pair.get('consensus')) or '-'})"))
        for name, entries in matching.items():
            entry = entries.get(i)
            if entry:
                chose = entry.get("chosen")
                said = "its own caption" if entry.get("correct") else \
                    ("none of them" if chose is None else f"frame {chose}'s caption")
                lines.append((f"match [{name}]", f"{_text(entry.get('answer'))}: {said}"))
        head = f"frame {i}" + (f" · {_t(info.get('time'))}" if _num(info.get("time")) is not None else "")
        row.append(frame(picture, head, lines, mark="keyframe" if i in keyframes else None))
    blocks = [kv(("action", record.get("action") or record.get("action_label")), ("source", record.get("source")),
                 ("captioners", models),
                 ("keyframes", ", ".join(str(k) for k in sorted(keyframes)) if keyframes else None),
                 ("keyframes by", _dict(record.get("keyframes_method")).get("method")),
                 ("distinct frames", ", ".join(str(d) for d in _list(progression.get("distinct"))) or None)),
              frames("frames and captions", row)]
    if progression.get("pairs"):
        blocks += progression_blocks(progression)
    verdicts = [[name, _dict(m).get("verdict"), _dict(m).get("scorer")] for name, m in _dict(record.get("matching")).items()]
    if verdicts:
        blocks.append(table("caption matching", ["captioner", "verdict", "judge"], verdicts,
                            [_text(v[1]) for v in verdicts]))
        blocks.append(legend("what the verdicts mean", MATCH_VERDICTS))
    return blocks


# What each letter of vi judge progression's prompts means, in the paper's option order
# (pipelines/progresscaptioner/judge_progression.py; a test checks "change" against letter_to_change).
PROGRESSION_LETTERS = {
    "pseudo": [("A", "the images likely look similar (no significant change)", "change: no"),
               ("B", "there are noticeable changes between image 1 and image 2", "change: yes"),
               ("C", "it is not possible to tell from the captions", "change: ? (no label)")],
    "eval": [("A", "action progression: the action has advanced from image 1 to image 2", "change: yes"),
             ("B", "no action progression: the same action, maybe another viewpoint or hand position",
              "change: no"),
             ("C", "uncertain whether the action progressed", "change: ? (no label)")],
}
PROGRESSION_TERMS = [
    ("answers", "each captioner's caption pair, each judge's letter"),
    ("consensus", "the most frequent letter over every judge and captioner; a tie: none (-)"),
    ("change", "what the consensus letter says: yes, no, or ? when it is C or there is none"),
    ("captioner agrees", "yes when the captioner's own majority letter is the consensus and the consensus "
                         "is A or B; a 2-frame record's caption pair is chosen by vi captioner-data only "
                         "then (and when matching is right)"),
]
# vi judge match's sequence verdict and what vi captioner-data makes of it (judge_match.verdict)
MATCH_VERDICTS = [
    ("good", "every matched frame got its own caption; vi captioner-data takes the captions as the chosen "
             "sample (c+: SFT, and DPO's preferred side)"),
    ("rejected", "more than half of the matched frames got another frame's caption or none; vi "
                 "captioner-data takes them as the rejected sample (c-: DPO's other side)"),
    ("neither", "some frames got a wrong caption, but not more than half; vi captioner-data makes no "
                "sample of a 3-6 frame sequence that is neither (a 2-frame pair is chosen or rejected by "
                "progression and matching together)"),
    ("match [captioner] on a frame", "the judge's letter and whose caption it picked; the options are "
                                     "shuffled per frame, the last one is \"none of the above\""),
]
KNOWN_PAIR_FIELDS = ("frames", "answers", "consensus", "change", "passed")


def _answers(by_captioner: Any) -> str:
    """`answers` of one pair: captioner -> judge -> a letter (or whatever a judge recorded per order)."""
    return "; ".join(f"{cap}: " + ", ".join(f"{judge} {_compact(said, 60)}" for judge, said in _dict(by).items())
                     for cap, by in _dict(by_captioner).items())


def progression_blocks(progression: dict) -> list[dict]:
    prompt = _text(progression.get("prompt"))
    pairs = [p for p in _list(progression["pairs"]) if isinstance(p, dict)]
    # fields a judge may add to a pair (how the decision was made, letters per option order...): shown
    # as they are, one column, so a newer record still reads
    extra = [k for k in dict.fromkeys(k for p in pairs for k in p) if k not in KNOWN_PAIR_FIELDS]
    rows = []
    for p in pairs:
        passed = ", ".join(f"{c} {'yes' if ok else 'no'}" for c, ok in _dict(p.get("passed")).items())
        rows.append([" → ".join(str(f) for f in _list(p.get("frames"))), p.get("consensus"),
                     {True: "yes", False: "no"}.get(p.get("change"), "?"), _answers(p.get("answers")), passed,
                     *([("; ".join(f"{k}: {_compact(p[k])}" for k in extra if k in p))] if extra else [])])
    blocks = [table(f"progression ({prompt} prompt)",
                    ["frames", "consensus", "change", "answers", "captioner agrees", *(["how decided"] if extra else [])],
                    rows)]
    others = [(k, _compact(v)) for k, v in progression.items()
              if k not in ("prompt", "judges", "captioners", "pairs", "distinct", "action") and v not in (None, "", [], {})]
    if others:
        blocks.append(kv(*others))
    letters = PROGRESSION_LETTERS.get(prompt)
    if letters:
        blocks.append(legend(f"what the letters mean ({prompt} prompt, the paper's option order)",
                             [(letter, f"{means}; {change}") for letter, means, change in letters]
                             + PROGRESSION_TERMS))
    else:
        blocks.append(legend("what the letters mean", [("A, B, C", f"the options of the {prompt or 'unnamed'} "
                                                                   "prompt, as its file defines them")]
                             + PROGRESSION_TERMS))
    return blocks


# --- ShowHowTo generator ---------------------------------------------------------------------

def generated_blocks(record: Record, thumbs: Thumbnails, roots: list[Path]) -> list[dict]:
    made = record["generated"]
    prompts = [_text(p) for p in _list(record.get("prompts"))]
    row = [frame(thumbs.image(record.get("image"), roots), "input scene", [("", prompts[0] if prompts else "")])]
    for n, path in enumerate(_list(made.get("frames")), 1):
        row.append(frame(thumbs.image(path, roots), f"step {n}", [("", prompts[n] if n < len(prompts) else "")]))
    guidance = _dict(made.get("guidance"))
    blocks = [kv(("model", made.get("model")), ("seed", made.get("seed")), ("steps", made.get("steps")),
                 ("guidance", ", ".join(f"{k} {v}" for k, v in guidance.items()) or None),
                 ("video", record.get("video"))),
              frames("generated, one frame per step", row)]
    if made.get("strip"):
        blocks.append(frames("generated strip", [frame(thumbs.image(made["strip"], roots, STRIP_BOX), "")], wide=True))
    if record.get("source_strip"):
        blocks.append(frames("source sequence", [frame(thumbs.image(record["source_strip"], roots, STRIP_BOX), "")],
                             wide=True))
    return blocks


BUILDERS = {"steps": steps_blocks, "transcript": transcript_blocks, "pair": pair_blocks, "clip": clip_blocks, "captions": captions_blocks,
            "generated": generated_blocks}


def view_blocks(record: Record, kind: str, thumbs: Thumbnails, roots: list[Path]) -> list[dict]:
    blocks = []
    errors = [e for e in _list(record.get("errors"))]
    if errors:
        blocks.append({"t": "errors", "items": [
            {"stage": _text(_dict(e).get("stage")), "kind": _text(_dict(e).get("kind")),
             "message": _text(_dict(e).get("message")) if isinstance(e, dict) else _text(e)} for e in errors]})
    if "raw" in record and kind == "other" and errors:
        blocks.append(text("the line as read", record["raw"]))
    build = BUILDERS.get(kind)
    if build is not None:
        blocks += build(record, thumbs, roots)
    else:
        blocks.append(fields_block(record))
    return blocks


def fields_block(record: Record, width: int = 160) -> dict:
    """Any other record: each top-level field with a one-line preview (the page collapses it)."""
    import json

    items = []
    for key, value in record.items():
        if key == "errors":
            continue
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        items.append([key, shown if len(shown) <= width else shown[:width - 1] + "…"])
    return {"t": "fields", "items": items}


def search_text(record_id: str, title: str, blocks: list[dict], limit: int = 3000) -> str:
    """What the page's text filter looks in: the id, the title and every string the view shows."""
    parts = [record_id, title]

    def walk(value):
        if isinstance(value, dict) and value.get("t") == "legend":
            return  # the same on every record of a kind: it would match them all
        if isinstance(value, str):
            parts.append(value)
        elif isinstance(value, dict):
            for k, v in value.items():
                if k not in ("thumb", "href", "t"):
                    walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(blocks)
    return " ".join(p for p in parts if p).lower()[:limit]
