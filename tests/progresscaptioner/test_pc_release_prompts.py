"""vi caption-frames asks as ProgressCaptioner's code release asks: a FrameCapEval sequence's own `query0`,
sent unchanged, else the release's prepare_data.py wording for --desc-mode (object / pose / action), with the
release's reply format; --prompt-style vi keeps vi's packaged prompt. The field's `prompt` says which wording
asked. Also: vi eval framecap refuses the release's sequence file as --labels (it holds no labels).

The 141 real sequences (../shared/data/progcaptioner/input) go through vi frames --framecap in-process, on tiny
stand-in images (the release's frames are not shipped; only the record shape and the prompts matter here), and
the text caption-frames sends a small OpenAI-compatible server is compared with query0 byte for byte."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest
from conftest import jsonl, run_vi, shared
from vi.core.stream import StreamOptions
from vi.evaluation.progresscaptioner import framecap as fc
from vi.pipelines.progresscaptioner import caption_frames as cf
from vi.pipelines.progresscaptioner.frame_replies import parse_frame_replies

SOURCES = {"coin": "action", "htc": "object"}  # the desc mode each shipped file's query0 was built with

# prepare_data.py's three --desc_mode wordings (a, b, c), as the release writes them: its data, not vi's
FIRST = "These are {n} frames extracted from a video sequence{depicting}, provide a description for each frame.\n"
REQUIREMENT = ("Requirement: (1) Ensure each frame's description is specific to the corresponding frame, not "
               "referencing to other frames; (2) The description should focus on the specific action being "
               "performed, capturing the {desc} and progression of the action. There is no need to comment on "
               "other elements, such as the background or unrelated objects.\n")
DESC = {"object": "object's state during the action", "pose": "subject's body pose during the action",
        "action": "action"}


# --- a small OpenAI-compatible server ----------------------------------------------------------------

class EchoServer(BaseHTTPRequestHandler):
    """Captions as many frames as the request has images, `<Frame i>: caption i`; keeps every request body."""

    bodies: ClassVar[list[dict]] = []

    def log_message(self, *args):
        pass

    def _send(self, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._send({"data": [{"id": "echo", "owned_by": "test"}]})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.bodies.append(body)
        images = [p for p in body["messages"][-1]["content"] if p["type"] == "image_url"]
        reply = "\n".join(f"<Frame {i}>: caption {i}" for i in range(1, len(images) + 1))
        self._send({"choices": [{"message": {"content": reply}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1}})


@pytest.fixture()
def server():
    EchoServer.bodies = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), EchoServer)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"openai:echo@http://127.0.0.1:{httpd.server_port}/v1", EchoServer.bodies
    httpd.shutdown()


def sent_text(body: dict) -> str:
    """The text part of a request's user turn (the images are parts of their own, before it)."""
    parts = body["messages"][-1]["content"]
    assert [p["type"] for p in parts[:-1]] == ["image_url"] * (len(parts) - 1) and parts[-1]["type"] == "text"
    return parts[-1]["text"]


# --- the release's sequences, as vi frames --framecap makes them ----------------------------------------

@pytest.fixture(scope="module")
def release_records(tmp_path_factory) -> dict[str, list[dict]]:
    """{coin|htc: (the shipped entries, vi frames --framecap's records of them)}, frames on tiny stand-ins."""
    from PIL import Image
    from vi.cli.frames import frames_command
    from vi.pipelines.progresscaptioner.frames import FramesConfig

    tmp = tmp_path_factory.mktemp("framecap")
    root = tmp / "images"
    out = {}
    for source in SOURCES:
        path = shared("progcaptioner", "input", f"{source}_valhs_seq.json")
        entries = json.loads(path.read_text())
        for entry in entries:
            for name in entry["image_files"]:
                (root / name).parent.mkdir(parents=True, exist_ok=True)
                Image.new("RGB", (8, 8), (len(name) % 256, 0, 0)).save(root / name)
        target = tmp / f"{source}.jsonl"
        opts = StreamOptions(input=None, output=target, overwrite=True, quiet=True)
        frames_command.stage_function(opts, FramesConfig(device="cpu", image_root=root), framecap=path)
        records = jsonl(target.read_text())
        assert len(records) == len(entries) and not any(r.get("errors") for r in records)
        out[source] = (entries, records)
    assert sum(len(e) for e, _ in out.values()) == 141
    return out


def test_every_shipped_query0_is_the_request_byte_for_byte(server, release_records):
    url, _ = server
    config = cf.CaptionConfig(vlm=url)
    assert (config.prompt_style, config.desc_mode) == ("release", "action")
    for source, (entries, records) in release_records.items():
        for entry, record in zip(entries, records):
            assert record["query0"] == entry["query0"] and len(record["frames"]) == entry["n_frames"]
            messages, name = cf.request_for(config, record, len(record["frames"]), True)
            assert messages == [{"role": "user", "content": entry["query0"]}] and name == "query0"
            # without query0, the release's wording for the desc mode the file was built with is the same text
            bare = {k: v for k, v in record.items() if k != "query0"}
            again = cf.CaptionConfig(vlm=url, desc_mode=SOURCES[source])
            messages, name = cf.request_for(again, bare, len(record["frames"]), True)
            assert messages[-1]["content"] == entry["query0"] and name == f"release:{SOURCES[source]}"
            assert cf.query_mode(config.release_templates, entry["query0"], entry["action_label"],
                                 entry["n_frames"]) == SOURCES[source]


def test_what_reaches_the_server_is_query0(server, release_records):
    url, bodies = server
    chosen = [r for source in SOURCES for r in release_records[source][1][:3]]  # the first 3 of each file
    out = cf.caption_batch(chosen, cf.CaptionConfig(vlm=url))
    assert len(bodies) == 6
    for record, result in zip(chosen, out):
        body = next(b for b in bodies if sent_text(b) == record["query0"])
        assert len(body["messages"][-1]["content"]) == record["n_frames"] + 1  # the frames, then the text
        assert result["captions"]["prompt"] == "query0"
        assert [i["text"] for i in result["captions"]["items"]] == [f"caption {i}" for i in
                                                                   range(1, record["n_frames"] + 1)]
    # --prompt-style vi: vi's packaged prompt, every frame's line listed, said as such
    bodies.clear()
    record = chosen[3]  # HTC: the release asked it about the object's state; vi's prompt asks about the action
    [result] = cf.caption_batch([record], cf.CaptionConfig(vlm=url, prompt_style="vi"))
    text = sent_text(bodies[0])
    lines = "\n".join(f"<Frame {i}>: Your description" for i in range(1, record["n_frames"] + 1))
    assert text.endswith("Reply with the following format:\n" + lines) and text != record["query0"]
    assert "capturing the action and progression" in text and result["captions"]["prompt"] == "vi"


def test_a_window_or_picked_frames_get_the_release_wording_in_query0s_mode(server, release_records):
    url, bodies = server
    htc = next(r for r in release_records["htc"][1] if r["n_frames"] == 4)
    config = cf.CaptionConfig(vlm=url)  # --desc-mode action, but the HTC query0 asks about the object's state
    messages, name = cf.request_for(config, htc, 2, False)
    assert name == "release:object" and messages[-1]["content"] == (
        FIRST.format(n=2, depicting=f" depicting {htc['action_label']}") + REQUIREMENT.format(desc=DESC["object"])
        + "Reply with the following format:\n<Frame 1>: Your description\n<Frame 2>: Your description\n")
    # vi frames --select kmeans kept 3 of its 4 frames: one request holding them all, but not query0's 4
    assert cf.request_for(config, htc, 3, True)[1] == "release:object"
    [result] = cf.caption_batch([htc], cf.CaptionConfig(vlm=url, window="2"))
    assert result["captions"]["prompt"] == "release:object" and len(bodies) == 3
    assert all("These are 2 frames" in sent_text(b) and "object's state" in sent_text(b) for b in bodies)
    # a query0 in none of the three wordings: --desc-mode words the windows
    odd = {**htc, "query0": "Describe each frame."}
    assert cf.request_for(cf.CaptionConfig(vlm=url, desc_mode="pose"), odd, 2, False)[1] == "release:pose"
    assert cf.request_for(config, odd, 4, True) == ([{"role": "user", "content": "Describe each frame."}], "query0")


# --- the three wordings, without the shared files ------------------------------------------------------

@pytest.mark.parametrize("mode", ["object", "pose", "action"])
@pytest.mark.parametrize("action", [None, "whipping milk"])
def test_the_three_desc_modes_word_as_prepare_data(mode, action):
    template = cf.release_templates()[mode]
    depicting = "" if action is None else f" depicting {action}"
    head = FIRST + REQUIREMENT + "Reply with the following format:\n"
    expected = {  # prepare_query: "..." only over 2 frames; every line, the last too, ends in a newline
        2: "<Frame 1>: Your description\n<Frame 2>: Your description\n",
        3: "<Frame 1>: Your description\n...\n<Frame 3>: Your description\n",
        6: "<Frame 1>: Your description\n...\n<Frame 6>: Your description\n",
        1: "<Frame 1>: Your description\n",  # prepare_query would list <Frame 1> twice; the release never asks one
    }
    for n, lines in expected.items():
        [turn] = cf.release_messages(template, action, n)
        assert turn == {"role": "user", "content": head.format(n=n, depicting=depicting, desc=DESC[mode]) + lines}


def test_the_release_example_without_an_action_is_its_wording():
    # one_example.json of the release: 5 frames, no action label, --desc_mode c
    example = ("These are 5 frames extracted from a video sequence, provide a description for each frame.\n"
               + REQUIREMENT.format(desc="action") + "Reply with the following format:\n<Frame 1>: Your "
               "description\n...\n<Frame 5>: Your description\n")
    assert cf.release_messages(cf.release_templates()["action"], None, 5)[-1]["content"] == example


def test_prompt_style_desc_mode_and_a_prompt_file(server, tmp_path):
    url, _ = server
    for options, message in [({"prompt_style": "paper"}, "--prompt-style must be one of release, vi, got 'paper'"),
                             ({"desc_mode": "a"}, "--desc-mode must be one of object, pose, action, got 'a'")]:
        with pytest.raises(ValueError, match=message):
            cf.CaptionConfig(vlm="offline", device="cpu", **options)
    mine = tmp_path / "mine.txt"
    mine.write_text("### user\nCaption ${n_frames} frames of ${action}.\n${frame_lines}")
    record = {"id": "r", "action": "peel", "query0": "ignored", "n_frames": 3}
    release = cf.CaptionConfig(vlm=url, prompt=mine)
    assert cf.request_for(release, record, 3, True) == (
        [{"role": "user", "content": "Caption 3 frames of peel.\n<Frame 1>: Your description\n...\n"
                                     "<Frame 3>: Your description\n"}], str(mine))
    vi = cf.CaptionConfig(vlm=url, prompt=mine, prompt_style="vi")
    assert cf.request_for(vi, record, 2, True)[0][-1]["content"] == (
        "Caption 2 frames of peel.\n<Frame 1>: Your description\n<Frame 2>: Your description")


# --- replies to either format ---------------------------------------------------------------------------

def test_replies_to_either_format_are_read():
    full = "<Frame 1>: A hand holds a whisk.\n<Frame 2>: Milk froths.\n<Frame 3>: Foam stands."
    assert parse_frame_replies(full, 3).texts == ["A hand holds a whisk.", "Milk froths.", "Foam stands."]
    assert parse_frame_replies(full + "\n", 3).clean  # the release's reply ends where its format did
    # a reply that copies the format's "..." and skips the frames between: those are missing (asked again),
    # never filled in
    skipped = parse_frame_replies("<Frame 1>: A hand holds a whisk.\n...\n<Frame 3>: Foam stands.", 3)
    assert skipped.missing == [2] and skipped.texts[2] == "Foam stands."


# --- vi eval framecap: the release's sequence file is no labels file -------------------------------------

RELEASE_SHAPE = [{"idx": "0004", "action_label": "PrepareSumiInk", "n_frames": 3,
                  "image_files": ["data/coin/testing_frames/v/frame001.png"] * 3, "query0": "These are 3 frames"}]


def test_a_sequence_file_without_labels_is_refused_at_once(tmp_path):
    file = tmp_path / "coin_valhs_seq.json"
    file.write_text(json.dumps(RELEASE_SHAPE))
    with pytest.raises(ValueError, match="the ProgressCaptioner release ships no per-pair progression labels"):
        fc.read_labels(file)
    partly = tmp_path / "coin_partly.json"
    partly.write_text(json.dumps([{**RELEASE_SHAPE[0], "labels": [1, 0]}, {**RELEASE_SHAPE[0], "idx": "0007"}]))
    with pytest.raises(ValueError, match=r"entry 2 \(idx '0007'\) has no 'labels'"):
        fc.read_labels(partly)
    labelled = tmp_path / "coin_labelled.json"  # the release's shape with labels added: read
    labelled.write_text(json.dumps([{**RELEASE_SHAPE[0], "labels": [1, 0]}]))
    assert fc.read_labels(labelled) == {"COIN/0004": [1, 0]}


def test_the_command_refuses_the_shipped_sequence_file_with_exit_2(tmp_path):
    release = shared("progcaptioner", "input", "htc_valhs_seq.json")
    done = run_vi("eval", "framecap", "--labels", str(release), stdin="")
    assert done.returncode == 2 and done.stdout == ""
    said = " ".join(done.stderr.split())
    assert "no entry has 'labels'" in said and "ships no per-pair progression labels" in said
    assert "your own annotation or from the paper's authors" in said
