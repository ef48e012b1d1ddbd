// Browsing one partition (from the start, the end, an offset or a time),
// following it live, searching the loaded window, and producing. Records
// are read committed (Kafka's read_committed, as `strata consume` reads by
// default) unless the user switches to uncommitted ones too.
import { useEffect, useMemo, useRef, useState, type FormEvent } from "react";
import { errorText, gateway, isAborted } from "../api";
import { IsolationLevel } from "../gen/strata/common/v1/common_pb";
import { ErrorBox, Value, type ValueFormat } from "../components";
import { num, time } from "../format";
import type { JSONFetchedRecord, JSONHeader } from "../gen/strata/gateway/v1/gateway_pb";

const pageSize = 100;
const windowLimit = 1000;

type From = "start" | "end" | "offset" | "timestamp";

function headerText(h: JSONHeader): string {
  const v = h.valueData;
  return v.case === "value" ? v.value : v.case === "valueBytes" ? `(${v.value.length} bytes)` : "null";
}

function recordMatches(r: JSONFetchedRecord, q: string): boolean {
  const parts = [r.keyData.case === "key" ? r.keyData.value : "", r.valueData.case === "value" ? r.valueData.value : "", ...r.headers.map((h) => `${h.key}=${headerText(h)}`), String(r.offset)];
  return parts.some((p) => p.toLowerCase().includes(q));
}

export function Messages({ topic, partitions }: { topic: string; partitions: number }) {
  const [partition, setPartition] = useState(0);
  const [from, setFrom] = useState<From>("end");
  const [offset, setOffset] = useState("0");
  const [ts, setTs] = useState("");
  const [format, setFormat] = useState<ValueFormat>("text");
  const [search, setSearch] = useState("");
  const [records, setRecords] = useState<JSONFetchedRecord[]>([]);
  const [next, setNext] = useState<bigint>();
  const [hw, setHw] = useState<bigint>();
  const [error, setError] = useState<string>();
  const [busy, setBusy] = useState(false);
  const [tail, setTail] = useState(false);
  // Off: read_committed, each partition up to its last stable offset and
  // without aborted transactions' records. On: read_uncommitted, every
  // record up to the high watermark.
  const [uncommitted, setUncommitted] = useState(false);
  const isolationLevel = uncommitted ? IsolationLevel.READ_UNCOMMITTED : IsolationLevel.READ_COMMITTED;
  const nextRef = useRef<bigint | undefined>(undefined);
  nextRef.current = next;
  // Each load takes a number; an answer to an older one (a partition
  // switched, Load clicked again) is dropped, never shown over a newer one.
  const loadSeq = useRef(0);

  const fetchFrom = async (start: bigint, signal?: AbortSignal) => {
    let at = start;
    const got: JSONFetchedRecord[] = [];
    let high = 0n;
    for (let i = 0; i < 5 && got.length < pageSize; i++) {
      const r = await gateway.fetchJSON({ topic, partition, offset: at, maxRecords: pageSize - got.length, maxWaitMs: 0, isolationLevel }, { signal });
      got.push(...r.records);
      high = r.highWatermark;
      at = r.nextOffset;
      if (r.records.length === 0 || at >= high) break;
    }
    return { got, next: at, high };
  };

  const load = async (e?: FormEvent) => {
    e?.preventDefault();
    const my = ++loadSeq.current;
    setBusy(true);
    setError(undefined);
    try {
      let start: bigint;
      if (from === "start") start = -2n;
      else if (from === "end") {
        const r = await gateway.fetchJSON({ topic, partition, offset: -2n, maxRecords: 1, maxWaitMs: 0, isolationLevel });
        start = r.highWatermark - BigInt(pageSize);
        if (start < r.logStartOffset) start = r.logStartOffset;
      } else if (from === "offset") start = BigInt(offset || "0");
      else {
        const ms = ts ? new Date(ts).getTime() : NaN;
        if (Number.isNaN(ms)) throw new Error("choose a date and time to start from");
        start = (await gateway.offsetForTimestamp({ topic, partition, timestampMs: BigInt(ms) })).offset;
      }
      const r = await fetchFrom(start);
      if (my !== loadSeq.current) return;
      setRecords(r.got);
      setNext(r.next);
      setHw(r.high);
    } catch (err) {
      if (my === loadSeq.current) setError(errorText(err));
    } finally {
      if (my === loadSeq.current) setBusy(false);
    }
  };

  const more = async () => {
    if (next === undefined) return;
    const my = ++loadSeq.current;
    setBusy(true);
    try {
      const r = await fetchFrom(next);
      if (my !== loadSeq.current) return;
      setRecords((old) => [...old, ...r.got].slice(-windowLimit));
      setNext(r.next);
      setHw(r.high);
    } catch (err) {
      if (my === loadSeq.current) setError(errorText(err));
    } finally {
      if (my === loadSeq.current) setBusy(false);
    }
  };

  // Load the end of partition 0 when the tab opens, and the window again
  // when the partition or the isolation level changes.
  useEffect(() => {
    void load();
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [topic, partition, isolationLevel]);

  // Live tail: long-poll from the end of the window for as long as it is on.
  useEffect(() => {
    if (!tail) return;
    const abort = new AbortController();
    void (async () => {
      while (!abort.signal.aborted) {
        try {
          const at = nextRef.current ?? -1n;
          const r = await gateway.fetchJSON({ topic, partition, offset: at, maxRecords: 500, maxWaitMs: 5000, isolationLevel }, { signal: abort.signal });
          if (abort.signal.aborted) return;
          if (r.records.length) setRecords((old) => [...old, ...r.records].slice(-windowLimit));
          setNext(r.nextOffset);
          nextRef.current = r.nextOffset;
          setHw(r.highWatermark);
          setError(undefined);
        } catch (err) {
          if (isAborted(err) || abort.signal.aborted) return;
          setError(errorText(err));
          await new Promise((res) => setTimeout(res, 1000));
        }
      }
    })();
    return () => abort.abort();
  }, [tail, topic, partition, isolationLevel]);

  const q = search.trim().toLowerCase();
  const shown = useMemo(() => (q ? records.filter((r) => recordMatches(r, q)) : records), [records, q]);

  return (
    <div data-testid="messages">
      <form onSubmit={load} className="browse">
        <div className="grid">
          <label>Partition
            <select value={partition} onChange={(e) => setPartition(Number(e.target.value))} data-testid="browse-partition">
              {Array.from({ length: partitions }, (_, i) => <option key={i} value={i}>{i}</option>)}
            </select>
          </label>
          <label>From
            <select value={from} onChange={(e) => setFrom(e.target.value as From)} data-testid="browse-from">
              <option value="start">the start</option>
              <option value="end">the end (last {pageSize})</option>
              <option value="offset">an offset</option>
              <option value="timestamp">a time</option>
            </select>
          </label>
          {from === "offset" && <label>Offset<input type="number" min="0" value={offset} onChange={(e) => setOffset(e.target.value)} data-testid="browse-offset" /></label>}
          {from === "timestamp" && <label>Time<input type="datetime-local" step="1" value={ts} onChange={(e) => setTs(e.target.value)} data-testid="browse-time" /></label>}
          <label>Show as
            <select value={format} onChange={(e) => setFormat(e.target.value as ValueFormat)} data-testid="browse-format">
              <option value="text">text</option>
              <option value="json">JSON</option>
              <option value="hex">hex</option>
            </select>
          </label>
        </div>
        <div className="row">
          <button type="submit" aria-busy={busy} disabled={busy} data-testid="browse-load">Load</button>
          <label className="inline"><input type="checkbox" role="switch" checked={tail} onChange={(e) => setTail(e.target.checked)} data-testid="browse-tail" /> Live tail</label>
          <label className="inline" title="Off: committed records only, as a read_committed consumer reads them. On: every record up to the high watermark, those of open and aborted transactions too.">
            <input type="checkbox" role="switch" checked={uncommitted} onChange={(e) => setUncommitted(e.target.checked)} data-testid="browse-uncommitted" /> Uncommitted records
          </label>
          <input type="search" placeholder="Search the loaded messages" value={search} onChange={(e) => setSearch(e.target.value)} data-testid="browse-search" />
        </div>
      </form>
      <ErrorBox error={error} />
      <p className="muted" data-testid="browse-status">
        {shown.length} of {records.length} loaded messages shown{hw !== undefined ? `; high watermark ${num(hw)}` : ""}
        {uncommitted ? "; uncommitted records included" : "; committed records only"}{tail ? "; following new messages" : ""}
      </p>
      <table className="striped records" data-testid="records">
        <thead><tr><th>Offset</th><th>Time (UTC)</th><th>Key</th><th>Value</th><th>Headers</th></tr></thead>
        <tbody>
          {shown.map((r) => (
            <tr key={String(r.offset)} data-testid={`record-${r.offset}`}>
              <td>{String(r.offset)}</td>
              <td className="nowrap">{time(r.timestampMs)}</td>
              <td><Value text={r.keyData.case === "key" ? r.keyData.value : undefined} bytes={r.keyData.case === "keyBytes" ? r.keyData.value : undefined} format={format} /></td>
              <td className="value"><Value text={r.valueData.case === "value" ? r.valueData.value : undefined} bytes={r.valueData.case === "valueBytes" ? r.valueData.value : undefined} format={format} /></td>
              <td>{r.headers.map((h, i) => <div key={i}><code>{h.key}</code>: {headerText(h)}</div>)}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {next !== undefined && hw !== undefined && next < hw && !tail && <button className="outline" onClick={() => void more()} disabled={busy}>Load more</button>}
      <Produce topic={topic} partitions={partitions} />
    </div>
  );
}

function Produce({ topic, partitions }: { topic: string; partitions: number }) {
  const [key, setKey] = useState("");
  const [value, setValue] = useState("");
  const [headers, setHeaders] = useState("");
  const [partition, setPartition] = useState("auto");
  const [result, setResult] = useState<{ partition: number; offset: bigint }>();
  const [error, setError] = useState<string>();
  const [busy, setBusy] = useState(false);
  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setBusy(true);
    setError(undefined);
    setResult(undefined);
    try {
      const hs = headers.split("\n").filter((l) => l.trim()).map((l) => {
        const i = l.indexOf("=");
        if (i <= 0) throw new Error(`header "${l.trim()}" is not key=value`);
        return { key: l.slice(0, i).trim(), valueData: { case: "value" as const, value: l.slice(i + 1) } };
      });
      const r = await gateway.produceJSON({
        topic,
        records: [{
          partition: partition === "auto" ? undefined : Number(partition),
          keyData: key ? { case: "key", value: key } : { case: undefined },
          valueData: { case: "value", value },
          headers: hs,
        }],
      });
      const res = r.results[0]!;
      if (res.error) throw new Error(res.error.message);
      setResult({ partition: res.partition, offset: res.offset });
    } catch (err) {
      setError(errorText(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <article>
      <h3>Produce a message</h3>
      <form onSubmit={submit} data-testid="produce">
        <div className="grid">
          <label>Key<input value={key} onChange={(e) => setKey(e.target.value)} placeholder="none" data-testid="produce-key" /></label>
          <label>Partition
            <select value={partition} onChange={(e) => setPartition(e.target.value)} data-testid="produce-partition">
              <option value="auto">by key</option>
              {Array.from({ length: partitions }, (_, i) => <option key={i} value={i}>{i}</option>)}
            </select>
          </label>
        </div>
        <label>Value<textarea rows={3} value={value} onChange={(e) => setValue(e.target.value)} data-testid="produce-value" /></label>
        <label>Headers, one <code>key=value</code> a line<textarea rows={2} value={headers} onChange={(e) => setHeaders(e.target.value)} data-testid="produce-headers" /></label>
        <button type="submit" aria-busy={busy} disabled={busy} data-testid="produce-send">Produce</button>
        {result && (
          <p className="good" data-testid="produce-result" data-partition={result.partition} data-offset={String(result.offset)}>
            Written to partition {result.partition} at offset {String(result.offset)}.
          </p>
        )}
        <ErrorBox error={error} />
      </form>
    </article>
  );
}
