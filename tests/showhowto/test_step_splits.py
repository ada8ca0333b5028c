"""Cutting a step the model merged where its later clause is said (step_splits.py), with the bag-of-words stand-in
for the sentence embedder."""

from __future__ import annotations

from tests.showhowto.grounding_fakes import words_embedder
from vi.pipelines.showhowto.step_splits import apply_cuts, breaks, find_cuts, sentence

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
