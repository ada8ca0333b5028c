"""`make bench` section k: `vi view` on 10,000 records, in headless Chromium.

The records are a mix of what the pipelines write (ShowHowTo steps with a transcript and a frame
per step, ProgressCaptioner sequences with captions and verdicts, one in ten an error record) over
twelve real photos. Measured:
- building the report (`write_report`: reading, view blocks, data files, thumbnails);
- opening it: from navigation to the first page of records drawn, and a text filter over all
  10,000 records until the matching page is drawn;
- the same records as one plain HTML page, every record drawn in it (what a quick script writes),
  from navigation to its load event: the ratio is what paging saves.
Both pages alternate A B B A after an untimed warm-up.

    python -m vi.evaluation.bench.view [--records 10000]
"""

from __future__ import annotations

import argparse
import html
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

PHOTOS = Path("/usr/share/doc/opencv-doc/examples/data")
NAMES = ("orange.jpg", "apple.jpg", "fruits.jpg", "home.jpg", "baboon.jpg", "butterfly.jpg", "building.jpg",
         "board.jpg", "aero1.jpg", "blox.jpg", "HappyFish.jpg", "ellipses.jpg")
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


def make_records(count: int, photos: list[Path]) -> list[dict]:
    records = []
    for i in range(count):
        pick = [str(photos[(i + k) % len(photos)]) for k in range(4)]
        if i % 10 == 9:
            records.append({"id": f"v{i:05d}", "video": f"videos/v{i:05d}.mp4", "errors": [
                {"stage": "transcribe", "kind": "unreadable_media", "message": f"videos/v{i:05d}.mp4: no audio stream"}]})
        elif i % 2:
            records.append({"id": f"v{i:05d}", "video": f"videos/v{i:05d}.mp4", "duration": 95.0,
                            "transcript": {"segments": [{"start": 8.0 * k, "end": 8.0 * k + 7, "text":
                                                         f"line {k} of video {i}: now we take the next part"}
                                                        for k in range(12)]},
                            "steps": {"title": f"How to do task {i % 200}", "items": [
                                {"text": f"Step {k} of task {i % 200}.", "start": 16.0 * k, "end": 16.0 * k + 15,
                                 "lines": [2 * k, 2 * k + 1], "frame": {"time": 16.0 * k + 3, "score": 0.3,
                                                                         "path": pick[k]}} for k in range(4)]}})
        else:
            records.append({"id": f"s{i:05d}", "action": f"action {i % 50}",
                            "frames": [{"time": float(k), "path": p} for k, p in enumerate(pick)],
                            "captions": {"model": "offline", "items": [{"frame": k, "text": f"frame {k}: stage {k} of "
                                                                        f"action {i % 50}"} for k in range(4)]},
                            "progression": {"prompt": "eval", "pairs": [
                                {"frames": [k, k + 1], "answers": {"captions": {"judge": "A"}}, "consensus": "A",
                                 "change": True, "passed": {"captions": True}} for k in range(3)], "distinct": [0, 1, 2, 3]},
                            "keyframes": [{"index": 0}, {"index": 2}]})
    return records


def plain_page(records: list[dict], out: Path) -> Path:
    """Every record in one page: its id, its images, its JSON (escaped), as a quick script would."""
    parts = ["<!doctype html><meta charset=utf-8><title>plain</title>"]
    for r in records:
        images = [f["path"] for f in r.get("frames", [])] + [i["frame"]["path"] for i in r.get("steps", {}).get("items", [])]
        parts.append(f"<article><h3>{html.escape(r['id'])}</h3>"
                     + "".join(f'<img loading=lazy width=200 src="{html.escape(Path(p).as_uri())}">' for p in images)
                     + f"<pre>{html.escape(json.dumps(r, indent=1))}</pre></article>")
    page = out / "plain.html"
    page.write_text("".join(parts))
    return page


def bench_view(count: int = 10_000, repeats: int = 3, work: Path | None = None) -> dict:
    from playwright.sync_api import sync_playwright

    from vi.evaluation.bench.tools import alternate
    from vi.evaluation.view.report import Source, write_report

    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(chromium).is_file():
        return {"skipped": "Chromium is not installed (apt-get install chromium)"}
    own = tempfile.TemporaryDirectory(prefix="vi-view-bench-") if work is None else None
    folder = Path(own.name if own else work) / "view"
    folder.mkdir(parents=True, exist_ok=True)
    photos = [Path(shutil.copy(PHOTOS / n, folder / n)) for n in NAMES]
    records = make_records(count, photos)
    source = folder / "records.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in records))
    start = time.perf_counter()
    summary = write_report([Source("records.jsonl", source)], folder / "report", title="bench")
    build_s = time.perf_counter() - start
    start = time.perf_counter()
    again = write_report([Source("records.jsonl", source)], folder / "report", title="bench")
    rebuild_s = time.perf_counter() - start
    plain = plain_page(records, folder)
    sizes = {"report_data_mb": sum(p.stat().st_size for p in (folder / "report" / "data").iterdir()) / 1e6,
             "plain_page_mb": plain.stat().st_size / 1e6}
    timings: dict[str, list[float]] = {"view": [], "plain": [], "filter": []}
    # the filter looks for one task of the steps records (odd i, not i % 10 == 9): task 123 when there
    # are that many records, else the last one there is (the smoke run's 20)
    task = next(f"task {i % 200}" for i in range(min(count, 124) - 1, 0, -1) if i % 2 and i % 10 != 9)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=FLAGS)

        def open_view():
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            t = time.perf_counter()
            page.goto((folder / "report" / "index.html").as_uri())
            page.wait_for_selector("main[aria-busy=false]")
            timings["view"].append(time.perf_counter() - t)
            t = time.perf_counter()
            page.fill("#q", task)  # after the page's 150 ms pause for typing, which is counted
            page.wait_for_selector(f"#pager-top .count:not(:has-text(' of {count},'))")  # the filtered pages
            page.wait_for_selector(f"main[aria-busy=false] article:has-text('{task}')")
            timings["filter"].append(time.perf_counter() - t)
            page.close()

        def open_plain():
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            t = time.perf_counter()
            page.goto(plain.as_uri(), wait_until="load", timeout=300_000)
            timings["plain"].append(time.perf_counter() - t)
            page.close()

        open_view(), open_plain()  # warm-up: the files in the page cache, Chromium started
        for key in timings:
            timings[key].clear()
        alternate({"view": open_view, "plain": open_plain}, repeats)
        browser.close()
    if own:
        own.cleanup()
    median = {k: statistics.median(v) for k, v in timings.items()}
    return {"records": count, "build_s": build_s, "rebuild_s": rebuild_s, "thumbs_made": summary.thumbs_made,
            "thumbs_reused_on_rebuild": again.thumbs_reused, **sizes, "samples_s": timings,
            "view_first_page_s": median["view"], "filter_s": median["filter"], "plain_load_s": median["plain"],
            "plain_over_view": median["plain"] / median["view"]}


def view_bench_rows(result: dict) -> list:
    from vi.evaluation.bench.tools import Row

    if "skipped" in result:
        return [Row("vi view: open a report of 10,000 records (Chromium)", None, None, "s", None, result["skipped"])]
    return [Row(f"vi view: open a report of {result['records']:,} records (Chromium)", result["view_first_page_s"],
                result["plain_load_s"], "s", None,
                f"to the first page drawn; baseline every record in one HTML page, to its load event. Text filter "
                f"over all: {result['filter_s']:.2f} s; report built in {result['build_s']:.1f} s "
                f"({result['thumbs_made']} thumbnails), rebuilt in {result['rebuild_s']:.1f} s")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps(bench_view(args.records, args.repeats), indent=1))


if __name__ == "__main__":
    main()
