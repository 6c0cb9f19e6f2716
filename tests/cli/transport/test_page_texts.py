"""The demo page's texts (issue 47, item 8), run in Node on ``transport/static/app.js`` itself
with a stand-in for the few DOM calls it makes (a browser would need Chromium; the page's
Chromium tests cover the wiring): latency figures only for the person they measure, and a
``translation_incomplete`` event as a notice, not an error; a target the server cannot
reach disabled in a session of one, "captions only" in a room."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import ROOT

APP_JS = ROOT / "transport" / "static" / "app.js"

HARNESS = r"""
const vm = require("vm");
const fs = require("fs");
const elements = {};
function element(id) {
  const el = {
    id, textContent: "", value: "", hidden: false, disabled: false, href: "", dataset: {},
    style: {}, innerHTML: "",
    addEventListener() {}, appendChild() {}, remove() {}, scrollIntoView() {},
    setAttribute() {}, closest() { return element(id + ":label"); },
    querySelector(sel) { return elements[id + sel] || (elements[id + sel] = element(id + sel)); },
  };
  return el;
}
const document = {
  getElementById: (id) => elements[id] || (elements[id] = element(id)),
  createElement: () => element("new"),
};
const context = vm.createContext({
  document, location: { hash: "", origin: "http://127.0.0.1", pathname: "/" },
  URLSearchParams, console, setTimeout, WebSocket: { OPEN: 1 },
});
vm.runInContext(fs.readFileSync(process.argv[2], "utf8"), context);
const scenario = JSON.parse(process.argv[3]);
context.scenario = scenario;
vm.runInContext(`
  s = { role: scenario.role, session: "me", transport: "websocket", samplesSent: 48000 * 3,
        ctx: { sampleRate: 48000, currentTime: 0 }, speechStarts: new Map(),
        spokenUtterances: new Set(), lines: { source: new Map(), target: new Map() },
        captionLag: null, speechOffset: null, pendingAudio: null, playhead: 0 };
  for (const m of scenario.messages) onMessage({ data: JSON.stringify(m) });
  if (scenario.close) setStatus(closedStatus(scenario.close, s.refusal), "error");
  if (scenario.targets) {  // "Translate to" once GET /models answered
    const select = $("target-lang");
    select.options = scenario.listed.map(([value, textContent]) => (
      { value, textContent, disabled: false, title: "", dataset: {} }));
    select.value = scenario.chosen || "en";
    $("room-mode").value = scenario.roomMode || "off";
    serverTargets = scenario.targets;
    labelTargets();
    for (const mode of scenario.thenRoomMode || []) {  // the Room select changed
      $("room-mode").value = mode;
      labelTargets();
    }
  }
`, context);
console.log(JSON.stringify({
  latency: elements.latency ? elements.latency.textContent : "",
  status: elements.status ? elements.status.textContent : "",
  level: elements.status ? elements.status.dataset.level : "",
  errors: elements.stats ? elements.stats.dataset.errors || "0" : "0",
  chosen: elements["target-lang"] ? elements["target-lang"].value : "",
  targets: elements["target-lang"] && elements["target-lang"].options
    ? elements["target-lang"].options.map((o) => [o.value, o.textContent, o.disabled, o.title])
    : [],
}));
"""


def run_page(role: dict[str, str] | None, messages: list[dict[str, object]],
             tmp_path: Path, close: dict[str, object] | None = None,
             **scenario: object) -> dict[str, Any]:
    node = shutil.which("node")
    if node is None:
        pytest.skip("Node.js is not installed (apt-get install -y nodejs)")
    harness = tmp_path / "harness.js"
    harness.write_text(HARNESS)
    result = subprocess.run(
        [node, str(harness), str(APP_JS),
         json.dumps({"role": role, "messages": messages, "close": close, **scenario})],
        capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


# another speaker's utterance 7 began 28 s into *their* stream; this page has sent 3 s
THEIR_SPEECH = [
    {"type": "vad", "kind": "start", "utterance": 7, "t": 28.0, "speaker": "them"},
    {"type": "target", "utterance": 7, "revision": 0, "committed": "Hello", "tentative": "",
     "final": False, "audio_end": 28.4, "speaker": "them"},
    {"type": "audio", "utterance": 7, "via": "webrtc", "samples": 2400, "sample_rate": 24000,
     "speaker": "them"},
]


@pytest.mark.parametrize("role", [{"room": "r", "role": "listener"},
                                  {"room": "r", "role": "participant"}])
def test_no_latency_figures_from_someone_elses_speech(role: dict[str, str],
                                                      tmp_path: Path) -> None:
    shown = run_page(role, THEIR_SPEECH, tmp_path)
    assert shown["latency"] == "", shown  # was "speech began -25.00 s after you started..."


def test_the_speaker_sees_its_own_latency(tmp_path: Path) -> None:
    mine = [{**m, "speaker": "me", "t": 1.0} if m["type"] == "vad" else {**m, "speaker": "me"}
            for m in THEIR_SPEECH]
    mine[1]["audio_end"] = 2.5
    shown = run_page({"room": "r", "role": "speaker"}, mine, tmp_path)
    assert "caption lag 0.50 s" in shown["latency"], shown
    assert "speech began 2.00 s after you started talking" in shown["latency"], shown


def test_an_incomplete_translation_is_a_notice_and_other_errors_stay_errors(
    tmp_path: Path,
) -> None:
    incomplete = {"type": "error", "code": "translation_incomplete", "fatal": False,
                  "message": "the translation covers 3 words of 12 heard", "utterance": 2}
    shown = run_page(None, [incomplete], tmp_path)
    assert shown["status"] == "note: the translation covers 3 words of 12 heard", shown
    assert shown["level"] == "info" and shown["errors"] == "0", shown
    other = {"type": "error", "code": "worker_error", "fatal": False, "message": "TTS failed"}
    shown = run_page(None, [other], tmp_path)
    assert shown["status"] == "error (worker_error): TTS failed" and shown["level"] == "warn"


def test_a_refusal_stays_in_view_when_the_server_closes(tmp_path: Path) -> None:
    """The newcomer's "disconnected (4003: unsupported_language)": the close that follows a
    fatal error replaced the error's text, which says what to do."""
    refusal = {"type": "error", "code": "unsupported_language", "fatal": True,
               "message": "no es voice or en->es pair: run speechpipe models pull en-es"}
    close = {"code": 4003, "reason": "unsupported_language"}
    shown = run_page(None, [refusal], tmp_path, close=close)
    assert shown["status"] == ("error (unsupported_language): no es voice or en->es pair: run "
                               "speechpipe models pull en-es (disconnected, 4003: "
                               "unsupported_language)"), shown
    assert shown["level"] == "error"
    # a close with no error before it still says what closed
    shown = run_page(None, [], tmp_path, close={"code": 1011, "reason": ""})
    assert shown["status"] == "disconnected (1011)", shown


LISTED = [["en", "English"], ["es", "Spanish"], ["fr", "French"], ["de", "German"]]


def test_a_session_of_one_cannot_choose_a_target_the_server_cannot_reach(
    tmp_path: Path,
) -> None:
    """The newcomer chose German, marked "(captions only)", and got "disconnected (4003:
    unsupported_language)": a session of one is refused a target no installed pair reaches,
    so such a target is listed disabled, with the command that installs it."""
    shown = run_page(None, [], tmp_path, targets={"en": [], "es": []}, listed=LISTED,
                     chosen="de")
    options = {value: (label, disabled, title) for value, label, disabled, title
               in shown["targets"]}
    assert options["en"] == ("English", False, "") and options["es"] == ("Spanish", False, "")
    assert options["de"] == ("German (not installed: speechpipe models pull en-de)", True,
                             "not installed on this server: speechpipe models pull en-de")
    assert options["fr"][1] and "captions only" not in options["fr"][0]
    assert shown["chosen"] == "en"  # a disabled choice does not stay chosen


def test_in_a_room_a_target_without_a_pair_is_captions_only(tmp_path: Path) -> None:
    """A room participant reads the others' captions in any language: there the same
    targets stay choosable, "captions only"; switching the Room select relabels them."""
    joined = run_page({"room": "r", "role": "participant"}, [], tmp_path,
                      targets={"en": []}, listed=LISTED, roomMode="participant", chosen="de")
    labels = {value: (label, disabled) for value, label, disabled, _ in joined["targets"]}
    assert labels["de"] == ("German (captions only)", False) and joined["chosen"] == "de"
    back = run_page(None, [], tmp_path, targets={"en": []}, listed=LISTED,
                    roomMode="participant", thenRoomMode=["off"])
    labels = {value: (label, disabled) for value, label, disabled, _ in back["targets"]}
    assert labels["de"] == ("German (not installed: speechpipe models pull en-de)", True)
