"""What `vi view` shows of one record: its kind, recognised by its fields, as a list of blocks.

The page's script draws a small vocabulary of blocks, so everything a kind means is decided
here, in pure functions that tests can call:
- `frames`: a row of pictures, each with a heading, lines of (who, text) and a highlight;
- `table`: a header and rows of text cells (a row may carry a class: kept, dropped, ...);
- `text`: a labelled paragraph;  `kv`: short facts on one line;  `errors`: the record's errors.
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
    # `lines` is [first, last]: 0-based indices into transcript.segments (vi extract-steps);
    # shown 1-based, as the transcript table numbers its lines.
    spans = [_span(item.get("lines")) for item in items]
    cited: dict[int, list[str]] = {}
    for n, span in enumerate(spans, 1):
        for k in range(span[0], span[1] + 1) if span else ():
            cited.setdefault(k, []).append(str(n))
    step_rows = [[n, f"{_t(i.get('start'))}–{_t(i.get('end'))}", i.get("text"),
                  "" if span is None else str(span[0] + 1) if span[0] == span[1] else f"{span[0] + 1}–{span[1] + 1}"]
                 for n, (i, span) in enumerate(zip(items, spans), 1)]
    blocks.append(table("steps", ["#", "time", "step", "transcript lines"], step_rows))
    blocks += transcript_table(record, cited)
    if steps.get("repairs"):
        blocks.append(table("repairs to the LLM's reply", ["repair"], [[r] for r in _list(steps["repairs"])]))
    return blocks


def transcript_table(record: Record, cited: dict[int, list[str]] | None = None) -> list[dict]:
    segments = [s for s in _list(_dict(record.get("transcript")).get("segments")) if isinstance(s, dict)]
    if not segments:
        return []
    rows = [[k + 1, f"{_t(s.get('start'))}–{_t(s.get('end'))}", s.get("text")] for k, s in enumerate(segments)]
    if cited is None:
        return [table("transcript", ["line", "time", "said"], rows)]
    rows = [[*row, ", ".join(cited.get(k, []))] for k, row in enumerate(rows)]
    return [table("transcript", ["line", "time", "said", "step"], rows, ["cited" if r[3] else "" for r in rows])]


def transcript_blocks(record: Record, thumbs: Thumbnails, roots: list[Path]) -> list[dict]:
    transcript, label = record["transcript"], _dict(record.get("instructional"))
    return [kv(("video", record.get("video")), ("duration", _t(record.get("duration"))),
               ("transcribed by", transcript.get("model")), ("language", transcript.get("language")),
               ("instructional", label.get("label")), ("why", label.get("reason"))),
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
            verdict = {True: "progressed", False: "no change", None: "uncertain"}.get(pair.get("change"), "")
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
        rows = []
        for p in _list(progression["pairs"]):
            if not isinstance(p, dict):
                continue
            answers = "; ".join(f"{cap}: " + ", ".join(f"{j} {a}" for j, a in _dict(by).items())
                                for cap, by in _dict(p.get("answers")).items())
            passed = ", ".join(f"{c} {'yes' if ok else 'no'}" for c, ok in _dict(p.get("passed")).items())
            rows.append([" → ".join(str(f) for f in _list(p.get("frames"))), p.get("consensus"),
                         {True: "yes", False: "no"}.get(p.get("change"), "?"), answers, passed])
        blocks.append(table(f"progression ({_text(progression.get('prompt'))} prompt)",
                            ["frames", "consensus", "change", "answers", "captioner agrees"], rows))
    verdicts = [[name, _dict(m).get("verdict"), _dict(m).get("scorer")] for name, m in _dict(record.get("matching")).items()]
    if verdicts:
        blocks.append(table("caption matching", ["captioner", "verdict", "judge"], verdicts,
                            [_text(v[1]) for v in verdicts]))
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
