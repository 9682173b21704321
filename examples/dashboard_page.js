// @ts-check
// The page script of examples/dashboard.py: live figures from a SUB socket drawn on a <canvas>,
// and commands sent to the backend on a REQ socket, both over the app's own WebSocket mount.
// No framework, no CDN: the SP client is the gsp.js module the mount serves at /sp/gsp.js.
// CI type-checks this file against gsp.d.ts (tsc --noEmit -p examples/tsconfig.dashboard.json).
import { socket, Timeout } from "/sp/gsp.js";

const canvas = /** @type {HTMLCanvasElement} */ (document.getElementById("chart"));
const statusLine = /** @type {HTMLElement} */ (document.getElementById("status"));
const replyLine = /** @type {HTMLElement} */ (document.getElementById("reply"));
const WINDOW = 120; // samples on the chart

/** @typedef {{t: number, done: number, target: number, workers: number}} Sample */
/** @type {Sample[]} */
const samples = [];

const figures = socket("sub", { reconnectTime: 0.5, maxReconnectTime: 5 });
figures.subscribe("figures ");
figures.onPipe((ev) => { statusLine.textContent = ev.type === "connect" ? "live" : "reconnecting…"; });
const commands = socket("req", { sendTimeout: 5, recvTimeout: 5, resendTime: 2 });

/** Draw the samples: jobs done per second (blue) against the target rate (grey). */
function draw() {
  const ctx = /** @type {CanvasRenderingContext2D} */ (canvas.getContext("2d"));
  const { width, height } = canvas;
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, width, height);
  const top = Math.max(10, ...samples.map((s) => Math.max(s.done, s.target))) * 1.2;
  const x = (/** @type {number} */ i) => (i / (WINDOW - 1)) * (width - 50) + 40;
  const y = (/** @type {number} */ v) => height - 20 - (v / top) * (height - 40);
  ctx.strokeStyle = "#ccc";
  ctx.fillStyle = "#555";
  ctx.font = "12px sans-serif";
  for (let k = 0; k <= 4; k++) {
    const v = (top * k) / 4;
    ctx.beginPath(); ctx.moveTo(40, y(v)); ctx.lineTo(width - 10, y(v)); ctx.stroke();
    ctx.fillText(v.toFixed(0), 4, y(v) + 4);
  }
  /** @param {(s: Sample) => number} pick @param {string} color */
  const line = (pick, color) => {
    ctx.strokeStyle = color;
    ctx.lineWidth = 2;
    ctx.beginPath();
    samples.forEach((s, i) => (i ? ctx.lineTo(x(i), y(pick(s))) : ctx.moveTo(x(i), y(pick(s)))));
    ctx.stroke();
  };
  line((s) => s.target, "#999");
  line((s) => s.done, "#1565c0");
  canvas.dataset.frames = String(Number(canvas.dataset.frames || 0) + 1);
}

/** Send one command on a context of its own, so that clicks do not cancel each other. */
async function command(/** @type {string} */ name) {
  const ctx = commands.openContext();
  try {
    await ctx.send(name);
    replyLine.textContent = await ctx.recvText();
  } catch (e) {
    replyLine.textContent = e instanceof Timeout ? `${name}: the backend did not answer` : String(e);
  } finally {
    ctx.close();
  }
}

for (const button of document.querySelectorAll("button[data-command]")) {
  const name = /** @type {HTMLElement} */ (button).dataset.command || "status";
  button.addEventListener("click", () => command(name));
}

// Each dial tries now, then keeps redialing until it connects: a page opened while the server
// restarts goes live when it is back. Browsers do not tell a page why an upgrade failed, so the
// status line names the likely causes until a connection comes up (sessions live in the
// server's memory: after a restart, only a new login gets in).
await figures.dial("/sp");           // relative to the page: ws://<this host>/sp
await commands.dial("/sp/commands");
if (!figures.pipes.length) {
  statusLine.textContent = "not connected (the server is down, or log in again at /login): retrying…";
}
for await (const msg of figures) {
  const text = new TextDecoder().decode(msg).slice("figures ".length);
  samples.push(/** @type {Sample} */ (JSON.parse(text)));
  if (samples.length > WINDOW) samples.shift();
  draw();
}
