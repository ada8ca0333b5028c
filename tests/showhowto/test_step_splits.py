"""Cutting a step the model merged where its later clause is said (step_splits.py), with the bag-of-words stand-in
for the sentence embedder."""

from __future__ import annotations

from tests.showhowto.grounding_fakes import words_embedder
from vi.pipelines.showhowto.step_splits import apply_cuts, breaks, find_cuts, head_lines, sentence

LINES = ["hey friends welcome back", "peel and dice two sweet potatoes", "toss them with oil cumin and salt",
         "roast them on a sheet pan", "my cat loves this part", "warm the black beans in a small pan"]
LABELS = {1: "TALK", 2: "STEP", 3: "MORE", 4: "MORE", 5: "TALK", 6: "STEP"}


def cut_points(text: str) -> list[tuple[str, str]]:
    return [(sentence(text[:at]), sentence(text[resume:])) for at, resume in breaks(text)]


def test_a_text_is_cut_at_its_clause_breaks_into_sentences_of_two_words_or_more():
    assert cut_points("Peel and dice two sweet potatoes, and toss them with oil, cumin, and salt.") == [
        ("Peel and dice two sweet potatoes.", "Toss them with oil, cumin, and salt."),
        ("Peel and dice two sweet potatoes, and toss them with oil.", "Cumin, and salt.")]
    assert cut_points("Stir it well.") == []


def test_a_merged_step_is_cut_where_its_later_clause_is_said_and_cut_again_on_its_tail():
    """Three actions said on three lines, written as one step placed on the first: cut twice, each part on the line
    it is said on, in the model's words."""
    merged = "Peel and dice two sweet potatoes, then toss them with oil, cumin and salt, then roast them on a pan."
    steps = [(2, 2, merged), (6, 6, "Warm the black beans in a small pan.")]
    cuts = find_cuts(steps, LINES, LABELS, words_embedder)
    assert [(cut.step, cut.line) for cut in cuts] == [(0, 3), (0, 4)]
    assert apply_cuts(steps, cuts, [True, True]) == [
        (2, 2, "Peel and dice two sweet potatoes."), (3, 3, "Toss them with oil, cumin and salt."),
        (4, 4, "Roast them on a pan."), (6, 6, "Warm the black beans in a small pan.")]
    # the cuts are made or not each on its own: the text between two cuts made is one step
    assert apply_cuts(steps, cuts, [False, True]) == [
        (2, 2, "Peel and dice two sweet potatoes, then toss them with oil, cumin and salt."),
        (4, 4, "Roast them on a pan."), (6, 6, "Warm the black beans in a small pan.")]
    assert apply_cuts(steps, cuts, [True, False]) == [
        (2, 2, "Peel and dice two sweet potatoes."),
        (3, 3, "Toss them with oil, cumin and salt, then roast them on a pan."),
        (6, 6, "Warm the black beans in a small pan.")]
    assert apply_cuts(steps, cuts, [False, False]) == steps


def test_no_cut_onto_talk_past_the_next_step_or_where_the_clause_is_said_on_the_steps_own_line():
    # the tail is said on a TALK line: no cut
    talk = [(4, 4, "Roast them on a sheet pan, my cat loves this part.")]
    assert find_cuts(talk, LINES, LABELS, words_embedder) == []
    # the tail is the next step's: no cut past that step's first line
    steps = [(4, 4, "Roast them on a sheet pan, then warm the black beans."), (6, 6, "Warm the beans.")]
    assert find_cuts(steps, LINES, {**LABELS, 5: "MORE"}, words_embedder) == []
    # both clauses said on the step's own line (one line, one step): no cut
    assert find_cuts([(2, 2, "Peel two sweet potatoes and dice them.")], LINES, LABELS, words_embedder) == []


def test_a_cut_steps_head_moves_to_the_line_its_part_says_it_on_past_a_false_start():
    """The engine's merged step was placed on the false start ("and then start pouring in the oil") that the next
    line corrects; once cut, its head ("check your owner's manual") is said on the correction's line, not on the
    first: with head_lines the head starts there, and without them it stays on the false start."""
    lines = ["unscrew the oil filler cap", "and then start pouring the right oil in",
             "oh wait no first check your owner's manual for the right grade",
             "now pour the oil in slowly using a funnel", "screw the filler cap back on"]
    merged = "Check your owner's manual for the right grade, then pour the oil in slowly using a funnel."
    steps = [(1, 1, "Unscrew the oil filler cap."), (2, 4, merged), (5, 5, "Screw the filler cap back on.")]
    labels = {1: "STEP", 2: "STEP", 3: "MORE", 4: "MORE", 5: "STEP"}
    cuts = find_cuts(steps, lines, labels, words_embedder)
    assert [(cut.step, cut.line) for cut in cuts] == [(1, 4)]
    assert head_lines(steps, cuts, [True], lines, words_embedder) == {1: 3}
    assert apply_cuts(steps, cuts, [True], {1: 3})[1:3] == [
        (3, 3, "Check your owner's manual for the right grade."), (4, 4, "Pour the oil in slowly using a funnel.")]
    assert apply_cuts(steps, cuts, [True])[1] == (2, 3, "Check your owner's manual for the right grade.")
    # a cut not made moves no head: the step was placed whole, by grounding
    assert head_lines(steps, cuts, [False], lines, words_embedder) == {}


def test_a_head_said_on_its_first_line_stays_there():
    """The usual merge: the head is said on the step's first line and its detail on the next; the head's part is
    two lines, and it stays on its first."""
    lines = ["peel and dice two sweet potatoes", "about an inch or so, peel and dice them small",
             "toss them with oil cumin and salt"]
    steps = [(1, 3, "Peel and dice two sweet potatoes, then toss them with oil, cumin and salt.")]
    cuts = find_cuts(steps, lines, {1: "STEP", 2: "MORE", 3: "MORE"}, words_embedder)
    assert [(cut.step, cut.line) for cut in cuts] == [(0, 3)]
    assert head_lines(steps, cuts, [True], lines, words_embedder) == {}
