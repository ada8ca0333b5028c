"""`vi view`'s page in a real browser: Debian's Chromium, headless, driven by Playwright.

Skipped, with the reason, where Chromium is not installed (`make install` installs it as root).
Set VI_VIEW_SHOTS=DIR to keep the screenshots of each view (docs/view/ come from there).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from tests.common.view_fixtures import INJECTED, all_records, write_jsonl
from tests.conftest import run_vi

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Chromium on a machine without network: no background connections, no component updates.
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]
# What each kind's view shows of the fixture records: images that must load.
IMAGES = {"steps": 2, "pair": 6, "clip": 3, "captions": 4, "generated": 5, "transcript": 0, "other": 0}


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).is_file():
        pytest.skip("Chromium is not installed: apt-get install chromium (make install does, as root)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is in the [dev] extra")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> tuple[Path, list[dict]]:
    folder = tmp_path_factory.mktemp("viewpage")
    records = all_records(folder)
    source = write_jsonl(folder / "records.jsonl", records, extra_lines=["not json at all"])
    done = run_vi("view", str(source), "-o", str(folder / "report"), "-q", "--title", "every kind", check=True)
    return Path(done.stdout.strip()), records


class Page:
    """A page with its console messages and uncaught errors collected."""

    def __init__(self, browser, url: str):
        self.page = browser.new_page(viewport={"width": 1280, "height": 900})
        self.problems: list[str] = []
        self.page.on("console", lambda m: self.problems.append(f"console {m.type}: {m.text}")
                     if m.type in ("error", "warning") else None)
        self.page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))
        self.goto(url)

    def goto(self, url: str) -> None:
        self.page.goto(url)
        self.settle()

    def until(self, condition: str, timeout: float = 30.0) -> None:
        """Wait for a JS condition. Not wait_for_function: that evaluates a string inside the page,
        which the page's Content-Security-Policy (no eval) refuses; evaluate() comes from outside."""
        deadline = time.monotonic() + timeout
        while not self.page.evaluate(condition):
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {condition}")
            time.sleep(0.05)

    def settle(self) -> None:
        self.page.wait_for_selector("main[aria-busy=false]")
        self.page.wait_for_load_state("load")
        self.until("[...document.images].every(i => i.complete)")

    def shown(self) -> list[str]:
        return self.page.eval_on_selector_all("article.record", "els => els.map(e => e.querySelector('.id').textContent)")


def _not_blank(png: bytes) -> float:
    import io

    from PIL import Image
    return float(np.asarray(Image.open(io.BytesIO(png)).convert("L"), dtype=float).std())


def test_the_page_loads_without_errors_and_shows_every_record(browser, report):
    page_path, records = report
    view = Page(browser, page_path.as_uri())
    assert view.shown() == [r["id"] for r in records] + [view.shown()[-1]]    # + the bad line's record
    assert view.page.text_content("#summary").startswith(f"{len(records) + 1} records (2 with errors)")
    assert "records 1–9 of 9" in view.page.text_content("#pager-top")
    assert view.problems == []
    view.page.close()


@pytest.mark.parametrize("kind", list(IMAGES))
def test_each_kind_of_view_draws_its_content_and_its_images_load(browser, report, kind, tmp_path):
    page_path, _ = report
    view = Page(browser, f"{page_path.as_uri()}#kind={kind}")
    article = view.page.locator("article.record").first
    article.scroll_into_view_if_needed()
    view.until("[...document.querySelector('article.record').querySelectorAll('img')].every(i => i.complete)")
    assert view.page.locator("article.record").count() >= 1
    assert view.page.eval_on_selector_all("article.record", f"els => els.every(e => e.dataset.kind === '{kind}')")
    sizes = article.evaluate("a => [...a.querySelectorAll('img')].map(i => i.naturalWidth)")
    assert len(sizes) == IMAGES[kind] and all(w > 0 for w in sizes)
    assert article.locator(".broken").count() == 0
    shot = article.screenshot()
    assert _not_blank(shot) > 20   # a drawn record, not an empty box
    keep = os.environ.get("VI_VIEW_SHOTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        (Path(keep) / f"view-{kind}.png").write_bytes(shot)
    assert view.problems == []
    view.page.close()


def test_filters_by_text_status_and_kind_and_the_address_keeps_them(browser, report):
    page_path, records = report
    view = Page(browser, page_path.as_uri())
    view.page.fill("#q", "peeler")
    view.until("document.querySelectorAll('article.record').length === 1")
    view.settle()
    assert view.shown() == [records[1]["id"]]                              # the pair: a candidate uses a peeler
    assert "q=peeler" in view.page.url
    view.page.fill("#q", "orange peel")                                    # every word, anywhere in the record
    view.until("!location.hash.includes('peeler')")
    view.settle()
    assert view.shown() == [r["id"] for r in records[:5]]    # not the talk, the error or the other record
    view.page.fill("#q", "")
    view.page.select_option("#status", "errors")
    view.until("location.hash.includes('status=errors')")
    view.settle()
    assert view.shown()[0] == "broken-1" and len(view.shown()) == 2
    assert "unreadable_media" in view.page.text_content("article.record ul.errors")
    view.page.reload()                                                     # the address holds the filter
    view.settle()
    assert len(view.shown()) == 2 and view.page.input_value("#status") == "errors"
    assert view.problems == []
    view.page.close()


def test_record_text_is_shown_as_text_and_never_runs(browser, report):
    page_path, _ = report
    view = Page(browser, f"{page_path.as_uri()}#kind=captions")
    assert view.page.evaluate("window.__pwned") is None
    assert view.page.locator("article script").count() == 0
    assert view.page.locator("figcaption img").count() == 0
    assert INJECTED in view.page.text_content("article.record")
    view.page.locator("details.raw summary").first.click()                 # the raw JSON too, as text
    assert view.page.evaluate("window.__pwned") is None
    assert view.problems == []
    view.page.close()


def test_pages_of_a_large_report_load_their_chunks_and_links_find_a_record(browser, tmp_path):
    records = [{"id": f"r{i:05d}", "steps": {"title": f"video {i}", "items": [{"text": f"step of video {i}"}]}}
               if i % 7 else {"id": f"r{i:05d}", "errors": [{"stage": "probe", "kind": "unreadable_media",
                                                              "message": f"video {i} cannot be read"}]}
               for i in range(1200)]
    source = write_jsonl(tmp_path / "many.jsonl", records)
    page_path = Path(run_vi("view", str(source), "-o", str(tmp_path / "rep"), "-q", check=True).stdout.strip())
    view = Page(browser, page_path.as_uri())
    assert view.shown() == [r["id"] for r in records[:20]]
    view.page.click("#pager-top button:has-text('last')")
    view.until("location.hash.includes('page=60')")
    view.settle()
    assert view.shown() == [r["id"] for r in records[-20:]]                # from the last of 5 chunks
    view.goto(f"{page_path.as_uri()}#r=777")
    assert "r00777" in view.shown()
    assert view.page.locator("article.focus .id").text_content() == "r00777"
    view.goto(f"{page_path.as_uri()}#status=errors&size=100")
    errors = [r["id"] for r in records if "errors" in r]
    assert view.shown() == errors[:100] and f"of {len(errors)}" in view.page.text_content("#pager-top")
    loaded = view.page.evaluate("Object.keys(state.chunks).length")
    assert loaded < 5 or len(errors) > 100                                   # chunks load when a page needs them
    assert json.loads(view.page.evaluate("JSON.stringify(Object.keys(state.chunks))"))
    assert view.problems == []
    view.page.close()


def test_the_legends_are_drawn_and_open_to_say_what_letters_and_verdicts_mean(browser, report):
    page_path, _ = report
    view = Page(browser, f"{page_path.as_uri()}#kind=captions")
    article = view.page.locator("article.record").first
    legends = article.locator("details.legend")
    assert legends.count() == 2 and "unknown block" not in article.text_content()
    letters = legends.nth(0)
    assert letters.locator("summary").text_content().startswith("what the letters mean (pseudo prompt")
    letters.locator("summary").click()
    assert "noticeable changes" in letters.locator("dl").inner_text()
    assert "neither" in legends.nth(1).locator("dl").text_content()
    assert view.problems == []
    view.page.close()
