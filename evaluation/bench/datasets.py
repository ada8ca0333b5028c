"""`make bench` section l: from video ids to the papers' datasets.

- `vi rebuild showhowto`'s frame cutting (`frames_of`) against the release's README recipe (one
  ffmpeg process per frame, each decoding from the video's start), on the same videos and
  keyframes: frames per second of each, and whether every frame's bytes are the same. The videos
  are 360p H.264 at 30 fps with B-frames and 2 s GOPs, as YouTube serves HowTo100M at the papers'
  scale, but shorter (HowTo100M's average is about 6.5 minutes): the recipe's cost grows with a
  video's length and a seeking pass's does not, so short videos understate the ratio.
- `vi download` (the stage driver, yt-dlp inside) against the local video server with 1 and 8
  downloads in flight; the server waits `LATENCY_S` before each answer and sends each response at
  `BYTES_PER_S`, as a remote host does (at full local speed yt-dlp's own CPU time is all there is
  to measure).

    python -m vi.evaluation.bench.datasets [--videos 3] [--repeats 2] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import tempfile
from pathlib import Path

VIDEO_S = 60
KEYFRAMES_PER_VIDEO = 8
DOWNLOADS = 16
LATENCY_S = 0.2
BYTES_PER_S = 2_000_000


def make_videos(folder: Path, count: int, seconds: int = VIDEO_S) -> list[Path]:
    """Moving test patterns (every frame differs, as a filmed video's do), each in its own hue."""
    videos = []
    for i in range(count):
        path = folder / f"bench{i:02d}.mp4"
        if not path.exists():
            subprocess.run(["ffmpeg", "-y", "-v", "error", "-f", "lavfi", "-i",
                            f"testsrc2=size=640x360:rate=30:duration={seconds}", "-vf", f"hue=h={i * 90}",
                            "-c:v", "libx264", "-preset", "veryfast", "-g", "60", "-bf", "2", "-pix_fmt", "yuv420p",
                            str(path)], check=True)
        videos.append(path)
    return videos


def make_keyframes(videos: list[Path], seconds: int = VIDEO_S, per_video: int = KEYFRAMES_PER_VIDEO,
                   seed: int = 0) -> dict[Path, list]:
    """Each video's keyframes as the release spreads them: one per step, in order, over the video."""
    from vi.pipelines.showhowto.rebuild import Keyframe

    chooser = random.Random(seed)
    return {video: [Keyframe(round(chooser.uniform(0, seconds - 3), 1), chooser.randrange(5))
                    for _ in range(per_video)] for video in videos}


def bench_rebuild(videos: list[Path], keyframes: dict[Path, list], repeats: int = 2, video_s: int = VIDEO_S) -> dict:
    from vi.evaluation.bench.tools import alternate, cpus, median, show_sample, walls
    from vi.pipelines.showhowto.rebuild import frames_of, recipe_frame

    got: dict[str, list[bytes]] = {}

    def ours(seek: bool):
        frames = [f.tobytes() for video in videos for f in frames_of(video, keyframes[video], seek=seek)[0]]
        got["seek" if seek else "no-seek"] = frames

    def recipe():
        frames = []
        for video in videos:
            width, height = _size(video)
            frames += [recipe_frame(video, k, width, height) for k in keyframes[video]]
        got["recipe"] = frames

    samples = alternate({"vi": lambda: ours(True), "vi --no-seek": lambda: ours(False), "recipe": recipe},
                        repeats, on_sample=show_sample)
    count = sum(len(k) for k in keyframes.values())
    seconds = {name: median(walls(s)) for name, s in samples.items()}
    cpu = {name: median(cpus(s)) for name, s in samples.items()}  # the ffmpeg children's included
    return {"videos": len(videos), "video_s": video_s, "frames": count, "seconds": seconds, "cpu_s": cpu,
            "frames_per_s": {name: count / s for name, s in seconds.items()},
            "identical": got["seek"] == got["recipe"] and got["no-seek"] == got["recipe"]}


def _size(video: Path) -> tuple[int, int]:
    from vi.pipelines.showhowto.rebuild import first_slot

    _, width, height = first_slot(video)
    return width, height


def bench_download(video: Path, repeats: int = 2, count: int = DOWNLOADS) -> dict:
    from vi.core.stream import Stage, StreamOptions, run_stage
    from vi.evaluation.bench.local_videos import VideoServer
    from vi.evaluation.bench.tools import alternate, median, show_sample, walls
    from vi.pipelines.common.download import STAGE, DownloadConfig, download_record

    data = video.read_bytes()
    files = {f"v{i:02d}.mp4": data for i in range(count)}
    with tempfile.TemporaryDirectory(prefix="vi-bench-download-") as tmp, \
            VideoServer(files, latency_s=LATENCY_S, bytes_per_s=BYTES_PER_S) as server:
        runs = iter(range(1_000_000))

        def fetch(in_flight: int):
            folder = Path(tmp) / f"run{next(runs)}"  # a fresh folder: the archive would skip every id
            config = DownloadConfig(out=folder / "videos", concurrency=in_flight, retries=0)
            stage = Stage(STAGE, writes=("video", "download"), concurrency=in_flight,
                          process=lambda record: download_record(record, config))
            records = [{"id": name.removesuffix(".mp4"), "url": server.url("v", name)} for name in files]
            report = run_stage(stage, records, StreamOptions(output=folder / "out.jsonl", quiet=True))
            if report.failed:
                raise RuntimeError(f"{report.failed} downloads failed against the local server")

        samples = alternate({"8 in flight": lambda: fetch(8), "1 in flight": lambda: fetch(1)}, repeats,
                            on_sample=show_sample)
    seconds = {name: median(walls(s)) for name, s in samples.items()}
    megabytes = count * len(data) / 1e6
    return {"downloads": count, "megabytes": megabytes, "latency_s": LATENCY_S, "bytes_per_s": BYTES_PER_S,
            "seconds": seconds, "mb_per_s": {name: megabytes / s for name, s in seconds.items()}}


def bench_datasets(work: Path, repeats: int = 2, videos: int | None = None, video_s: int = VIDEO_S,
                   keyframes: int = KEYFRAMES_PER_VIDEO) -> dict:
    """Both measures; one repeat (make bench --smoke) takes one video and 4 downloads, and the smoke run
    shorter videos (`video_s`) with fewer `keyframes` each."""
    videos = videos or (3 if repeats > 1 else 1)
    folder = work / "dataset-videos"
    folder.mkdir(parents=True, exist_ok=True)
    made = make_videos(folder, videos, video_s)
    clip = folder / "download-clip.mp4"  # 10 s, about 1 MB: 16 of them at 2 MB/s stay short
    subprocess.run(["ffmpeg", "-y", "-v", "error", "-i", str(made[0]), "-t", "10", "-c", "copy", str(clip)], check=True)
    return {"rebuild": bench_rebuild(made, make_keyframes(made, video_s, keyframes), repeats, video_s),
            "download": bench_download(clip, repeats, DOWNLOADS if repeats > 1 else 4)}


def datasets_bench_rows(result: dict) -> list:
    from vi.evaluation.bench.tools import Row

    rebuild, download = result["rebuild"], result["download"]
    fps = rebuild["frames_per_s"]
    same = "identical bytes" if rebuild["identical"] else "BYTES DIFFER"
    return [
        Row(f"rebuild showhowto: {rebuild['frames']} keyframes of {rebuild['videos']} x {rebuild['video_s']} s 360p",
            rebuild["seconds"]["vi"], rebuild["seconds"]["recipe"], "s", 0.2,
            f"{fps['vi']:.1f} vs {fps['recipe']:.1f} frames/s (the release's ffmpeg per frame); CPU "
            f"{rebuild['cpu_s']['vi']:.1f} vs {rebuild['cpu_s']['recipe']:.1f} s; --no-seek "
            f"{fps['vi --no-seek']:.1f} frames/s; {same}"),
        Row(f"download: {download['downloads']} videos from the local server, 8 vs 1 in flight",
            download["seconds"]["8 in flight"], download["seconds"]["1 in flight"], "s", None,
            f"{download['mb_per_s']['8 in flight']:.1f} vs {download['mb_per_s']['1 in flight']:.1f} MB/s; "
            f"the server waits {download['latency_s']} s per answer, sends {download['bytes_per_s'] / 1e6:.0f} "
            "MB/s per connection"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--videos", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--work", type=Path, default=None, help="keep the generated videos here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="vi-bench-") as tmp:
        result = bench_datasets(args.work or Path(tmp), args.repeats, args.videos)
    print(json.dumps(result, indent=1))
    from rich.console import Console

    from vi.evaluation.bench.tools import build_table

    Console(stderr=True).print(build_table(datasets_bench_rows(result)))


if __name__ == "__main__":
    main()
