"""Chat prompts as text files: the package's own (prompt_templates/) or a user's (--prompt).

A prompt file is a list of chat turns. Each turn starts with a line `### system`,
`### user` or `### assistant`; user/assistant pairs before the last user turn are worked
examples. `${name}` placeholders are filled at render time (string.Template, so the JSON in
examples needs no escaping). Lines starting with `#` before the first turn are comments.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

ROLES = ("system", "user", "assistant")
_HEADER = re.compile(r"^###\s*(\w+)\s*$")


@dataclass(frozen=True)
class ChatPrompt:
    source: str  # where it came from, for messages
    turns: tuple[tuple[str, str], ...]  # (role, template text)

    def placeholders(self) -> set[str]:
        names = set()
        for role, text in self.turns:
            for match in string.Template.pattern.finditer(text):
                if match.group("invalid") is not None:
                    line = text.count("\n", 0, match.start()) + 1
                    raise ValueError(f"{self.source}: a '$' in the {role} turn (its line {line}) "
                                     "starts no placeholder; write $$ for a literal dollar sign")
                names.add(match.group("named") or match.group("braced"))
        return names - {None}

    def render(self, **values: str) -> list[dict[str, str]]:
        return [{"role": role, "content": string.Template(text).substitute(values)}
                for role, text in self.turns]


def parse_prompt(text: str, source: str) -> ChatPrompt:
    turns: list[tuple[str, list[str]]] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        header = _HEADER.match(line)
        if header:
            role = header.group(1).lower()
            if role not in ROLES:
                raise ValueError(f"{source}:{lineno}: unknown turn '### {header.group(1)}'; "
                                 f"turns are {', '.join('### ' + r for r in ROLES)}")
            turns.append((role, []))
        elif turns:
            turns[-1][1].append(line)
        elif line.strip() and not line.startswith("#"):
            raise ValueError(f"{source}:{lineno}: text before the first turn; start the prompt "
                             "with a line '### system' or '### user'")
    if not turns or turns[-1][0] != "user":
        raise ValueError(f"{source}: a prompt must end with a '### user' turn")
    return ChatPrompt(source, tuple((role, "\n".join(lines).strip()) for role, lines in turns))


def load_prompt(name: str, override: Path | None = None, needs: tuple[str, ...] = ()) -> ChatPrompt:
    """The packaged prompt `name`, or the file `override`; checks it uses `needs`."""
    if override is not None:
        prompt = parse_prompt(Path(override).read_text(encoding="utf-8"), str(override))
    else:
        text = resources.files("vi.pipelines.common").joinpath("prompt_templates", f"{name}.txt")
        prompt = parse_prompt(text.read_text(encoding="utf-8"), f"{name}.txt")
    missing = [n for n in needs if n not in prompt.placeholders()]
    if missing:
        raise ValueError(f"{prompt.source}: the prompt never uses {', '.join('${' + n + '}' for n in missing)}; "
                         "the stage would send the model no transcript")
    unknown = prompt.placeholders() - set(needs)
    if unknown:
        raise ValueError(f"{prompt.source}: unknown placeholders {', '.join(sorted(unknown))}; "
                         f"this stage fills {', '.join('${' + n + '}' for n in needs)}")
    return prompt
