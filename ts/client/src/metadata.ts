// The routing cache a producer or consumer uses, as the Go client's
// cluster (client/metadata.go): per topic of interest, each partition's
// leader, leader epoch and leader address, from the gateway's Metadata. A
// refresh already in flight is joined; an answer older than the cache
// (gateways behind a load balancer may lag one another) only adds topics;
// NOT_LEADER hints with a newer epoch update the cache directly. Every
// transport it makes carries the client's credentials, and it keeps the
// throttle times the nodes asked for (throttle.ts).

import { createClient, type Client, type Transport } from "@connectrpc/connect";
import { gateway, storage, common } from "./api.js";
import type { ResolvedConfig } from "./config.js";
import {
  detailOf,
  fromConnect,
  isTransportFailure,
  NoLeaderError,
  StrataAuthenticationError,
  StrataAuthorizationError,
  UnknownPartitionError,
  UnknownTopicError,
} from "./errors.js";
import type { Logger } from "./logger.js";
import { platform } from "./platform.js";
import { Throttles } from "./throttle.js";
import { Backoff, sleep, unrefTimer } from "./util.js";

/** One partition's routing. */
export interface PartInfo {
  /** Leader node id, -1 when offline. */
  leader: number;
  epoch: number;
  /** Leader base URL; "" when unknown. */
  addr: string;
}

/** One topic's routing; replaced whole on refresh, never modified. */
export interface TopicInfo {
  id: string;
  parts: PartInfo[];
  /**
   * The topic's max.message.bytes from the gateway's metadata (the
   * effective configuration): the producer cuts its batches at it. 0 when
   * the metadata does not say.
   */
  maxMessageBytes: number;
}

export type GatewayClient = Client<typeof gateway.GatewayService>;
export type StorageClient = Client<typeof storage.StorageService>;

/** Cluster is the metadata cache and the pool of Connect clients of one producer, consumer or admin. */
export class Cluster {
  /** The gateway client: it bootstraps from the gateway list, moving on when one cannot be reached. */
  readonly gw: GatewayClient;
  readonly log: Logger;
  /** Index in cfg.gateways of the gateway calls go to. */
  private gwIndex = 0;
  private readonly transports = new Map<string, { transport: Transport; close(): void }>();
  private readonly storages = new Map<string, StorageClient>();
  private version = -1n;
  private answered = false;
  private readonly nodes = new Map<number, string>();
  private readonly topics = new Map<string, TopicInfo>();
  private readonly missing = new Set<string>();
  private readonly interest = new Set<string>();
  /** Topics the last refresh that asked for them was refused, with the refusal; topic() takes them out. */
  private readonly refused = new Map<string, StrataAuthorizationError>();
  private refreshing: Promise<void> | undefined;
  private timer: ReturnType<typeof setInterval> | undefined;
  /** How long each node asked this client to hold its next request (quota throttling). */
  readonly throttles = new Throttles();

  constructor(
    readonly cfg: ResolvedConfig,
    namespace = "Cluster",
  ) {
    this.log = cfg.logger.namespace(namespace);
    this.gw = createClient(gateway.GatewayService, this.gatewayTransport());
    this.timer = setInterval(() => {
      if (this.interest.size > 0) void this.refreshQuietly("periodic metadata refresh");
    }, cfg.metadataMaxAge);
    unrefTimer(this.timer);
  }

  /** The gateway calls go to now. */
  get gatewayUrl(): string {
    return this.cfg.gateways[this.gwIndex] ?? this.cfg.gateway;
  }

  /**
   * gatewayTransport sends each call to the current gateway; a call that
   * cannot reach it (refused, reset, no connection in time) is sent to the
   * next gateway of the list, each tried once per call, and the one that
   * answered becomes the current one. A failure is a StrataConnectionError
   * naming the last gateway tried, with the runtime's error as its cause.
   */
  private gatewayTransport(): Transport {
    const n = this.cfg.gateways.length;
    const attempt = async <T>(call: (t: Transport) => Promise<T>): Promise<T> => {
      let last: unknown;
      for (let i = 0; i < n; i++) {
        const idx = (this.gwIndex + i) % n;
        const url = this.cfg.gateways[idx]!;
        try {
          const r = await call(this.transport(url));
          if (idx !== this.gwIndex) {
            this.log.info("gateway changed", { from: this.gatewayUrl, to: url });
            this.gwIndex = idx;
          }
          return r;
        } catch (e) {
          if (!isTransportFailure(e)) throw e;
          last = fromConnect(e, url);
          if (n > 1) this.log.warn("gateway unreachable, trying the next", { gateway: url, error: last });
        }
      }
      throw last;
    };
    return {
      unary: (method, signal, timeoutMs, header, input, ctx) => attempt((t) => t.unary(method, signal, timeoutMs, header, input, ctx)),
      stream: (method, signal, timeoutMs, header, input, ctx) => attempt((t) => t.stream(method, signal, timeoutMs, header, input, ctx)),
    };
  }

  /** transport returns the shared transport to a base URL, with the client's credentials. */
  transport(baseUrl: string): Transport {
    let t = this.transports.get(baseUrl);
    if (!t) {
      const creds = this.cfg.credentials;
      const made = this.cfg.transport
        ? { transport: this.cfg.transport(baseUrl), close: () => undefined }
        : platform().transport(baseUrl, { tls: creds.tls(), connectionTimeout: this.cfg.connectionTimeout });
      t = { transport: creds.authorize(made.transport), close: made.close };
      this.transports.set(baseUrl, t);
    }
    return t.transport;
  }

  /** storage returns the client of the storage node at addr. */
  storage(addr: string): StorageClient {
    let c = this.storages.get(addr);
    if (!c) {
      c = createClient(storage.StorageService, this.transport(addr));
      this.storages.set(addr, c);
    }
    return c;
  }

  /** close stops the periodic refresh and releases the connections the client opened. Safe twice. */
  close(): void {
    if (this.timer !== undefined) clearInterval(this.timer);
    this.timer = undefined;
    for (const t of this.transports.values()) t.close();
    this.transports.clear();
    this.storages.clear();
  }

  /**
   * refreshQuietly refreshes for a caller that goes on either way (the
   * answer it waits for comes on its next try): a failure is logged with
   * its cause, at WARN, and the promise never rejects.
   */
  async refreshQuietly(why: string): Promise<void> {
    try {
      await this.refresh();
    } catch (e) {
      this.log.warn(`metadata refresh failed (${why})`, { error: e });
    }
  }

  /**
   * refresh asks the gateway for every topic of interest; joins a refresh in
   * flight. The gateway refuses a whole Metadata call that names one topic
   * the principal may not describe, so on that refusal each topic is asked
   * for alone: the refused ones leave the interest (topic() reports them),
   * the others stay routable.
   */
  refresh(): Promise<void> {
    if (this.refreshing) return this.refreshing;
    const topics = [...this.interest];
    const p = (async () => {
      if (topics.length === 0) return;
      const ask = async (names: string[]) => {
        try {
          this.apply(await this.gw.metadata({ topics: names }, { timeoutMs: this.cfg.requestTimeout }));
        } catch (e) {
          throw fromConnect(e);
        }
      };
      try {
        await ask(topics);
        return;
      } catch (e) {
        if (!(e instanceof StrataAuthorizationError)) throw e;
        if (topics.length === 1) {
          this.refuse(topics[0]!, e);
          throw e;
        }
      }
      for (const t of topics) {
        try {
          await ask([t]);
        } catch (e) {
          if (!(e instanceof StrataAuthorizationError)) throw e;
          this.refuse(t, e);
        }
      }
    })().finally(() => {
      this.refreshing = undefined;
    });
    this.refreshing = p;
    return p;
  }

  /** refuse records that the gateway refused to describe a topic to this principal, and stops asking for it. */
  private refuse(name: string, e: StrataAuthorizationError): void {
    this.interest.delete(name);
    this.refused.set(name, e);
  }

  private apply(m: gateway.MetadataResponse): void {
    this.answered = true;
    const stale = m.metadataVersion < this.version;
    if (!stale) {
      this.version = m.metadataVersion;
      for (const n of m.nodes) this.nodes.set(n.nodeId, n.address);
    }
    for (const t of m.topics) {
      if (stale && this.topics.has(t.name)) continue;
      const parts: PartInfo[] = new Array(t.partitions.length);
      for (let i = 0; i < parts.length; i++) parts[i] = { leader: -1, epoch: -1, addr: "" };
      for (const p of t.partitions) {
        if (p.partition < 0 || p.partition >= parts.length) continue;
        parts[p.partition] = { leader: p.leaderId, epoch: p.leaderEpoch, addr: p.leaderId >= 0 ? (this.nodes.get(p.leaderId) ?? "") : "" };
      }
      const mmb = Number(t.configs["max.message.bytes"]);
      this.topics.set(t.name, { id: t.topicId, parts, maxMessageBytes: Number.isSafeInteger(mmb) && mmb > 0 ? mmb : 0 });
      this.missing.delete(t.name);
    }
    if (!stale) {
      for (const name of m.unknownTopics) {
        this.topics.delete(name);
        this.missing.add(name);
      }
    }
  }

  /** known returns the cached routing of a topic without I/O. */
  known(name: string): TopicInfo | undefined {
    return this.topics.get(name);
  }

  /** isMissing reports that the last answer listed the topic as unknown. */
  isMissing(name: string): boolean {
    return this.missing.has(name);
  }

  /**
   * topic returns a topic's routing, asking the gateway when it is not cached.
   * A topic the gateway lists as unknown is asked for again for
   * unknownTopicWait before UnknownTopicError. A gateway that never
   * answered fails at once, and so does a refusal
   * (StrataAuthenticationError, StrataAuthorizationError); when the gateway
   * stops answering, the last failure (a StrataConnectionError, say) is
   * what is thrown, never UnknownTopicError.
   */
  async topic(name: string, signal?: AbortSignal): Promise<TopicInfo> {
    const deadline = Date.now() + this.cfg.unknownTopicWait;
    const bo = Backoff.of(this.cfg.retry);
    for (;;) {
      const t = this.topics.get(name);
      if (t) return t;
      this.interest.add(name);
      this.refused.delete(name);
      let failed: unknown;
      try {
        await this.refresh();
      } catch (e) {
        if (e instanceof StrataAuthenticationError || !this.answered) throw e;
        failed = e;
      }
      const refused = this.refused.get(name);
      if (refused) {
        this.refused.delete(name);
        throw refused;
      }
      const t2 = this.topics.get(name);
      if (t2) return t2;
      if (Date.now() >= deadline) {
        this.interest.delete(name);
        if (failed !== undefined) throw failed;
        throw new UnknownTopicError(name);
      }
      await sleep(Math.min(bo.next(), Math.max(deadline - Date.now(), 1)), signal);
    }
  }

  /**
   * leader returns a partition's routing and its leader's client;
   * NoLeaderError when it has none. A partition beyond the cached count
   * (partitions were added) refreshes the metadata once; still beyond it,
   * UnknownPartitionError, which is retriable.
   */
  async leader(topic: string, partition: number, signal?: AbortSignal): Promise<{ info: PartInfo; client: StorageClient }> {
    let t = await this.topic(topic, signal);
    if (partition >= t.parts.length) {
      await this.refresh();
      t = await this.topic(topic, signal);
    }
    const info = t.parts[partition];
    if (!info) throw new UnknownPartitionError(topic, partition);
    if (info.leader < 0 || info.addr === "") throw new NoLeaderError(topic, partition);
    return { info, client: this.storage(info.addr) };
  }

  /**
   * applyHint updates one partition from a NOT_LEADER / fenced-epoch hint
   * whose epoch is newer than the cache's; true when it did (no refresh needed).
   */
  applyHint(err: unknown): boolean {
    const d = detailOf(err);
    if (!d || d.hint.case !== "leader") return false;
    const h: common.LeaderHint = d.hint.value;
    const tp = h.topicPartition;
    if (!tp || h.leaderId < 0 || h.leaderAddress === "" || h.leaderEpoch < 0) return false;
    const t = this.topics.get(tp.topic);
    const cur = t?.parts[tp.partition];
    if (!t || !cur || h.leaderEpoch <= cur.epoch) return false;
    // The hint names the leader's default address; the gateway's metadata
    // may have given this client another listener's address for the same
    // node (advertised listeners), which is the one it can reach.
    const addr = this.nodes.get(h.leaderId) || h.leaderAddress;
    const parts = t.parts.slice();
    parts[tp.partition] = { leader: h.leaderId, epoch: h.leaderEpoch, addr };
    this.topics.set(tp.topic, { ...t, parts });
    return true;
  }
}
