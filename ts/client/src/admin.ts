// Admin calls through the gateway: topics, groups and who the client is.

import { coordinator, type controller } from "./api.js";
import type { ResolvedConfig } from "./config.js";
import { fromConnect } from "./errors.js";
import { Cluster } from "./metadata.js";

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
  /** @internal use strata.admin() */
  constructor(private readonly cfg: ResolvedConfig) {
    this.cluster = new Cluster(cfg);
  }

  private async call<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (e) {
      throw fromConnect(e);
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
