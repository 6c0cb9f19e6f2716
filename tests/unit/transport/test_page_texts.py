"""The demo page's hints (``transport/static/app.js``) name real flags and commands (the
page's texts, run in Node: the cli tier)."""

from __future__ import annotations

from tests.helpers import ROOT

APP_JS = ROOT / "transport" / "static" / "app.js"


def test_the_page_s_hints_name_real_flags_and_commands() -> None:
    """Every flag the page names is one ``serve`` (or ``token``) has — none is
    ``translate``'s ``--mt``, which ``serve`` lacks — and the install hint on a language the
    server cannot reach names a pair ``models pull`` knows, for every language the page
    lists by itself (the others come from ``GET /models``: installed, so no hint)."""
    import re

    from speechpipe.cli import build_parser
    from speechpipe.models.mt.routes import PAIR_CATALOGUE

    static = APP_JS.parent
    texts = (APP_JS.read_text(), (static / "index.html").read_text())
    named = {flag for text in texts for flag in re.findall(r"(?<![\w-])--[a-z][a-z-]+", text)}
    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    known = {flag for name in ("serve", "token") for action in commands[name]._actions
             for flag in action.option_strings}
    assert named and named <= known, named - known
    assert "--mt" not in named
    assert "speechpipe models pull en-${code}" in texts[0]
    listed = re.findall(r'<option value="([a-z]{2})"', texts[1].split('id="target-lang"')[1]
                        .split("</select>")[0])
    assert "en" in listed and len(listed) > 1
    assert all(f"en-{code}" in PAIR_CATALOGUE for code in listed if code != "en"), listed
