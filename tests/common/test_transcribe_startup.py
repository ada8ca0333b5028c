"""`vi transcribe` starts no slower than the raw whisperx script: with --align-model auto and no
aligner in the cache (offline, the default) it does not import whisperx.alignment (nltk, pandas,
transformers' wav2vec2: 0.5 s) only to learn the default aligners' names."""

import subprocess
import sys

from vi.pipelines.common import transcribe


def test_default_aligners_are_whisperx_own():
    import whisperx.alignment

    assert transcribe.default_aligners() == (whisperx.alignment.DEFAULT_ALIGN_MODELS_TORCH,
                                             whisperx.alignment.DEFAULT_ALIGN_MODELS_HF)


def test_looking_for_the_default_aligner_imports_no_alignment_code():
    done = subprocess.run([sys.executable, "-c", """
import sys
from vi.pipelines.common import transcribe
config = transcribe.TranscribeConfig(device="cpu")
transcribe._align_model_path(config, "ja")  # a hub model: looked up in the local cache only
print("whisperx.alignment" in sys.modules, "nltk" in sys.modules)
"""], capture_output=True, text=True, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"]
