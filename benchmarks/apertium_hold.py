"""How many words an Apertium sentence's re-translation should hold back (``apertium.hold_words``).

Replays each reference transcript of ../shared/samples word by word through the real
incremental policy (``stages.text_mt.IncrementalTextTranslation``) on the real Apertium pair,
as committed captions would arrive, for hold = 1..4, and prints per half of the clips (split
by recording source, ``speechpipe.evaluation.split``):

- ``NE``: shown words (committed + held) later taken back, over final words;
- ``BLEU vs whole``: the streamed translation against the same pair's translation of the
  whole sentence at once (what streaming costs in quality);
- ``early``: the share of the final words committed before the sentence's last word arrived
  (how much is spoken while the speaker still talks).

    python benchmarks/apertium_hold.py [../shared/samples/manifest.jsonl]

The hold is chosen on the tuning half; the report half is printed beside it.
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import replace
from pathlib import Path

from speechpipe.evaluation.scores import corpus_bleu, normalized_erasure
from speechpipe.evaluation.split import split_of
from speechpipe.models.mt.apertium import ApertiumTranslator, installed_pairs
from speechpipe.stages.text_mt import IncrementalTextTranslation
from speechpipe.stages.text_mt_options import TextMtOptions

PAIRS = (("en", "es"), ("fr", "es"))


def sentences(manifest: Path) -> list[tuple[str, str, str]]:
    """(split, lang, transcript) of every clip with a cased, punctuated reference transcript
    in a language a pair translates from, or a normalized one (both are what captions are)."""
    out = []
    for line in manifest.read_text(encoding="utf-8").splitlines():
        clip = json.loads(line)
        kind = (clip.get("transcript_kind") or "").split()
        if clip["lang"] in dict(PAIRS) and clip.get("transcript") and kind \
                and kind[0].startswith("reference") and clip.get("duration_s", 0) < 30:
            out.append((split_of(clip), clip["lang"], clip["transcript"]))
    return out


async def stream(translator: ApertiumTranslator, text: str, hold: int,
                 utterance: int) -> tuple[str, list[dict[str, object]], int]:
    """The streamed translation, what was shown at each update (as trace records, for
    ``normalized_erasure``) and the words committed before the end."""
    translator.options = replace(translator.options, hold_words=hold)
    policy = IncrementalTextTranslation(translator.pair.source, translator.pair.target,
                                        options=translator.policy(TextMtOptions()))
    words = text.split()
    shown: list[dict[str, object]] = []
    early = 0
    for n in range(1, len(words) + 1):
        final = n == len(words)
        requests = policy.update(" ".join(words[:n]), final=final)
        update = policy.apply([await translator.translate(r) for r in requests])
        shown.append({"event": "mt.update", "utterance": utterance,
                      "committed": update.committed, "tentative": update.tentative})
        if not final:
            early = len(update.committed.split())
    return policy.committed, shown, early


async def main(manifest: Path) -> None:
    installed = installed_pairs()
    rows: dict[tuple[str, int], list[tuple[str, str, list[dict[str, object]], int]]] = {}
    for source, target in PAIRS:
        if (source, target) not in installed:
            print(f"skipping {source}-{target}: not installed")
            continue
        translator = ApertiumTranslator(installed[(source, target)])
        try:
            for half, lang, text in sentences(manifest):
                if lang != source:
                    continue
                whole = translator.translate_text(text)
                for hold in (1, 2, 3, 4):
                    items = rows.setdefault((half, hold), [])
                    streamed, shown, early = await stream(translator, text, hold, len(items))
                    items.append((streamed, whole, shown, early))
        finally:
            translator.close()
    print(f"{'half':<8}{'hold':>5}{'sents':>7}{'NE':>8}{'BLEU vs whole':>15}{'early':>8}")
    for (half, hold), items in sorted(rows.items()):
        final_words = sum(len(s.split()) for s, *_ in items) or 1
        ne = normalized_erasure([r for _, _, shown, _ in items for r in shown]) or 0.0
        early = sum(x for *_, x in items) / final_words
        bleu = corpus_bleu([s for s, *_ in items], [w for _, w, *_ in items]) or 0.0
        print(f"{half:<8}{hold:>5}{len(items):>7}{ne:>8.3f}{bleu:>15.2f}{early:>8.2f}")


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1] if len(sys.argv) > 1 else
                          "../shared/samples/manifest.jsonl")))
