"""The README's "Library use" example, extracted from README.md and run as written."""

from __future__ import annotations

import re

import pytest

from tests.helpers import ROOT


def library_example() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Library use", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "the Library use section has one python example"
    return blocks[0]


def test_readme_library_example_translates_a_real_clip(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code = library_example()
    assert "samples/wav/es_gato.wav" in code
    monkeypatch.chdir(ROOT)  # the example names the clip relative to the repository
    exec(compile(code, str(ROOT / "README.md"), "exec"), {"__name__": "__main__"})
    out = capsys.readouterr().out
    # the example prints repr()s: double quotes when the text holds an apostrophe
    utterances = re.findall(r"""^(['"])(.*)\1 -> (['"])(.*)\3$""", out, re.M)
    assert utterances, out
    source = " ".join(u[1] for u in utterances).lower()
    target = " ".join(u[3] for u in utterances).lower()
    assert "gato" in source and "casa" in source, source
    # beam-5 partials agree on a wrong first word on this clip ("And I'm going to sleep in
    # the house because it's very cold."; greedy: "The cat is sleeping in the house ..."):
    # a known miss of the beam default, which is +5 BLEU on the 49 shared clips
    # (docs/benchmarks.md, "Quality"); the rest of the sentence must be there
    assert "house" in target and "cold" in target, target
    speech_s = float(re.search(r"^([\d.]+) s of translated speech$", out, re.M).group(1))
    assert speech_s > 1.0
