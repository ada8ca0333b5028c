"""`vi transcribe`."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from vi.cli.app import app
from vi.cli.stage import stage_command
from vi.core.records import count_file, read_records
from vi.core.stream import Stage, StreamOptions, run_stage
from vi.pipelines.common import transcribe


@stage_command(
    app, "transcribe",
    summary="Speech to sentence-level segments with word times (WhisperX schema).",
    reads="[cyan]video[/cyan] or [cyan]audio[/cyan] (a media path), and [cyan]has_audio[/cyan] "
          "when vi probe set it.",
    writes="[cyan]transcript[/cyan] = {language, segments: [{start, end, text, words: [{word, "
           "start, end, score}]}], backend, model, word_timing}; a record without speech gets "
           "empty segments and a [cyan]note[/cyan].",
    example="vi probe videos/ | vi transcribe --model whisper-base | vi extract-steps",
    models=True,
)
def transcribe_command(
    opts: StreamOptions,
    model: Annotated[str, typer.Option(
        help="ASR model: an alias from `vi models`, a CTranslate2 model folder, a hub id or a "
             "faster-whisper size name (large-v2, small.en, ...) in the local hub cache.")
    ] = "whisper-tiny.en",
    backend: Annotated[str, typer.Option(help="whisperx or faster-whisper.")] = "whisperx",
    batch_size: Annotated[int, typer.Option(help="Audio chunks decoded together.")] = 8,
    beam_size: Annotated[int, typer.Option(help="Beam width of the decoder.")] = 5,
    language: Annotated[Optional[str], typer.Option(
        help="Language code (en, de, ...); detected per video when not given.")] = None,
    align_model: Annotated[str, typer.Option(
        help="Word alignment: auto (whisperx's wav2vec2 model for the language when it is in "
             "a local cache), none (Whisper's own word times), or a model alias/path/hub id.")
    ] = "auto",
    device: str = "auto",
    dtype: str = "auto",
):
    # Built before the stream starts: a bad option or a missing aligner stops the stage here
    # (exit 2 or 5) with nothing written, instead of failing every record the same way.
    # The ASR model itself loads on the first record that has audio.
    config = transcribe.TranscribeConfig(
        model=model, backend=backend, batch_size=batch_size, beam_size=beam_size,
        language=language, align_model=align_model, device=device, dtype=dtype,
        seed=opts.seed)
    stage = Stage(transcribe.STAGE, writes=("transcript",),
                  process=lambda record: transcribe.transcribe_record(record, config))
    return run_stage(stage, read_records(opts.input, transcribe.STAGE), opts,
                     total=lambda: count_file(opts.input, opts.shard))
