// Admin calls through the gateway: topics, partitions, configs, groups
// and their offsets, and who the client is. Calls that may succeed when
// repeated (a gateway unreachable, a controller or coordinator moving) are
// retried with the client's retry options, the next gateway of the list
// taking over when one is down. The gateway has no DescribeConfigs:
// describeConfigs answers from DescribeTopics' effective configs, topics
// only.

import { Code } from "@connectrpc/connect";
import { controller, coordinator, storage } from "./api.js";
import type { ResolvedConfig } from "./config.js";
import { Action, classify, fromConnect, fromDetail, isAuthError, parseOffset, StrataError } from "./errors.js";
import type { Logger } from "./logger.js";
import { Cluster } from "./metadata.js";
import { Backoff, sleep } from "./util.js";

/** Config resource types, numbered as kafkajs' ConfigResourceTypes. Strata has topic configs only. */
export const ConfigResourceTypes = { UNKNOWN: 0, TOPIC: 2, BROKER: 4, BROKER_LOGGER: 8 } as const;

/** Where a config value comes from, numbered as kafkajs' ConfigSource. */
export const ConfigSource = { UNKNOWN: 0, TOPIC_CONFIG: 1, DYNAMIC_BROKER_CONFIG: 2, DYNAMIC_DEFAULT_BROKER_CONFIG: 3, STATIC_BROKER_CONFIG: 4, DEFAULT_CONFIG: 5 } as const;

/** One config entry as describeConfigs returns it (kafkajs' shape). */
export interface ConfigEntry {
  configName: string;
  configValue: string;
  /** True when the topic has no override and the cluster default applies. */
  isDefault: boolean;
  configSource: number;
  isSensitive: boolean;
  readOnly: boolean;
  configSynonyms: never[];
}

/** describeConfigs' answer (kafkajs' DescribeConfigResponse). */
export interface DescribeConfigResponse {
  resources: { resourceType: number; resourceName: string; errorCode: number; errorMessage: string | null; configEntries: ConfigEntry[] }[];
  throttleTime: number;
}

/** One partition of fetchTopicMetadata's answer (kafkajs' PartitionMetadata). */
export interface PartitionMetadata {
  partitionErrorCode: number;
  partitionId: number;
  leader: number;
  replicas: number[];
  isr: number[];
  offlineReplicas: number[];
}

/** One group's outcome in deleteGroups. */
export interface DeleteGroupResult {
  groupId: string;
  /** "NONE" when deleted, else the reason (e.g. "GROUP_NOT_EMPTY") or the code name. */
  errorCode: string;
  error?: StrataError;
}

/** DeleteGroupsError: some groups of a deleteGroups call were not deleted; `groups` has every group's outcome. */
export class DeleteGroupsError extends StrataError {
  override name = "DeleteGroupsError";
  constructor(readonly groups: DeleteGroupResult[]) {
    const failed = groups.filter((g) => g.error);
    super(`${failed.length} of ${groups.length} groups not deleted: ${failed.map((g) => `${g.groupId}: ${g.error!.message}`).join("; ")}`, { cause: failed[0]?.error, code: failed[0]?.error?.code, reason: failed[0]?.error?.reasonCode });
  }
}

/** Arguments of Admin.createTopic. */
export interface CreateTopic {
  topic: string;
  /** Default: the cluster default (1). */
  partitions?: number;
  /** Default: the cluster default (3). */
  replicationFactor?: number;
  /** Topic config overrides by Kafka key, for example {"retention.ms": "86400000"}. */
  configs?: Record<string, string>;
}

/** One partition of a described topic. */
export interface PartitionDescription {
  partition: number;
  /** Leader node id, -1 when offline. */
  leader: number;
  leaderEpoch: number;
  replicas: number[];
  isr: number[];
  offlineReplicas: number[];
  /** First offset available, as a decimal string; "-1" when the leader could not be asked. */
  logStartOffset: string;
  /** High watermark, as a decimal string; "-1" when the leader could not be asked. */
  highWatermark: string;
}

/** A described topic. */
export interface TopicDescription {
  name: string;
  topicId: string;
  replicationFactor: number;
  internal: boolean;
  partitions: PartitionDescription[];
  /** Effective configuration by key. */
  configs: Record<string, string>;
}

/** A group listing. */
export interface GroupListing {
  groupId: string;
  /** "EMPTY", "RECONCILING", "STABLE" or "DEAD". */
  state: string;
  memberCount: number;
}

/** A described group. */
export interface GroupDescription {
  groupId: string;
  state: string;
  groupEpoch: number;
  assignmentEpoch: number;
  coordinatorId: string;
  members: { memberId: string; clientId: string; clientHost: string; memberEpoch: number; assignment: { topic: string; partitions: number[] }[] }[];
  /** Per partition: committed offset, log end offset and lag as decimal strings ("-1" when unknown), and the owner. */
  partitions: { topic: string; partition: number; committedOffset: string; logEndOffset: string; lag: string; memberId: string }[];
}

/** Admin: topic and group administration through the gateway. Create it with `strata.admin()`. */
export class Admin {
  private readonly cluster: Cluster;
  private readonly log: Logger;
  /** @internal use strata.admin() */
  constructor(private readonly cfg: ResolvedConfig) {
    this.cluster = new Cluster(cfg, "Admin.Cluster");
    this.log = cfg.logger.namespace("Admin");
  }

  /**
   * call runs one gateway call, retrying a retriable failure (see
   * StrataError.retriable) with the client's retry options; refusals and
   * failures a retry cannot fix are thrown at once.
   */
  private async call<T>(fn: () => Promise<T>): Promise<T> {
    const bo = Backoff.of(this.cfg.retry);
    for (let attempt = 0; ; attempt++) {
      let err: unknown;
      try {
        return await fn();
      } catch (e) {
        err = fromConnect(e, this.cluster.gatewayUrl);
      }
      if (!(err instanceof StrataError) || !err.retriable || isAuthError(err) || attempt >= this.cfg.retry.retries) throw err;
      const wait = bo.next();
      this.log.debug("admin call failed; retrying", { attempt: attempt + 1, retryInMs: Math.round(wait), error: err });
      await sleep(wait);
    }
  }

  private get opts() {
    return { timeoutMs: this.cfg.requestTimeout };
  }

  /** connect is a no-op (kafkajs compatibility). */
  async connect(): Promise<void> {}

  /** disconnect releases the admin's timers (kafkajs compatibility). */
  async disconnect(): Promise<void> {
    this.cluster.close();
  }

  /**
   * whoAmI returns the principal the gateway authenticated this client as
   * ("User:alice"; "User:ANONYMOUS" on a cluster without authentication) and
   * how ("certificate", "token", "oidc" or "anonymous").
   */
  async whoAmI(): Promise<{ principal: string; method: string }> {
    const r = await this.call(() => this.cluster.gw.whoAmI({}, this.opts));
    return { principal: r.principal, method: r.method };
  }

  /** createTopic creates a topic; rejects with reason TOPIC_ALREADY_EXISTS when it exists. */
  async createTopic(t: CreateTopic): Promise<TopicDescription> {
    const r = await this.call(() =>
      this.cluster.gw.createTopic(
        { name: t.topic, partitions: t.partitions ?? 0, replicationFactor: t.replicationFactor ?? 0, configs: t.configs ?? {} },
        this.opts,
      ),
    );
    return describe(r.topic!);
  }

  /**
   * createTopics creates several topics (kafkajs compatibility): resolves
   * true when all were created, false when any already existed.
   */
  async createTopics(a: { topics: { topic: string; numPartitions?: number; replicationFactor?: number; configEntries?: { name: string; value: string }[] }[] }): Promise<boolean> {
    let all = true;
    for (const t of a.topics) {
      try {
        await this.createTopic({
          topic: t.topic,
          partitions: t.numPartitions,
          replicationFactor: t.replicationFactor,
          configs: Object.fromEntries((t.configEntries ?? []).map((c) => [c.name, c.value])),
        });
      } catch (e) {
        if ((e as { reason?: string }).reason === "TOPIC_ALREADY_EXISTS") all = false;
        else throw e;
      }
    }
    return all;
  }

  /** listTopics returns the names of every non-internal topic, sorted. */
  async listTopics(): Promise<string[]> {
    const r = await this.call(() => this.cluster.gw.listTopics({}, this.opts));
    return r.topics.map((t) => t.name);
  }

  /** describeTopic returns a topic's partitions (with log start offset and high watermark) and configs. */
  async describeTopic(name: string): Promise<TopicDescription> {
    const r = await this.call(() => this.cluster.gw.describeTopics({ names: [name], includeOffsets: true }, this.opts));
    const d = describe(r.topics[0]!);
    for (const po of r.partitionOffsets) {
      const p = d.partitions.find((x) => x.partition === po.partition);
      if (p && po.topic === name && !po.error) {
        p.logStartOffset = String(po.logStartOffset);
        p.highWatermark = String(po.highWatermark);
      }
    }
    return d;
  }

  /** fetchTopicOffsets (kafkajs compatibility): per partition, the high watermark (offset, high) and log start (low). */
  async fetchTopicOffsets(topic: string): Promise<{ partition: number; offset: string; high: string; low: string }[]> {
    const d = await this.describeTopic(topic);
    return d.partitions.map((p) => ({ partition: p.partition, offset: p.highWatermark, high: p.highWatermark, low: p.logStartOffset }));
  }

  /** deleteTopic deletes a topic. */
  async deleteTopic(name: string): Promise<void> {
    await this.call(() => this.cluster.gw.deleteTopic({ name }, this.opts));
  }

  /** deleteTopics (kafkajs compatibility). */
  async deleteTopics(a: { topics: string[] }): Promise<void> {
    for (const t of a.topics) await this.deleteTopic(t);
  }

  /** listGroups lists every group, sorted by id. */
  async listGroups(): Promise<{ groups: GroupListing[] }> {
    const r = await this.call(() => this.cluster.gw.listGroups({}, this.opts));
    return { groups: r.groups.map((g) => ({ groupId: g.groupId, state: groupState(g.state), memberCount: g.memberCount })) };
  }

  /** describeGroup returns a group's members, assignments and per-partition lag. */
  async describeGroup(groupId: string): Promise<GroupDescription> {
    const r = await this.call(() => this.cluster.gw.describeGroup({ groupId }, this.opts));
    const g = r.group!;
    return {
      groupId: g.groupId,
      state: groupState(g.state),
      groupEpoch: g.groupEpoch,
      assignmentEpoch: g.assignmentEpoch,
      coordinatorId: g.coordinatorId,
      members: g.members.map((m) => ({
        memberId: m.memberId,
        clientId: m.clientId,
        clientHost: m.clientHost,
        memberEpoch: m.memberEpoch,
        assignment: (m.assignment?.partitions ?? []).map((tp) => ({ topic: tp.topic, partitions: [...tp.partitions] })),
      })),
      partitions: g.partitions.map((p) => ({
        topic: p.topic,
        partition: p.partition,
        committedOffset: String(p.committedOffset),
        logEndOffset: String(p.logEndOffset),
        lag: String(p.lag),
        memberId: p.memberId,
      })),
    };
  }

  /**
   * createPartitions raises topics' partition counts (kafkajs' shape:
   * `count` is the new total). Resolves true. Existing keys move to other
   * partitions for new records, as in Kafka.
   */
  async createPartitions(a: { topicPartitions: { topic: string; count: number }[]; validateOnly?: boolean }): Promise<boolean> {
    for (const tp of a.topicPartitions) {
      await this.call(() => this.cluster.gw.createPartitions({ topic: tp.topic, total: tp.count, validateOnly: a.validateOnly ?? false }, this.opts));
    }
    return true;
  }

  /**
   * fetchTopicOffsetsByTimestamp returns, per partition, the first offset
   * whose record timestamp is at or after timestamp (Unix ms), or the high
   * watermark when none is that recent or no timestamp is given; asked of
   * each partition's leader.
   */
  async fetchTopicOffsetsByTimestamp(topic: string, timestamp?: number): Promise<{ partition: number; offset: string }[]> {
    if (timestamp !== undefined && !Number.isSafeInteger(timestamp)) throw new TypeError(`@strata-mq/client: fetchTopicOffsetsByTimestamp: bad timestamp ${timestamp}`);
    const t = await this.cluster.topic(topic);
    const out = new Map<number, string>();
    const bo = Backoff.of(this.cfg.retry);
    for (let attempt = 0; ; attempt++) {
      const groups = new Map<string, { partition: number; epoch: number }[]>();
      let missing = false;
      const info = this.cluster.known(topic) ?? t;
      for (let p = 0; p < info.parts.length; p++) {
        if (out.has(p)) continue;
        const pi = info.parts[p]!;
        if (pi.leader < 0 || pi.addr === "") {
          missing = true;
          continue;
        }
        groups.set(pi.addr, [...(groups.get(pi.addr) ?? []), { partition: p, epoch: pi.epoch }]);
      }
      let lastErr: unknown;
      await Promise.all(
        [...groups].map(async ([addr, g]) => {
          try {
            const resp = await this.cluster.storage(addr).listOffsets(
              {
                partitions: g.map(({ partition, epoch }) => ({
                  topic,
                  partition,
                  currentLeaderEpoch: epoch,
                  spec: timestamp === undefined ? storage.OffsetSpec.LATEST : storage.OffsetSpec.TIMESTAMP,
                  timestampMs: BigInt(timestamp ?? 0),
                })),
              },
              this.opts,
            );
            resp.partitions.forEach((r, i) => {
              const p = g[i]?.partition;
              if (p === undefined) return;
              if (r.error) lastErr = fromDetail(r.error);
              else out.set(p, String(r.offset));
            });
          } catch (e) {
            lastErr = fromConnect(e, addr);
          }
        }),
      );
      if (out.size === info.parts.length) return [...out].sort((x, y) => x[0] - y[0]).map(([partition, offset]) => ({ partition, offset }));
      if (lastErr !== undefined && classify(lastErr) === Action.Fail) throw lastErr;
      if (attempt >= this.cfg.retry.retries) {
        throw lastErr ?? new StrataError(`${topic}: no leader for ${info.parts.length - out.size} partition(s)`, { code: Code.Unavailable, retriable: true });
      }
      if (missing || lastErr !== undefined) await this.cluster.refreshQuietly("fetchTopicOffsetsByTimestamp");
      await sleep(bo.next());
    }
  }

  /**
   * resetOffsets moves a group's committed offsets of every partition of a
   * topic to the log start (earliest) or the high watermark (the default).
   * The group must have no live members (reason GROUP_NOT_EMPTY otherwise).
   */
  async resetOffsets(a: { groupId: string; topic: string; earliest?: boolean }): Promise<void> {
    await this.reset(a.groupId, a.topic, [], a.earliest ? coordinator.ResetSpec.EARLIEST : coordinator.ResetSpec.LATEST, 0n);
  }

  /**
   * setOffsets sets a group's committed offsets of some partitions
   * (kafkajs' shape). An offset outside the log is clamped to it by the
   * coordinator. The group must have no live members.
   */
  async setOffsets(a: { groupId: string; topic: string; partitions: { partition: number; offset: string | number }[] }): Promise<void> {
    const byOffset = new Map<number, number[]>();
    for (const p of a.partitions) {
      const o = parseOffset(p.offset);
      byOffset.set(o, [...(byOffset.get(o) ?? []), p.partition]);
    }
    for (const [offset, partitions] of byOffset) await this.reset(a.groupId, a.topic, partitions, coordinator.ResetSpec.OFFSET, BigInt(offset));
  }

  private async reset(groupId: string, topic: string, partitions: number[], spec: coordinator.ResetSpec, offset: bigint): Promise<void> {
    const r = await this.call(() => this.cluster.gw.resetOffsets({ groupId, topics: [{ topic, partitions }], spec, offset }, this.opts));
    const failed = r.partitions.find((p) => p.error);
    if (failed?.error) throw fromDetail(failed.error);
  }

  /**
   * deleteGroups deletes groups and their committed offsets; resolves with
   * each group's outcome, or rejects with DeleteGroupsError (every outcome
   * in `groups`) when one was not deleted.
   */
  async deleteGroups(groupIds: string[]): Promise<DeleteGroupResult[]> {
    const out: DeleteGroupResult[] = [];
    for (const groupId of groupIds) {
      try {
        await this.call(() => this.cluster.gw.deleteGroup({ groupId }, this.opts));
        out.push({ groupId, errorCode: "NONE" });
      } catch (e) {
        const err = e instanceof StrataError ? e : new StrataError(String(e), { cause: e });
        if (isAuthError(err) && out.length === 0 && groupIds.length === 1) throw err;
        out.push({ groupId, errorCode: err.reason || err.codeName, error: err });
      }
    }
    if (out.some((g) => g.error)) throw new DeleteGroupsError(out);
    return out;
  }

  /**
   * describeConfigs returns topics' effective configs (kafkajs' shape),
   * from DescribeTopics: Strata has no broker configs to describe, so a
   * resource of another type is refused (unimplemented). configNames
   * narrows the entries; every one is given otherwise.
   */
  async describeConfigs(a: { resources: { type: number; name: string; configNames?: string[] }[]; includeSynonyms?: boolean }): Promise<DescribeConfigResponse> {
    this.topicsOnly(a.resources);
    const names = a.resources.map((r) => r.name);
    const r = await this.call(() => this.cluster.gw.describeTopics({ names, includeOffsets: false }, this.opts));
    const byName = new Map(r.topics.map((t) => [t.name, t]));
    return {
      throttleTime: 0,
      resources: a.resources.map((res) => {
        const t = byName.get(res.name);
        const want = res.configNames?.length ? new Set(res.configNames) : undefined;
        return {
          resourceType: res.type,
          resourceName: res.name,
          errorCode: t ? 0 : 3,
          errorMessage: t ? null : `topic "${res.name}" does not exist`,
          configEntries: (t?.configs ?? [])
            .filter((c) => !want || want.has(c.key))
            .map((c) => ({
              configName: c.key,
              configValue: c.value,
              isDefault: c.source !== controller.ConfigSource.TOPIC,
              configSource: c.source === controller.ConfigSource.TOPIC ? ConfigSource.TOPIC_CONFIG : ConfigSource.DEFAULT_CONFIG,
              isSensitive: false,
              readOnly: false,
              configSynonyms: [],
            })),
        };
      }),
    };
  }

  /**
   * alterConfigs sets topic config overrides (kafkajs' shape). Unlike
   * Kafka's AlterConfigs it changes only the keys given (as
   * incrementalAlterConfigs does); a null value removes the override.
   */
  async alterConfigs(a: { validateOnly?: boolean; resources: { type: number; name: string; configEntries: { name: string; value: string | null }[] }[] }): Promise<{ resources: { resourceType: number; resourceName: string; errorCode: number; errorMessage: string | null }[]; throttleTime: number }> {
    this.topicsOnly(a.resources);
    for (const res of a.resources) {
      const setConfigs: Record<string, string> = {};
      const deleteConfigs: string[] = [];
      for (const c of res.configEntries) {
        if (c.value === null) deleteConfigs.push(c.name);
        else setConfigs[c.name] = c.value;
      }
      await this.call(() => this.cluster.gw.alterTopicConfig({ name: res.name, setConfigs, deleteConfigs, validateOnly: a.validateOnly ?? false }, this.opts));
    }
    return { throttleTime: 0, resources: a.resources.map((r) => ({ resourceType: r.type, resourceName: r.name, errorCode: 0, errorMessage: null })) };
  }

  private topicsOnly(resources: { type: number; name: string }[]): void {
    const other = resources.find((r) => r.type !== ConfigResourceTypes.TOPIC);
    if (other) throw new StrataError(`config resource type ${other.type} (${other.name}): Strata has topic configs only (ConfigResourceTypes.TOPIC)`, { code: Code.Unimplemented });
  }

  /**
   * fetchTopicMetadata returns the partitions of the given topics (every
   * topic when none are given), kafkajs' shape, in one call.
   */
  async fetchTopicMetadata(a?: { topics?: string[] }): Promise<{ topics: { name: string; partitions: PartitionMetadata[] }[] }> {
    const names = a?.topics?.length ? a.topics : await this.listTopics();
    const r = await this.call(() => this.cluster.gw.describeTopics({ names, includeOffsets: false }, this.opts));
    return {
      topics: r.topics.map((t) => ({
        name: t.name,
        partitions: t.partitions.map((p) => ({
          partitionErrorCode: 0,
          partitionId: p.partition,
          leader: p.leaderId,
          replicas: [...p.replicas],
          isr: [...p.isr],
          offlineReplicas: [...p.offlineReplicas],
        })),
      })),
    };
  }
}

function groupState(s: coordinator.GroupState): string {
  return (coordinator.GroupState[s] as string | undefined) ?? String(s);
}

function describe(t: controller.TopicDescription): TopicDescription {
  return {
    name: t.name,
    topicId: t.topicId,
    replicationFactor: t.replicationFactor,
    internal: t.internal,
    partitions: t.partitions.map((p) => ({
      partition: p.partition,
      leader: p.leaderId,
      leaderEpoch: p.leaderEpoch,
      replicas: [...p.replicas],
      isr: [...p.isr],
      offlineReplicas: [...p.offlineReplicas],
      logStartOffset: "-1",
      highWatermark: "-1",
    })),
    configs: Object.fromEntries(t.configs.map((c) => [c.key, c.value])),
  };
}
