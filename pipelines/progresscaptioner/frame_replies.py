"""Parsing a captioner's `<Frame i>: ...` reply into one caption per frame.

ProgressCaptioner's prompt asks for "<Frame 1>: Your description ... <Frame T>: Your description". Its own
model follows that (all 141 replies shipped with FrameCapEval do), but other VLMs number frames their own way,
so `parse_frame_replies` reads, at the start of a line (after markdown bullets, headings or bold):

- labelled headers: `<Frame 1>:`, `<Frame1>`, `Frame 1:`, `**Frame 1:**`, `**Frame 1**:`, `Frame 1 -`,
  `[Frame 1]`, `Image 1:`; a `<Frame i>` in the middle of a line (two frames on one line) starts a frame too;
- bare numbers `1.`, `1)`, `1:` only when the reply has no labelled header (a caption may begin "2 eggs");
- merged frames: `<Frame 2-3>:`, `Frames 2 and 3:`, `Frames 2, 3:`, `Frame 2 & 3` -> the same text for each.

What it repairs, each noted in `repairs` (a reply that needed none parses "clean"):
- merged frames get the shared text; a frame captioned twice keeps the first; frames numbered beyond T are
  dropped; frames numbered 0..T-1 are shifted to 1..T;
- text before the first header ("Sure! Here are the descriptions:") is dropped; so is a closing paragraph after
  the last caption ("Overall, the sequence ...") when no caption of the reply spans paragraphs;
- a reply without any header: with T = 1 the whole reply is the caption; with exactly T non-empty lines, they
  are the captions in order.
A caption may span several lines (joined with single spaces). A frame without text is `None` and listed in
`missing` (1-based), which the caller turns into a retry or an error record; nothing is invented.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_LEAD = r"^[ \t]*(?:(?:[#>*_•]+|-(?=\s|\*))[ \t]*)*"  # markdown: "- ", "* ", "### ", "> ", "**"
_NUMS = r"(?P<nums>\d{1,3}(?:\s*(?:-|–|—|to|and|&|,|/)\s*\d{1,3})*)"
# A labelled header: Frame/Frames/Image, the number(s), optional brackets, bold, and a separator or not.
_LABELLED = re.compile(
    _LEAD + r"[<\[(]?\s*(?:frames?|images?)\s*#?\s*" + _NUMS + r"\s*[>\])]?\s*(?:\*\*|__)?\s*"
    r"(?:[:.)：]|\s[-–—](?=\s)|[-–—](?=\s))?\s*(?:\*\*|__)?",
    re.IGNORECASE)
# A bare numbered line: "1." "1)" "1:" (a separator is required; read only when no labelled header exists).
_BARE = re.compile(_LEAD + r"\(?" + _NUMS + r"\s*(?:\*\*|__)?\s*[.):：](?!\d)\s*(?:\*\*|__)?")
_INLINE = re.compile(r"(?<=\S)[ \t]*(?=<\s*frames?\s*\d)", re.IGNORECASE)  # "... text. <Frame 2>: ..."
_CLOSING = re.compile(r"^(?:overall|in summary|to summarize|in conclusion|summary|these frames|the sequence|"
                      r"this sequence|together)\b", re.IGNORECASE)


@dataclass
class FrameReplies:
    texts: list[str | None]  # one per frame, in order; None where the reply has no caption for it
    repairs: list[str] = field(default_factory=list)  # what was repaired, in words
    missing: list[int] = field(default_factory=list)  # 1-based frames without a caption

    @property
    def clean(self) -> bool:
        return not self.repairs and not self.missing


def _numbers(text: str) -> list[int]:
    """'2-3' -> [2, 3]; '2 and 4' -> [2, 4]; '1, 2 & 3' -> [1, 2, 3]; a reversed range reads as its ends."""
    out: list[int] = []
    for part in re.split(r"\s*(?:and|&|,|/)\s*", text):
        ends = [int(x) for x in re.split(r"\s*(?:-|–|—|to)\s*", part) if x]
        if len(ends) == 2 and 0 <= ends[1] - ends[0] <= 10:
            out += range(ends[0], ends[1] + 1)
        else:
            out += ends
    return list(dict.fromkeys(out))


def _clean(lines: list[str]) -> str:
    text = " ".join(" ".join(lines).split())
    text = re.sub(r"^(?:\*\*|__|[:\-–—])\s*", "", text)
    text = re.sub(r"\s*(?:\*\*|__)$", "", text)
    if len(text) > 1 and text[0] == text[-1] and text[0] in "\"'":
        text = text[1:-1].strip()
    return text


def _sections(lines: list[str], header: re.Pattern) -> tuple[list[str], list[tuple[list[int], str, list[str]]]]:
    """(the lines before the first header, [(frame numbers, the header as written, its text lines)])."""
    before: list[str] = []
    sections: list[tuple[list[int], str, list[str]]] = []
    for line in lines:
        match = header.match(line)
        if match and match.group("nums"):
            rest = line[match.end():]
            sections.append((_numbers(match.group("nums")), match.group(0).strip(), [rest]))
        elif sections:
            sections[-1][2].append(line)
        else:
            before.append(line)
    return before, sections


def _split_closing(sections: list[tuple[list[int], str, list[str]]], repairs: list[str]) -> None:
    """Drop a summary paragraph after the last caption, unless captions of this reply span paragraphs."""
    def paragraphs(lines: list[str]) -> list[list[str]]:
        out: list[list[str]] = [[]]
        for line in lines:
            if line.strip():
                out[-1].append(line)
            elif out[-1]:
                out.append([])
        return [p for p in out if p]

    if any(len(paragraphs(s[2])) > 1 for s in sections[:-1]):
        return
    last = paragraphs(sections[-1][2])
    if len(last) > 1 and _CLOSING.match(last[1][0].strip().lstrip("*_#> ")):
        sections[-1][2][:] = last[0]
        repairs.append(f"dropped a closing paragraph after the last caption: {_clean(last[1])[:80]!r}")


def parse_frame_replies(text: str, n_frames: int) -> FrameReplies:
    """One caption per frame from a reply to the `<Frame i>:` prompt (see the module docstring)."""
    if n_frames < 1:
        raise ValueError(f"n_frames must be at least 1, got {n_frames}")
    repairs: list[str] = []
    lines = _INLINE.sub("\n", text or "").splitlines()
    before, sections = _sections(lines, _LABELLED)
    if not sections:
        before, sections = _sections(lines, _BARE)
        if sections:
            repairs.append("frames numbered without 'Frame' (as '1.'): read as frame numbers")
    texts: list[str | None] = [None] * n_frames
    if not sections:
        return _headerless(lines, n_frames, texts)
    if _clean(before):
        repairs.append(f"dropped text before the first frame: {_clean(before)[:80]!r}")
    _split_closing(sections, repairs)
    numbers = {n for nums, _, _ in sections for n in nums}
    shift = 1 if 0 in numbers and max(numbers) <= n_frames - 1 else 0
    if shift:
        repairs.append("frames numbered from 0: read as 1-based")
    for nums, header, body in sections:
        caption = _clean(body)
        nums = [n + shift for n in nums]
        if len(nums) > 1:
            repairs.append(f"{header!r} captions frames {', '.join(map(str, nums))} at once: each gets that text")
        for number in nums:
            if not 1 <= number <= n_frames:
                repairs.append(f"frame {number} is outside 1..{n_frames}: dropped")
            elif texts[number - 1] is not None:
                repairs.append(f"frame {number} is captioned more than once: the first kept")
            elif not caption:
                repairs.append(f"frame {number} has a header but no text")
            else:
                texts[number - 1] = caption
    return FrameReplies(texts, repairs, [i + 1 for i, t in enumerate(texts) if t is None])


def _headerless(lines: list[str], n_frames: int, texts: list[str | None]) -> FrameReplies:
    """A reply with no frame header: usable only when its shape leaves no doubt."""
    whole = _clean(lines)
    if n_frames == 1 and whole:
        return FrameReplies([whole], ["no <Frame 1> header: the whole reply is its caption"], [])
    filled = [_clean([line]) for line in lines if _clean([line])]
    if n_frames > 1 and len(filled) == n_frames:
        return FrameReplies(list(filled), [f"no frame headers: the reply's {n_frames} lines taken in order"], [])
    return FrameReplies(texts, [], list(range(1, n_frames + 1)))
