"""The docs say what the command says: every command `vi --help` lists (group subcommands
included) has a `### vi NAME` heading in a docs/*.md page, every such heading names a real
command, the README stays short, and every relative link in README.md, docs/*.md and the
measured results (evaluation/*/RESULTS.md) resolves, down to the heading it names."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest
import typer

import vi.cli.app as vi_app

ROOT = Path(__file__).resolve().parents[2]  # the checkout: the docs are not in the wheel
DOCS = ROOT / "docs"
README = ROOT / "README.md"
README_MAX_LINES = 120  # two screens: the rest is in docs/
HEADING = re.compile(r"^### vi ([a-z0-9][a-z0-9-]*(?: [a-z0-9][a-z0-9-]*)*)\s*$")
LINK = re.compile(r"(?<!\\)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~)")


def cli_command_names() -> set[str]:
    """Every leaf command's full name (`probe`, `judge match`), walked through the click API so it
    holds however the app registers its commands (decorators, or a lazy command table)."""
    register = getattr(vi_app, "_register", None)
    if callable(register):  # the app as it was: commands added by importing their modules
        register()
    root = typer.main.get_command(vi_app.app)

    def walk(group, prefix: str) -> set[str]:
        ctx = typer.Context(group, info_name=prefix.strip() or "vi")
        names = set()
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            assert command is not None, f"vi --help lists {prefix}{name}, which does not load"
            if command.hidden:
                continue
            if hasattr(command, "list_commands"):  # a group (typer vendors click: no isinstance)
                names |= walk(command, f"{prefix}{name} ")
            else:
                names.add(prefix + name)
        return names

    return walk(root, "")


def doc_pages() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


def prose_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of the lines outside fenced code blocks."""
    out, fenced = [], False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append((number, line))
    return out


def documented_commands() -> dict[str, list[str]]:
    """`### vi NAME` headings of docs/*.md: name -> where."""
    found: dict[str, list[str]] = {}
    for page in doc_pages():
        for number, line in prose_lines(page):
            match = HEADING.match(line)
            if match:
                found.setdefault(match.group(1), []).append(f"{page.name}:{number}")
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces to dashes."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for _, line in prose_lines(path):
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            base = slug(match.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            out.add(base if count == 0 else f"{base}-{count}")
    return out


@pytest.fixture(scope="module")
def commands() -> set[str]:
    names = cli_command_names()
    assert {"probe", "extract-steps", "train stepdiff", "judge match", "eval framecap",
            "export showhowto"} <= names, names
    return names


def test_every_command_has_a_docs_heading(commands):
    documented = documented_commands()
    missing = sorted(commands - set(documented))
    assert not missing, ("commands without a `### vi NAME` heading in docs/*.md: "
                         + ", ".join(f"vi {name}" for name in missing))


def test_every_docs_heading_names_a_real_command(commands):
    documented = documented_commands()
    unknown = {name: where for name, where in documented.items() if name not in commands}
    assert not unknown, f"`### vi NAME` headings for commands vi does not have: {unknown}"
    twice = {name: where for name, where in documented.items() if len(where) > 1}
    assert not twice, f"commands documented under two headings: {twice}"


def test_the_readme_fits_in_two_screens():
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; at most {README_MAX_LINES}: move detail to docs/"


@pytest.mark.parametrize("page", [README, *doc_pages(), *sorted(ROOT.glob("evaluation/*/RESULTS.md"))],
                         ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(page):
    broken = []
    for number, line in prose_lines(page):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto: ...: not checked here
                continue
            path_part, _, fragment = target.partition("#")
            where = (page.parent / unquote(path_part)).resolve() if path_part else page
            if not where.exists():
                broken.append(f"line {number}: {target} (no such file)")
            elif fragment and where.suffix == ".md" and fragment not in anchors(where):
                broken.append(f"line {number}: {target} (no heading #{fragment} in {where.name})")
    assert not broken, f"{page.relative_to(ROOT)}: broken links: {broken}"
