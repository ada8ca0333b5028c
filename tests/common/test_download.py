"""vi download against a video server on 127.0.0.1 (vi.evaluation.bench.local_videos): real MP4s,
404, 429 with Retry-After, and connections dropped mid-file. Nothing leaves this machine: the
in-process tests refuse any connection to another address, and the servers listen on 127.0.0.1."""

from __future__ import annotations

import json
import os
import socket
import time

import pytest

from tests.conftest import ffmpeg, jsonl, run_vi
from vi.core.errors import RecordError
from vi.evaluation.bench.local_videos import VideoServer
from vi.pipelines.common import download
from vi.pipelines.common.download import DownloadConfig, classify, download_record, read_targets, shard_folder

NO_PROXY = {"http_proxy": "", "https_proxy": "", "HTTP_PROXY": "", "HTTPS_PROXY": "", "ALL_PROXY": "",
            "all_proxy": "", "NO_PROXY": "*", "no_proxy": "*"}


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> dict[str, bytes]:
    folder = tmp_path_factory.mktemp("clips")
    out = {}
    for name, pattern in (("one.mp4", "testsrc"), ("two.mp4", "smptebars")):
        ffmpeg("-f", "lavfi", "-i", f"{pattern}=size=160x120:rate=10:duration=2", "-f", "lavfi",
               "-i", "sine=frequency=300:duration=2", "-c:v", "libx264", "-preset", "veryfast",
               "-pix_fmt", "yuv420p", "-c:a", "aac", "-shortest", str(folder / name))
        out[name] = (folder / name).read_bytes()
    return out


@pytest.fixture()
def only_localhost(monkeypatch):
    """Any connection this process opens to an address other than 127.0.0.1 fails the test."""
    real = socket.socket.connect

    def connect(self, address):
        assert address[0] == "127.0.0.1", f"vi download tried to reach {address}"
        return real(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    for key, value in NO_PROXY.items():
        monkeypatch.setenv(key, value)


def test_plain_ids_urls_and_records_become_fetch_targets(tmp_path):
    listing = tmp_path / "ids.txt"
    listing.write_text("dQw4w9WgXcQ\nhttps://youtu.be/abcdefghijk?t=3\n# a comment\n\n"
                       '{"id": "mine", "url": "http://127.0.0.1:1/v/x.mp4"}\n{"youtube_id": "ABCDEFGHIJK"}\n')
    records = list(read_targets(listing))
    assert [r["id"] for r in records] == ["dQw4w9WgXcQ", "abcdefghijk", "mine", "ABCDEFGHIJK"]
    assert [download.target_of(r) for r in records] == [
        "https://www.youtube.com/watch?v=dQw4w9WgXcQ", "https://youtu.be/abcdefghijk?t=3",
        "http://127.0.0.1:1/v/x.mp4", "https://www.youtube.com/watch?v=ABCDEFGHIJK"]
    with pytest.raises(RecordError, match="'url' or a 'youtube_id'"):
        download.target_of({"id": "not-a-youtube-id"})


@pytest.mark.parametrize("message, kind", [
    ("ERROR: [youtube] x: Private video. Sign in if you've been granted access to this video", "private"),
    ("ERROR: [youtube] x: Sign in to confirm your age. This video may be inappropriate for some users.",
     "age_restricted"),
    ("ERROR: [youtube] x: The uploader has not made this video available in your country", "geo_blocked"),
    ("ERROR: [youtube] x: Video unavailable. This video has been removed by the uploader", "unavailable"),
    ("ERROR: [youtube] x: Sign in to confirm you're not a bot", "rate_limited"),
    ("ERROR: unable to download video data: <urlopen error timed out>", "network"),
])
def test_youtube_messages_map_to_kinds_a_user_can_act_on(message, kind):
    from yt_dlp.utils import DownloadError

    assert classify(DownloadError(message))[0] == kind
    assert kind in download.HINTS


def test_each_failure_is_an_error_record_with_its_kind_and_a_429_waits_for_retry_after(
        clips, tmp_path, only_localhost):
    config = DownloadConfig(out=tmp_path / "videos", retries=1)
    with VideoServer(clips, retry_after=1) as server:
        start = time.monotonic()
        busy = download_record({"id": "busy", "url": server.url("busy", "one.mp4")}, config)
        assert time.monotonic() - start >= 1.0  # honoured the server's Retry-After
        assert server.hits["/busy/one.mp4"] == 3  # the 429, then the sniff and the download
        assert open(busy["video"], "rb").read() == clips["one.mp4"]
        for route, kind in (("missing", "unavailable"), ("limited", "rate_limited"), ("drop", "network")):
            with pytest.raises(RecordError) as failed:
                download_record({"id": route, "url": server.url(route, "one.mp4")}, config)
            assert failed.value.kind == kind, failed.value.message
            assert download.HINTS[kind] in failed.value.message
            assert download.find_download(config.out, route) is None  # no file under a final name
        assert server.hits["/missing/one.mp4"] == 1  # a 404 is not retried
        assert server.hits["/limited/one.mp4"] == 2  # --retries 1
    # The dropped download's .part is kept for the next try to resume; the others leave nothing.
    assert sorted(p.name for p in (config.out / ".partial").iterdir()) == ["drop"]


def test_a_connection_dropped_mid_file_is_resumed_and_the_file_is_whole(clips, tmp_path, only_localhost):
    config = DownloadConfig(out=tmp_path / "videos", retries=1)
    with VideoServer(clips, drop_times=2) as server:
        got = download_record({"id": "dropped", "url": server.url("drop-first", "two.mp4")}, config)
    assert open(got["video"], "rb").read() == clips["two.mp4"]
    assert got["video"].endswith(f"/{shard_folder('dropped')}/dropped.mp4")
    assert not any((config.out / ".partial").iterdir())


def test_vi_download_fetches_each_id_once_resumes_and_reports_failures(clips, tmp_path):
    out, records = tmp_path / "videos", tmp_path / "downloaded.jsonl"
    with VideoServer(clips) as server:
        lines = (f"{server.url('v', 'one.mp4')}\n"
                 + json.dumps({"id": "two", "url": server.url("v", "two.mp4")}) + "\n"
                 + json.dumps({"id": "gone", "url": server.url("missing", "two.mp4")}) + "\n")
        listing = tmp_path / "list.txt"
        listing.write_text(lines)
        args = ("download", "-i", str(listing), "--out", str(out), "--concurrency", "2", "--retries", "0", "-q")
        first = run_vi(*args, "-o", str(records), env=NO_PROXY)
        assert first.returncode == 3, first.stderr  # one record failed
        got = {r["id"]: r for r in jsonl(records.read_text())}
        assert got["gone"]["errors"][-1]["kind"] == "unavailable"
        assert open(got["two"]["video"], "rb").read() == clips["two.mp4"]
        one = next(r for i, r in got.items() if i not in ("two", "gone"))
        assert open(one["video"], "rb").read() == clips["one.mp4"] and one["download"]["fetched"]
        assert all(n == 2 for path, n in server.hits.items() if path.startswith("/v/"))  # sniff + download
        hits = dict(server.hits)
        again = run_vi(*args, "-o", str(records), "--resume", env=NO_PROXY)
        assert again.returncode == 0, again.stderr  # the failed record counts as done
        assert dict(server.hits) == hits and len(jsonl(records.read_text())) == 3
        elsewhere = run_vi(*args, "-o", str(tmp_path / "other.jsonl"), env=NO_PROXY)
        assert dict(server.hits) == {**hits, "/missing/two.mp4": 2}  # the archive: no finished id refetched
        refound = {r["id"]: r for r in jsonl((tmp_path / "other.jsonl").read_text())}
        assert refound["two"]["video"] == got["two"]["video"] and refound["two"]["download"]["fetched"] is False
        assert elsewhere.returncode == 3
    archive = (out / "archive.txt").read_text().splitlines()
    assert len(archive) == 2 and all(os.path.exists(out / line.split("\t")[1]) for line in archive)


def test_a_rate_limited_id_is_fetched_again_by_retry_errors_and_only_it(clips, tmp_path):
    """rate_limited is a transient kind (core.errors.TRANSIENT_KINDS): a plain --resume leaves it
    failed, --resume --retry-errors (its default kinds) fetches it again, and its line is replaced."""
    out, records = tmp_path / "videos", tmp_path / "downloaded.jsonl"
    with VideoServer(clips, busy_times=1) as server:
        listing = tmp_path / "list.txt"
        listing.write_text(json.dumps({"id": "fine", "url": server.url("v", "one.mp4")}) + "\n"
                           + json.dumps({"id": "busy", "url": server.url("busy", "two.mp4")}) + "\n")
        args = ("download", "-i", str(listing), "--out", str(out), "--retries", "0", "-q", "-o", str(records))
        assert run_vi(*args, env=NO_PROXY).returncode == 3
        assert {r["id"]: r["errors"][-1]["kind"] for r in jsonl(records.read_text()) if r.get("errors")} == \
            {"busy": "rate_limited"}
        hits = dict(server.hits)
        assert run_vi(*args, "--resume", env=NO_PROXY).returncode == 0
        assert dict(server.hits) == hits  # the failed id counts as done
        retried = run_vi(*args, "--resume", "--retry-errors", env=NO_PROXY)
        assert retried.returncode == 0, retried.stderr
        got = {r["id"]: r for r in jsonl(records.read_text())}
        assert len(jsonl(records.read_text())) == 2 and not got["busy"].get("errors")
        assert open(got["busy"]["video"], "rb").read() == clips["two.mp4"]
        assert server.hits["/v/one.mp4"] == hits["/v/one.mp4"]  # the finished id was not fetched again
