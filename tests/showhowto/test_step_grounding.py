"""vi extract-steps' steps placed where their words are said (step_grounding.py), the label pass
read with a bounded window and calibrated (narration_labels.py), and the copy rule: each
mechanism pinned with small fakes, no model."""

from __future__ import annotations

import re

import numpy as np
import pytest

from vi.pipelines.showhowto import step_grounding as sg
from vi.pipelines.showhowto.extract_steps import STEP_SURE
from vi.pipelines.showhowto.narration_labels import (LABELS, Rereading, both_readings, labels_from_scores, step_runs,
                                                     talk_of_two, with_talk)
from tests.showhowto.grounding_fakes import words_embedder

LINES = [
    "Hi, it's Matthew with the pressure cooker again.",  # 1
    "Today I'm going to make baked potatoes.",  # 2
    "So here is my favourite trick.",  # 3
    "I'm going to make two little rings of foil.",  # 4
    "I'm going to take my potatoes and put them in on the rings.",  # 5
    "And I've got my cup and a half of water.",  # 6
    "I'll just dump that in.",  # 7
    "For these ones I'm going to put them in for about 15 minutes.",  # 8
    "When they're done you just pop them out and eat them.",  # 9
    "I hope you enjoyed it, bye.",  # 10
]


def test_a_citation_one_line_off_lands_on_the_line_its_words_are_said_on():
    steps = ["Make two rings of aluminum foil.", "Put the potatoes on the rings.",
             "Cook for about 15 minutes."]
    cited = [(3, 3), (4, 4), (7, 7)]  # what the 1.5B model does: the line before
    placed = sg.ground_steps(steps, LINES, cited, words_embedder)
    assert [(g.first, g.last) for g in placed] == [(4, 4), (5, 5), (8, 8)]
    assert all(g.similarity > 0.3 for g in placed)


def test_the_citation_breaks_a_tie_between_lines_that_say_the_same_words():
    lines = ["Stir the sauce.", "Taste it.", "Add salt.", "Stir the sauce."]
    near_first = sg.ground_steps(["Stir the sauce."], lines, [(1, 1)], words_embedder)
    near_last = sg.ground_steps(["Stir the sauce."], lines, [(4, 4)], words_embedder)
    assert (near_first[0].first, near_last[0].first) == (1, 4)


def test_steps_keep_their_order_under_the_alignment():
    """Step 2's words are best matched before step 1's best line: the alignment keeps the model's
    order rather than swapping them, and no two steps share more than one line."""
    runs = sg.spans(6, max_span=1)
    similarity = np.array([[0.1, 0.2, 0.3, 0.9, 0.2, 0.1],   # step 1: line 4
                           [0.1, 0.95, 0.1, 0.2, 0.6, 0.1],  # step 2: line 2 best, line 5 next
                           [0.1, 0.1, 0.1, 0.1, 0.2, 0.8]])  # step 3: line 6
    placed = sg.align(similarity, runs, [None, None, None])
    assert placed == [(4, 4), (5, 5), (6, 6)]
    starts = [a for a, _ in placed]
    assert starts == sorted(starts)


def test_a_line_near_every_step_does_not_take_steps_said_elsewhere():
    """Hubness (CSLS): line 2 talks about the dish in general ("put them in so they're steamed
    nicely"), so it is near every step and a little nearer the water and the 15 minutes than lines
    3 and 5, where they are said (the pressure cooker's case). Aligned on the raw similarity, line 2
    takes both; taken off how near each line is to all the steps, each lands where it is said."""
    runs = sg.spans(5, max_span=1)
    similarity = np.array([[0.8, 0.7, 0.2, 0.2, 0.3],     # put the potatoes in: line 1
                           [0.2, 0.72, 0.7, 0.2, 0.2],    # add a cup and a half of water: line 3
                           [0.3, 0.72, 0.2, 0.2, 0.68]])  # steam for 15 minutes: line 5
    cited = [None, None, None]
    assert sg.align(similarity, runs, cited) == [(1, 1), (2, 2), (2, 2)]
    corrected = sg.hub_corrected(similarity)
    assert np.allclose(corrected[:, 1], similarity[:, 1] - (0.7 + 0.72 + 0.72) / 3 / 2)
    assert sg.align(corrected, runs, cited) == [(1, 1), (3, 3), (5, 5)]
    assert np.allclose(sg.hub_corrected(similarity, k=1)[:, 1], similarity[:, 1] - 0.36)


def test_a_step_is_not_grounded_on_talk_that_shares_its_words():
    lines = ["The nice thing about steaming potatoes is it keeps your kitchen cool.",
             "Put the potatoes in the steamer basket."]
    talk = [0.95, 0.05]  # the label pass's P(TALK) per line
    placed = sg.ground_steps(["Steam the potatoes in the basket."], lines, [(1, 1)], words_embedder, talk)
    assert (placed[0].first, placed[0].last) == (2, 2)


def test_a_step_may_span_several_lines_and_two_steps_may_share_one():
    lines = ["Whisk the flour and the sugar,", "then the baking powder and the salt.",
             "Crack an egg into the milk and beat them."]
    steps = ["Whisk the flour, sugar, baking powder and salt.", "Crack an egg into the milk.",
             "Beat the egg and milk."]
    placed = sg.ground_steps(steps, lines, [(1, 1), (3, 3), (3, 3)], words_embedder)
    assert [(g.first, g.last) for g in placed] == [(1, 2), (3, 3), (3, 3)]


# --- the label pass: a bounded window, calibrated ---------------------------------------------------

def chaining_scorer(text: str) -> np.ndarray:
    """A stand-in for the 1.5B model's label likelihoods with the failure the issue saw: the more
    of its own TALK labels the video's text holds, the likelier TALK is, whatever the line; the
    line's own content (an action verb) only adds a fixed amount to STEP."""
    video = text.rsplit('Video: "', 1)[-1]
    talk_so_far = video.count("-> TALK")
    line = video.rsplit("\n", 1)[-1]
    action = bool(re.search(r"\b(put|pop|cut|pour|add|take)\b", line, re.I))
    step, more, talk = 0.0, -0.5, -1.0 + 0.8 * talk_so_far
    if action:
        step += 2.0
    if re.search(r"\b(hi|bye|hope|enjoy|nice|really|kitchen)\b", line, re.I):
        talk += 2.5
    return np.array([step, more, talk])


NARRATION = ["Hi, welcome back.", "Put foil in the cooker.", "Put the potatoes on it.",
             "The nice thing is it doesn't heat up your kitchen.", "It's really nice in the summer.",
             "I really like it.", "Pour in the water.", "Pop them out when done.", "Cut it open.",
             "Hope you enjoyed it, bye."]


def test_the_label_pass_does_not_call_the_second_half_talk():
    """With every earlier label in the text (the old pass) the run of talk in the middle makes
    every later line TALK, the actions too; a bounded window labels each action line by what it
    says, and so does calibration against a content-free line (not the default: see
    labels_from_scores)."""
    old = [m["label"] for m in labels_from_scores(chaining_scorer, "Potatoes", NARRATION, window=None,
                                                  calibrate=False, alone=False)]
    assert old[6:9] == ["TALK", "TALK", "TALK"]  # the failure: pour, pop out, cut, all talk
    new = labels_from_scores(chaining_scorer, "Potatoes", NARRATION)
    assert [m["label"] for m in new] == ["TALK", "STEP", "STEP", "TALK", "TALK", "TALK", "STEP", "STEP",
                                         "STEP", "TALK"]
    for mark in new:
        assert mark["label"] in LABELS and abs(sum(mark["probs"]) - 1) < 0.01
    calibrated = labels_from_scores(chaining_scorer, "Potatoes", NARRATION, window=None, calibrate=True,
                                    alone=False)
    assert [m["label"] for m in calibrated] == [m["label"] for m in new]


def continuing_scorer(text: str) -> np.ndarray:
    """A stand-in for the 1.5B model's other habit in its window: the more step labels it has just
    given, the likelier it goes on with one more, whatever the line; read alone, a line scores by
    what it says (an action: STEP; a greeting or closing words: TALK)."""
    video = text.rsplit('Video: "', 1)[-1]
    run = video.count("-> STEP") + video.count("-> MORE")
    line = video.rsplit("\n", 1)[-1]
    action = bool(re.search(r"\b(put|screw|slide|tighten)\b", line, re.I))
    talk = 1.3 if re.search(r"\b(hi|that's it|ready)\b", line, re.I) else -1.0
    return np.array([2.0 if action else 0.0, -1.0 + 0.8 * run, talk])


SHELF = ["Hi, welcome back.", "Put the bracket on the wall.", "Screw it in tight.",
         "Slide the shelf onto the bracket.", "Tighten the set screw underneath.", "That's it, it's ready."]


def test_a_closing_line_after_a_run_of_steps_is_talk_when_read_alone_too():
    """Read only in its window, the closing line after a run of steps is "one more" (the habit);
    read alone as well, it is TALK, and every action line keeps its label."""
    window_only = [m["label"] for m in labels_from_scores(continuing_scorer, "A shelf", SHELF, alone=False)]
    assert window_only == ["TALK", "STEP", "STEP", "STEP", "STEP", "MORE"]  # the failure: the outro goes on
    both = labels_from_scores(continuing_scorer, "A shelf", SHELF)
    assert [m["label"] for m in both] == ["TALK", "STEP", "STEP", "STEP", "STEP", "TALK"]
    for mark in both[1:]:
        assert abs(sum(mark["probs"]) - 1) < 0.01 and abs(sum(mark["alone"]) - 1) < 0.01
    assert "alone" not in both[0]  # shown no earlier line, the first line was read alone already: once


def test_talk_needs_both_readings_and_the_window_alone_tells_step_from_more():
    """A detail that reads as talk alone ("There it is, a tiny puncture") but goes on with the step in
    its window stays MORE: the two readings' log-odds of TALK are summed, and alone a line cannot be
    MORE (no step is above it), so STEP against MORE is the window's."""
    probs = both_readings(np.array([0.2, 0.7, 0.1]), np.array([0.3, 0.05, 0.65]))
    assert LABELS[int(np.argmax(probs))] == "MORE" and abs(sum(probs) - 1) < 1e-9
    assert probs[-1] == pytest.approx(0.1 * 0.65 / (0.1 * 0.65 + 0.9 * 0.35))
    assert probs[0] / probs[1] == pytest.approx(0.2 / 0.7)  # the window's split of not-TALK
    closing = both_readings(np.array([0.68, 0.1, 0.22]), np.array([0.11, 0.04, 0.85]))  # bike tyre's outro
    assert LABELS[int(np.argmax(closing))] == "TALK"


def first_line_is_talk_scorer(text: str) -> np.ndarray:
    """A label pass with the habit the labelled examples teach (both open on a greeting): a line with no
    earlier line shown reads as talk (P(TALK) about 0.54) whatever it says; a greeting is talk anywhere."""
    video = text.rsplit('Video: "', 1)[-1]
    line = video.rsplit("\n", 1)[-1]
    if re.search(r"\b(hi|welcome)\b", line, re.I):
        return np.array([1.0, -1.0, 3.0])
    return np.array([1.0, -1.0, 1.3 if video.count("\n[") == 1 else -2.0])


def words_say_talk(line: str) -> float:
    """A reader blind to position, as the talk probe is: the line's words alone."""
    return 3.0 if re.search(r"\b(hi|welcome)\b", line, re.I) else -3.0


CLIP = ["Rinse the apple under the tap.", "Peel the orange.", "Cut the fruit into a bowl."]


def test_a_clips_first_line_is_a_step_when_a_reader_blind_to_position_says_so():
    """A clean clip opens on a step: the label pass alone calls it talk for where it stands (all four
    clean clips of blind set 11 lost their first step), and read once, not twice (its "alone" reading is
    the same text). The talk probe's reading of its words, added as the second view, makes it a STEP; a
    greeting that opens a narration stays TALK."""
    alone = labels_from_scores(first_line_is_talk_scorer, "Fruit salad", CLIP)
    assert [m["label"] for m in alone] == ["TALK", "STEP", "STEP"]  # the failure
    assert alone[0]["probs"][-1] == pytest.approx(0.543, abs=1e-3)  # read once: 0.585 counted twice
    seen = labels_from_scores(first_line_is_talk_scorer, "Fruit salad", CLIP, reread=Rereading(words_say_talk))
    assert [m["label"] for m in seen] == ["STEP", "STEP", "STEP"] and seen[0]["probe"] == pytest.approx(0.047, abs=1e-3)
    greeting = labels_from_scores(first_line_is_talk_scorer, "Fruit salad", ["Hi, welcome back."] + CLIP,
                                  reread=Rereading(words_say_talk))
    assert [m["label"] for m in greeting] == ["TALK", "STEP", "STEP", "STEP"]
    # only the first line is read by it: the other lines have an earlier line and two readings of their own
    assert all("probe" not in m and "alone" in m for m in seen[1:])


def opening_is_talk_scorer(text: str) -> np.ndarray:
    """A label pass that reads a line as talk (P(TALK) about 0.54) while nothing but greetings is shown
    before it, whatever it says: read alone, or after a greeting labelled TALK (set 20's oil check, "Park
    the car on level ground...", after "Hi everyone."); a greeting is talk anywhere."""
    video = text.rsplit('Video: "', 1)[-1]
    shown = video.split("\n")[1:]
    if re.search(r"\b(hi|welcome)\b", shown[-1], re.I):
        return np.array([1.0, -1.0, 3.0])
    opening = all(re.search(r"\b(hi|welcome)\b", line, re.I) for line in shown[:-1])
    return np.array([1.0, -1.0, 1.3 if opening else -2.0])


def test_the_first_step_after_a_greeting_is_a_step_when_the_opening_is_read_by_the_probe_until_a_step():
    """After a one-line greeting, both of the model's views of the first step read it as talk: in its
    window it follows TALK, alone it is read as a first line. With until_step, each line while every line
    before it is TALK has the talk probe as its second view in place of its reading alone, so the step
    stays; the greeting stays talk, and once a line is not talk the lines after it are read alone again."""
    lines = ["Hi everyone, welcome back."] + CLIP
    first_line = labels_from_scores(opening_is_talk_scorer, "Fruit salad", lines, reread=Rereading(words_say_talk))
    assert [m["label"] for m in first_line] == ["TALK", "TALK", "STEP", "STEP"]  # the failure: the first step lost
    seen = labels_from_scores(opening_is_talk_scorer, "Fruit salad", lines, reread=Rereading(words_say_talk,
                              until_step=True))
    assert [m["label"] for m in seen] == ["TALK", "STEP", "STEP", "STEP"]
    assert seen[1]["probe"] == pytest.approx(0.047, abs=1e-3) and "alone" not in seen[1]
    assert all("probe" not in m and "alone" in m for m in seen[2:])  # a step is shown: read alone again
    two_greetings = labels_from_scores(opening_is_talk_scorer, "Fruit salad", ["Hi everyone.", "Welcome back!"] + CLIP,
                                       reread=Rereading(words_say_talk, until_step=True))
    assert [m["label"] for m in two_greetings] == ["TALK", "TALK", "STEP", "STEP", "STEP"]
    assert "probe" in two_greetings[1] and "probe" in two_greetings[2]


def every_line_a_step_scorer(text: str) -> np.ndarray:
    """A label pass that reads every line but a greeting as a step, in its window and alone: a closing worded
    as an instruction ("Enjoy it while it's cold!") reads as one more step (set 20's pour-over, set 22's basil)."""
    shown = text.rsplit('Video: "', 1)[-1].split("\n")[-1]
    return np.array([1.0, -1.0, 3.0 if re.search(r"\b(hi|welcome)\b", shown, re.I) else 0.3])


def closing_words_say_talk(line: str) -> float:
    """The talk probe's habit on closings: a greeting, "enjoy" or "subscribe" is talk whatever its mood."""
    return 3.0 if re.search(r"\b(hi|welcome|enjoy|subscribe)\b", line, re.I) else -3.0


def test_a_closing_worded_as_an_instruction_is_talk_when_the_probe_reads_back_to_the_last_step():
    """Read in its window and alone, a closing worded as an instruction is one more step. With back_to_step,
    each line from the last back gets the talk probe as a third view until one stays a step: the closings turn
    to talk, the last true step stays, and the walk stops there, so a step the probe would misread earlier in
    the clip ("Enjoy ..." is not asked about, it is not in the closing) keeps its labels."""
    lines = ["Hi everyone."] + CLIP + ["Enjoy it while it's cold!", "And subscribe for more."]
    before = labels_from_scores(every_line_a_step_scorer, "Fruit salad", lines, reread=Rereading(closing_words_say_talk,
                                until_step=True))
    assert [m["label"] for m in before] == ["TALK", "STEP", "STEP", "STEP", "STEP", "STEP"]  # the failure
    seen = labels_from_scores(every_line_a_step_scorer, "Fruit salad", lines, reread=Rereading(closing_words_say_talk,
                              until_step=True, back_to_step=True))
    assert [m["label"] for m in seen] == ["TALK", "STEP", "STEP", "STEP", "TALK", "TALK"]
    assert seen[-1]["closing_probe"] == pytest.approx(0.953, abs=1e-3) and "closing_probe" in seen[3]
    assert all("closing_probe" not in m for m in seen[:3])  # the last step stayed: the walk ended there
    mid = ["Hi everyone.", CLIP[0], "Enjoy the quiet while it naps.", *CLIP[1:]]  # read as talk, not at the close
    assert [m["label"] for m in labels_from_scores(every_line_a_step_scorer, "Fruit salad", mid,
                                                   reread=Rereading(closing_words_say_talk, until_step=True,
                                                   back_to_step=True))] == ["TALK"] + ["STEP"] * 4


def unsure_closing_scorer(text: str) -> np.ndarray:
    """Every line a step but a greeting, and a closing the label pass leaves an unsure step (P(STEP) 0.48 with
    both readings: MORE nearly as likely), as set 24's lavender ("Use the dried buds to fill little sachets...")."""
    shown = text.rsplit('Video: "', 1)[-1].split("\n")[-1]
    if "sachets" in shown:
        return np.array([1.0, 0.9, 0.5])
    return every_line_a_step_scorer(text)


def test_the_closing_walk_never_makes_a_line_a_surer_step_than_its_two_readings_did():
    """The walk looks for talk. A probe that reads an unsure closing as a step (no "enjoy": -3) leaves its
    probabilities as its two readings left them, under the stage's STEP_SURE, so no step is written from the
    line the model left out; heard both ways, as on blind set 24, it would have pushed the line over it."""
    lines = ["Hi everyone."] + CLIP + ["Use the dried buds to fill little sachets."]
    before = labels_from_scores(unsure_closing_scorer, "Lavender", lines, reread=Rereading(closing_words_say_talk,
                                until_step=True))
    seen = labels_from_scores(unsure_closing_scorer, "Lavender", lines, reread=Rereading(closing_words_say_talk,
                              until_step=True, back_to_step=True))
    assert seen[-1]["label"] == "STEP" and seen[-1]["closing_probe"] == pytest.approx(0.047, abs=1e-3)
    assert seen[-1]["probs"] == before[-1]["probs"] and before[-1]["probs"][0] < STEP_SURE
    assert "closing_probe" not in seen[-2]  # it stayed a step: the walk ended there
    probs = before[-1]["probs"]
    assert with_talk(probs, talk_of_two(probs[-1], seen[-1]["closing_probe"]))[0] > STEP_SURE  # heard both ways


ASIDE = ["This reminds me of my first flat.", "The plumber charged me eighty quid for it.",
         "I still think about that every winter.", "Anyway, he was nice about it."]
STORY = r"\b(hi|welcome|reminds|plumber|winter|anyway)\b"


def talk_sticks_after_talk_scorer(text: str) -> np.ndarray:
    """A label pass that goes on with its own TALK labels: a line whose window shows three lines labelled TALK
    reads as talk (P(TALK) 0.95) whatever it says; read alone, as a first line, it leans to talk (0.54); the
    story is talk anywhere, and a step after a step is a step."""
    shown = text.rsplit('Video: "', 1)[-1].split("\n")[1:]
    if re.search(STORY, shown[-1], re.I):
        return np.array([1.0, -1.0, 3.0])
    earlier = shown[:-1]
    if len(earlier) >= 3 and all(line.endswith("-> TALK") for line in earlier):
        return np.array([1.0, -1.0, 4.0])
    return np.array([1.0, -1.0, 1.3 if not earlier else -2.0])


def story_words_say_talk(line: str) -> float:
    return 3.0 if re.search(STORY, line, re.I) else -3.0


def test_a_step_after_an_aside_as_long_as_the_window_is_a_step_when_read_as_a_first_line():
    """After a four-line aside, the window shows only the model's own TALK labels and the steps said next are
    labelled TALK (blind set 26's radiator: four steps dropped). With after_talk, a TALK line after a window of
    TALK is read alone with the talk probe as its second view: the step after the aside is a step again, the
    story's own lines stay talk, and one step given back lets the lines after it be read as before."""
    lines = ["Hi everyone.", CLIP[0], *ASIDE, *CLIP[1:]]
    before = labels_from_scores(talk_sticks_after_talk_scorer, "Fruit salad", lines,
                                reread=Rereading(story_words_say_talk, until_step=True))
    assert [m["label"] for m in before] == ["TALK", "STEP"] + ["TALK"] * 4 + ["TALK", "TALK"]  # the failure
    seen = labels_from_scores(talk_sticks_after_talk_scorer, "Fruit salad", lines,
                              reread=Rereading(story_words_say_talk, until_step=True, after_talk=True))
    assert [m["label"] for m in seen] == ["TALK", "STEP"] + ["TALK"] * 4 + ["STEP", "STEP"]
    assert seen[6]["after_talk_probe"] == pytest.approx(0.047, abs=1e-3)
    assert seen[5]["after_talk_probe"] == pytest.approx(0.953, abs=1e-3)  # read again, still talk
    assert "after_talk_probe" not in seen[7]  # its window holds a step: read as before
    assert all("after_talk_probe" not in m for m in seen[:5])  # their windows hold a step or the opening


def test_the_after_talk_reading_never_takes_a_step_away():
    """A line its window and its reading alone call a step keeps its label even where the probe reads talk:
    the reading is heard only where the window read TALK."""
    def step_after_talk_scorer(text):
        shown = text.rsplit('Video: "', 1)[-1].split("\n")[1:]
        return np.array([1.0, -1.0, 3.0 if re.search(STORY, shown[-1], re.I) else -2.0])
    lines = ["Hi everyone.", CLIP[0], *ASIDE, "Anyway, peel the orange."]
    seen = labels_from_scores(step_after_talk_scorer, "Fruit salad", lines, reread=Rereading(story_words_say_talk,
                              until_step=True, after_talk=True))
    assert seen[-1]["label"] == "TALK"  # the story's word: talk in every reading
    lines[-1] = "Peel the orange."
    def orange_is_talk(line):
        return 3.0 if "orange" in line else story_words_say_talk(line)
    probe_says_talk = labels_from_scores(step_after_talk_scorer, "Fruit salad", lines, reread=Rereading(orange_is_talk,
                                         until_step=True, after_talk=True))
    assert probe_says_talk[-1]["label"] == "STEP" and "after_talk_probe" not in probe_says_talk[-1]


def more_sticks_after_more_scorer(text: str) -> np.ndarray:
    """A label pass that goes on with its own MORE labels: a line whose window shows three lines labelled MORE
    reads as MORE (P 0.96) whatever it says. Otherwise the story is talk (read in a window, it leans to MORE), a
    line about "it" goes on with the step above (alone too), and an action starts a step (read alone, as a first
    line, it leans to talk, 0.54)."""
    shown = text.rsplit('Video: "', 1)[-1].split("\n")[1:]
    line, earlier = shown[-1], shown[:-1]
    if len(earlier) >= 3 and all(seen.endswith("-> MORE") for seen in earlier):
        return np.array([0.0, 4.0, 0.0])
    if re.search(STORY, line, re.I):
        return np.array([0.0, 1.0, 0.5]) if earlier else np.array([-1.0, -1.0, 3.0])
    if re.search(r"\bit\b", line):
        return np.array([0.0, 2.0, -1.0])
    return np.array([2.0, 0.0, -1.0]) if earlier else np.array([1.0, -1.0, 1.3])


def test_a_new_step_after_a_window_of_more_is_a_step_and_an_aside_talk_when_read_as_a_first_line():
    """After a step's four lines, the window shows only the model's own MORE labels, and the next step, an aside
    and the step after it all go on with the first (blind set 27's lemon curd: lines 10-25 MORE, one step made of
    four and a story). With after_more, a MORE line after a window of MORE is read alone with the talk probe as
    its second view: the new step starts a step, and the lines after it are read as before (the aside talk, the
    step after it a step); a detail line that reads MORE alone too stays MORE."""
    lines = ["Hi everyone.", "Rinse the apple under the tap.", "Rub it dry with a towel.",
             "Get every bit of wax off it.", "Then give it a shine.", "Check it all over once more.",
             "Peel the orange.", *ASIDE, "Cut the fruit into a bowl."]
    before = labels_from_scores(more_sticks_after_more_scorer, "Fruit salad", lines,
                                reread=Rereading(story_words_say_talk, until_step=True, after_talk=True))
    assert [m["label"] for m in before] == ["TALK", "STEP"] + ["MORE"] * 10  # the failure: one step
    seen = labels_from_scores(more_sticks_after_more_scorer, "Fruit salad", lines,
                              reread=Rereading(story_words_say_talk, until_step=True, after_more=True))
    assert [m["label"] for m in seen] == ["TALK", "STEP"] + ["MORE"] * 4 + ["STEP"] + ["TALK"] * 4 + ["STEP"]
    assert step_runs([m["label"] for m in seen]) == [(1, 5), (6, 6), (11, 11)]
    assert seen[6]["after_more_probe"] == pytest.approx(0.047, abs=1e-3)
    assert seen[5]["after_more_probe"] == pytest.approx(0.047, abs=1e-3)  # read again: MORE alone too, kept
    assert all("after_more_probe" not in m for m in seen[:5] + seen[7:])  # their windows hold another label
