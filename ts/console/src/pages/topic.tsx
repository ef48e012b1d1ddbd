// A topic: partitions with leader, replicas, ISR and log extents; its
// messages; its configuration; deleting it.
import { useState, type FormEvent } from "react";
import { Link, useLocation } from "wouter";
import { gateway } from "../api";
import { useCluster } from "../cluster";
import { Confirm, ErrorBox, usePoll } from "../components";
import { bytes, num } from "../format";
import { ConfigSource, type TopicDescription } from "../gen/strata/controller/v1/controller_pb";
import type { PartitionOffsets } from "../gen/strata/gateway/v1/gateway_pb";
import { parseConfigs } from "./home";
import { Messages } from "./messages";

export function TopicPage({ name, tab }: { name: string; tab: string }) {
  const { overview } = useCluster();
  const version = overview?.metadataVersion;
  const { data, error } = usePoll(
    async (signal) => {
      const r = await gateway.describeTopics({ names: [name], includeOffsets: true, includeLogExtents: true }, { signal });
      return { topic: r.topics[0], offsets: r.partitionOffsets };
    },
    3000,
    [name, version],
  );
  const [deleting, setDeleting] = useState(false);
  const [delError, setDelError] = useState<unknown>();
  const [busy, setBusy] = useState(false);
  const [, navigate] = useLocation();
  const base = `/topics/${encodeURIComponent(name)}`;
  const del = async () => {
    setBusy(true);
    try {
      await gateway.deleteTopic({ name, topicId: data?.topic?.topicId ?? "" });
      navigate("/");
    } catch (e) {
      setDelError(e);
      setDeleting(false);
    } finally {
      setBusy(false);
    }
  };
  return (
    <section data-testid="topic-page">
      <nav aria-label="breadcrumb"><ul><li><Link href="/">Topics</Link></li><li>{name}</li></ul></nav>
      <h2>
        {name}{" "}
        <button className="outline danger small" onClick={() => setDeleting(true)} data-testid="delete-topic">Delete topic</button>
      </h2>
      <ErrorBox error={error ?? delError} />
      {deleting && (
        <Confirm title="Delete topic" word={name} busy={busy} onConfirm={() => void del()} onClose={() => setDeleting(false)}>
          <p>Every message of <strong>{name}</strong> is deleted, on the storage nodes and in the tier. This cannot be undone.</p>
        </Confirm>
      )}
      <div className="tabs">
        <Link href={base} className={tab === "partitions" ? "active" : ""}>Partitions</Link>
        <Link href={`${base}/messages`} className={tab === "messages" ? "active" : ""} data-testid="tab-messages">Messages</Link>
        <Link href={`${base}/config`} className={tab === "config" ? "active" : ""} data-testid="tab-config">Configuration</Link>
      </div>
      {data?.topic && tab === "partitions" && <Partitions topic={data.topic} offsets={data.offsets} />}
      {data?.topic && tab === "messages" && <Messages topic={name} partitions={data.topic.partitions.length} />}
      {data?.topic && tab === "config" && <Config topic={data.topic} />}
    </section>
  );
}

function Partitions({ topic, offsets }: { topic: TopicDescription; offsets: PartitionOffsets[] }) {
  const byPartition = new Map(offsets.map((o) => [o.partition, o]));
  return (
    <>
      <p className="muted">
        {topic.partitions.length} partitions, replication factor {topic.replicationFactor}, id {topic.topicId}. Replicas out of the ISR are <span className="out-of-sync">highlighted</span>.
      </p>
      <table className="striped" data-testid="partitions">
        <thead>
          <tr><th>Partition</th><th>Leader</th><th>Replicas</th><th>ISR</th><th>Log start</th><th>High watermark</th><th>Local range</th><th>Local size</th><th>Tiered range</th><th>Tiered size</th></tr>
        </thead>
        <tbody>
          {topic.partitions.map((p) => {
            const o = byPartition.get(p.partition);
            const tiered = o && o.tieredEndOffset >= 0n;
            return (
              <tr key={p.partition} data-testid={`partition-${p.partition}`}>
                <td>{p.partition}</td>
                <td className={p.leaderId < 0 ? "bad" : ""}>{p.leaderId < 0 ? "none" : p.leaderId}</td>
                <td>
                  {p.replicas.map((r) => (
                    <span key={r} className={`replica ${p.isr.includes(r) ? "" : "out-of-sync"}`} title={p.isr.includes(r) ? "in sync" : "out of sync"}>{r}</span>
                  ))}
                </td>
                <td>{p.isr.join(", ")}</td>
                {o?.error ? (
                  <td colSpan={6} className="bad">{o.error.message}</td>
                ) : o ? (
                  <>
                    <td>{num(o.logStartOffset)}</td>
                    <td data-testid={`hw-${p.partition}`}>{num(o.highWatermark)}</td>
                    <td>{num(o.localLogStartOffset)} – {num(o.logEndOffset)}</td>
                    <td>{bytes(o.localSizeBytes)}</td>
                    <td>{tiered ? `${num(o.logStartOffset)} – ${num(o.tieredEndOffset)}` : "–"}</td>
                    <td>{tiered ? bytes(o.tieredSizeBytes) : "–"}</td>
                  </>
                ) : (
                  <td colSpan={6} />
                )}
              </tr>
            );
          })}
        </tbody>
      </table>
    </>
  );
}

function Config({ topic }: { topic: TopicDescription }) {
  const [text, setText] = useState("");
  const [removing, setRemoving] = useState<string>();
  const [error, setError] = useState<unknown>();
  const [done, setDone] = useState<string>();
  const [configs, setConfigs] = useState(topic.configs);
  const apply = async (set: Record<string, string>, del: string[]) => {
    setError(undefined);
    setDone(undefined);
    try {
      const r = await gateway.alterTopicConfig({ name: topic.name, setConfigs: set, deleteConfigs: del });
      setConfigs(r.configs);
      setDone("Saved.");
      setText("");
    } catch (e) {
      setError(e);
    }
  };
  const submit = (e: FormEvent) => {
    e.preventDefault();
    try {
      void apply(parseConfigs(text), []);
    } catch (err) {
      setError(err);
    }
  };
  return (
    <>
      <table className="striped" data-testid="configs">
        <thead><tr><th>Key</th><th>Value</th><th>Source</th><th /></tr></thead>
        <tbody>
          {configs.map((c) => (
            <tr key={c.key} data-testid={`config-${c.key}`}>
              <td><code>{c.key}</code></td>
              <td>{c.value}</td>
              <td>{c.source === ConfigSource.TOPIC ? <strong>topic override</strong> : "default"}</td>
              <td>
                {c.source === ConfigSource.TOPIC && (
                  <a href="#" onClick={(e) => { e.preventDefault(); setRemoving(c.key); void apply({}, [c.key]).finally(() => setRemoving(undefined)); }} aria-busy={removing === c.key}>reset to default</a>
                )}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      <form onSubmit={submit} data-testid="alter-config">
        <label>Set overrides, one <code>key=value</code> a line
          <textarea rows={2} value={text} onChange={(e) => setText(e.target.value)} placeholder="retention.ms=86400000" />
        </label>
        <button type="submit">Save</button> <span className="good">{done}</span>
        <ErrorBox error={error} />
      </form>
    </>
  );
}
