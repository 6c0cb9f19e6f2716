"""The eval's and the server's counts of invented and dropped utterances (issue 16)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from speechpipe.evaluation.evaluate import count_unfaithful
from speechpipe.evaluation.trace import TraceBuilder
from speechpipe.server.metrics import ServerMetrics
from speechpipe.stages.frames import UtteranceEnd
from speechpipe.transport.file_replay import ReplayEvent

NEWS = ("Merci. Mais l'actualité c'est aussi aujourd'hui un dernier adieu à un grand homme "
        "de la radio.")
FAITHFUL = [("Bonjour à tous.", "Hello everyone."),
            (NEWS, "Thank you. But the news today is also a last farewell to a great radio man."),
            ("...", "")]
UNGUARDED = [("...", "The game is over."),  # music: no source words, English anyway
             ("", "The first time I saw it, I was surprised."),
             (NEWS, "Thank you!")]  # 16 source words, 2 target words


def test_counts_scripted_hypotheses():
    assert count_unfaithful(FAITHFUL) == {"invented": 0, "dropped": 0}
    assert count_unfaithful(UNGUARDED) == {"invented": 2, "dropped": 1}
    assert count_unfaithful(UNGUARDED, min_ratio=0.05) == {"invented": 2, "dropped": 0}


def test_trace_marks_the_utterance():
    trace = TraceBuilder(16_000)
    for i, (source, target) in enumerate([*FAITHFUL, *UNGUARDED]):
        trace.add(ReplayEvent(0.0, UtteranceEnd(i, 16_000 * i, source, target)))
    marks = [r["faithfulness"] for r in trace.records]
    assert marks == ["ok", "ok", "empty", "invented", "invented", "dropped"]
    assert trace.records[-1]["source_words"] == 16 and trace.records[-1]["target_words"] == 2


def test_prometheus_counts_unfaithful_utterances():
    metrics = ServerMetrics(CollectorRegistry())
    for i, (source, target) in enumerate([*FAITHFUL, *UNGUARDED]):
        metrics.output_event(UtteranceEnd(i, 16_000 * i, source, target))
    text = metrics.text().decode()
    assert 'speechpipe_unfaithful_utterances_total{kind="invented"} 2.0' in text
    assert 'speechpipe_unfaithful_utterances_total{kind="dropped"} 1.0' in text
