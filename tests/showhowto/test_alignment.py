"""The wav2vec2 word-alignment path of `vi transcribe`, on a tiny randomly initialised model.

No real alignment weights can be had offline, so this proves the code path (loading a local
model folder, running whisperx.align, turning its output into our schema), not accuracy.
"""

import json
import string

import pytest

from conftest import jsonl, run_vi
from vi.core.media import probe

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny_wav2vec2(tmp_path_factory):
    from transformers import (Wav2Vec2Config, Wav2Vec2CTCTokenizer, Wav2Vec2FeatureExtractor,
                              Wav2Vec2ForCTC, Wav2Vec2Processor)

    folder = tmp_path_factory.mktemp("tiny-wav2vec2")
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3, "|": 4}
    vocab.update({c: i + 5 for i, c in enumerate(string.ascii_lowercase + "'")})
    (folder / "vocab.json").write_text(json.dumps(vocab))
    tokenizer = Wav2Vec2CTCTokenizer(str(folder / "vocab.json"), word_delimiter_token="|")
    extractor = Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=16000, padding_value=0.0,
                                         do_normalize=True, return_attention_mask=False)
    Wav2Vec2Processor(feature_extractor=extractor, tokenizer=tokenizer).save_pretrained(folder)
    config = Wav2Vec2Config(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2,
                            num_attention_heads=2, intermediate_size=64, conv_dim=(16,) * 7,
                            num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2,
                            pad_token_id=0)
    Wav2Vec2ForCTC(config).save_pretrained(folder)
    return folder


def test_align_model_from_a_local_folder_gives_word_times_in_our_schema(tea, tiny_wav2vec2):
    record = json.dumps({"id": "tea", "video": str(tea)})
    done = run_vi("transcribe", "-q", "--align-model", str(tiny_wav2vec2), stdin=record + "\n")
    assert done.returncode == 0, done.stderr
    (out,) = jsonl(done.stdout)
    transcript = out["transcript"]
    assert transcript["word_timing"].startswith("wav2vec2 alignment")
    segments = transcript["segments"]
    heard = " ".join(s["text"] for s in segments).lower()
    assert len(segments) >= 3 and "tea" in heard and "water" in heard  # whisper's text kept
    duration = probe(tea).duration
    assert any(segment["words"] for segment in segments)
    for segment in segments:
        assert segment["text"]  # kept even where the aligner placed no word
        assert 0 <= segment["start"] <= segment["end"] <= duration
        times = [(w["start"], w["end"]) for w in segment["words"]]
        assert all(start <= end for start, end in times)
        assert [s for s, _ in times] == sorted(s for s, _ in times)
        assert set(segment["words"][0]) == {"word", "start", "end", "score"}


def test_a_missing_align_model_is_a_setup_error(tea, tmp_path):
    record = json.dumps({"id": "tea", "video": str(tea)})
    done = run_vi("transcribe", "-q", "--align-model", "someorg/no-such-aligner",
                  env={"HF_HUB_CACHE": str(tmp_path)}, stdin=record + "\n")
    assert done.returncode == 5 and "someorg/no-such-aligner" in done.stderr
