"""`vi transcribe`: speech to sentence-level segments with word times (WhisperX schema).

Backends:
- whisperx (default): VAD (whisperx's bundled pyannote model, offline), batched decoding,
  then word times from a wav2vec2 alignment model when one is available locally; otherwise
  from Whisper's own cross-attention (faster-whisper's DTW alignment) computed on the
  encoder output each batch already produced, so word timing costs no second encoder pass.
- faster-whisper: sequential (or batched) decoding with word_timestamps=True.
Both end in sentence-level segments: see `vi.pipelines.common.sentences`.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import logging
import os
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from vi.core import media
from vi.core.config import check_choices, internal, option
from vi.core.devices import Placement, resolve_placement, usable_cpus
from vi.core.errors import RecordError, SetupError
from vi.core.models import load_once
from vi.core.models.catalog import DEFAULT_ASR
from vi.core.models.resolve import resolve
from vi.core.progress import log
from vi.core.models.sources import cache_dir
from vi.core.stream import RecordStage
from vi.pipelines.common.sentences import ABBREVIATIONS, split_sentences

if TYPE_CHECKING:
    import numpy as np

STAGE = "transcribe"
BACKENDS = ("whisperx", "faster-whisper")
HOP = 160  # audio samples per mel frame at 16 kHz
WHISPER_WORD_TIMING = "whisper cross-attention (faster-whisper DTW)"
MIN_SPEECH_RMS = 1e-4  # below this the track is digital silence: nothing to decode


@dataclass(frozen=True, kw_only=True)
class TranscribeConfig:
    """The options of `vi transcribe`, checked when built: a bad one fails before any record.

    Everything that can be checked without loading the ASR model is checked here, so that a
    typo is one usage error (exit 2) or setup error (exit 5), not one error record per
    record. `placement` and `align_path` are derived once, here, and used as they are.
    """

    model: str = option(DEFAULT_ASR, help=(
        "ASR model: an alias from `vi models`, a CTranslate2 model folder, a hub id or a "
        "faster-whisper size name (large-v2, small.en, ...) in the local hub cache."))
    backend: str = option("whisperx", choices=BACKENDS, help="whisperx or faster-whisper.")
    batch_size: int = option(8, help="Audio chunks decoded together.")
    beam_size: int = option(5, help="Beam width of the decoder.")
    language: str | None = option(None, help="Language code (en, de, ...); detected per video when not given.")
    align_model: str = option("auto", help=(  # auto | none | alias, path or hub id of a wav2vec2 CTC model
        "Word alignment: auto (whisperx's wav2vec2 model for the language when it is in "
        "a local cache), none (Whisper's own word times), or a model alias/path/hub id."))
    device: str = "auto"
    dtype: str = "auto"
    seed: int = 0
    threads: int = internal(default_factory=usable_cpus)
    # Derived from the options above (so not part of equality or of the model cache key).
    placement: Placement = internal(init=False)
    align_path: str | None = internal(init=False)  # a named aligner, resolved

    def __post_init__(self) -> None:
        check_choices(self)
        if self.batch_size < 1:
            raise ValueError("--batch-size must be at least 1")
        if self.beam_size < 1:
            raise ValueError(f"--beam-size must be at least 1, got {self.beam_size}")
        _check_language(self.language)
        if not self.align_model:
            raise ValueError("--align-model must be auto, none, or a model alias, path or hub id")
        # The decoder is CTranslate2 in both backends: it decides which devices can work.
        object.__setattr__(self, "placement",
                           resolve_placement(self.device, self.dtype, engine="ctranslate2"))
        object.__setattr__(self, "align_path", _named_aligner(self.align_model))


def _check_language(language: str | None) -> None:
    from faster_whisper.tokenizer import _LANGUAGE_CODES  # a tuple; no model is loaded

    if language is not None and language not in _LANGUAGE_CODES:
        raise ValueError(f"--language must be a language code Whisper knows (en, de, fr, zh, "
                         f"...; {len(_LANGUAGE_CODES)} in all), got {language!r}")


def _named_aligner(ref: str) -> str | None:
    """The local path of an --align-model given by name; None for auto and none.

    A missing model, or a catalogue alias of another role (an ASR model, say), is a
    SetupError now rather than a failure after the first record's whole ASR pass.
    """
    if ref in ("auto", "none"):
        return None
    return str(resolve(ref, "alignment"))


class _RecordingGenerate:
    """Wraps CTranslate2's Whisper so each `generate` result (the tokens) stays readable."""

    def __init__(self, inner):
        self._inner = inner
        self.last = None

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def generate(self, *args, **kwargs):
        self.last = self._inner.generate(*args, **kwargs)
        return self.last


def _timed_model_class():
    from whisperx.asr import WhisperModel

    class TimedWhisperModel(WhisperModel):
        """whisperx's batched model, plus word times from each batch's own encoder output."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.model = _RecordingGenerate(self.model)
            self.chunk_frames: deque[int] = deque()  # content length of each chunk, in order
            self.chunk_words: list[list[dict]] = []  # words per chunk, times from chunk start
            self._encoded = None

        def encode(self, features):
            self._encoded = super().encode(features)
            return self._encoded

        def generate_segment_batched(self, features, tokenizer, options, encoder_output=None):
            out = super().generate_segment_batched(features, tokenizer, options, encoder_output)
            batch = features.shape[0] if features.ndim == 3 else 1
            frames = [self.chunk_frames.popleft() for _ in range(batch)]
            tokens = [[t for t in r.sequences_ids[0] if t < tokenizer.eot] for r in self.model.last]
            words: list[list[dict]] = [[] for _ in range(batch)]
            keep = [i for i in range(batch) if tokens[i]]
            if keep:
                segments = [[{"tokens": tokens[i], "seek": 0, "start": 0.0,
                              "end": frames[i] / self.frames_per_second}] for i in range(batch)]
                self.add_word_timestamps(segments, tokenizer, self._encoded, max(frames),
                                         options.prepend_punctuations,
                                         options.append_punctuations, 0.0)
                for i in keep:
                    words[i] = segments[i][0].get("words", [])
            self.chunk_words.extend(words)
            return out

    return TimedWhisperModel


def asr_model_path(name: str) -> str:
    """The CTranslate2 Whisper folder `name` names: a vi alias, a path, a hub id, or a
    faster-whisper size name ("large-v2"), from the local cache only (`resolve`'s asr role)."""
    return str(resolve(name, "asr"))


def _load_whisperx(config: TranscribeConfig):
    import whisperx
    from whisperx.log_utils import setup_logging

    # whisperx logs every VAD pass at INFO; keep that for --verbose. Its own set-up, done
    # now, stops its first get_logger() from resetting the level later.
    verbose = log.isEnabledFor(logging.DEBUG)
    setup_logging(level="info" if verbose else "warning")
    # pyannote's VAD checkpoint is "upgraded" in memory on every load: noise, not news.
    logging.getLogger("lightning.pytorch.utilities.migration.utils").setLevel(
        logging.INFO if verbose else logging.WARNING)

    path = asr_model_path(config.model)
    placement = config.placement  # CTranslate2 takes the device kind and index apart
    model = _timed_model_class()(path, device=placement.kind, device_index=placement.index,
                                 compute_type=placement.dtype,
                                 cpu_threads=config.threads, local_files_only=True)
    language = config.language or (None if model.model.is_multilingual else "en")
    pipe = whisperx.load_model(path, device=placement.kind, device_index=placement.index,
                               compute_type=placement.dtype,
                               language=language, vad_method="pyannote", model=model,
                               asr_options={"beam_size": config.beam_size},
                               local_files_only=True, threads=config.threads)
    preprocess = pipe.preprocess

    def preprocess_and_measure(inputs):  # chunks are preprocessed in order (num_workers=0)
        model.chunk_frames.append(min(3000, -(-len(inputs["inputs"]) // HOP)))
        return preprocess(inputs)

    pipe.preprocess = preprocess_and_measure
    return pipe


def _load_faster_whisper(config: TranscribeConfig):
    from faster_whisper import BatchedInferencePipeline, WhisperModel

    path = asr_model_path(config.model)
    placement = config.placement
    model = WhisperModel(path, device=placement.kind, device_index=placement.index,
                         compute_type=placement.dtype,
                         cpu_threads=config.threads, local_files_only=True)
    return model, BatchedInferencePipeline(model)


def _align_model_path(config: TranscribeConfig, language: str) -> str | None:
    """The local wav2vec2 model for `language`, or None (then words come from Whisper)."""
    if config.align_model == "none":
        return None
    if config.align_model != "auto":
        return config.align_path  # resolved once, when the config was built
    bundles, hub_models = default_aligners()
    if language in bundles:
        import torch
        import torchaudio

        bundle = getattr(torchaudio.pipelines, bundles[language])
        cached = os.path.join(torch.hub.get_dir(), "checkpoints", os.path.basename(bundle._path))
        return bundles[language] if os.path.exists(cached) else None
    if language in hub_models:
        from vi.core.models.sources import hub_snapshot

        found = hub_snapshot(hub_models[language])
        return str(found) if found else None
    return None


@functools.cache
def default_aligners() -> tuple[dict[str, str], dict[str, str]]:
    """whisperx's default wav2vec2 aligner of each language (torchaudio bundles, hub ids), read from
    whisperx/alignment.py's source: importing it (nltk, pandas, transformers' wav2vec2) costs 0.5 s
    of every `vi transcribe`'s start even when, as offline by default, no aligner is there to load."""
    spec = importlib.util.find_spec("whisperx.alignment")
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    found = {target.id: ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
             for target in node.targets if isinstance(target, ast.Name)
             and target.id in ("DEFAULT_ALIGN_MODELS_TORCH", "DEFAULT_ALIGN_MODELS_HF")}
    return found["DEFAULT_ALIGN_MODELS_TORCH"], found["DEFAULT_ALIGN_MODELS_HF"]


def _ensure_punkt(language: str) -> None:
    """whisperx.align splits sentences with NLTK's punkt_tab data, which NLTK downloads.

    Offline that download fails on every record, so when the data is missing vi writes a
    minimal Punkt model (its own abbreviation list, no learned statistics) into its cache
    and puts that on NLTK's search path. The full model, where a user has it, wins.
    """
    import nltk
    from whisperx.alignment import PUNKT_LANGUAGES

    lang = PUNKT_LANGUAGES.get(language, "english")
    try:
        nltk.data.find(f"tokenizers/punkt_tab/{lang}/")
        return
    except LookupError:
        pass
    root = cache_dir().parent / "nltk_data"
    folder = root / "tokenizers" / "punkt_tab" / lang
    if not (folder / "abbrev_types.txt").exists():
        folder.mkdir(parents=True, exist_ok=True)
        abbreviations = sorted(a.rstrip(".") for a in ABBREVIATIONS)
        (folder / "abbrev_types.txt").write_text("\n".join(abbreviations) + "\n")
        for name in ("collocations.tab", "sent_starters.txt", "ortho_context.tab"):
            (folder / name).write_text("")
    if str(root) not in nltk.data.path:
        nltk.data.path.append(str(root))
    log.warning("NLTK's punkt_tab data is not installed: whisperx alignment splits sentences "
                "with vi's minimal Punkt model; run nltk.download('punkt_tab') on a machine "
                "with internet for the full one")


def _load_aligner(config: TranscribeConfig, language: str):
    """(model, metadata, name) of the wav2vec2 aligner for `language`, or None.

    A model that does not load (not a wav2vec2 CTC model, a corrupt folder) fails every
    record the same way, so it stops the stage (SetupError) instead of failing each record
    after its ASR pass.
    """
    name = _align_model_path(config, language)
    if name is None:
        return None
    import whisperx

    _ensure_punkt(language)
    try:
        # the whole device string: "cuda:1" keeps the aligner on the ASR model's GPU
        model, metadata = whisperx.load_align_model(language, config.placement.device,
                                                    model_name=name, model_cache_only=True)
    except Exception as exc:
        raise SetupError(f"could not load alignment model {config.align_model!r} ({name}) for "
                         f"language {language!r}: {type(exc).__name__}: {exc}. --align-model "
                         "takes a wav2vec2 CTC model (alias, folder or hub id), auto or none"
                         ) from exc
    return model, metadata, name


def _timed(word: dict) -> bool:
    return word.get("start") is not None and word.get("end") is not None


def _words(raw: list[dict], offset: float = 0.0, fallback: float | None = None) -> list[dict]:
    """Our word schema; times shifted by `offset`.

    A word without times (the aligner cannot place a numeral) borrows the previous word's
    end, or `fallback` (the segment's start; `offset` when not given) when it comes first.
    """
    out = []
    for w in raw:
        text = str(w.get("word", "")).strip()
        if not text:
            continue
        start, end = w.get("start"), w.get("end")
        if not _timed(w):
            start = end = out[-1]["end"] if out else (offset if fallback is None else fallback)
        else:
            start, end = start + offset, end + offset
        score = w.get("probability", w.get("score"))
        out.append({"word": text, "start": round(float(start), 3), "end": round(float(end), 3),
                    "score": None if score is None else round(float(score), 4)})
    return out


def _aligned_segment(seg: dict) -> dict:
    """One segment of whisperx.align's output in our schema.

    Its bounds come from the words the aligner timed; a segment it could not place at all
    keeps its text and its own times. Untimed words (numerals) fall back to the segment's
    start, never to 0.0.
    """
    raw = [w for w in seg.get("words", []) if str(w.get("word", "")).strip()]
    timed = [w for w in raw if _timed(w)]
    start = min(float(w["start"]) for w in timed) if timed else float(seg["start"])
    end = max(float(w["end"]) for w in timed) if timed else float(seg["end"])
    return {"start": round(start, 3), "end": round(end, 3), "text": str(seg["text"]).strip(),
            "words": _words(raw, fallback=start)}


def _seed_decoder(seed: int) -> None:
    """Make decoding reproducible: CTranslate2 samples when its temperature fallback kicks in.

    Its generators are per thread and take this seed when first used (later calls do not
    reseed them), so it is set before the model decodes anything.
    """
    import ctranslate2

    ctranslate2.set_random_seed(seed % 2**32)


class Transcriber:
    """One loaded backend; `__call__` turns 16 kHz audio into the transcript field."""

    def __init__(self, config: TranscribeConfig):
        self.config = config
        _seed_decoder(config.seed)
        loader = _load_whisperx if config.backend == "whisperx" else _load_faster_whisper
        try:
            self.engine = loader(config)
        except SetupError:
            raise
        except Exception as exc:  # a corrupt model folder, a missing CUDA library, ...
            raise SetupError(f"could not load ASR model {config.model!r} with the "
                             f"{config.backend} backend: {type(exc).__name__}: {exc}") from exc
        log.info("transcribe: %s (%s) on %s/%s", config.model, config.backend,
                 config.placement.device, config.placement.dtype)

    def __call__(self, audio: np.ndarray) -> dict:
        if self.config.backend == "whisperx":
            language, segments, timing = self._whisperx(audio)
        else:
            language, segments, timing = self._faster_whisper(audio)
        if not segments:
            return transcript(self.config, language, [], None, note="no speech detected")
        return transcript(self.config, language, segments, timing)

    def _whisperx(self, audio: np.ndarray):
        pipe = self.engine
        pipe.model.chunk_frames.clear()
        pipe.model.chunk_words = []
        out = pipe.transcribe(audio, batch_size=self.config.batch_size,
                              language=self.config.language, num_workers=0)
        language, chunks = out["language"], out["segments"]
        aligner = load_once(("align", self.config, language),
                            lambda: _load_aligner(self.config, language))
        if aligner is not None and chunks:
            import whisperx

            model, metadata, name = aligner
            aligned = whisperx.align(chunks, model, metadata, audio, self.config.placement.device,
                                     return_char_alignments=False)
            segments = [_aligned_segment(seg) for seg in aligned["segments"]]
            return language, segments, f"wav2vec2 alignment ({name})"
        words = [w for chunk, raw in zip(chunks, pipe.model.chunk_words)
                 for w in _words(raw, chunk["start"])]
        return language, split_sentences(words), WHISPER_WORD_TIMING

    def _faster_whisper(self, audio: np.ndarray):
        model, batched = self.engine
        language = self.config.language or (None if model.model.is_multilingual else "en")
        options = dict(language=language, beam_size=self.config.beam_size, word_timestamps=True,
                       vad_filter=True)
        if self.config.batch_size > 1:
            segments, info = batched.transcribe(audio, batch_size=self.config.batch_size, **options)
        else:
            segments, info = model.transcribe(audio, **options)
        words = [w for seg in segments for w in _words([x._asdict() for x in seg.words or []])]
        return info.language, split_sentences(words), WHISPER_WORD_TIMING


def audio_source(record: dict) -> str:
    for key in ("audio", "video"):
        if isinstance(record.get(key), str) and record[key]:
            return record[key]
    raise RecordError("missing_field", "record has neither 'video' nor 'audio'; "
                      "run vi probe first or add the media path")


def transcript(config: TranscribeConfig, language: str | None, segments: list[dict],
               word_timing: str | None, note: str | None = None) -> dict:
    """The transcript field: the same keys whether or not there was speech to transcribe."""
    out = {"language": language, "segments": segments, "backend": config.backend,
           "model": config.model, "word_timing": word_timing}
    if note is not None:
        out["note"] = note
    return out


def rms(audio: np.ndarray) -> float:
    """Root mean square, without the float64 copies `audio ** 2` would make (an hour of
    16 kHz audio is 230 MB of float32)."""
    import numpy as np

    return float(np.sqrt(float(np.dot(audio, audio)) / audio.size)) if audio.size else 0.0


def transcribe_record(record: dict, config: TranscribeConfig) -> dict:
    path = audio_source(record)
    has_audio = record.get("has_audio")
    if has_audio is None:
        has_audio = media.probe(path).has_audio
    if not has_audio:  # nothing to decode: the ASR model is not even loaded
        return {"transcript": transcript(config, None, [], None, note="no audio track")}
    audio = media.read_audio(path)
    if rms(audio) < MIN_SPEECH_RMS:
        return {"transcript": transcript(config, None, [], None, note="audio is silent")}
    transcriber = load_once(("transcriber", config), lambda: Transcriber(config))
    return {"transcript": transcriber(audio)}


TRANSCRIBE = RecordStage(
    STAGE,
    reads="[cyan]video[/cyan] or [cyan]audio[/cyan] (a media path), and [cyan]has_audio[/cyan] "
          "when vi probe set it.",
    writes="[cyan]transcript[/cyan] = {language, segments: [{start, end, text, words: [{word, "
           "start, end, score}]}], backend, model, word_timing}; a record without speech gets "
           "empty segments and a [cyan]note[/cyan].",
    example="vi probe videos/ | vi transcribe --model whisper-base | vi extract-steps",
    config=TranscribeConfig, fields=("transcript",), process=transcribe_record)
