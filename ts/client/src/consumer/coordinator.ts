// The coordinator of one key, as a group's membership and committer and
// a transactional producer reach it: found through the gateway's
// FindCoordinator (by group id, or by transactional id with the
// transaction key type), followed on NOT_COORDINATOR, found again when it
// cannot be reached, and called again while it is loading or (for a
// transactional id) while the previous transaction completes
// (CONCURRENT_TRANSACTIONS), within the client's retry options.

import { Code, createClient, type Client } from "@connectrpc/connect";
import { common, coordinator } from "../api.js";
import type { ResolvedRetry } from "../config.js";
import { detailOf, fromConnect, StrataError } from "../errors.js";
import type { Logger } from "../logger.js";
import type { Cluster } from "../metadata.js";
import { Backoff, sleep } from "../util.js";

const { Reason } = common;

export type CoordinatorClient = Client<typeof coordinator.CoordinatorService>;

/** Codes after which the coordinator is looked up again. */
const lookAgain = new Set<Code>([Code.Unavailable, Code.Unknown, Code.DeadlineExceeded, Code.Internal]);

/** CoordinatorLink finds and calls the coordinator of one group or transactional id. Not shared between consumers or producers. */
export class CoordinatorLink {
  private addr = "";
  private readonly clients = new Map<string, CoordinatorClient>();

  constructor(
    private readonly cluster: Cluster,
    private readonly groupId: string,
    private readonly requestTimeout: number,
    private readonly retry: ResolvedRetry,
    private readonly log: Logger,
    /** What groupId names: a group (the default) or a transactional id. */
    private readonly keyType: coordinator.CoordinatorKeyType = coordinator.CoordinatorKeyType.GROUP,
  ) {}

  /** get returns the coordinator's client and address, asking the gateway when none is known. */
  async get(): Promise<{ c: CoordinatorClient; addr: string }> {
    let addr = this.addr;
    if (addr === "") {
      try {
        const r = await this.cluster.gw.findCoordinator({ groupId: this.groupId, keyType: this.keyType }, { timeoutMs: this.requestTimeout });
        addr = r.address;
      } catch (e) {
        throw fromConnect(e, this.cluster.gatewayUrl);
      }
      this.addr = addr;
      this.log.debug("coordinator found", { groupId: this.groupId, address: addr });
    }
    let c = this.clients.get(addr);
    if (!c) {
      c = createClient(coordinator.CoordinatorService, this.cluster.transport(addr));
      this.clients.set(addr, c);
    }
    return { c, addr };
  }

  /**
   * failed takes in a failed call to the coordinator at addr: it follows a
   * NOT_COORDINATOR hint, and forgets the coordinator when it could not be
   * reached. It returns true when the call may be tried again.
   */
  failed(err: unknown, addr: string): boolean {
    const d = detailOf(err);
    if (d?.reason === Reason.NOT_COORDINATOR) {
      if (this.addr === addr) this.addr = d.hint.case === "coordinator" ? d.hint.value.address : "";
      return true;
    }
    if (d?.reason === Reason.COORDINATOR_LOADING || d?.reason === Reason.CONCURRENT_TRANSACTIONS) return true;
    if (err instanceof StrataError && lookAgain.has(err.code)) {
      if (this.addr === addr) this.addr = "";
      return true;
    }
    return false;
  }

  /** call runs fn against the coordinator, retrying as `failed` allows within the retry options. */
  async call<T>(fn: (c: CoordinatorClient, timeoutMs: number) => Promise<T>, signal?: AbortSignal): Promise<T> {
    const bo = Backoff.of(this.retry);
    for (let attempt = 0; ; attempt++) {
      let err: unknown;
      let addr = "";
      try {
        const co = await this.get();
        addr = co.addr;
        return await fn(co.c, this.requestTimeout);
      } catch (e0) {
        err = fromConnect(e0, addr || undefined);
      }
      if (!this.failed(err, addr) || attempt >= this.retry.retries) throw err;
      this.log.debug("coordinator call failed, retrying", { groupId: this.groupId, error: err });
      await sleep(bo.next(), signal);
    }
  }
}
