from vi.pipelines.common.sentences import ends_sentence, split_sentences


def words(*spec):
    return [{"word": w, "start": s, "end": e, "score": 0.9} for w, s, e in spec]


def test_sentence_ends_and_non_ends():
    assert ends_sentence("tea.") and ends_sentence("Really?!") and ends_sentence('"done."')
    for word in ("Mr.", "e.g.", "U.S.", "tbsp.", "water,", "and"):
        assert not ends_sentence(word), word


def test_split_at_sentence_ends_and_long_pauses():
    ws = words(("Fill", 0.0, 0.3), ("it.", 0.3, 0.6), ("Add", 0.8, 1.0), ("Mr.", 1.0, 1.2),
               ("Tea", 1.2, 1.5), ("now", 1.5, 1.8), ("then", 5.0, 5.2), ("stir!", 5.2, 5.5))
    segments = split_sentences(ws)
    assert [s["text"] for s in segments] == ["Fill it.", "Add Mr. Tea now", "then stir!"]
    assert [(s["start"], s["end"]) for s in segments] == [(0.0, 0.6), (0.8, 1.8), (5.0, 5.5)]
    assert segments[1]["words"] == ws[2:6]


def test_no_words_no_segments():
    assert split_sentences([]) == []
