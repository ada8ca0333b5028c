"""The `<Frame i>:` reply parser: messy replies made here in the styles VLMs write, and the 141 real replies
of ProgressCaptioner-7B shipped with FrameCapEval (../shared/data/progcaptioner/output)."""

from __future__ import annotations

import json
import re

import pytest
from conftest import shared
from vi.pipelines.progresscaptioner.frame_replies import parse_frame_replies


@pytest.mark.parametrize("reply", [
    "<Frame 1>: A hand holds a knife.\n<Frame 2>: The knife cuts the bread.",
    "Frame 1: A hand holds a knife.\nFrame 2: The knife cuts the bread.",
    "**Frame 1:** A hand holds a knife.\n\n**Frame 2:** The knife cuts the bread.",
    "**Frame 1**: A hand holds a knife.\n**Frame 2**: The knife cuts the bread.",
    "<Frame1> A hand holds a knife.\n<Frame2> The knife cuts the bread.",
    "Frame 1 - A hand holds a knife.\nFrame 2 – The knife cuts the bread.",
    "- **Frame 1**: A hand holds a knife.\n- **Frame 2**: The knife cuts the bread.",
    "### Frame 1\nA hand holds a knife.\n### Frame 2\nThe knife cuts the bread.",
    "<Frame 1>: A hand holds a knife. <Frame 2>: The knife cuts the bread.",
    "<Frame 1>: A hand holds\na knife.\n<Frame 2>: The knife cuts\n  the bread.",
])
def test_numbering_styles_and_captions_over_several_lines_parse_cleanly(reply):
    parsed = parse_frame_replies(reply, 2)
    assert parsed.texts == ["A hand holds a knife.", "The knife cuts the bread."]
    assert parsed.clean, parsed.repairs


def test_bare_numbers_are_read_only_without_labelled_headers_and_noted():
    parsed = parse_frame_replies("1. 2 eggs in a bowl.\n2) 1.5 cups of flour added.", 2)
    assert parsed.texts == ["2 eggs in a bowl.", "1.5 cups of flour added."] and parsed.missing == []
    assert parsed.repairs == ["frames numbered without 'Frame' (as '1.'): read as frame numbers"]
    labelled = parse_frame_replies("Frame 1: Add:\n1. eggs\nFrame 2: Stir.", 2)  # a list inside a caption
    assert labelled.texts == ["Add: 1. eggs", "Stir."] and labelled.clean


@pytest.mark.parametrize("reply, texts, repair", [
    ("<Frame 1>: a\n<Frame 2-3>: b", ["a", "b", "b"], "'<Frame 2-3>:' captions frames 2, 3 at once"),
    ("Frame 1: a\nFrames 2 and 3: b", ["a", "b", "b"], "'Frames 2 and 3:' captions frames 2, 3 at once"),
    ("Frames 1, 2: a\nFrame 3: b", ["a", "a", "b"], "'Frames 1, 2:' captions frames 1, 2 at once"),
    ("<Frame 1>: a\n<Frame 1>: x\n<Frame 2>: b\n<Frame 3>: c", ["a", "b", "c"],
     "frame 1 is captioned more than once: the first kept"),
    ("<Frame 1>: a\n<Frame 2>: b\n<Frame 3>: c\n<Frame 4>: d", ["a", "b", "c"], "frame 4 is outside 1..3: dropped"),
    ("Frame 0: a\nFrame 1: b\nFrame 2: c", ["a", "b", "c"], "frames numbered from 0: read as 1-based"),
    ("Sure! Here they are:\n<Frame 1>: a\n<Frame 2>: b\n<Frame 3>: c", ["a", "b", "c"],
     "dropped text before the first frame: 'Sure! Here they are:'"),
    ("<Frame 1>: a\n<Frame 2>: b\n<Frame 3>: c\n\nOverall, the bread is cut.", ["a", "b", "c"],
     "dropped a closing paragraph after the last caption: 'Overall, the bread is cut.'"),
    ("a\nb\nc", ["a", "b", "c"], "no frame headers: the reply's 3 lines taken in order"),
])
def test_merged_duplicate_extra_and_stray_text_are_repaired_and_noted(reply, texts, repair):
    parsed = parse_frame_replies(reply, 3)
    assert parsed.texts == texts and parsed.missing == []
    assert any(r.startswith(repair) for r in parsed.repairs), parsed.repairs


def test_missing_frames_are_none_and_listed_never_invented():
    parsed = parse_frame_replies("<Frame 1>: a\n<Frame 3>: c\n<Frame 4>:", 4)
    assert parsed.texts == ["a", None, "c", None] and parsed.missing == [2, 4]
    assert parsed.repairs == ["frame 4 has a header but no text"]
    assert parse_frame_replies("I cannot see any images.", 3).missing == [1, 2, 3]
    assert parse_frame_replies("", 2).texts == [None, None]
    single = parse_frame_replies("A man slices bread.", 1)  # --window 1: a bare caption is the caption
    assert single.texts == ["A man slices bread."] and single.repairs


def test_a_multi_paragraph_style_keeps_the_last_captions_second_paragraph():
    reply = "<Frame 1>: a\n\nmore a\n<Frame 2>: b\n\nOverall b"  # captions span paragraphs: nothing dropped
    assert parse_frame_replies(reply, 2).texts == ["a more a", "b Overall b"]


def test_all_141_real_replies_parse_with_every_frame_captioned():
    replies = []
    for source in ("coin", "htc"):
        replies += json.loads(shared("progcaptioner", "output", f"{source}_valhs_seq.json").read_text())
    assert len(replies) == 141
    clean = repaired = missing = 0
    for sequence in replies:
        parsed = parse_frame_replies(sequence["response0"], sequence["n_frames"])
        clean += parsed.clean
        repaired += bool(parsed.repairs)
        missing += bool(parsed.missing)
        # each caption is exactly its line's text after "<Frame i>: "
        lines = re.findall(r"^<Frame (\d+)>: (.*)$", sequence["response0"], re.MULTILINE)
        assert [t for _, t in lines] == [" ".join(t.split()) for t in parsed.texts], sequence["idx"]
    assert (clean, repaired, missing) == (141, 0, 0)
