"""vi caption-frames: windows, the offline captioner (the real EfficientNet-Lite0) on photo sequences whose
changes are known, the OpenAI-compatible path against a small HTTP server speaking the chat API (what it is
sent, retries, error records), and the stage end to end through the CLI."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
from conftest import jsonl, run_vi
from vi.core.errors import RecordError
from vi.pipelines.progresscaptioner import caption_frames as cf
from vi.pipelines.progresscaptioner import offline_captioner as oc

PHOTOS = Path("/usr/share/doc/opencv-doc/examples/data")


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> dict[str, str]:
    """a, b: the same orange photo saved twice (JPEG quality 95 and 70); c: an apple; d: an orange again."""
    from PIL import Image

    if not (PHOTOS / "orange.jpg").exists():
        pytest.skip(f"{PHOTOS} is absent: install the Debian package opencv-doc (make install does)")
    out = tmp_path_factory.mktemp("photos")
    orange, apple = Image.open(PHOTOS / "orange.jpg").convert("RGB"), Image.open(PHOTOS / "apple.jpg").convert("RGB")
    orange.save(out / "a.jpg", quality=95), orange.save(out / "b.jpg", quality=70)
    apple.save(out / "c.jpg"), orange.resize((320, 240)).save(out / "d.jpg")
    return {k: str(out / f"{k}.jpg") for k in "abcd"}


def sequence(id_: str, *paths: str, **extra) -> dict:
    return {"id": id_, "frames": [{"time": float(i), "path": p} for i, p in enumerate(paths)], **extra}


# --- windows ---------------------------------------------------------------------------------------

def test_windows_full_sliding_and_single():
    assert cf.plan_windows(4, None, 6, "r") == [[0, 1, 2, 3]]
    assert cf.plan_windows(4, 2, 6, "r") == [[0, 1], [1, 2], [2, 3]]
    assert cf.plan_windows(4, 3, 6, "r") == [[0, 1, 2], [1, 2, 3]]
    assert cf.plan_windows(2, 3, 6, "r") == [[0, 1]] and cf.plan_windows(1, 2, 6, "r") == [[0]]
    assert cf.plan_windows(3, 1, 6, "r") == [[0], [1], [2]]
    two = cf.plan_windows(4, 2, 6, "r")
    # frame t from (v_{t-1}, v_t), frame 0 from (v0, v1); keep-both adds (v_t, v_{t+1})
    assert cf.assign(two, 4, False) == [(0, 0), (1, 0), (2, 1), (3, 2)]
    assert cf.assign(two, 4, True) == [(0, 0), (1, 0), (1, 1), (2, 1), (2, 2), (3, 2)]
    for n, kind, says in [(1, "too_few_frames", "use --window 1"), (7, "too_many_frames", "use --window 2")]:
        with pytest.raises(RecordError) as info:
            cf.plan_windows(n, None, 6, "seq9")
        assert info.value.kind == kind and says in info.value.message and "seq9" in info.value.message


@pytest.mark.parametrize("options, message", [
    ({"window": "0"}, "--window '0'"), ({"window": "two"}, "--window 'two'"),
    ({"keep_both": True}, "--keep-both"), ({"into": "frames"}, "--into 'frames'"),
    ({"max_frames": 1}, "--max-frames"),
])
def test_bad_options_fail_before_any_record(options, message):
    with pytest.raises(ValueError, match=message):
        cf.CaptionConfig(vlm="offline", device="cpu", **options)


# --- the offline captioner -------------------------------------------------------------------------

def test_offline_captions_say_same_where_the_photo_is_the_same_and_differ_where_it_changes(photos):
    config = cf.CaptionConfig(vlm="offline", device="cpu")
    out = cf.caption_batch([sequence("s", photos["a"], photos["b"], photos["c"], action="peel")], config)[0]
    captions = out["captions"]
    assert captions["kind"] == oc.KIND and "efficientnet-lite0" in captions["model"] and captions["prompt"] is None
    first, same, changed = (item["text"] for item in captions["items"])
    assert [item["frame"] for item in captions["items"]] == [0, 1, 2] and captions["window"] == "full"
    assert first.startswith("An ImageNet classifier's top labels: orange (")
    assert same.startswith("The same scene as the previous frame") and "orange (" in same
    assert changed.startswith("The scene changed from the previous frame") and "Granny Smith apple" in changed
    assert "labels gone: orange" in changed and len({first, same, changed}) == 3
    for text in (first, same, changed):  # it never claims an action it cannot see
        assert "peel" not in text


def test_offline_windows_of_two_with_keep_both_and_of_one(photos):
    frames = (photos["a"], photos["c"], photos["d"])
    both = cf.CaptionConfig(vlm="offline", window="2", keep_both=True, into="captions_b", device="cpu")
    items = cf.caption_batch([sequence("s", *frames)], both)[0]["captions_b"]["items"]
    assert [(i["frame"], i["from"]) for i in items] == [(0, [0, 1]), (1, [0, 1]), (1, [1, 2]), (2, [1, 2])]
    assert items[1]["text"].startswith("The scene changed") and not items[2]["text"].startswith("The scene changed")
    assert items[3]["text"].startswith("The scene changed")  # apple -> orange
    single = cf.CaptionConfig(vlm="offline", window="1", device="cpu")
    out = cf.caption_batch([sequence("s", *frames)], single)[0]["captions"]
    assert out["window"] == 1 and all("from" not in i and i["text"].startswith("An ImageNet") for i in out["items"])


# --- an OpenAI-compatible server ---------------------------------------------------------------------

class FakeVLMServer(BaseHTTPRequestHandler):
    """/v1/models and /v1/chat/completions. The reply captions as many frames as the request has images,
    except for actions named 'skip once' (frame 2 left out of the first reply) and 'skip always'."""

    bodies: ClassVar[list[dict]] = []

    def log_message(self, *args):  # keep pytest's output clean
        pass

    def _send(self, code: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._send(200, {"data": [{"id": "fake-vlm", "owned_by": "test"}]})

    def do_POST(self):
        if not self.path.endswith("/chat/completions"):
            return self._send(404, {"error": "no such endpoint"})
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.bodies.append(body)
        parts = body["messages"][-1]["content"]
        text, images = parts[-1]["text"], [p for p in parts if p["type"] == "image_url"]
        tries = sum(b["messages"][-1]["content"][-1]["text"] == text for b in self.bodies)
        skip = ("skip always" in text) or ("skip once" in text and tries == 1)
        reply = "\n".join(f"<Frame {i}>: caption {i} of {len(images)}" for i in range(1, len(images) + 1)
                          if not (skip and i == 2))
        self._send(200, {"choices": [{"message": {"content": reply}, "finish_reason": "stop"}],
                         "usage": {"prompt_tokens": 10, "completion_tokens": 10}})


@pytest.fixture()
def server():
    FakeVLMServer.bodies = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), FakeVLMServer)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_port}/v1", FakeVLMServer.bodies
    httpd.shutdown()


def test_a_server_gets_the_frames_as_data_urls_before_the_prompt_and_its_reply_is_parsed(server, photos):
    url, bodies = server
    config = cf.CaptionConfig(vlm=f"openai:fake-vlm@{url}", concurrency=2)
    records = [sequence("s1", photos["a"], photos["b"], photos["c"], action="peeling an orange"),
               sequence("s2", photos["a"], photos["c"]), sequence("s3", photos["a"], "/nonexistent/x.jpg")]
    one, two, gone = cf.caption_batch(records, config)
    assert one["captions"]["kind"] == "openai" and one["captions"]["model"] == f"fake-vlm@{url}"
    assert [i["text"] for i in one["captions"]["items"]] == ["caption 1 of 3", "caption 2 of 3", "caption 3 of 3"]
    # no query0: the release's wording for --desc-mode (default action: COIN's), with or without an action
    assert one["captions"]["prompt"] == two["captions"]["prompt"] == "release:action"
    assert isinstance(gone, RecordError) and gone.kind == "missing_media" and "frames[1]" in gone.message
    assert len(bodies) == 2
    first = next(b for b in bodies if "3 frames" in b["messages"][-1]["content"][-1]["text"])
    parts = first["messages"][-1]["content"]
    assert [p["type"] for p in parts] == ["image_url"] * 3 + ["text"]
    assert all(p["image_url"]["url"].startswith("data:image/jpeg;base64,") for p in parts[:3])
    assert parts[-1]["text"].startswith("These are 3 frames extracted from a video sequence depicting peeling an "
                                        "orange, provide a description for each frame.")
    assert parts[-1]["text"].endswith("Reply with the following format:\n<Frame 1>: Your description\n...\n"
                                      "<Frame 3>: Your description\n") and first["temperature"] == 0.0


def test_a_reply_missing_a_frame_is_asked_again_once_then_an_error_naming_the_frames(server, photos):
    url, bodies = server
    config = cf.CaptionConfig(vlm=f"openai:fake-vlm@{url}", window="2")
    once, always = cf.caption_batch([sequence("once", photos["a"], photos["b"], photos["c"], action="skip once"),
                                     sequence("always", photos["a"], photos["c"], action="skip always")], config)
    assert [i["text"] for i in once["captions"]["items"]] == ["caption 1 of 2", "caption 2 of 2", "caption 2 of 2"]
    # the server leaves frame 2 out of the first reply to this prompt only: window 0's; window 1 repeats the prompt
    repairs = once["captions"]["repairs"]
    assert len(repairs) == 1 and "asked again (sampled, temperature 0.7, seed " in repairs[0]
    assert repairs[0].startswith("window frames[0..1]: the first reply had no caption for <Frame 2>")
    retries = [b for b in bodies if b["temperature"] > 0]
    assert len(bodies) == 5 and len(retries) == 2  # 3 windows asked; once's first and always' asked again
    assert retries[0]["seed"] != bodies[0]["seed"]
    assert isinstance(always, RecordError) and always.kind == "frames_missing"
    assert "record always: the window frames[0..1] has no caption for <Frame 2> (frames [1])" in always.message
    assert "raw reply: '<Frame 1>: caption 1 of 2'" in always.message  # the raw replies are in the error


# --- the stage ---------------------------------------------------------------------------------------

@pytest.mark.slow
def test_the_stage_keeps_the_record_contract_offline(photos, tmp_path):
    upstream = {"id": "up", "errors": [{"stage": "frames", "kind": "x", "message": "y"}]}
    records = [sequence("good", photos["a"], photos["b"], photos["c"], action="peel", source="COIN"),
               sequence("one", photos["a"]), sequence("many", *[photos["a"]] * 7),
               sequence("gone", photos["a"], str(tmp_path / "gone.jpg")), {"id": "none"}, upstream]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in records))
    done = run_vi("caption-frames", "-i", str(src), "-q", "--device", "cpu")
    assert done.returncode == 3, done.stderr  # some records failed, the stream went on
    assert "found no vision-language model" in done.stderr and "offline" in done.stderr
    good, one, many, gone, none, passed = jsonl(done.stdout)
    assert list(good)[:len(records[0])] == list(records[0]) and len(good["captions"]["items"]) == 3
    assert one["errors"][-1]["kind"] == "too_few_frames" and many["errors"][-1]["kind"] == "too_many_frames"
    assert gone["errors"][-1]["kind"] == "missing_media" and "frames[1]" in gone["errors"][-1]["message"]
    assert none["errors"][-1]["kind"] == "missing_field" and passed == upstream


def test_with_missing_keep_a_reply_still_lacking_a_frame_keeps_the_captions_it_gave(server, photos):
    # several captioners share a record in ProgressCaptioner's training data: a weak one must not make it an error
    url, _ = server
    config = cf.CaptionConfig(vlm=f"openai:fake-vlm@{url}", missing="keep", into="captions_weak")
    (always,) = cf.caption_batch([sequence("always", photos["a"], photos["c"], action="skip always")], config)
    field = always["captions_weak"]
    assert [(i["frame"], i["text"]) for i in field["items"]] == [(0, "caption 1 of 2")] and field["missing"] == [1]
    assert "no caption for <Frame 2> (frames [1]), also after one retry; kept without" in field["repairs"][-1]
    with pytest.raises(ValueError, match="--missing must be one of error, keep, got 'skip'"):
        cf.CaptionConfig(vlm="offline", missing="skip")
