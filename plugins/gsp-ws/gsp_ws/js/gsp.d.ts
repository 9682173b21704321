// Type declarations of gsp.js, the browser SP client served by gsp's WSGI mount at
// <mount path>/gsp.js. Times are seconds.

/** The protocol names; a page's socket dials a peer of the matching protocol. */
export type ProtocolName =
  | "pair" | "pair1" | "pub" | "sub" | "req" | "rep" | "push" | "pull"
  | "surveyor" | "respondent" | "bus";

/** A message body: a string is sent as UTF-8. */
export type Data = string | Uint8Array | ArrayBuffer | ArrayBufferView;

export interface SocketOptions {
  /** Seconds recv() waits; null (default) = forever. */
  recvTimeout?: number | null;
  /** Seconds send() waits for a connection with room; null (default) = forever. */
  sendTimeout?: number | null;
  /** First redial delay, seconds (default 0.1); the delay is this x random(0.5..1). */
  reconnectTime?: number;
  /** Ceiling of the doubling redial backoff, seconds (default 10); 0 = no growth. */
  maxReconnectTime?: number;
  /** @deprecated The old name of `maxReconnectTime`. */
  reconnectTimeMax?: number;
  /** req: seconds before an unanswered request is sent again (default 60); 0 or null = never. */
  resendTime?: number | null;
  /** surveyor: seconds a survey collects answers (default 1); null = until the next survey. */
  surveyTime?: number | null;
  /** Largest message accepted, bytes (default 1 MiB); a larger one closes its connection. 0 = no limit. */
  maxRecvSize?: number;
  /** @deprecated The old name of `maxRecvSize`. */
  recvMaxSize?: number;
  /** Bytes the browser may hold unsent on a connection before send() waits (default 1 MiB). */
  sendBufferSize?: number;
  /** @deprecated The old name of `sendBufferSize`. */
  sendBufferMax?: number;
  /** sub, bus, surveyor, respondent: messages kept unread before the oldest is dropped (default 1024). */
  recvBuffer?: number;
  /** @deprecated The old name of `recvBuffer`. */
  recvBufferMax?: number;
  /** rep, respondent, pair1: most hops a message may have taken (default 8). */
  ttl?: number;
}

/** Every dial keeps redialing until its dialer or socket closes; by default its promise
 * resolves after the first attempt, connected or not. */
export interface DialOptions {
  /** true: resolve once connected, or reject with ConnectionRefused when the first attempt
   * fails (and stop). Default false. */
  failFast?: boolean;
  /** true: resolve at once, before the first attempt. Default false. */
  background?: boolean;
  /** @deprecated `{block: true}` is `{failFast: true}`, `{block: false}` is `{background: true}`. */
  block?: boolean;
  /** This dial's first redial delay, seconds (default: the socket's). */
  reconnectTime?: number;
  /** This dial's redial backoff ceiling, seconds (default: the socket's). */
  maxReconnectTime?: number;
  /** @deprecated The old name of `maxReconnectTime`. */
  reconnectTimeMax?: number;
}

export interface CallOptions {
  /** Seconds this call waits (overrides the socket's or context's option); null = forever. */
  timeout?: number | null;
}

export interface PipeEvent {
  type: "connect" | "disconnect";
  /** The connection's id (31 bits). */
  pipe: number;
  /** The URL it was dialed to. */
  url: string;
}

export interface PipeInfo {
  id: number;
  url: string;
}

/** What dial() resolves with: one URL kept connected. */
export interface Dialer {
  readonly url: string;
  /** Stop redialing and close the connection. */
  close(): void;
}

export declare class Context {
  readonly socket: Socket;
  readonly closed: boolean;
  /** undefined: the socket's value. */
  recvTimeout: number | null | undefined;
  sendTimeout: number | null | undefined;
  resendTime: number | null | undefined;
  surveyTime: number | null | undefined;
  send(data: Data, opts?: CallOptions): Promise<void>;
  recv(opts?: CallOptions): Promise<Uint8Array>;
  recvText(opts?: CallOptions): Promise<string>;
  /** sub: receive on this context the messages that begin with this prefix ("" = all). */
  subscribe(prefix: Data): void;
  unsubscribe(prefix: Data): void;
  close(): void;
}

export declare class Socket implements AsyncIterable<Uint8Array> {
  constructor(name: ProtocolName, options?: SocketOptions);
  readonly protocol: ProtocolName;
  /** The protocol of the peers it speaks to (req's is "rep"). */
  readonly peer: ProtocolName;
  readonly closed: boolean;
  readonly options: Readonly<Required<SocketOptions>>;
  recvTimeout: number | null;
  sendTimeout: number | null;
  resendTime: number | null;
  surveyTime: number | null;
  setOption<K extends keyof SocketOptions>(name: K, value: SocketOptions[K]): void;
  /** Connect to a ws:// or wss:// URL (http(s):// and paths are taken relative to the page)
   * and keep it connected, redialing with backoff. */
  dial(url: string, opts?: DialOptions): Promise<Dialer>;
  send(data: Data, opts?: CallOptions): Promise<void>;
  recv(opts?: CallOptions): Promise<Uint8Array>;
  recvText(opts?: CallOptions): Promise<string>;
  /** req, rep, surveyor, respondent, sub. */
  openContext(): Context;
  /** sub: receive messages that begin with this prefix ("" = all). */
  subscribe(prefix: Data): void;
  unsubscribe(prefix: Data): void;
  /** Returns a function that removes the listener. */
  onPipe(listener: (event: PipeEvent) => void): () => void;
  readonly pipes: PipeInfo[];
  close(): void;
  [Symbol.asyncIterator](): AsyncIterator<Uint8Array>;
}

export declare function socket(name: ProtocolName, options?: SocketOptions): Socket;

export declare class GspError extends Error {}
export declare class Timeout extends GspError {}
export declare class Closed extends GspError {}
export declare class ProtocolError extends GspError {}
export declare class NotSupported extends GspError {}
export declare class ConnectionRefused extends GspError {}
export declare class BadOption extends GspError {}
export declare class InvalidAddress extends GspError {}

export declare const PROTOCOLS: Readonly<Record<ProtocolName, { id: number; peer: ProtocolName }>>;

export declare const codec: {
  readonly SUFFIX: string;
  toBytes(data: Data): Uint8Array;
  encode(header: number[] | Uint8Array, body: Uint8Array): Uint8Array;
  word(msg: Uint8Array, at?: number): number | null;
  splitBacktrace(msg: Uint8Array, ttl?: number): { header: Uint8Array; body: Uint8Array } | null;
  IdSequence: new (start?: number) => { take(): number };
  subprotocolFor(name: ProtocolName): string;
  wsURL(url: string): string;
};
