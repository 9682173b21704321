// gsp.js: Scalability Protocols (nanomsg / nng / mangos / gsp) over WebSocket, for web pages.
//
// One ES module, no dependencies. A page's socket dials ws:// or wss:// URLs exactly as nng's
// ws transport does: the WebSocket subprotocol is "<peer protocol>.sp.nanomsg.org", and each
// SP message (its protocol header, then its body) is one binary WebSocket message. So it talks to
// a gsp WSGI mount (which serves this file at <mount path>/gsp.js), a gsp ws:// listener, and
// nng, pynng or mangos ws listeners alike. Times are seconds, as in gsp's Python API.
//
//   import { socket, Timeout } from "/sp/gsp.js";
//   const req = socket("req", { recvTimeout: 5 });
//   await req.dial("ws://127.0.0.1:8080/sp");
//   await req.send("hello");
//   const reply = await req.recvText();
//
// Layout: errors; the codec (pure functions, exported as `codec`); the small waiting helpers;
// Pipe and Dialer (one WebSocket each, redialing with backoff and jitter); Socket and Context
// (options and the API); then one object a protocol with its send and receive rules.

const SUFFIX = ".sp.nanomsg.org";
const HIGH = 0x80000000;

// -- errors -----------------------------------------------------------------------------------

/** Every error this module raises is a GspError. */
export class GspError extends Error {
  constructor(message) { super(message); this.name = new.target.name; }
}
/** A send or recv did not complete within its timeout (or a survey's time is up). */
export class Timeout extends GspError {}
/** The socket or context is closed. */
export class Closed extends GspError {}
/** The protocol does not allow this now: recv on req before a send, a reply with no request. */
export class ProtocolError extends GspError {}
/** The operation does not exist for this protocol (send on sub, recv on push, contexts on pull). */
export class NotSupported extends GspError {}
/** A dial with `failFast` whose first attempt failed: the server refused the upgrade
 * (ws_authorize, ws_origins, a wrong path or protocol) or could not be reached. Browsers do not
 * tell pages which. */
export class ConnectionRefused extends GspError {}
/** A bad option name or value. */
export class BadOption extends GspError {}
/** A URL that is not ws://, wss://, http(s):// or a path. */
export class InvalidAddress extends GspError {}

// -- the codec --------------------------------------------------------------------------------

/** Protocol number (major*16 + minor) and peer name of each protocol, as in nng. */
export const PROTOCOLS = Object.freeze({
  pair: { id: 0x10, peer: "pair" }, pair1: { id: 0x11, peer: "pair1" },
  pub: { id: 0x20, peer: "sub" }, sub: { id: 0x21, peer: "pub" },
  req: { id: 0x30, peer: "rep" }, rep: { id: 0x31, peer: "req" },
  push: { id: 0x50, peer: "pull" }, pull: { id: 0x51, peer: "push" },
  surveyor: { id: 0x62, peer: "respondent" }, respondent: { id: 0x63, peer: "surveyor" },
  bus: { id: 0x70, peer: "bus" },
});

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** The bytes of a message body: a string (as UTF-8), a Uint8Array, an ArrayBuffer or any view. */
function toBytes(data) {
  if (typeof data === "string") return encoder.encode(data);
  if (data instanceof Uint8Array) return data;
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (ArrayBuffer.isView(data)) {
    return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  }
  throw new TypeError("a message is a string, a Uint8Array, an ArrayBuffer or a typed array view");
}

/** One wire message: each 32-bit word of `header` big-endian, then `body`'s bytes. `header` is
 * an array of numbers or a Uint8Array of whole words (a backtrace, sent back as it came). */
function encode(header, body) {
  const head = header instanceof Uint8Array ? header.length : header.length * 4;
  const out = new Uint8Array(head + body.length);
  if (header instanceof Uint8Array) out.set(header, 0);
  else {
    const view = new DataView(out.buffer);
    header.forEach((word, i) => view.setUint32(i * 4, word >>> 0));
  }
  out.set(body, head);
  return out;
}

/** The first 32-bit word of `msg` (big-endian), or null when it is shorter than 4 bytes. */
function word(msg, at = 0) {
  if (msg.length < at + 4) return null;
  return ((msg[at] << 24) | (msg[at + 1] << 16) | (msg[at + 2] << 8) | msg[at + 3]) >>> 0;
}

/** Split a request or survey as REP and RESPONDENT do: 32-bit words up to and including the
 * first with the high bit set are the backtrace. `{header, body}`, or null to drop it (no such
 * word, or more than `ttl` of them). */
function splitBacktrace(msg, ttl = 8) {
  for (let at = 0, hops = 1; at + 4 <= msg.length; at += 4, hops++) {
    if (hops > ttl) return null;
    if (msg[at] & 0x80) return { header: msg.subarray(0, at + 4), body: msg.subarray(at + 4) };
  }
  return null;
}

/** Request and survey ids: 32 bits with the high bit set, counting from a random start. */
class IdSequence {
  constructor(start = Math.floor(Math.random() * HIGH)) { this.next = start >>> 0; }
  take() {
    const id = ((this.next & 0x7fffffff) | HIGH) >>> 0;
    this.next = (this.next + 1) & 0x7fffffff;
    return id;
  }
}

/** The WebSocket subprotocol a dialer of protocol `name` offers: its peer's. */
function subprotocolFor(name) { return PROTOCOLS[name].peer + SUFFIX; }

/** An absolute ws:// or wss:// URL; http(s):// and paths are taken relative to the page. */
function wsURL(url) {
  let u;
  try {
    const base = globalThis.location ? globalThis.location.href : undefined;
    u = new URL(url, base);
  } catch {
    throw new InvalidAddress(`not a URL: ${url}`);
  }
  if (u.protocol === "http:") u.protocol = "ws:";
  else if (u.protocol === "https:") u.protocol = "wss:";
  if (u.protocol !== "ws:" && u.protocol !== "wss:") {
    throw new InvalidAddress(`not a ws:// or wss:// URL: ${url}`);
  }
  u.hash = "";
  return u.href;
}

/** The pure parts of the wire mapping, for tests and for tools. */
export const codec = Object.freeze({
  toBytes, encode, word, splitBacktrace, IdSequence, subprotocolFor, wsURL, SUFFIX,
});

// -- waiting ----------------------------------------------------------------------------------

function now() { return performance.now() / 1000; }

function checkTime(name, v, allowNull = true) {
  if (v === null && allowNull) return v;
  if (typeof v !== "number" || !(v >= 0) || v === Infinity) {
    throw new BadOption(`${name} is seconds, a number >= 0${allowNull ? " or null" : ""}: ${v}`);
  }
  return v;
}

/** Callers waiting for values, first come first served, each with its own timeout. */
class Waiters {
  constructor() { this.list = []; }
  /** A promise of the next value; it rejects with Timeout after `timeout` s (null: never). */
  wait(timeout, what, owner = null) {
    return new Promise((resolve, reject) => {
      const w = { resolve, reject, timer: null, owner };
      if (timeout !== null) {
        w.timer = setTimeout(() => {
          this.list.splice(this.list.indexOf(w), 1);
          reject(new Timeout(`${what} timed out after ${timeout} s`));
        }, timeout * 1000);
      }
      this.list.push(w);
    });
  }
  get size() { return this.list.length; }
  /** Hand `value` to the first waiter; false if nobody waits. */
  wake(value) {
    const w = this.list.shift();
    if (!w) return false;
    clearTimeout(w.timer);
    w.resolve(value);
    return true;
  }
  /** Reject every waiter (or only those of `owner`) with `err`. */
  fail(err, owner = null) {
    const out = owner === null ? this.list.splice(0) : this.list.filter((w) => w.owner === owner);
    if (owner !== null) this.list = this.list.filter((w) => w.owner !== owner);
    for (const w of out) { clearTimeout(w.timer); w.reject(err); }
  }
}

/** A receive queue with its waiters; `limit` > 0 drops the oldest message past it. */
class Inbox {
  constructor(limit = 0) { this.queue = []; this.waiters = new Waiters(); this.limit = limit; }
  put(m) {
    if (this.waiters.wake(m)) return;
    this.queue.push(m);
    if (this.limit > 0 && this.queue.length > this.limit) this.queue.shift();
  }
  get(timeout, what, owner = null) {
    if (this.queue.length) return Promise.resolve(this.queue.shift());
    if (timeout === 0) return Promise.reject(new Timeout(`${what}: nothing to receive`));
    return this.waiters.wait(timeout, what, owner);
  }
}

// -- pipes and dialers ------------------------------------------------------------------------

let pipeIds = new IdSequence(Math.floor(Math.random() * 0x7fff0000));

/** One WebSocket connection of a socket. */
class Pipe {
  constructor(sock, ws, url) {
    this.socket = sock; this.ws = ws; this.url = url;
    this.id = pipeIds.take() & 0x7fffffff;
    this.open = true;
  }
  /** Bytes queued by the browser and not yet sent. */
  get buffered() { return this.ws.bufferedAmount; }
  send(bytes) { if (this.open) this.ws.send(bytes); }
  /** Close this connection (a peer that broke the protocol, a message over maxRecvSize). */
  close(reason = "") {
    if (this.open) this.ws.close(1000, reason.slice(0, 120));
  }
}

/** Connects one URL and redials it until it is closed, as gsp's dialers do: after a loss or a
 * failed attempt wait `backoff` x random(0.5..1), doubling the backoff up to maxReconnectTime
 * (0: no growth); a connection that comes up resets it to reconnectTime. */
class Dialer {
  constructor(sock, url, options) {
    this.socket = sock; this.url = url; this.options = options;
    this.backoff = options.reconnectTime;
    this.closed = false; this.ws = null; this.pipe = null; this.timer = null;
  }
  /** Dial now. The promise settles as dialMode() says; a URL the browser will not open at all
   * rejects in every mode. */
  start(mode) {
    return new Promise((resolve, reject) => {
      this.first = { resolve, reject, failFast: mode === "failFast" };
      this.connect();
      if (mode === "background" && this.first) { this.first = null; resolve(this); }
    });
  }
  connect() {
    this.timer = null;
    if (this.closed) return;
    const sock = this.socket, want = subprotocolFor(sock.protocol);
    let ws;
    try {
      ws = new WebSocket(this.url, [want]);
    } catch (e) {
      this.failed(new InvalidAddress(`${this.url}: ${e.message}`), true);
      return;
    }
    ws.binaryType = "arraybuffer";
    this.ws = ws;
    ws.onopen = () => {
      if (this.closed) { ws.close(1000); return; }
      if (ws.protocol !== want) {
        ws.onclose = null; ws.close(1000);
        this.failed(new ConnectionRefused(
          `${this.url} answered with subprotocol "${ws.protocol}", not ${want}`));
        return;
      }
      this.backoff = this.options.reconnectTime;
      this.pipe = sock._attach(ws, this.url);
      if (this.first) { this.first.resolve(this); this.first = null; }
    };
    ws.onclose = (ev) => {
      const pipe = this.pipe;
      this.ws = null; this.pipe = null;
      if (pipe) sock._detach(pipe);
      if (pipe || this.first === null) {
        if (pipe) this.backoff = this.options.reconnectTime;
        this.redial();
        return;
      }
      const why = ev.code === 1006
        ? "the server refused the WebSocket upgrade or could not be reached"
        : `the connection closed before it opened (code ${ev.code} ${ev.reason})`;
      this.failed(new ConnectionRefused(`dial ${this.url}: ${why}`));
    };
    ws.onmessage = (ev) => { if (this.pipe) sock._arrived(this.pipe, ev.data); };
  }
  /** An attempt failed: the first one of a failFast dial (or a `fatal` one) rejects the dial
   * and stops; any other is redialed after the backoff. */
  failed(err, fatal = false) {
    const first = this.first;
    this.first = null;
    if (first && (fatal || first.failFast)) { first.reject(err); this.close(); return; }
    if (first) first.resolve(this);
    this.redial();
  }
  redial() {
    if (this.closed || this.socket.closed) return;
    const delay = this.backoff * (0.5 + Math.random() * 0.5);
    const cap = this.options.maxReconnectTime;
    this.backoff = cap > 0 ? Math.min(this.backoff * 2, cap) : this.options.reconnectTime;
    this.timer = setTimeout(() => this.connect(), delay * 1000);
  }
  /** Stop redialing and close this dialer's connection. */
  close() {
    if (this.closed) return;
    this.closed = true;
    clearTimeout(this.timer);
    if (this.first) {
      this.first.reject(new Closed(`dial ${this.url}: closed`));
      this.first = null;
    }
    if (this.ws) this.ws.close(1000);
    this.socket._dialers.delete(this);
  }
}

// -- sockets and contexts ---------------------------------------------------------------------

const SOCKET_DEFAULTS = {
  recvTimeout: null, sendTimeout: null, reconnectTime: 0.1, maxReconnectTime: 10,
  resendTime: 60, surveyTime: 1, maxRecvSize: 1 << 20, sendBufferSize: 1 << 20,
  recvBuffer: 1024, ttl: 8,
};
const TIMES = new Set(["recvTimeout", "sendTimeout", "resendTime", "surveyTime"]);
const DIAL_OPTIONS = ["failFast", "background", "reconnectTime", "maxReconnectTime", "block",
                      "reconnectTimeMax"];
let warnedBlock = false;

/** Old option names: each still works, and warns once, naming the new one (the names follow
 * Python's: max_reconnect_time, max_recv_size, send_buffer_size, recv_buffer). */
const RENAMED = {
  reconnectTimeMax: "maxReconnectTime", recvMaxSize: "maxRecvSize",
  sendBufferMax: "sendBufferSize", recvBufferMax: "recvBuffer",
};
const warnedRenamed = new Set();

/** The option's name, an old spelling turned into the new one (with a warning, once). */
function optionName(name) {
  const now = Object.prototype.hasOwnProperty.call(RENAMED, name) ? RENAMED[name] : undefined;
  if (now === undefined) return name;
  if (!warnedRenamed.has(name)) {
    warnedRenamed.add(name);
    console.warn(`gsp.js: the option ${name} is now ${now}; the old name is deprecated`);
  }
  return now;
}

/** When dial()'s promise settles: "failFast" once connected, or rejected with the first
 * attempt's error (and no redialing); "background" at once; "" (the default) after the first
 * attempt, connected or not. Every dial then keeps redialing until it is closed. */
function dialMode(opts) {
  for (const k of Object.keys(opts)) {
    if (!DIAL_OPTIONS.includes(k)) {
      throw new BadOption(`unknown dial option ${k}; one of ${DIAL_OPTIONS.slice(0, 4).join(", ")}`);
    }
  }
  let { failFast = false, background = false } = opts;
  if (opts.block !== undefined) {
    if (!warnedBlock) {
      warnedBlock = true;
      console.warn("gsp.js: dial()'s block option is deprecated: " +
                   "{block: true} is {failFast: true}, {block: false} is {background: true}");
    }
    if (opts.block) failFast = true; else background = true;
  }
  if (typeof failFast !== "boolean" || typeof background !== "boolean") {
    throw new BadOption(`dial's failFast and background are true or false: ${failFast}, ${background}`);
  }
  if (failFast && background) {
    throw new BadOption("dial: failFast waits for the first attempt, background does not: pick one");
  }
  return failFast ? "failFast" : background ? "background" : "";
}

function checkOption(name, v) {
  if (!(name in SOCKET_DEFAULTS)) throw new BadOption(`unknown option ${name}`);
  if (TIMES.has(name)) return checkTime(name, v);
  if (name === "reconnectTime") {
    checkTime(name, v, false);
    if (v === 0) throw new BadOption("reconnectTime must be > 0");
    return v;
  }
  if (name === "maxReconnectTime") return checkTime(name, v, false);
  if (!Number.isInteger(v) || v < 0 || (name === "ttl" && (v < 1 || v > 255))) {
    const range = name === "ttl" ? " (1..255)" : "";
    throw new BadOption(`${name} must be an integer >= 0${range}: ${v}`);
  }
  return v;
}

/** What a send or recv call may override: `{timeout}` in seconds (null: wait forever). */
function callTimeout(opts, fallback, name) {
  if (opts === undefined || opts === null || opts.timeout === undefined) return fallback;
  return checkTime(`${name} timeout`, opts.timeout);
}

/** State and timeouts of one requester or replier. A socket's own send/recv use its first. */
export class Context {
  constructor(sock) {
    this.socket = sock; this.closed = false;
    this._times = {}; // recvTimeout, sendTimeout, resendTime, surveyTime set on this context
    sock._proto.open(this);
  }
  _opt(name) {
    const mine = this._times[name]; // null is a value (forever); undefined is the socket's
    return mine === undefined ? this.socket.options[name] : mine;
  }
  _check() {
    if (this.closed || this.socket.closed) {
      throw new Closed(`${this.socket.protocol} context is closed`);
    }
  }
  /** Send one message; resolves once it is handed to a connection (or, for pub, bus and
   * surveyor, to every connection that has room). */
  async send(data, opts) {
    this._check();
    const body = toBytes(data);
    return this.socket._proto.send(this, body, callTimeout(opts, this._opt("sendTimeout"), "send"));
  }
  /** The next message, as a Uint8Array. */
  async recv(opts) {
    this._check();
    return this.socket._proto.recv(this, callTimeout(opts, this._opt("recvTimeout"), "recv"));
  }
  /** The next message, decoded as UTF-8. */
  async recvText(opts) { return decoder.decode(await this.recv(opts)); }
  /** sub: receive on this context the messages that begin with `prefix` ("" = all). */
  subscribe(prefix) { this._topics().add(prefix); }
  unsubscribe(prefix) { this._topics().remove(prefix); }
  _topics() {
    this._check();
    const sock = this.socket;
    if (!sock._proto.topics) throw new NotSupported(`${sock.protocol} has no subscriptions`);
    return sock._proto.topics(this);
  }
  /** Close this context: its request or survey is cancelled, its waits fail with Closed. */
  close() {
    if (this.closed) return;
    this.closed = true;
    this.socket._proto.closeContext(this, new Closed(`${this.socket.protocol} context is closed`));
    this.socket._contexts.delete(this);
  }
}

// A context's times: undefined (the default) reads the socket's; a bad value throws BadOption.
for (const name of ["recvTimeout", "sendTimeout", "resendTime", "surveyTime"]) {
  Object.defineProperty(Context.prototype, name, {
    get() { return this._times[name]; },
    set(v) { this._times[name] = v === undefined ? undefined : checkTime(name, v); },
  });
}

/** A socket of one protocol; `socket(name, options)` makes one. */
export class Socket {
  constructor(name, options = {}) {
    if (!Object.prototype.hasOwnProperty.call(PROTOCOLS, name)) {
      throw new NotSupported(`no protocol ${name}; one of ${Object.keys(PROTOCOLS).join(", ")}`);
    }
    this.protocol = name;
    this.peer = PROTOCOLS[name].peer;
    this.options = { ...SOCKET_DEFAULTS };
    for (const [k, v] of Object.entries(options)) {
      if (v !== undefined) this.options[optionName(k)] = checkOption(optionName(k), v);
    }
    this.closed = false;
    this._pipes = new Map();
    this._dialers = new Set();
    this._pipeListeners = new Set();
    this._roomWaiters = new Set();
    this._contexts = new Set();
    this._proto = PROTOCOL_RULES[name](this);
    this._main = null;
    this._main = this.openContext(true);
  }
  setOption(name, value) { this.options[optionName(name)] = checkOption(optionName(name), value); }
  get recvTimeout() { return this.options.recvTimeout; }
  set recvTimeout(v) { this.setOption("recvTimeout", v); }
  get sendTimeout() { return this.options.sendTimeout; }
  set sendTimeout(v) { this.setOption("sendTimeout", v); }
  get resendTime() { return this.options.resendTime; }
  set resendTime(v) { this.setOption("resendTime", v); }
  get surveyTime() { return this.options.surveyTime; }
  set surveyTime(v) { this.setOption("surveyTime", v); }

  /** Connect to `url` and keep it connected, redialing until the dialer or socket closes.
   * Resolves with the dialer after the first attempt, connected or not; `{failFast: true}`:
   * once connected, else rejects with ConnectionRefused and stops; `{background: true}`: at
   * once. */
  async dial(url, opts = {}) {
    if (this.closed) throw new Closed("socket is closed");
    const mode = dialMode(opts);
    if (opts.reconnectTimeMax !== undefined && opts.maxReconnectTime === undefined) {
      opts = { ...opts, [optionName("reconnectTimeMax")]: opts.reconnectTimeMax };
    }
    const options = {
      reconnectTime: checkOption("reconnectTime", opts.reconnectTime ?? this.options.reconnectTime),
      maxReconnectTime: checkOption("maxReconnectTime",
        opts.maxReconnectTime ?? this.options.maxReconnectTime),
    };
    const d = new Dialer(this, wsURL(url), options);
    this._dialers.add(d);
    return d.start(mode);
  }
  send(data, opts) { return this._main.send(data, opts); }
  recv(opts) { return this._main.recv(opts); }
  recvText(opts) { return this._main.recvText(opts); }
  /** A new context (req, rep, surveyor, respondent, sub): its own request, survey or
   * subscriptions, and its own timeouts. */
  openContext(main = false) {
    if (this.closed) throw new Closed("socket is closed");
    if (!main && !this._proto.contexts) throw new NotSupported(`${this.protocol} has no contexts`);
    const ctx = new Context(this);
    this._contexts.add(ctx);
    return ctx;
  }
  /** sub: receive the messages that begin with `prefix` ("" = all). */
  subscribe(prefix) { this._main.subscribe(prefix); }
  unsubscribe(prefix) { this._main.unsubscribe(prefix); }
  /** Call `listener({type: "connect" | "disconnect", pipe, url})` as connections come and go;
   * returns a function that stops it. */
  onPipe(listener) {
    this._pipeListeners.add(listener);
    return () => this._pipeListeners.delete(listener);
  }
  /** The open connections: `[{id, url}]`, oldest first. */
  get pipes() { return [...this._pipes.values()].map((p) => ({ id: p.id, url: p.url })); }
  /** Close every connection and context; waits fail with Closed. */
  close() {
    if (this.closed) return;
    this.closed = true;
    for (const d of [...this._dialers]) d.close();
    for (const ctx of [...this._contexts]) ctx.close();
    this._proto.closeSocket(new Closed(`${this.protocol} socket is closed`));
    this._wakeRoom();
  }
  async *[Symbol.asyncIterator]() {
    for (;;) {
      try {
        yield await this.recv();
      } catch (e) {
        if (e instanceof Closed) return;
        throw e;
      }
    }
  }

  _attach(ws, url) {
    const pipe = new Pipe(this, ws, url);
    if (this._proto.single && this._pipes.size > 0) {
      // pair and pair1 have one peer: a second connection is closed, as nng does.
      pipe.open = false; ws.close(1000, "this pair socket already has a peer");
      return null;
    }
    this._pipes.set(pipe.id, pipe);
    this._proto.attached?.(pipe);
    this._event("connect", pipe);
    this._wakeRoom();
    return pipe;
  }
  _detach(pipe) {
    pipe.open = false;
    if (!this._pipes.delete(pipe.id)) return;
    this._proto.detached?.(pipe);
    this._event("disconnect", pipe);
    this._wakeRoom();
  }
  _event(type, pipe) {
    for (const f of [...this._pipeListeners]) {
      try {
        f({ type, pipe: pipe.id, url: pipe.url });
      } catch (e) {
        setTimeout(() => { throw e; }); // reported, without stopping the other listeners
      }
    }
  }
  _arrived(pipe, data) {
    if (typeof data === "string") { pipe.close("text frames are not SP messages"); return; }
    const msg = new Uint8Array(data);
    const max = this.options.maxRecvSize;
    if (max > 0 && msg.length > max) { pipe.close(`message over maxRecvSize ${max}`); return; }
    this._proto.arrived(pipe, msg);
  }
  /** Pipes with room in the browser's send buffer, in round-robin order from the last used. */
  _roomy() {
    const all = [...this._pipes.values()].filter((p) => p.buffered < this.options.sendBufferSize);
    if (!all.length) return all;
    const k = (this._rr = ((this._rr ?? -1) + 1) % all.length);
    return all.slice(k).concat(all.slice(0, k));
  }
  /** A connected pipe with room to send, waiting up to `timeout` s for one. */
  async _pipeWithRoom(timeout, what) {
    const deadline = timeout === null ? null : now() + timeout;
    for (;;) {
      if (this.closed) throw new Closed(`${this.protocol} socket is closed`);
      const p = this._roomy()[0];
      if (p) return p;
      const left = deadline === null ? null : deadline - now();
      if (left !== null && left <= 0) {
        throw new Timeout(this._pipes.size
          ? `${what} timed out after ${timeout} s: the connections' send buffers are full`
          : `${what} timed out after ${timeout} s: no peer connected`);
      }
      // Wake on a pipe coming or going, else poll the buffers (browsers say nothing on drain).
      const poll = this._pipes.size ? 0.01 : 1;
      await new Promise((resolve) => {
        const done = () => { clearTimeout(t); this._roomWaiters.delete(done); resolve(); };
        const t = setTimeout(done, Math.min(left ?? poll, poll) * 1000);
        this._roomWaiters.add(done);
      });
    }
  }
  _wakeRoom() { for (const f of [...this._roomWaiters]) f(); }
}

/** A new socket of protocol `name` (pair, pair1, pub, sub, req, rep, push, pull, surveyor,
 * respondent, bus) with these options (times in seconds). */
export function socket(name, options) { return new Socket(name, options); }

// -- the protocols ----------------------------------------------------------------------------
// Each makes the rules object of one socket: open(ctx), send(ctx, body, timeout),
// recv(ctx, timeout), arrived(pipe, msg), closeContext(ctx, err), closeSocket(err), and
// optionally attached(pipe), detached(pipe), contexts, single, topics.

function noSend(name) {
  return () => Promise.reject(new NotSupported(`${name} sockets do not send`));
}
function noRecv(name) {
  return () => Promise.reject(new NotSupported(`${name} sockets do not receive`));
}

/** pair, pair1, push, pull, bus, pub: one inbox a socket, no per-message state. */
function simple(sock, { send, recv = true, single = false, header = null, lossy = false }) {
  const inbox = new Inbox(lossy ? sock.options.recvBuffer : 0);
  const name = sock.protocol;
  const rules = {
    single,
    open() {},
    closeContext() {},
    closeSocket(err) { inbox.waiters.fail(err); },
    recv: recv ? (ctx, timeout) => inbox.get(timeout, `${name} recv`) : noRecv(name),
    arrived(pipe, msg) { if (recv) inbox.put(msg); },
    send: noSend(name),
  };
  const frame = (body) => (header === null ? body : encode(header, body));
  if (send === "one") { // to one peer, round robin, waiting for a connection with room
    rules.send = async (ctx, body, timeout) => {
      const pipe = await sock._pipeWithRoom(timeout, `${name} send`);
      pipe.send(frame(body));
    };
  } else if (send === "all") { // to every peer with room, never waiting
    rules.send = async (ctx, body) => {
      const bytes = frame(body);
      for (const p of sock._roomy()) p.send(bytes);
    };
  }
  return { rules, inbox };
}

/** req: a request id a context, resent every resendTime s and at once when its connection is
 * lost; a new request cancels the last; a reply is matched to its context by id. */
function reqRules(sock) {
  const ids = new IdSequence();
  const pending = new Map(); // request id -> context state
  const transmit = (st) => {
    const p = sock._roomy()[0];
    st.pipe = p || null;
    if (p) p.send(st.frame);
    clearTimeout(st.timer);
    const every = st.resend;
    if (every) st.timer = setTimeout(() => transmit(st), every * 1000);
  };
  const end = (st) => {
    if (st.id !== null) pending.delete(st.id);
    clearTimeout(st.timer);
    st.id = null; st.frame = null; st.pipe = null; st.reply = null;
  };
  return {
    contexts: true,
    open(ctx) {
      ctx._st = { id: null, frame: null, pipe: null, reply: null, timer: null, waiters: new Waiters() };
    },
    async send(ctx, body, timeout) {
      const st = ctx._st;
      end(st);
      st.waiters.fail(new ProtocolError("req: the request was replaced by a new one"));
      const pipe = await sock._pipeWithRoom(timeout, "req send");
      ctx._check();
      end(st);
      do st.id = ids.take(); while (pending.has(st.id)); // an outstanding id is never reused
      st.frame = encode([st.id], body);
      st.resend = ctx._opt("resendTime");
      pending.set(st.id, st);
      st.pipe = pipe;
      pipe.send(st.frame);
      if (st.resend) st.timer = setTimeout(() => transmit(st), st.resend * 1000);
    },
    async recv(ctx, timeout) {
      const st = ctx._st;
      if (st.reply !== null) { const r = st.reply; end(st); return r; }
      if (st.id === null) {
        throw new ProtocolError("req: no request to receive a reply to; send one first");
      }
      try {
        return await st.waiters.wait(timeout, "req recv");
      } catch (e) {
        if (e instanceof Timeout) end(st); // as in nng: a timed-out recv ends the request
        throw e;
      }
    },
    arrived(pipe, msg) {
      const id = word(msg);
      if (id === null) { pipe.close("req: a reply shorter than its request id"); return; }
      const st = pending.get(id);
      if (!st) return; // late, cancelled or duplicate: dropped
      const body = msg.subarray(4);
      if (st.waiters.size) { end(st); st.waiters.wake(body); } else {
        pending.delete(id); clearTimeout(st.timer); st.reply = body;
      }
    },
    attached() { // requests that found no connection go out now
      for (const st of pending.values()) if (st.pipe === null && st.reply === null) transmit(st);
    },
    detached(pipe) { // requests on a lost connection are resent at once elsewhere
      for (const st of pending.values()) if (st.pipe === pipe && st.reply === null) transmit(st);
    },
    closeContext(ctx, err) { end(ctx._st); ctx._st.waiters.fail(err); },
    closeSocket() {
      for (const st of pending.values()) clearTimeout(st.timer);
      pending.clear();
    },
  };
}

/** rep and respondent: each recv takes the next request (or survey) and keeps its backtrace
 * and connection in the context; the next send on that context is its reply. */
function replierRules(sock) {
  const name = sock.protocol;
  const inbox = new Inbox(name === "respondent" ? sock.options.recvBuffer : 0);
  return {
    contexts: true,
    open(ctx) { ctx._job = null; },
    async recv(ctx, timeout) {
      const m = await inbox.get(timeout, `${name} recv`, ctx);
      ctx._job = m;
      return m.body;
    },
    async send(ctx, body) {
      const job = ctx._job;
      if (job === null) {
        const what = name === "rep" ? "request" : "survey";
        throw new ProtocolError(`${name}: no ${what} to answer; recv one first`);
      }
      ctx._job = null;
      if (job.pipe.open) job.pipe.send(encode(job.header, body)); // else: dropped, as in nng
    },
    arrived(pipe, msg) {
      const split = splitBacktrace(msg, sock.options.ttl);
      if (split) inbox.put({ pipe, header: split.header, body: split.body });
    },
    closeContext(ctx, err) { ctx._job = null; inbox.waiters.fail(err, ctx); },
    closeSocket(err) { inbox.waiters.fail(err); },
  };
}

/** surveyor: each survey gets an id and a deadline (surveyTime); replies carrying its id are
 * received until then, after which recv fails with Timeout until the next survey. */
function surveyorRules(sock) {
  const ids = new IdSequence();
  const live = new Map(); // survey id -> context state
  const end = (st, err) => {
    if (st.id !== null) live.delete(st.id);
    clearTimeout(st.timer);
    st.id = null;
    if (err) { st.inbox.waiters.fail(err); }
  };
  return {
    contexts: true,
    open(ctx) {
      ctx._st = { id: null, timer: null, expired: false, inbox: new Inbox(sock.options.recvBuffer) };
    },
    async send(ctx, body) {
      const st = ctx._st;
      end(st, new ProtocolError("surveyor: the survey was replaced by a new one"));
      st.inbox.queue = [];
      do st.id = ids.take(); while (live.has(st.id));
      st.expired = false;
      live.set(st.id, st);
      const time = ctx._opt("surveyTime");
      if (time !== null) {
        st.timer = setTimeout(() => {
          st.expired = true;
          end(st, new Timeout(`surveyor: the survey's time (${time} s) is up`));
        }, time * 1000);
      }
      const bytes = encode([st.id], body);
      for (const p of sock._roomy()) p.send(bytes);
    },
    async recv(ctx, timeout) {
      const st = ctx._st;
      if (st.inbox.queue.length) return st.inbox.queue.shift();
      if (st.id === null) {
        if (st.expired) throw new Timeout("surveyor: the survey's time is up");
        throw new ProtocolError("surveyor: no survey to receive answers to; send one first");
      }
      return st.inbox.get(timeout, "surveyor recv");
    },
    arrived(pipe, msg) {
      const id = word(msg);
      if (id === null) { pipe.close("surveyor: an answer shorter than its survey id"); return; }
      const st = live.get(id);
      if (st) st.inbox.put(msg.subarray(4));
    },
    closeContext(ctx, err) { end(ctx._st, err); },
    closeSocket() { for (const st of live.values()) clearTimeout(st.timer); live.clear(); },
  };
}

/** sub: subscriptions are byte prefixes matched in the page ("" matches all; none, nothing). */
function subRules(sock) {
  const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
  const name = sock.protocol;
  return {
    contexts: true,
    open(ctx) { ctx._sub = { prefixes: [], inbox: new Inbox(sock.options.recvBuffer) }; },
    topics(ctx) {
      const { prefixes } = ctx._sub;
      return {
        add(p) {
          const b = toBytes(p);
          if (!prefixes.some((q) => same(q, b))) prefixes.push(b.slice());
        },
        remove(p) {
          const b = toBytes(p), i = prefixes.findIndex((q) => same(q, b));
          if (i < 0) throw new ProtocolError("sub: not subscribed to that prefix");
          prefixes.splice(i, 1);
        },
      };
    },
    send: noSend(name),
    recv: (ctx, timeout) => ctx._sub.inbox.get(timeout, "sub recv"),
    arrived(pipe, msg) { // each context whose subscriptions match gets the message
      const matches = (p) => p.length <= msg.length && p.every((x, i) => msg[i] === x);
      let first = true;
      for (const ctx of sock._contexts) {
        if (!ctx._sub.prefixes.some(matches)) continue;
        ctx._sub.inbox.put(first ? msg : msg.slice());
        first = false;
      }
    },
    closeContext(ctx, err) { ctx._sub.inbox.waiters.fail(err); },
    closeSocket() {},
  };
}

/** pair1: a 32-bit hop count in front of each message; a direct peer's arrive as 1. */
function pair1Rules(sock) {
  const { rules, inbox } = simple(sock, { send: "one", single: true, header: [1] });
  rules.arrived = (pipe, msg) => {
    const hops = word(msg);
    if (hops === null || hops > 0xff) { pipe.close("pair1: bad hop count header"); return; }
    if (hops > sock.options.ttl) return; // too many hops: dropped
    inbox.put(msg.subarray(4));
  };
  return rules;
}

const PROTOCOL_RULES = {
  pair: (s) => simple(s, { send: "one", single: true }).rules,
  pair1: pair1Rules,
  push: (s) => simple(s, { send: "one", recv: false }).rules,
  pull: (s) => simple(s, {}).rules,
  pub: (s) => simple(s, { send: "all", recv: false }).rules,
  sub: subRules,
  bus: (s) => simple(s, { send: "all", lossy: true }).rules,
  req: reqRules,
  rep: replierRules,
  respondent: replierRules,
  surveyor: surveyorRules,
};
