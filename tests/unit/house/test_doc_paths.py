"""Every repository path the user documents name exists, and every link in them resolves.

The README and ``docs/usage.md`` (and the other documents moved out of the README) name files
as ``samples/wav/es_gato.wav``, ``scripts/netns-pytest`` or ``stages/clock.py``, and link
``docs/serving.md#...``. A rename that forgets them leaves a user at a path that is not
there: this test reads each document, takes every path that starts with one of the
repository's top-level entries, and every relative Markdown link (with its ``#anchor``, held
to the target's headings as GitHub makes them), and fails naming each one that is missing.
Paths outside the repository (``../shared/samples``, ``~/.cache``, ``$SPEECHPIPE_HOME``,
URLs) are not repository paths and are not checked.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers import ROOT

DOCUMENTS = ["README.md", "docs/usage.md", "docs/serving.md", "docs/layout.md"]
# the first component of a path relative to the repository: a top-level file or folder
TOP = {entry.name for entry in ROOT.iterdir()
       if not entry.name.startswith(".") or entry.name == ".ci"} - {".venv", ".ci-venv"}
PATH = re.compile(r"(?<![\w./~$:@-])([A-Za-z_.][\w.-]*(?:/[\w.-]+)+/?)(?![\w*{/.-])")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def repository_paths(text: str) -> set[str]:
    """Paths in ``text`` (prose, code spans and blocks) that start at a top-level entry."""
    found = set()
    for match in PATH.finditer(text):
        path = match.group(1).rstrip(".,:;")
        if path.split("/", 1)[0] in TOP:
            found.add(path)
    return found


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    text = re.sub(r"```.*?```", "", markdown, flags=re.S)  # no headings inside code blocks
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.M):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(document: Path, text: str) -> list[str]:
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (document.parent / path).resolve() if path else document
        if not file.exists():
            broken.append(target)
        elif anchor and file.suffix == ".md" and anchor not in anchors(
                file.read_text(encoding="utf-8")):
            broken.append(f"{target} (no such heading)")
    return broken


@pytest.mark.parametrize("name", DOCUMENTS)
def test_every_repository_path_a_document_names_exists(name: str) -> None:
    text = (ROOT / name).read_text(encoding="utf-8")
    paths = repository_paths(text)
    assert paths, f"{name} names no repository path: the pattern no longer reads it"
    missing = sorted(path for path in paths if not (ROOT / path).exists())
    assert missing == [], f"{name} names paths that do not exist: {missing}"


@pytest.mark.parametrize("name", DOCUMENTS)
def test_every_relative_link_of_a_document_resolves(name: str) -> None:
    document = ROOT / name
    assert broken_links(document, document.read_text(encoding="utf-8")) == []


def test_the_readme_is_read_for_the_paths_a_user_types() -> None:
    readme = repository_paths((ROOT / "README.md").read_text(encoding="utf-8"))
    assert {"samples/wav/es_gato.wav", "scripts/test-all", "docs/usage.md",
            "docs/serving.md", "tests/slow/e2e/test_readme_example.py"} <= readme
    # outside the repository, or not a path: never checked
    assert repository_paths("`../shared/samples/x.wav` `~/.cache/speechpipe` "
                            "`$SPEECHPIPE_HOME/models` http://127.0.0.1:8765/metrics "
                            "`owner/name` `speechpipe/bench/drill*.py`") == set()
    assert repository_paths("see docs/design.md, and `stages/nothing_here.py`.") == {
        "docs/design.md", "stages/nothing_here.py"}


def test_anchors_are_githubs() -> None:
    markdown = "# A\n## The caption overlay (`/captions`)\n## Long speech\n## Long speech\n"
    assert anchors(markdown) == {"a", "the-caption-overlay-captions", "long-speech",
                                 "long-speech-1"}
    assert slug("Nothing at a window's edge is final (issues 40 and 45, 2026-12-03)") == (
        "nothing-at-a-windows-edge-is-final-issues-40-and-45-2026-12-03")


def test_the_readme_stays_a_users_document() -> None:
    """Issue 43: at most 200 lines; the details live in docs/usage.md and docs/serving.md,
    the figures in docs/benchmarks.md (the README keeps a few current ones)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200, "move details to docs/usage.md or docs/serving.md"
    for title in ("Quick start", "Usage", "Serving", "Library use", "Figures", "Documentation"):
        assert f"\n## {title}\n" in readme, title
