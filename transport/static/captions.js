// speechpipe caption overlay: /captions#room=ID&lang=xx[&token=...][&size=44]
// Joins the room as a listener (docs/protocol.md, "Rooms"), shows the last two lines of the
// captions in that language (tentative words dimmed) and reconnects when the connection
// ends: a server restart, a network change. Plain JS, no build step; no audio is played.
"use strict";

const KEEP = 4; // utterances kept on screen (the box shows their last two lines)
const params = new URLSearchParams(location.hash.slice(1));
const room = params.get("room");
const lang = (params.get("lang") || "en").toLowerCase();
const token = params.get("token") || undefined;
const overlay = document.getElementById("overlay");
const box = document.getElementById("captions");
if (params.get("size")) box.style.setProperty("--size", `${Number(params.get("size")) || 44}px`);

let side = "target"; // "source" when the server has no model for this language
let retryMs = 1000;
const lines = new Map(); // speaker:utterance -> {committed, tentative, revision}

function render() {
  box.textContent = "";
  for (const line of lines.values()) {
    if (!line.committed && !line.tentative) continue;
    const committed = document.createElement("span");
    committed.className = "committed";
    committed.textContent = line.committed;
    box.appendChild(committed);
    if (line.tentative) {
      const tentative = document.createElement("span");
      tentative.className = "tentative";
      tentative.textContent = (line.committed ? " " : "") + line.tentative;
      box.appendChild(tentative);
    }
    box.appendChild(document.createTextNode(" "));
  }
}

function onCaption(msg) {
  if (msg.type !== side) return;
  const key = `${msg.speaker || ""}:${msg.utterance}`;
  const old = lines.get(key);
  if (old && msg.revision < old.revision) return;
  lines.delete(key); // re-insert: the newest utterance is the last on screen
  lines.set(key, { committed: msg.committed || "", tentative: msg.final ? "" : msg.tentative || "",
                   revision: msg.revision });
  while (lines.size > KEEP) lines.delete(lines.keys().next().value);
  overlay.dataset.captions = String(Number(overlay.dataset.captions) + 1);
  render();
}

function connect() {
  if (!room) {
    overlay.dataset.state = "no-room"; // the address needs #room=ID&lang=xx
    return;
  }
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const ws = new WebSocket(`${scheme}//${location.host}/ws`);
  ws.binaryType = "arraybuffer";
  overlay.dataset.state = "connecting";
  ws.onopen = () => ws.send(JSON.stringify({
    type: "start", role: "listener", room, source_lang: "auto", target_lang: lang,
    format: "pcm_s16le", sample_rate: 16000, output_sample_rate: 16000, token,
  }));
  ws.onmessage = (event) => {
    if (typeof event.data !== "string") return; // speech: not played here
    let msg;
    try { msg = JSON.parse(event.data); } catch { return; }
    if (msg.type === "started") {
      overlay.dataset.state = "live";
      retryMs = 1000;
    } else if (msg.type === "source" || msg.type === "target") {
      onCaption(msg);
    } else if (msg.type === "status" && msg.status === "translation_unavailable") {
      side = "source"; // the speaker's own captions are what this room has in no language
    } else if (msg.type === "error" && msg.fatal) {
      overlay.dataset.error = msg.code || "";
    }
  };
  ws.onclose = (event) => {
    overlay.dataset.state = "reconnecting";
    overlay.dataset.closeCode = String(event.code);
    // a token that is refused will not get better: try again, but rarely
    const wait = event.code === 4004 ? 30000 : retryMs;
    retryMs = Math.min(retryMs * 2, 10000);
    setTimeout(connect, wait);
  };
}

connect();
