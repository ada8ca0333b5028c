"""`vi encode-videos`: a frozen video encoder runs once per clip; its tokens go to a feature store.

Training and scoring then read tensors instead of decoding video again. Records arrive in chunks of
`chunk_size`; each chunk's new tensors are written as one store chunk (atomically) before its records are
returned, so a record on the output always has its tensor on disk. After a kill, `--resume` skips the
records already in --output, and the clips whose chunk was written but whose records were not are found
in the store and not encoded again: exactly once, either way. A clip already in the store (an id the
store has, from an earlier run or rank) keeps its tensor unless `overwrite_features`.

A record is a clip (`video`, with `start` and `end` in seconds, or neither for the whole video) or an
image (`image`: a still clip, StepDiff's image-caption pretraining); `video` wins where both are given.
"""

from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from vi.core import media
from vi.core.config import check_choices, internal, option
from vi.core.devices import Placement, resolve_placement, usable_cpus
from vi.core.errors import RecordError, SetupError
from vi.core.features import STORE_DTYPES, FeatureStore, FeatureWriter, check_info
from vi.core.models.catalog import DEFAULT_VIDEO_ENCODER
from vi.core.models.resolve import resolve
from vi.core.records import finite_number
from vi.pipelines.stepdiff import video_encoder as ve
from vi.pipelines.stepdiff.describe import clip_span

STAGE = "encode-videos"
DECODE_THREADS = usable_cpus()
PROBE_CACHE = 4096  # videos whose size and length are remembered: clips of one video arrive together


@dataclass(frozen=True, kw_only=True)
class EncodeConfig:
    """The options of `vi encode-videos`, checked when built: a bad value fails before any record (exit
    2), a missing model or a store of another encoder too (exit 5). The model loads on first use."""

    store: Path = option(help=(
        "Feature store folder (made where absent): encoder.json and chunk-*.safetensors. Several runs "
        "and Slurm array ranks may share one, if they use the same encoder and --frames."))
    encoder: str = option(DEFAULT_VIDEO_ENCODER, help=(
        "open_clip:REF (a CLIP alias from `vi models`, a folder, a checkpoint with --clip-arch, "
        "hf-hub:org/name or NAME:TAG): a ViT's patch tokens per frame; efficientnet-lite0: its 7x7 "
        "feature map per frame (embedded, offline); hf:FOLDER_OR_HUB_ID: a transformers video model "
        "(VideoMAE, TimeSformer, ViViT), its last_hidden_state over the whole clip."))
    clip_arch: str | None = option(None, help=(
        "With --encoder open_clip:CHECKPOINT_FILE: its open_clip architecture name or model config .json."))
    frames: int = option(8, help="Frames per clip, sampled uniformly inside it.")
    chunk_size: int = option(64, help=(
        "Clips per store chunk: each chunk is written (atomically) before its records go out."))
    batch_size: int = option(64, help="Frames per forward pass of the encoder.")
    store_dtype: str = option("float16", choices=STORE_DTYPES, help=(
        "Number format of the stored tokens: float16, bfloat16 or float32."))
    overwrite_features: bool = option(False, flag="--overwrite-features", help=(
        "Encode clips the store already has again (the new chunk's copy is the one read)."))
    device: str = "auto"
    dtype: str = "auto"
    spec: ve.EncoderSpec = internal(init=False)
    placement: Placement = internal(init=False)

    def __post_init__(self) -> None:
        if self.chunk_size < 1 or self.batch_size < 1:
            raise ValueError("--chunk-size and --batch-size must be at least 1")
        check_choices(self)
        if self.store.exists() and not self.store.is_dir():
            raise ValueError(f"--store {self.store} is a file; give a folder (made where absent)")
        object.__setattr__(self, "placement", resolve_placement(self.device, self.dtype, engine="torch"))
        object.__setattr__(self, "spec", resolve(self.encoder, "video-encoder", clip_arch=self.clip_arch,
                                                  frames=self.frames))
        check_info(self.store, self.spec.identity)  # another encoder's store: refused before any record


class Encoder:
    """The stage's state across chunks: the model, the writer and what the store holds, each made once."""

    def __init__(self, config: EncodeConfig):
        self.config = config
        self._model: ve.VideoEncoder | None = None
        self._writer: FeatureWriter | None = None
        self._known: dict[str, tuple[str, list[int]]] | None = None  # id -> (chunk file, shape)
        self._pool: ThreadPoolExecutor | None = None

    @property
    def model(self) -> ve.VideoEncoder:
        if self._model is None:
            self._model = ve.load_video_encoder(self.config.spec, self.config.placement)
        return self._model

    def known(self) -> dict[str, tuple[str, list[int]]]:
        if self._known is None:  # read once: other ranks write other ids, and this one adds its own below
            known = {}
            if self.config.store.is_dir() and not self.config.overwrite_features:
                store = FeatureStore(self.config.store)
                known = {i: (store.file(i).name, list(store.shape(i))) for i in store.ids()}
            self._known = known  # only once read whole: a failed read is tried again, not taken as "empty"
        return self._known

    def write(self, tensors: dict) -> str:
        if self._writer is None:
            self._writer = FeatureWriter(self.config.store, self.model.info, self.config.store_dtype)
        name = self._writer.write(tensors)
        self.known().update({i: (name, list(t.shape)) for i, t in tensors.items()})
        return name

    def fields(self, clip_id: str) -> dict:
        name, shape = self.known()[clip_id]
        return {"features": {"store": str(self.config.store), "file": name, "shape": shape,
                             "encoder": self.config.spec.ref}}

    def __call__(self, records: list[dict]) -> list[dict | Exception]:
        import torch

        ids = [str(r["id"]) for r in records]
        first = {clip_id: n for n, clip_id in reversed(list(enumerate(ids)))}  # an id twice is encoded once
        pending = [n for clip_id, n in first.items() if clip_id not in self.known()]
        model = self.model if pending else None  # loaded on the first chunk that needs it
        read = self._decoders().map(lambda n: _read(records[n], model), sorted(pending))
        frames = dict(zip(sorted(pending), read))
        failed = {n: got for n, got in frames.items() if isinstance(got, Exception)}
        todo = {ids[n]: got for n, got in frames.items() if n not in failed}
        if todo:
            dtype = getattr(torch, self.config.store_dtype)  # cast per forward: a chunk's tokens stay small
            tokens = self.model.encode(list(todo.values()), self.config.batch_size, dtype)
            self.write(dict(zip(todo, tokens)))  # on disk before any of these records goes out
        return [failed[first[i]] if first[i] in failed else self.fields(i) for i in ids]

    def _decoders(self) -> ThreadPoolExecutor:
        # decoding is the slow part beside a GPU: decord and ffprobe work outside the GIL, so threads overlap
        if self._pool is None:
            self._pool = ThreadPoolExecutor(DECODE_THREADS, thread_name_prefix="decode")
        return self._pool


def _read(record: dict, model: ve.VideoEncoder):
    try:
        return read_clip(record, model)
    except SetupError:  # no ffprobe, say: nothing any record can get past
        raise
    except Exception as exc:  # noqa: BLE001 -- this record's failure (the driver names it), not the chunk's
        return exc


@functools.lru_cache(maxsize=PROBE_CACHE)
def _probe(video: str) -> media.MediaInfo:
    return media.probe(video)


def _lengths(video: str) -> float:
    return _probe(video).duration


def read_clip(record: dict, encoder: ve.VideoEncoder):
    """The frames the encoder takes for a record: a clip's `frames` samples, or an image once."""
    video, image = record.get("video"), record.get("image")
    if not video and isinstance(image, str) and image:
        return ve.image_frames(image)
    if not isinstance(video, str) or not video:
        raise RecordError("missing_field", f"record {record['id']}: no 'video' (nor 'image') path; vi "
                          "encode-videos reads vi clips records, or records with an image")
    given = [name for name in ("start", "end") if record.get(name) is not None]
    for name in given:
        if finite_number(record[name]) is None:
            raise RecordError("missing_field", f"clip {record['id']}: '{name}' is {record[name]!r}, not a "
                              "time in seconds")
    if len(given) == 1:
        raise RecordError("missing_field", f"clip {record['id']}: has '{given[0]}' but no "
                          f"'{({'start', 'end'} - set(given)).pop()}'; give both, or neither for the whole video")
    if given:  # checked against the video's length: times outside it are an error, not a clamp
        video, start, end = clip_span(record, _lengths)
    else:
        start, end = None, None
    media.check_readable(video)
    return ve.clip_frames(encoder, video, start, end, _probe(video))
