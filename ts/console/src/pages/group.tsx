// One consumer group: members, assignment, committed and end offsets, lag
// per partition with a chart of the total over the last minutes, and an
// offset reset (dry run first) while the group is empty.
import { useEffect, useRef, useState, type FormEvent } from "react";
import { Link } from "wouter";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import { errorText, gateway } from "../api";
import { ErrorBox, usePoll } from "../components";
import { num } from "../format";
import { GroupState, ResetSpec, type ResetOffsetsPartitionResult } from "../gen/strata/coordinator/v1/coordinator_pb";
import { groupStateText } from "./groups";

const chartWindowMs = 10 * 60 * 1000;

export function GroupPage({ id }: { id: string }) {
  const samples = useRef<{ t: number[]; lag: number[] }>({ t: [], lag: [] });
  const { data, error, reload } = usePoll(
    async (signal) => {
      const r = await gateway.describeGroup({ groupId: id }, { signal });
      const g = r.group!;
      const total = g.partitions.reduce((s, p) => s + (p.lag > 0n ? Number(p.lag) : 0), 0);
      const now = Date.now();
      const s = samples.current;
      s.t.push(now / 1000);
      s.lag.push(total);
      while (s.t.length && s.t[0]! < (now - chartWindowMs) / 1000) {
        s.t.shift();
        s.lag.shift();
      }
      return { g, total };
    },
    2000,
    [id],
  );
  const g = data?.g;
  return (
    <section data-testid="group-page">
      <nav aria-label="breadcrumb"><ul><li><Link href="/groups">Consumer groups</Link></li><li>{id}</li></ul></nav>
      <h2>{id} {g && <span className="badge">{groupStateText[g.state]}</span>}</h2>
      <ErrorBox error={error} />
      {g && (
        <>
          <div className="grid figures">
            <article className="figure"><small>Total lag</small><div className="big" data-testid="group-total-lag">{num(data!.total)}</div></article>
            <article className="figure"><small>Members</small><div className="big">{g.members.length}</div></article>
            <article className="figure"><small>Group epoch</small><div className="big">{g.groupEpoch}</div></article>
            <article className="figure"><small>Coordinator</small><div className="big small-text">{g.coordinatorId}</div></article>
          </div>
          <LagChart samples={samples.current} version={data!.total + samples.current.t.length} />
          <h3>Members</h3>
          {g.members.length === 0 ? <p className="muted">No live members.</p> : (
            <table className="striped" data-testid="members">
              <thead><tr><th>Member</th><th>Client</th><th>Host</th><th>Assigned partitions</th></tr></thead>
              <tbody>
                {g.members.map((m) => (
                  <tr key={m.memberId}>
                    <td><code>{m.memberId}</code>{m.instanceId && <> ({m.instanceId})</>}</td>
                    <td>{m.clientId}</td>
                    <td>{m.clientHost}</td>
                    <td>{(m.assignment?.partitions ?? []).map((tp) => `${tp.topic}: ${tp.partitions.join(", ")}`).join("; ") || "–"}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          )}
          <h3>Partitions</h3>
          <table className="striped" data-testid="group-partitions">
            <thead><tr><th>Topic</th><th>Partition</th><th>Member</th><th>Committed</th><th>End</th><th>Lag</th></tr></thead>
            <tbody>
              {g.partitions.map((p) => (
                <tr key={`${p.topic}/${p.partition}`}>
                  <td><Link href={`/topics/${encodeURIComponent(p.topic)}`}>{p.topic}</Link></td>
                  <td>{p.partition}</td>
                  <td>{p.memberId ? <code>{p.memberId.slice(0, 12)}</code> : <span className="muted">unassigned</span>}</td>
                  <td>{p.committedOffset < 0n ? "–" : num(p.committedOffset)}</td>
                  <td>{p.logEndOffset < 0n ? "unknown" : num(p.logEndOffset)}</td>
                  <td className={p.lag > 0n ? "warn" : ""}>{p.lag < 0n ? "unknown" : num(p.lag)}</td>
                </tr>
              ))}
            </tbody>
          </table>
          <Reset id={id} empty={g.state === GroupState.EMPTY} topics={[...new Set(g.partitions.map((p) => p.topic))]} onDone={reload} />
        </>
      )}
    </section>
  );
}

function LagChart({ samples, version }: { samples: { t: number[]; lag: number[] }; version: number }) {
  const el = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | undefined>(undefined);
  useEffect(() => {
    if (!el.current) return;
    plot.current = new uPlot(
      {
        width: Math.min(900, el.current.clientWidth || 600),
        height: 160,
        legend: { show: false },
        scales: { y: { range: (_u, _min, max) => [0, Math.max(1, max * 1.1)] } },
        series: [{}, { label: "lag", stroke: "#1971c2", fill: "rgba(25,113,194,0.1)", width: 2 }],
        axes: [{}, { size: 60 }],
      },
      [samples.t, samples.lag],
      el.current,
    );
    return () => plot.current?.destroy();
  }, [samples]);
  useEffect(() => {
    plot.current?.setData([samples.t, samples.lag]);
  }, [version, samples]);
  return (
    <figure>
      <div ref={el} data-testid="lag-chart" />
      <figcaption className="muted">Total lag over the last minutes (since this page opened), every 2 seconds.</figcaption>
    </figure>
  );
}

function Reset({ id, empty, topics, onDone }: { id: string; empty: boolean; topics: string[]; onDone: () => void }) {
  const [topic, setTopic] = useState("");
  const [spec, setSpec] = useState<ResetSpec>(ResetSpec.EARLIEST);
  const [offset, setOffset] = useState("0");
  const [ts, setTs] = useState("");
  const [plan, setPlan] = useState<ResetOffsetsPartitionResult[]>();
  const [applied, setApplied] = useState(false);
  const [error, setError] = useState<string>();
  const [busy, setBusy] = useState(false);
  useEffect(() => setPlan(undefined), [topic, spec, offset, ts]);
  const run = async (dryRun: boolean) => {
    setBusy(true);
    setError(undefined);
    setApplied(false);
    try {
      const timestampMs = spec === ResetSpec.TIMESTAMP ? BigInt(new Date(ts).getTime() || 0) : 0n;
      const r = await gateway.resetOffsets({
        groupId: id,
        topics: (topic ? [topic] : topics).map((t) => ({ topic: t, partitions: [] })),
        spec,
        offset: spec === ResetSpec.OFFSET ? BigInt(offset || "0") : 0n,
        timestampMs,
        dryRun,
      });
      setPlan(r.partitions);
      if (!dryRun) {
        setApplied(true);
        onDone();
      }
    } catch (e) {
      setError(errorText(e));
    } finally {
      setBusy(false);
    }
  };
  const submit = (e: FormEvent) => {
    e.preventDefault();
    void run(true);
  };
  return (
    <article>
      <h3>Reset offsets</h3>
      {!empty ? (
        <p className="muted">Offsets can be reset only while the group is empty: stop its consumers first.</p>
      ) : (
        <form onSubmit={submit} data-testid="reset">
          <div className="grid">
            <label>Topic
              <select value={topic} onChange={(e) => setTopic(e.target.value)}>
                <option value="">every subscribed topic</option>
                {topics.map((t) => <option key={t} value={t}>{t}</option>)}
              </select>
            </label>
            <label>To
              <select value={spec} onChange={(e) => setSpec(Number(e.target.value) as ResetSpec)} data-testid="reset-spec">
                <option value={ResetSpec.EARLIEST}>the earliest offset</option>
                <option value={ResetSpec.LATEST}>the latest offset</option>
                <option value={ResetSpec.TIMESTAMP}>a time</option>
                <option value={ResetSpec.OFFSET}>an offset</option>
              </select>
            </label>
            {spec === ResetSpec.OFFSET && <label>Offset<input type="number" min="0" value={offset} onChange={(e) => setOffset(e.target.value)} /></label>}
            {spec === ResetSpec.TIMESTAMP && <label>Time<input type="datetime-local" step="1" value={ts} onChange={(e) => setTs(e.target.value)} /></label>}
          </div>
          <button type="submit" className="outline" aria-busy={busy} disabled={busy} data-testid="reset-dry-run">Dry run</button>{" "}
          <button type="button" className="danger" disabled={!plan || busy || applied} onClick={() => void run(false)} data-testid="reset-apply">Apply</button>
          {plan && (
            <table className="striped" data-testid="reset-plan">
              <thead><tr><th>Topic</th><th>Partition</th><th>Committed now</th><th>{applied ? "Committed after" : "Would become"}</th></tr></thead>
              <tbody>
                {plan.map((p) => (
                  <tr key={`${p.topic}/${p.partition}`}>
                    <td>{p.topic}</td><td>{p.partition}</td>
                    <td>{p.previousOffset < 0n ? "–" : num(p.previousOffset)}</td>
                    <td>{p.error ? <span className="bad">{p.error.message}</span> : num(p.newOffset)}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          )}
          {applied && <p className="good">Offsets reset.</p>}
        </form>
      )}
      <ErrorBox error={error} />
    </article>
  );
}
