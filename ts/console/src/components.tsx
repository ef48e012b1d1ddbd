// Small building blocks shared by the pages.
import { useEffect, useRef, useState, type ReactNode } from "react";
import { errorText } from "./api";
import { hex, tryJSON } from "./format";

/** ErrorBox shows an error in words with the server's reason. */
export function ErrorBox({ error }: { error?: unknown }) {
  if (error === undefined || error === null || error === "") return null;
  return (
    <p className="error" role="alert" data-testid="error">
      {typeof error === "string" ? error : errorText(error)}
    </p>
  );
}

/** usePoll calls load now and every intervalMs while mounted (and when deps change). */
export function usePoll<T>(load: (signal: AbortSignal) => Promise<T>, intervalMs: number, deps: unknown[]): { data?: T; error?: string; loading: boolean; reload: () => void } {
  const [data, setData] = useState<T>();
  const [error, setError] = useState<string>();
  const [loading, setLoading] = useState(true);
  const [tick, setTick] = useState(0);
  useEffect(() => {
    const abort = new AbortController();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const run = async () => {
      try {
        const d = await load(abort.signal);
        if (abort.signal.aborted) return;
        setData(d);
        setError(undefined);
      } catch (e) {
        if (abort.signal.aborted) return;
        setError(errorText(e));
      } finally {
        if (!abort.signal.aborted) {
          setLoading(false);
          if (intervalMs > 0) timer = setTimeout(run, intervalMs);
        }
      }
    };
    void run();
    return () => {
      abort.abort();
      if (timer) clearTimeout(timer);
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [...deps, tick]);
  return { data, error, loading, reload: () => setTick((t) => t + 1) };
}

/** Confirm is a modal asking the user to type a word before a destructive action. */
export function Confirm({ title, word, children, onConfirm, onClose, busy }: {
  title: string;
  word: string;
  children?: ReactNode;
  onConfirm: () => void;
  onClose: () => void;
  busy?: boolean;
}) {
  const [typed, setTyped] = useState("");
  const ref = useRef<HTMLDialogElement>(null);
  useEffect(() => {
    ref.current?.showModal();
  }, []);
  return (
    <dialog ref={ref} onClose={onClose} data-testid="confirm">
      <article>
        <h3>{title}</h3>
        {children}
        <label>
          Type <code>{word}</code> to confirm
          <input value={typed} onChange={(e) => setTyped(e.target.value)} data-testid="confirm-input" autoFocus />
        </label>
        <footer>
          <button className="secondary" onClick={onClose}>Cancel</button>{" "}
          <button className="danger" disabled={typed !== word || busy} aria-busy={busy} onClick={onConfirm} data-testid="confirm-button">
            {title}
          </button>
        </footer>
      </article>
    </dialog>
  );
}

export type ValueFormat = "text" | "json" | "hex";

/** Value renders a key, value or header as text, JSON (pretty, collapsible) or hex. */
export function Value({ text, bytes, format }: { text?: string; bytes?: Uint8Array; format: ValueFormat }) {
  if (text === undefined && bytes === undefined) return <span className="muted">null</span>;
  if (format === "hex" || text === undefined) return <code className="hex">{hex(text ?? bytes!)}</code>;
  if (format === "json") {
    const j = tryJSON(text);
    if (j !== undefined) return <JSONView value={j} />;
  }
  return <span className="text">{text}</span>;
}

function JSONView({ value, name }: { value: unknown; name?: string }) {
  const label = name !== undefined ? <span className="json-key">{JSON.stringify(name)}: </span> : null;
  if (value !== null && typeof value === "object") {
    const entries = Array.isArray(value) ? value.map((v, i) => [String(i), v] as const) : Object.entries(value);
    const [open, close] = Array.isArray(value) ? ["[", "]"] : ["{", "}"];
    return (
      <details open className="json">
        <summary>
          {label}
          {open}
          <span className="muted"> {entries.length} </span>
          {close}
        </summary>
        <div className="json-body">
          {entries.map(([k, v]) => (
            <JSONView key={k} name={Array.isArray(value) ? undefined : k} value={v} />
          ))}
        </div>
      </details>
    );
  }
  return (
    <div className="json-leaf">
      {label}
      <span className={`json-${value === null ? "null" : typeof value}`}>{JSON.stringify(value)}</span>
    </div>
  );
}
