"""The command line as a user meets it: help, completion, exit codes, stdout purity."""

import json
import os
import sys

from conftest import VI, jsonl, run_vi


def test_help_lists_every_stage_with_a_description():
    out = run_vi("--help", check=True).stdout
    for command in ("probe", "transcribe", "models"):
        assert command in out
    assert "metadata records" in out and "sentence-level segments" in out


def test_each_stage_help_says_what_it_reads_writes_and_an_example():
    for stage in ("probe", "transcribe"):
        out = run_vi(stage, "--help", check=True).stdout
        assert "Reads:" in out and "Writes:" in out and "Example:" in out
        for option in ("--input", "--output", "--resume", "--shard", "--strict", "--seed"):
            assert option in out
    assert "--device" in run_vi("transcribe", "--help").stdout


def test_no_help_text_has_brackets_that_rich_takes_for_markup():
    """Help is rich markup: `text: [captions]` would show as `text: }`, the bracketed words read as a style.
    Brackets meant as text are written \\[captions]; every tag left must be a style rich knows."""
    from rich.errors import StyleSyntaxError
    from rich.markup import RE_TAGS
    from rich.style import Style

    from vi.cli.app import COMMANDS, Group, load

    texts = {}
    for name, entry in COMMANDS.items():
        entries = entry.commands.items() if isinstance(entry, Group) else [(None, entry)]
        if isinstance(entry, Group):
            texts[f"{name} (group)"] = entry.help
        for sub, (target, summary) in entries:
            command = load(target, sub or name, summary)
            texts[" ".join(filter(None, (name, sub)))] = " ".join(
                [command.help or "", command.epilog or "", *(getattr(p, "help", None) or "" for p in command.params)])
    eaten = []
    for name, text in texts.items():
        for match in RE_TAGS.finditer(text):
            escapes, tag = match.group(2), match.group(3)
            if len(escapes) % 2 or tag.startswith("/"):
                continue
            try:
                Style.parse(tag)
            except StyleSyntaxError:
                eaten.append(f"{name}: {match.group(0)}")
    assert eaten == []


def test_python_dash_m_vi_is_the_same_app():
    import subprocess

    done = subprocess.run([sys.executable, "-m", "vi", "--version"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith("vi ")


def test_shell_completion_completes_stage_names():
    env = {"_VI_COMPLETE": "complete_bash", "COMP_WORDS": "vi tra", "COMP_CWORD": "1"}
    out = run_vi(env=env).stdout
    assert "transcribe" in out and "probe" not in out


def test_usage_errors_exit_2_with_a_message(tmp_path):
    done = run_vi("probe", "--shard", "9/4", str(tmp_path))
    assert done.returncode == 2 and "--shard" in done.stderr
    assert done.stdout == ""
    done = run_vi("transcribe", "--resume", stdin="")
    assert done.returncode == 2 and "--output" in done.stderr


def test_unknown_model_is_a_setup_error_naming_it(tea):
    record = json.dumps({"id": "tea", "video": str(tea), "has_audio": True})
    done = run_vi("transcribe", "--model", "no-such-model", stdin=record + "\n")
    assert done.returncode == 5
    assert "no-such-model" in done.stderr and "vi models" in done.stderr


def test_typo_of_a_command_is_not_sent_to_the_editor():
    done = run_vi("transcrib")
    assert done.returncode == 2 and "No such command" in done.stderr


def test_a_file_argument_is_handed_to_the_real_vi_editor(tmp_path):
    # git runs `vi .git/COMMIT_EDITMSG` when EDITOR is unset: inside a venv that is us.
    fake_editor_dir = tmp_path / "bin"
    fake_editor_dir.mkdir()
    editor = fake_editor_dir / "vi"
    editor.write_text("#!/bin/sh\necho \"editor got $1\"\n")
    editor.chmod(0o755)
    message = tmp_path / "COMMIT_EDITMSG"
    message.write_text("msg\n")
    path = f"{os.path.dirname(VI)}{os.pathsep}{fake_editor_dir}{os.pathsep}{os.environ['PATH']}"
    done = run_vi(str(message), env={"PATH": path})
    assert done.stdout.strip() == f"editor got {message}"


def test_stdout_carries_only_jsonl_even_when_libraries_print(tea, tmp_path):
    # whisperx logs to stdout; the stage must keep that off the record stream, and off the
    # terminal's stdout when the records go to a file.
    records = run_vi("probe", str(tea), check=True).stdout
    done = run_vi("transcribe", "--verbose", stdin=records + records.replace('"tea"', '"tea2"'))
    assert done.returncode == 0, done.stderr
    assert len(jsonl(done.stdout)) == 2
    assert "voice activity detection" in done.stderr  # whisperx's INFO log, sent to stderr
    to_file = run_vi("transcribe", "--verbose", "-o", str(tmp_path / "t.jsonl"), stdin=records)
    assert to_file.returncode == 0 and to_file.stdout == ""
    assert "voice activity detection" in to_file.stderr


def test_whisper_size_names_resolve_through_the_hub_cache_only(tea, tmp_path):
    record = json.dumps({"id": "tea", "video": str(tea), "has_audio": True})
    done = run_vi("transcribe", "--model", "large-v2", env={"HF_HUB_CACHE": str(tmp_path)},
                  stdin=record + "\n", timeout=60)
    assert done.returncode == 5
    assert "Systran/faster-whisper-large-v2" in done.stderr and "hf download" in done.stderr


def test_progress_total_counts_only_this_shard(tmp_path):
    from vi.core.records import count_file, count_in_shard
    from vi.core.sharding import Shard

    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps({"id": f"r{i}"}) + "\n" for i in range(100)) + "\n")
    assert count_file(path, None) == 100
    parts = [count_file(path, Shard(i, 4)) for i in range(4)]
    assert sum(parts) == 100 and all(parts)
    assert count_file(None, None) is None
    records = [{"id": f"r{i}"} for i in range(100)]
    assert [count_in_shard(records, Shard(i, 4)) for i in range(4)] == parts


def test_bad_input_lines_are_kept_counted_as_failures_and_set_exit_3():
    done = run_vi("transcribe", stdin='this is not json\n{"video": "x.mp4"}\n')
    records = jsonl(done.stdout)
    assert [r["errors"][0]["kind"] for r in records] == ["invalid_json", "missing_id"]
    assert records[0]["raw"] == "this is not json" and records[1]["video"] == "x.mp4"
    assert done.returncode == 3 and "0 ok, 2 failed, 0 skipped" in done.stderr


def test_vi_runs_offline_unless_downloads_are_allowed():
    import subprocess

    code = "import os; from vi.cli.app import main; import sys; sys.argv=['vi','--version']; "
    code += "main()"
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "VI_ALLOW_DOWNLOAD")}
    probe = "import os, atexit; atexit.register(lambda: print(os.environ.get('HF_HUB_OFFLINE')));"
    out = subprocess.run([sys.executable, "-c", probe + code], env=env, capture_output=True, text=True)
    assert out.stdout.strip().endswith("1")
    out = subprocess.run([sys.executable, "-c", probe + code], capture_output=True, text=True,
                         env={**env, "VI_ALLOW_DOWNLOAD": "1"})
    assert out.stdout.strip().endswith("None")


def test_a_closed_downstream_pipe_is_a_normal_stop(tea, tmp_path):
    import subprocess

    for i in range(40):
        os.symlink(tea, tmp_path / f"v{i:02d}.mp4")
    done = subprocess.run(["bash", "-c", f"set -o pipefail; {VI} probe -q {tmp_path} | head -1"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert len(jsonl(done.stdout)) == 1 and "Traceback" not in done.stderr


def test_unusable_input_or_output_paths_are_usage_errors(tmp_path):
    done = run_vi("transcribe", "-i", str(tmp_path), stdin="")
    assert done.returncode == 2 and str(tmp_path) in done.stderr
    done = run_vi("transcribe", "-o", str(tmp_path), stdin="")
    assert done.returncode == 2 and "Traceback" not in done.stderr
