// The first page: the cluster overview and the topic list, both from the
// live WatchCluster stream, and the form to create a topic.
import { useState, type FormEvent } from "react";
import { Link, useLocation } from "wouter";
import { gateway } from "../api";
import { useCluster } from "../cluster";
import { ErrorBox } from "../components";
import { bytes, num } from "../format";
import { NodeState } from "../gen/strata/controller/v1/controller_pb";

export const nodeStateText: Record<NodeState, string> = {
  [NodeState.UNSPECIFIED]: "unknown",
  [NodeState.ALIVE]: "up",
  [NodeState.FENCED]: "fenced",
  [NodeState.SHUTTING_DOWN]: "shutting down",
  [NodeState.DEAD]: "down",
};

export function HomePage() {
  return (
    <>
      <Overview />
      <TopicList />
    </>
  );
}

function Overview() {
  const { overview: o } = useCluster();
  if (!o) return <p aria-busy="true">Waiting for the cluster overview…</p>;
  const healthy = o.offlinePartitions === 0 && o.underReplicatedPartitions === 0 && o.nodes.every((n) => n.state === NodeState.ALIVE || (n.drained && n.state === NodeState.DEAD));
  return (
    <section data-testid="overview">
      <h2>
        Cluster <small className="muted">{o.clusterId}</small>{" "}
        <span className={healthy ? "badge good" : "badge bad"} data-testid="health">{healthy ? "healthy" : "degraded"}</span>
      </h2>
      <div className="grid figures">
        {o.controllers && <Figure label="Storage nodes up" value={`${o.nodes.filter((n) => n.state === NodeState.ALIVE).length} / ${o.nodes.length}`} />}
        <Figure label="Under-replicated partitions" value={num(o.underReplicatedPartitions)} bad={o.underReplicatedPartitions > 0} testid="under-replicated" />
        <Figure label="Offline partitions" value={num(o.offlinePartitions)} bad={o.offlinePartitions > 0} testid="offline" />
        <Figure label="Tiering lag (offsets)" value={num(o.tieringLagOffsets)} testid="tiering-lag" />
        <Figure label="Metadata version" value={String(o.metadataVersion)} />
      </div>
      {!o.controllers && <p className="muted" data-testid="no-cluster-access">Controllers and storage nodes are shown to users allowed to describe the cluster.</p>}
      {o.controllers && (
        <>
          <h3>Controllers</h3>
          <table className="striped" data-testid="controllers">
            <thead><tr><th>Id</th><th>Address</th><th>Role</th><th>Health</th></tr></thead>
            <tbody>
              {o.controllers.members.map((c) => (
                <tr key={c.controllerId}>
                  <td>{c.controllerId}</td>
                  <td>{c.address}</td>
                  <td>{c.active || c.controllerId === o.controllers!.activeControllerId ? <strong>active</strong> : "standby"}</td>
                  <td className={c.healthy ? "good" : "bad"}>{c.healthy ? "healthy" : "unhealthy"}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </>
      )}
      {o.nodes.length > 0 && (
        <>
          <h3>Storage nodes</h3>
          <table className="striped" data-testid="nodes">
            <thead><tr><th>Node</th><th>Address</th><th>Rack</th><th>State</th><th>Replicas</th><th>Leaders</th><th>Disk</th></tr></thead>
            <tbody>
              {o.nodes.map((n) => (
                <tr key={n.node?.nodeId} data-testid={`node-${n.node?.nodeId}`} data-state={nodeStateText[n.state]}>
                  <td>{n.node?.nodeId}</td>
                  <td>{n.node?.address}</td>
                  <td>{n.node?.rack || "–"}</td>
                  <td className={n.state === NodeState.ALIVE ? "good" : "bad"}>{nodeStateText[n.state]}{n.drained ? " (drained)" : ""}</td>
                  <td>{n.replicas}</td>
                  <td>{n.leaders}</td>
                  <td>{bytes(n.diskBytes)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </>
      )}
    </section>
  );
}

function Figure({ label, value, bad, testid }: { label: string; value: string; bad?: boolean; testid?: string }) {
  return (
    <article className={`figure ${bad ? "bad" : ""}`}>
      <small>{label}</small>
      <div className="big" data-testid={testid}>{value}</div>
    </article>
  );
}

function TopicList() {
  const { overview: o, rates } = useCluster();
  const [creating, setCreating] = useState(false);
  return (
    <section>
      <h2>
        Topics{" "}
        <button className="outline small" onClick={() => setCreating((c) => !c)} data-testid="new-topic">{creating ? "Close" : "Create topic"}</button>
      </h2>
      {creating && <CreateTopic onDone={() => setCreating(false)} />}
      {!o ? null : o.topics.length === 0 ? (
        <p className="muted">No topics yet.</p>
      ) : (
        <table className="striped" data-testid="topics">
          <thead><tr><th>Name</th><th>Partitions</th><th>RF</th><th>Local</th><th>Tiered</th><th>Messages</th><th>Throughput</th><th>Health</th></tr></thead>
          <tbody>
            {o.topics.map((t) => (
              <tr key={t.name} data-testid={`topic-${t.name}`}>
                <td><Link href={`/topics/${encodeURIComponent(t.name)}`}>{t.name}</Link></td>
                <td>{t.partitions}</td>
                <td>{t.replicationFactor}</td>
                <td>{bytes(t.localBytes)}</td>
                <td>{bytes(t.tieredBytes)}</td>
                <td>{num(t.endOffsets)}</td>
                <td>{rates[t.name] !== undefined ? `${rates[t.name]!.toFixed(1)} msg/s` : "–"}</td>
                <td className={t.offlinePartitions || t.underReplicatedPartitions ? "bad" : "good"}>
                  {t.offlinePartitions ? `${t.offlinePartitions} offline` : t.underReplicatedPartitions ? `${t.underReplicatedPartitions} under-replicated` : "ok"}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}

/** parseConfigs reads "key=value" lines. */
export function parseConfigs(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of text.split("\n")) {
    const t = line.trim();
    if (!t) continue;
    const i = t.indexOf("=");
    if (i <= 0) throw new Error(`"${t}" is not key=value`);
    out[t.slice(0, i).trim()] = t.slice(i + 1).trim();
  }
  return out;
}

function CreateTopic({ onDone }: { onDone: () => void }) {
  const [name, setName] = useState("");
  const [partitions, setPartitions] = useState("3");
  const [rf, setRf] = useState("3");
  const [configs, setConfigs] = useState("");
  const [error, setError] = useState<unknown>();
  const [busy, setBusy] = useState(false);
  const [, navigate] = useLocation();
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setBusy(true);
    setError(undefined);
    try {
      await gateway.createTopic({ name, partitions: Number(partitions), replicationFactor: Number(rf), configs: parseConfigs(configs) });
      onDone();
      navigate(`/topics/${encodeURIComponent(name)}`);
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  };
  return (
    <article>
      <form onSubmit={submit} data-testid="create-topic">
        <div className="grid">
          <label>Name<input required value={name} onChange={(e) => setName(e.target.value)} name="name" /></label>
          <label>Partitions<input type="number" min="1" value={partitions} onChange={(e) => setPartitions(e.target.value)} name="partitions" /></label>
          <label>Replication factor<input type="number" min="1" value={rf} onChange={(e) => setRf(e.target.value)} name="rf" /></label>
        </div>
        <label>Configuration overrides, one <code>key=value</code> a line
          <textarea rows={2} value={configs} onChange={(e) => setConfigs(e.target.value)} placeholder="retention.ms=86400000" name="configs" />
        </label>
        <button type="submit" aria-busy={busy} disabled={busy}>Create</button>
        <ErrorBox error={error} />
      </form>
    </article>
  );
}
