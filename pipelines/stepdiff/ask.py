"""`vi ask`: a trained StepDiff model answers a question about a pair of clips.

A record asks {"reference", "candidate", "question", "seed"?}; each clip is one of
- a clip id: its encoder tokens come from a feature store given with --features;
- a video (or image) path: encoded here with the checkpoint's encoder (the whole video);
- a clip record {id?, video | image, start?, end?, features?: {store}} (what vi clips and vi pair
  write): the tokens of its id where a store has them (--features, or the store the record names,
  as vi train reads them), else its video from start to end (or its image), encoded here.
The model only ever reads tokens of the encoder it was trained on: a feature store of another
encoder is refused, and clips encoded here use the encoder the checkpoint names (its model.json).
A clip encoded here is kept for the rest of the process (by path and times), so a clip that
several records ask about is encoded once.

The answer continues the record's `seed` text (if any; else --seed-text) until the model's end
of turn: greedy, or sampled (--sample) with a generator seeded from (--seed, record id), so a
record's answer does not depend on its shard or on a resume. `answer` is the seed text followed
by the continuation.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from vi.core.config import option
from vi.core.devices import Placement, resolve_placement
from vi.core.errors import RecordError
from vi.core.features import INFO_FILE, FeatureStore, differing_keys, read_info
from vi.core.models.cache import load_once
from vi.core.seeding import record_seed

STAGE = "ask"
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".tif", ".tiff")
CACHED_CLIPS = 256  # clips encoded here, kept in memory (most recently used)


# --- the checkpoint -------------------------------------------------------------------------------

def resolve_checkpoint(path: Path) -> Path:
    """The checkpoint folder `--checkpoint` means: itself, or the newest one of a run folder."""
    from vi.pipelines.stepdiff.train import latest_checkpoint

    path = Path(path)
    if not path.is_dir():
        raise ValueError(f"--checkpoint {path}: no such folder; give a run folder of vi train stepdiff (-o RUN) "
                         "or one of its checkpoints/step-N folders")
    found = latest_checkpoint(path)
    if found is None:
        raise ValueError(f"--checkpoint {path}: neither a checkpoint (with model.json) nor a run folder with a "
                         "complete checkpoints/step-N; has vi train stepdiff saved one yet (--save-every)?")
    return found


def load_model(folder: Path, placement: Placement):
    """The trained model, built once per process (its LLM too: shared with anything else loading it)."""
    from vi.pipelines.stepdiff.model import StepDiffModel

    key = ("stepdiff-model", str(Path(folder).resolve()), placement)
    return load_once(key, lambda: StepDiffModel.from_checkpoint(folder, placement))


def check_store(store: Path, expected: dict, checkpoint: Path, option: str = "--features") -> None:
    """Refuse a feature store whose encoder is not the one the checkpoint was trained on (ValueError)."""
    found = read_info(store)
    if found is None:
        raise ValueError(f"{option} {store}: no {INFO_FILE}, so not a feature store of vi encode-videos (or nothing "
                         "was encoded into it yet)")
    differ = differing_keys(found, expected)
    if differ:
        def show(info: dict) -> str:
            return ", ".join(f"{k}={info[k]!r}" for k in differ)
        raise ValueError(f"{option} {store} holds features of encoder {found.get('encoder')!r} ({show(found)}), but "
                         f"the checkpoint {checkpoint} was trained on {expected.get('encoder')!r} ({show(expected)}): "
                         "give a store that encoder made (vi encode-videos with the same options), or leave it out "
                         "and let the clips be encoded here")


# --- clips to encoder tokens ----------------------------------------------------------------------

def _time(value, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RecordError("bad_field", f"{name} must be a number of seconds, not {value!r}")
    return float(value)


class ClipFeatures:
    """Encoder tokens (frames, tokens, dim) of clips, for a model trained on `encoder` (its info dict):
    from feature stores (checked to hold that encoder's tokens), or encoded here with that encoder."""

    def __init__(self, encoder: dict, stores: list[Path], placement: Placement, checkpoint: Path,
                 cache_size: int = CACHED_CLIPS):
        self.info, self.placement, self.checkpoint = encoder, placement, checkpoint
        for store in stores:
            check_store(Path(store), encoder, checkpoint)
        self.store = FeatureStore(stores) if stores else None
        self._named: dict[str, FeatureStore | RecordError] = {}  # stores that records name
        self._encoded: OrderedDict[tuple, object] = OrderedDict()
        self.cache_size = cache_size

    @property
    def encoder(self):
        from vi.pipelines.stepdiff.video_encoder import load_video_encoder_from_info

        return load_video_encoder_from_info(self.info, self.placement)  # built once (load_once)

    def stored(self, clip_id: object) -> bool:
        return self.store is not None and clip_id in self.store

    def get(self, clip_id: object):
        return self.store.get(clip_id)

    def encoded(self, path: str | Path, start: float | None = None, end: float | None = None,
                image: bool = False):
        """The tokens of `path` from `start` to `end` (the whole video where None), encoded here once."""
        from vi.core import media
        from vi.pipelines.stepdiff import video_encoder as ve

        media.check_readable(path)  # a missing file fails its record before the encoder loads
        key = (str(Path(path).resolve()), start, end, image)
        if key in self._encoded:
            self._encoded.move_to_end(key)
            return self._encoded[key]
        tokens = ve.encode_image(self.encoder, path) if image else ve.encode_video(self.encoder, path, start, end)
        self._encoded[key] = tokens
        while len(self._encoded) > self.cache_size:
            self._encoded.popitem(last=False)
        return tokens

    def _named_store(self, store: str, field: str) -> FeatureStore:
        if store not in self._named:
            try:
                if not Path(store).is_dir():
                    raise ValueError(f"feature store {store}: no such folder")
                check_store(Path(store), self.info, self.checkpoint, option="feature store")
                self._named[store] = FeatureStore([store])
            except ValueError as exc:
                self._named[store] = RecordError("wrong_features", f"{field}.features.store: {exc}")
        found = self._named[store]
        if isinstance(found, RecordError):
            raise found
        return found

    def tokens(self, value, field: str):
        """The tokens of a record's clip (`field` names it in errors): see the module's docstring."""
        try:
            return self._tokens(value, field)
        except RecordError as exc:
            if exc.message.startswith(field):
                raise
            raise RecordError(exc.kind, f"{field}: {exc.message}") from None

    def _tokens(self, value, field: str):
        if value is None or value == "" or value == {}:
            raise RecordError("missing_field", f"{field} is missing: give a clip id, a video path or a clip record")
        if isinstance(value, str):
            if self.stored(value):
                return self.get(value)
            path = Path(value).expanduser()
            if path.is_file():
                return self.encoded(path, image=path.suffix.lower() in IMAGE_EXTENSIONS)
            where = (f"a clip id of --features {', '.join(map(str, self.store.paths))}" if self.store is not None
                     else "a clip id (no --features store was given to look it up in)")
            raise RecordError("unknown_clip", f"{field} {value!r} is neither {where} nor a video file")
        if not isinstance(value, dict):
            raise RecordError("bad_field", f"{field} must be a clip id, a video path or a clip record, not "
                              f"{type(value).__name__}")
        clip_id = value.get("id")
        if clip_id is not None and self.stored(clip_id):
            return self.get(clip_id)
        named = value.get("features")
        if clip_id is not None and isinstance(named, dict) and isinstance(named.get("store"), str):
            store = self._named_store(named["store"], field)
            if clip_id in store:
                return store.get(clip_id)
        if value.get("video"):
            return self.encoded(str(value["video"]), _time(value.get("start"), f"{field}.start"),
                                _time(value.get("end"), f"{field}.end"))
        if value.get("image"):
            return self.encoded(str(value["image"]), image=True)
        stores = "the feature stores given" if self.store is not None or isinstance(named, dict) else "--features"
        raise RecordError("unknown_clip", f"{field}: clip {clip_id!r} has no tokens in {stores}, and no video or "
                          "image to encode")


# --- the stage ------------------------------------------------------------------------------------

GENERATION_PANEL = "Generation"


@dataclass(frozen=True, kw_only=True)
class AskConfig:
    """The options of `vi ask`, checked when the Asker is built (before any record)."""

    checkpoint: Path = option(exists=True, file_okay=False, show_default=False, help=(
        "A run folder of vi train stepdiff (its newest checkpoint is used) or one checkpoints/step-N folder."))
    features: tuple[Path, ...] = option((), metavar="DIR", exists=True, file_okay=False, help=(
        "A feature store (vi encode-videos --store) to look clip ids up in; repeatable. Its encoder must be "
        "the one the checkpoint was trained on."))
    max_new_tokens: int = option(64, min=1, panel=GENERATION_PANEL, help="Longest answer, in tokens.")
    sample: bool = option(False, flag="--sample/--greedy", panel=GENERATION_PANEL, help=(
        "Sample the answer (seeded per record from --seed and its id), or take the likeliest token each time."))
    temperature: float = option(1.0, panel=GENERATION_PANEL, help="Sampling temperature (with --sample).")
    top_p: float = option(1.0, panel=GENERATION_PANEL, help=(
        "Nucleus sampling: keep the likeliest tokens up to this probability (with --sample)."))
    seed_text: str = option("", panel=GENERATION_PANEL, help=(
        "Text every answer starts with, for the model to continue (a record's own seed field wins), "
        "e.g. \"In Video 2,\"."))
    device: str = "auto"
    dtype: str = "auto"
    seed: int = 0


class Asker:
    """Checks the options when built (a bad one is a ValueError before any record); the model loads
    on the first record."""

    def __init__(self, config: AskConfig):
        from vi.pipelines.stepdiff.model import ModelConfig

        if config.max_new_tokens < 1:
            raise ValueError(f"--max-new-tokens must be at least 1, got {config.max_new_tokens}")
        if not config.sample and (config.temperature, config.top_p) != (AskConfig.temperature, AskConfig.top_p):
            raise ValueError("--temperature and --top-p shape sampling: give them with --sample")
        if config.temperature <= 0:
            raise ValueError(f"--temperature must be above 0, got {config.temperature}")
        if not 0 < config.top_p <= 1:
            raise ValueError(f"--top-p must be in (0, 1], got {config.top_p}")
        self.config = config
        self.folder = resolve_checkpoint(config.checkpoint)
        self.model_config = ModelConfig.load(self.folder)
        self.placement = resolve_placement(config.device, config.dtype, engine="torch")
        self.clips = ClipFeatures(self.model_config.encoder, list(config.features), self.placement, self.folder)

    @property
    def model(self):
        return load_model(self.folder, self.placement)

    def ask(self, record: dict) -> dict:
        question = record.get("question")
        if not isinstance(question, str) or not question.strip():
            raise RecordError("missing_field", "question is missing: give the question to ask about the two clips")
        seed_text = record.get("seed", self.config.seed_text)
        if seed_text is None:
            seed_text = ""
        if not isinstance(seed_text, str):
            raise RecordError("bad_field", f"seed must be the text the answer starts with, not {seed_text!r}")
        features = {"reference": self.clips.tokens(record.get("reference"), "reference"),
                    "candidate": self.clips.tokens(record.get("candidate"), "candidate")}
        model = self.model
        sequence, _ = model.format.pair_question(question.strip(), ("reference", "candidate"), seed=seed_text)
        text = model.generate(sequence, features, self.config.max_new_tokens, self.config.sample,
                              self.config.temperature, self.config.top_p, record_seed(self.config.seed, record["id"]))
        return {"answer": (seed_text + text).strip()}
