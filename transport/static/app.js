// speechpipe demo page: microphone -> /ws (AudioWorklet PCM, or WebRTC) -> captions + speech.
// Plain JS, no build step. Protocol reference: docs/protocol.md.
"use strict";

const $ = (id) => document.getElementById(id);
const OUTPUT_RATE = 24000;
const MAX_LINES = 30;

let s = null; // the current run's state

function setStatus(text, level = "info") {
  const el = $("status");
  el.textContent = text;
  el.dataset.level = level;
}

function bump(name, by = 1) {
  const stats = $("stats");
  stats.dataset[name] = String(Number(stats.dataset[name] || 0) + by);
  stats.textContent =
    `source events ${stats.dataset.source} · target events ${stats.dataset.target} · ` +
    `speech chunks ${stats.dataset.audio} (${(Number(stats.dataset.audioSamples) /
      OUTPUT_RATE).toFixed(1)} s)`;
}

function resetStats() {
  const stats = $("stats");
  for (const key of ["source", "target", "audio", "audioSamples", "errors", "remoteLoud",
                     "refused"]) {
    stats.dataset[key] = "0";
  }
  stats.textContent = "";
}

// Seconds of audio the server has been sent: the client's view of stream time.
function streamSeconds() {
  if (!s) return 0;
  if (s.transport === "websocket") return s.samplesSent / s.ctx.sampleRate;
  return s.streamStart === null ? 0 : s.ctx.currentTime - s.streamStart;
}

// Whether a message measures this page's own speech: the latency figures compare its stream
// time with this page's clock, so a listener (another's speech, another's clock) shows none,
// and a participant only those of its own utterances.
function measuresMe(msg) {
  if (s.role && s.role.role === "listener") return false;
  return !msg.speaker || msg.speaker === s.session;
}

// Error codes that say something about one utterance while the session goes on as it should:
// shown as a notice, not as an error.
const NOTICE_CODES = new Set(["translation_incomplete"]);

// -- rooms ----------------------------------------------------------------------------------
// A room link carries the room in the page's fragment (never sent in a request line):
// #room=ID&role=listener (hear the room) or #room=ID&role=participant (a conversation).
function pageRoom() {
  const params = new URLSearchParams(location.hash.slice(1));
  const room = params.get("room");
  const role = params.get("role");
  if (!room) return null;
  const invite = params.get("invite") || undefined;  // the right to speak (conversation link)
  return { room, invite, role: role === "participant" || role === "speaker" ? role : "listener" };
}

function roomLink(room, role, invite) {
  const right = invite ? `&invite=${encodeURIComponent(invite)}` : "";
  return `${location.origin}${location.pathname}#room=${encodeURIComponent(room)}&role=${role}${right}`;
}

function setupRoomView() {
  const joined = pageRoom();
  if (!joined) return;
  $("room-mode").value = joined.role === "listener" ? "off" : joined.role;
  $("room-mode").disabled = true;
  $("room").hidden = false;
  if (joined.role === "listener") {
    showCaptionLinks(joined.room, "listener");
    for (const id of ["source-lang", "mode", "transport", "room-mode"]) {
      $(id).closest("label").hidden = true;
    }
    $("start").textContent = "Listen";
    $("room-role").textContent = "You are a listener: press Listen to hear the room in your language.";
    $("source-title").textContent = "Speaker said";
    setStatus("idle — press Listen");
  } else {
    $("room-role").textContent = "You join a conversation: press Start and allow the microphone.";
    $("target-title").textContent = "They said (in your language)";
  }
}

function roleOf() {
  const joined = pageRoom();
  if (joined) return joined;
  const mode = $("room-mode").value;
  return mode === "off" ? null : { room: null, role: mode };
}

// Which pane a caption goes to: a participant sees its own words on the left and the others'
// (translated, or their captions where the server has no model) on the right.
function paneOf(msg) {
  if (!s.role || s.role.role !== "participant" || !msg.speaker) return msg.type;
  return msg.speaker === s.session ? "source" : "target";
}

// The room's captions: a WebVTT file of what was said so far (fetched with the page's token
// in a header, never in an address) and the caption overlay's address (/captions), both in
// the language chosen under "Translate to".
function showCaptionLinks(room, role) {
  const update = () => {
    const lang = $("target-lang").value;
    const token = role === "listener" ? pageToken() : undefined; // a listener token only
    $("overlay-link").href = `${location.origin}/captions#room=${encodeURIComponent(room)}` +
      `&lang=${encodeURIComponent(lang)}` + (token ? `&token=${encodeURIComponent(token)}` : "");
  };
  update();
  $("target-lang").addEventListener("change", update);
  $("captions-download").onclick = (e) => {
    e.preventDefault();
    downloadCaptions(room, $("target-lang").value, pageToken())
      .catch((err) => setStatus(`captions download failed: ${err.message || err}`, "warn"));
  };
  $("room-captions").hidden = false;
}

async function downloadCaptions(room, lang, token) {
  const response = await fetch(
    `/rooms/${encodeURIComponent(room)}/captions.vtt?lang=${encodeURIComponent(lang)}`,
    { headers: token ? { Authorization: `Bearer ${token}` } : {}, cache: "no-store" });
  if (!response.ok) throw new Error(`${response.status} ${(await response.text()).trim()}`);
  const url = URL.createObjectURL(await response.blob());
  const link = document.createElement("a");
  link.href = url;
  link.download = `captions-${lang}.vtt`;
  document.body.appendChild(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

function showRoom(msg) {
  $("room").hidden = false;
  if (msg.role !== "listener") showCaptionLinks(msg.room, msg.role);
  $("room-role").textContent = `Room ${msg.room.slice(0, 6)}… — you are ${msg.role === "participant"
    ? "a participant" : "the " + msg.role}.`;
  if (msg.role === "listener") return;
  $("listener-link").href = roomLink(msg.room, "listener");
  $("listener-link").textContent = roomLink(msg.room, "listener");
  $("participant-link").href = roomLink(msg.room, "participant", msg.invite);
  $("participant-link").textContent = "conversation link";
  $("speaker-link").href = roomLink(msg.room, "participant", msg.invite);
  $("room-links").hidden = false;
  if (msg.role === "participant") $("target-title").textContent = "They said (in your language)";
}

// -- captions -------------------------------------------------------------------------------
function renderCaption(side, msg) {
  const lines = s.lines[side];
  const key = msg.speaker ? `${msg.speaker}:${msg.type}:${msg.utterance}` : msg.utterance;
  let line = lines.get(key);
  if (!line) {
    line = document.createElement("p");
    line.className = "line";
    line.innerHTML = '<span class="committed"></span> <span class="tentative"></span>';
    $(side).appendChild(line);
    lines.set(key, line);
    while (lines.size > MAX_LINES) {
      const [oldest, el] = lines.entries().next().value;
      el.remove();
      lines.delete(oldest);
    }
  }
  if (msg.revision < (line.dataset.revision ? Number(line.dataset.revision) : -1)) return;
  line.dataset.revision = String(msg.revision);
  line.querySelector(".committed").textContent = msg.committed;
  line.querySelector(".tentative").textContent = msg.final ? "" : msg.tentative;
  line.scrollIntoView({ block: "nearest" });
}

function showLatency() {
  const parts = [];
  if (s.captionLag !== null) parts.push(`caption lag ${s.captionLag.toFixed(2)} s`);
  if (s.speechOffset !== null) {
    parts.push(`speech began ${s.speechOffset.toFixed(2)} s after you started talking`);
  }
  $("latency").textContent = parts.join(" · ");
}

// -- translated speech ----------------------------------------------------------------------
function playPcm(header, data) {
  const pcm = new Int16Array(data);
  bump("audio");
  bump("audioSamples", pcm.length);
  if (pcm.length === 0) return;
  const floats = new Float32Array(pcm.length);
  for (let i = 0; i < pcm.length; i++) floats[i] = pcm[i] / 32768;
  const buffer = s.ctx.createBuffer(1, floats.length, header.sample_rate);
  buffer.copyToChannel(floats, 0);
  const node = s.ctx.createBufferSource();
  node.buffer = buffer;
  node.connect(s.ctx.destination);
  const at = Math.max(s.ctx.currentTime + 0.03, s.playhead); // back to back, never overlapping
  node.start(at);
  s.playhead = at + buffer.duration;
  if (s.role && s.role.role === "participant") notePlayout(at, buffer.duration);
}

// -- the echo guard's clock (participants): how much of the room's speech has played --------
// The server holds a participant's microphone while the speech it was sent plays; the page
// tells it when that is ({"type": "playout", "played_s": ...}, docs/protocol.md), every
// 250 ms while speech is queued and once when it ends.
function notePlayout(at, duration) {
  s.playout.queue.push({ at, duration });
  if (!s.playout.timer) s.playout.timer = setInterval(reportPlayout, 250);
}

function playedSeconds() {
  const p = s.playout;
  const now = s.ctx.currentTime - (s.ctx.outputLatency || 0); // what is audible now
  while (p.queue.length && p.queue[0].at + p.queue[0].duration <= now) {
    p.done += p.queue.shift().duration;
  }
  const head = p.queue[0];
  const partial = head && now > head.at ? now - head.at : 0;
  p.reported = Math.max(p.reported, p.done + partial); // never goes back
  return p.reported;
}

function reportPlayout() {
  const p = s.playout;
  const played = playedSeconds();
  if (s.ws.readyState === WebSocket.OPEN) {
    s.ws.send(JSON.stringify({ type: "playout", played_s: Math.round(played * 1000) / 1000 }));
  }
  if (!p.queue.length) { // it all played: the last report went out
    clearInterval(p.timer);
    p.timer = null;
  }
}

function noteSpeechArrived(header) {
  if (!measuresMe(header)) return;
  const began = s.speechStarts.get(header.utterance);
  if (began !== undefined && !s.spokenUtterances.has(header.utterance)) {
    s.spokenUtterances.add(header.utterance);
    s.speechOffset = streamSeconds() - began;
    showLatency();
  }
}

// -- messages -------------------------------------------------------------------------------
function onMessage(event) {
  if (typeof event.data !== "string") {
    const header = s.pendingAudio;
    s.pendingAudio = null;
    if (header) playPcm(header, event.data);
    return;
  }
  let msg;
  try {
    msg = JSON.parse(event.data);
  } catch {
    return;
  }
  switch (msg.type) {
    case "started":
      $("stats").dataset.state = "listening";
      s.session = msg.session;
      if (msg.room) showRoom(msg);
      setStatus(`listening (session ${msg.session})`);
      startAudio(msg).catch((err) => fail(`audio failed: ${err.message || err}`));
      break;
    case "vad":
      if (msg.kind === "start" && measuresMe(msg)) s.speechStarts.set(msg.utterance, msg.t);
      break;
    case "source":
    case "target":
      bump(msg.type);
      renderCaption(paneOf(msg), msg);
      if (msg.type === "target" && measuresMe(msg)) {
        s.captionLag = Math.max(0, streamSeconds() - msg.audio_end);
        showLatency();
      }
      break;
    case "audio":
      noteSpeechArrived(msg);
      if (msg.via === "webrtc") {
        bump("audio");
        bump("audioSamples", Math.round((msg.samples * OUTPUT_RATE) / msg.sample_rate));
      } else {
        s.pendingAudio = msg;
      }
      break;
    case "status":
      if (msg.status === "queued") {
        setStatus(`queued at position ${msg.detail.position ?? "?"}`, "warn");
      } else if (msg.status === "degraded") {
        setStatus(`degraded: ${msg.message}`, "warn");
      } else {
        setStatus(msg.message || msg.status);
      }
      break;
    case "error":
      if (!msg.fatal && NOTICE_CODES.has(msg.code)) {
        setStatus(`note: ${msg.message}`);
        break;
      }
      if (msg.fatal && !s.session && typeof msg.retry_after_s === "number"
          && Number.isFinite(msg.retry_after_s) && msg.retry_after_s >= 0
          && s.retries < RETRIES) {
        s.retry = { after: msg.retry_after_s, turn: typeof msg.turn === "string" ? msg.turn : null };
        if (!s.stopping) setStatus("waiting to join", "warn"); // Stop pressed: the close says
        break;
      }
      bump("errors");
      setStatus(`error (${msg.code}): ${msg.message}`, msg.fatal ? "error" : "warn");
      // the close that follows a fatal error keeps this text: it says what to do
      if (msg.fatal) s.refusal = `error (${msg.code}): ${msg.message}`;
      break;
    case "answer":
      s.pc.setRemoteDescription({ type: "answer", sdp: msg.sdp })
        .catch((err) => fail(`WebRTC answer failed: ${err.message || err}`));
      break;
    case "end":
      setStatus("finished");
      break;
    default:
      break; // newer servers may send more; ignore what we do not know
  }
}

// -- audio in -------------------------------------------------------------------------------
// WebSocket mode: the capture graph is built before "start" is sent, so the declared
// sample_rate is the rate the worklet really runs at. Frames before "started" are dropped.
async function buildCapture(ctx, stream) {
  let mic;
  try {
    mic = ctx.createMediaStreamSource(stream);
  } catch (err) {
    // Firefox refuses to connect a microphone whose rate differs from the context's:
    // rebuild the context at the microphone's rate.
    const rate = stream.getAudioTracks()[0].getSettings().sampleRate;
    if (!rate || rate === ctx.sampleRate) throw err;
    await ctx.close();
    ctx = new AudioContext({ sampleRate: rate, latencyHint: "interactive" });
    await ctx.resume();
    mic = ctx.createMediaStreamSource(stream);
  }
  await ctx.audioWorklet.addModule("worklet.js");
  const frameSamples = Math.round(ctx.sampleRate * 0.02);
  const worklet = new AudioWorkletNode(ctx, "pcm-capture", {
    numberOfInputs: 1, numberOfOutputs: 1, processorOptions: { frameSamples },
  });
  const mute = ctx.createGain(); // keeps the worklet pulled without playing the mic back
  mute.gain.value = 0;
  mic.connect(worklet).connect(mute).connect(ctx.destination);
  return { ctx, mic, worklet, frameSamples };
}

async function startAudio() {
  if (!s.stream) return; // a listener: no microphone
  if (s.transport === "websocket") {
    s.capturing = true;
    return;
  }
  s.pc = new RTCPeerConnection({ iceServers: [] });
  for (const track of s.stream.getAudioTracks()) s.pc.addTrack(track, s.stream);
  s.pc.ontrack = (e) => {
    const stream = e.streams[0] || new MediaStream([e.track]);
    $("remote-audio").srcObject = stream; // plays it (Chromium also needs this for Web Audio)
    watchLevel(stream);
  };
  s.pc.onconnectionstatechange = () => {
    const state = s && s.pc ? s.pc.connectionState : "closed";
    if (state === "connected") {
      s.streamStart = s.ctx.currentTime;
      setStatus("listening (WebRTC)");
    } else if (state === "failed") {
      setStatus("WebRTC connection failed", "error");
    }
  };
  const offer = await s.pc.createOffer();
  await s.pc.setLocalDescription(offer);
  await iceGatheringDone(s.pc, 3000);
  s.ws.send(JSON.stringify({ type: "offer", sdp: s.pc.localDescription.sdp }));
  setStatus("connecting WebRTC");
}

// Counts 100 ms windows of the received WebRTC track that carry sound (data-remote-loud).
function watchLevel(stream) {
  const analyser = s.ctx.createAnalyser();
  analyser.fftSize = 2048;
  s.ctx.createMediaStreamSource(stream).connect(analyser);
  const buf = new Float32Array(analyser.fftSize);
  const run = s;
  const timer = setInterval(() => {
    if (s !== run || run.ctx.state === "closed") {
      clearInterval(timer);
      return;
    }
    analyser.getFloatTimeDomainData(buf);
    let sum = 0;
    for (let i = 0; i < buf.length; i++) sum += buf[i] * buf[i];
    if (Math.sqrt(sum / buf.length) > 0.01) bump("remoteLoud");
  }, 100);
}

function iceGatheringDone(pc, limitMs) {
  if (pc.iceGatheringState === "complete") return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, limitMs);
    pc.addEventListener("icegatheringstatechange", () => {
      if (pc.iceGatheringState === "complete") {
        clearTimeout(timer);
        resolve();
      }
    });
  });
}

// -- start / stop ---------------------------------------------------------------------------
async function start() {
  $("start").disabled = true;
  resetStats();
  $("source").textContent = "";
  $("target").textContent = "";
  $("latency").textContent = "";
  setStatus("connecting");
  $("stats").dataset.state = "connecting";
  let ctx = new AudioContext({ latencyHint: "interactive" });
  await ctx.resume();
  const role = roleOf();
  const listening = role !== null && role.role === "listener";
  let stream = null;
  if (!listening) try {
    stream = await navigator.mediaDevices.getUserMedia({
      audio: { channelCount: 1, echoCancellation: true, noiseSuppression: true,
               autoGainControl: true },
    });
  } catch (err) {
    await ctx.close();
    $("start").disabled = false;
    setStatus(`microphone unavailable: ${err.message || err}`, "error");
    return;
  }
  const transport = listening ? "websocket" : $("transport").value;
  let capture = null;
  if (transport === "websocket" && stream) {
    try {
      capture = await buildCapture(ctx, stream);
    } catch (err) {
      for (const track of stream.getTracks()) track.stop();
      if (ctx.state !== "closed") await ctx.close();
      throw err;
    }
    ctx = capture.ctx;
  }
  s = {
    ws: null, ctx, stream, transport, role, session: null, pc: null,
    worklet: capture && capture.worklet,
    capturing: false, samplesSent: 0, streamStart: null, playhead: 0, pendingAudio: null, stopping: false,
    lines: { source: new Map(), target: new Map() }, speechStarts: new Map(),
    spokenUtterances: new Set(), captionLag: null, speechOffset: null,
    playout: { queue: [], done: 0, reported: 0, timer: null }, refusal: null,
    retry: null, retries: 0, retryTimer: null,
  };
  window.speechpipeState = s;
  if (capture) {
    const run = s;
    capture.worklet.port.onmessage = (e) => {
      if (run.capturing && !run.stopping && run.ws.readyState === WebSocket.OPEN) {
        run.ws.send(e.data);
        run.samplesSent += capture.frameSamples;
      }
    };
  }
  openSocket(s, null);
  $("stop").disabled = false;
}

// One connection of a run: `start` (with the turn a too_many_joins refusal booked, if any).
// A refusal that names a retry (retry_after_s, before `started`) is followed by itself, as
// docs/protocol.md ("Retrying a refusal") says: "waiting to join", never an error.
function openSocket(run, turn) {
  const { ctx, role } = run;
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const ws = new WebSocket(`${scheme}//${location.host}/ws`);
  ws.binaryType = "arraybuffer";
  run.ws = ws;
  run.retry = null;
  run.refusal = null;
  ws.onopen = () => {
    ws.send(JSON.stringify({
      type: "start",
      source_lang: $("source-lang").value,
      target_lang: $("target-lang").value,
      mode: $("mode").value,
      format: "pcm_s16le",
      sample_rate: Math.min(48000, Math.max(8000, Math.round(ctx.sampleRate))),
      output_sample_rate: OUTPUT_RATE,
      token: pageToken(),
      ...(role ? { role: role.role, room: role.room || undefined, invite: role.invite } : {}),
      ...(turn ? { turn } : {}),
    }));
  };
  ws.onmessage = onMessage;
  ws.onerror = () => { if (!run.retry) setStatus("connection error", "error"); };
  ws.onclose = (e) => {
    if (s !== run || run.ws !== ws) return;
    if (run.retry && run.stopping) { // Stop while the refusal came in: no wait, no error
      setStatus("stopped");
      $("stats").dataset.state = "closed";
      teardown();
      return;
    }
    if (run.retry && run.retries < RETRIES) {
      run.retries += 1;
      const wait = retryDelay(run.retry.after);
      const next = run.retry.turn;
      setStatus(`waiting to join: many are joining, trying again in ${wait.toFixed(1)} s`, "warn");
      $("stats").dataset.state = "waiting";
      $("stats").dataset.refused = String(run.retries);
      run.retryTimer = setTimeout(() => {
        run.retryTimer = null;
        if (s === run && !run.stopping) openSocket(run, next);
      }, wait * 1000);
      return;
    }
    const normal = e.code === 1000;
    if (!normal) setStatus(closedStatus(e, run.refusal), "error");
    $("stats").dataset.state = "closed";
    teardown();
  };
}

// The retry rule (docs/protocol.md, "Retrying a refusal"; transport/client.py retry_delay):
// never earlier than the server said, plus up to 0.1 s + 5 % at random, so listeners refused
// at the same moment do not come back at the same moment.
const RETRIES = 5;
function retryDelay(after) {
  const wait = Math.max(0, after);
  return wait + Math.random() * (0.1 + 0.05 * wait);
}

// What the status says when the server closes the session abnormally: the fatal error it
// sent just before (what to do, e.g. "run speechpipe models pull en-es") stays in view.
function closedStatus(e, refusal) {
  const closed = `${e.code}${e.reason ? ": " + e.reason : ""}`;
  return refusal ? `${refusal} (disconnected, ${closed})` : `disconnected (${closed})`;
}

// A session token (servers run with --auth-secret) from the page's address: #token=...
// (never sent to the server in a request line) or ?token=...; it travels in `start`.
function pageToken() {
  const fromHash = new URLSearchParams(location.hash.slice(1)).get("token");
  return fromHash || new URLSearchParams(location.search).get("token") || undefined;
}

function stop() {
  if (!s) return;
  s.stopping = true;
  $("stop").disabled = true;
  if (s.retryTimer) { // waiting to join: nothing is open, just give up the wait
    clearTimeout(s.retryTimer);
    s.retryTimer = null;
    setStatus("stopped");
    $("stats").dataset.state = "closed";
    teardown();
    return;
  }
  setStatus("finishing…");
  if (s.ws.readyState === WebSocket.OPEN) s.ws.send(JSON.stringify({ type: "stop" }));
  if (s.stream) for (const track of s.stream.getTracks()) track.stop();
}

function fail(text) {
  setStatus(text, "error");
  if (s && s.ws.readyState === WebSocket.OPEN) s.ws.close(1000);
}

function teardown() {
  if (!s) return;
  const old = s;
  if (old.stream) for (const track of old.stream.getTracks()) track.stop();
  if (old.worklet) old.worklet.port.onmessage = null;
  if (old.pc) old.pc.close();
  if (old.playout.timer) clearInterval(old.playout.timer);
  // let queued speech finish playing before closing the audio context
  const remaining = Math.max(0, old.playhead - old.ctx.currentTime);
  setTimeout(() => old.ctx.close(), remaining * 1000 + 200);
  $("start").disabled = false;
  $("stop").disabled = true;
}

$("start").addEventListener("click", () => {
  start().catch((err) => {
    $("start").disabled = false;
    setStatus(`could not start: ${err.message || err}`, "error");
  });
});
$("stop").addEventListener("click", stop);
$("room-mode").addEventListener("change", labelTargets);
setupRoomView();
showInstalledLanguages();

// "Translate to" lists what the server can reach (GET /models): English always, and each
// language an installed MT pair leads to. The others: in a room they stay choosable,
// "captions only" (a participant reads the others' captions there); in a session of one the
// server refuses them (unsupported_language), so they are listed disabled, with the command
// that installs them.
let serverTargets = null; // GET /models' targets, once it answered

function targetOption(code, targets, inRoom) {
  if (code in targets) return { suffix: "", disabled: false, title: "" };
  const install = `speechpipe models pull en-${code}`;
  const title = `not installed on this server: ${install}`;
  return inRoom ? { suffix: " (captions only)", disabled: false, title }
    : { suffix: ` (not installed: ${install})`, disabled: true, title };
}

function labelTargets() {
  if (!serverTargets) return;
  const select = $("target-lang");
  const inRoom = roleOf() !== null;
  for (const option of select.options) {
    if (!option.dataset.name) option.dataset.name = option.textContent;
    const shown = targetOption(option.value, serverTargets, inRoom);
    option.textContent = option.dataset.name + shown.suffix;
    option.disabled = shown.disabled;
    option.title = shown.title;
  }
  const chosen = [...select.options].find((o) => o.value === select.value);
  if (chosen && chosen.disabled) select.value = "en";
}

async function showInstalledLanguages() {
  let models;
  try {
    const response = await fetch("/models");
    if (!response.ok) return;
    models = await response.json();
  } catch (err) {
    return; // an older server: keep the list as it is
  }
  const targets = models.targets || {};
  const select = $("target-lang");
  const names = typeof Intl.DisplayNames === "function"
    ? new Intl.DisplayNames(["en"], { type: "language" }) : null;
  const listed = new Set([...select.options].map((o) => o.value));
  for (const code of Object.keys(targets)) {
    if (listed.has(code)) continue;
    const option = document.createElement("option");
    option.value = code;
    option.textContent = (names && names.of(code)) || code;
    select.appendChild(option);
  }
  serverTargets = targets;
  labelTargets();
}
