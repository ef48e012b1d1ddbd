// The live overview: one WatchCluster stream per page, reopened with
// backoff when it breaks, shared by every component through a context.
import { createContext, useContext, useEffect, useRef, useState, type ReactNode } from "react";
import type { WatchClusterResponse } from "./gen/strata/gateway/v1/gateway_pb";
import { errorText, gateway, isAborted } from "./api";

export interface ClusterState {
  overview?: WatchClusterResponse;
  /** Messages per second of each topic, from the change of its end offsets between updates. */
  rates: Record<string, number>;
  /** Why the stream is down; undefined while it is up. */
  error?: string;
  updatedAt?: number;
}

const Ctx = createContext<ClusterState>({ rates: {} });

export function useCluster(): ClusterState {
  return useContext(Ctx);
}

export function ClusterProvider({ children }: { children: ReactNode }) {
  const [state, setState] = useState<ClusterState>({ rates: {} });
  const prev = useRef<{ at: number; ends: Record<string, number> } | undefined>(undefined);
  useEffect(() => {
    const abort = new AbortController();
    void (async () => {
      let wait = 250;
      while (!abort.signal.aborted) {
        try {
          for await (const msg of gateway.watchCluster({}, { signal: abort.signal })) {
            wait = 250;
            const at = Number(msg.sampledAtMs) || Date.now();
            const ends: Record<string, number> = {};
            const rates: Record<string, number> = {};
            for (const t of msg.topics) {
              ends[t.name] = Number(t.endOffsets);
              const p = prev.current;
              if (p && p.ends[t.name] !== undefined && at > p.at) {
                rates[t.name] = Math.max(0, ((ends[t.name]! - p.ends[t.name]!) * 1000) / (at - p.at));
              }
            }
            if (!prev.current || at > prev.current.at) prev.current = { at, ends };
            setState((s) => ({ overview: msg, rates: { ...s.rates, ...rates }, updatedAt: Date.now() }));
          }
          // The server ended the stream (it is draining): reconnect.
        } catch (e) {
          if (isAborted(e) || abort.signal.aborted) return;
          setState((s) => ({ ...s, error: errorText(e) }));
        }
        await new Promise((r) => setTimeout(r, wait));
        wait = Math.min(wait * 2, 5000);
      }
    })();
    return () => abort.abort();
  }, []);
  return <Ctx.Provider value={state}>{children}</Ctx.Provider>;
}
