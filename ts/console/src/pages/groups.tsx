// Consumer groups with their state and total lag.
import { Link } from "wouter";
import { gateway } from "../api";
import { ErrorBox, usePoll } from "../components";
import { num } from "../format";
import { GroupState } from "../gen/strata/coordinator/v1/coordinator_pb";

export const groupStateText: Record<GroupState, string> = {
  [GroupState.UNSPECIFIED]: "unknown",
  [GroupState.EMPTY]: "empty",
  [GroupState.RECONCILING]: "reconciling",
  [GroupState.STABLE]: "stable",
  [GroupState.DEAD]: "dead",
};

export function GroupsPage() {
  const { data, error, loading } = usePoll((signal) => gateway.listGroups({ includeLag: true }, { signal }), 2000, []);
  return (
    <section>
      <h2>Consumer groups</h2>
      <ErrorBox error={error} />
      {loading && <p aria-busy="true">Loading…</p>}
      {data && data.groups.length === 0 && <p className="muted">No consumer groups yet.</p>}
      {data && data.groups.length > 0 && (
        <table className="striped" data-testid="groups">
          <thead><tr><th>Group</th><th>State</th><th>Members</th><th>Total lag</th></tr></thead>
          <tbody>
            {data.groups.map((g, i) => {
              const lag = data.lags[i];
              return (
                <tr key={g.groupId} data-testid={`group-${g.groupId}`}>
                  <td><Link href={`/groups/${encodeURIComponent(g.groupId)}`}>{g.groupId}</Link></td>
                  <td>{groupStateText[g.state]}</td>
                  <td>{g.memberCount}</td>
                  <td data-testid={`group-lag-${g.groupId}`} data-lag={lag && !lag.error ? String(lag.totalLag) : ""}>
                    {lag?.error ? <span className="bad">{lag.error.message}</span> : lag ? `${num(lag.totalLag)}${lag.unknownPartitions ? ` (${lag.unknownPartitions} partitions unknown)` : ""}` : "–"}
                  </td>
                </tr>
              );
            })}
          </tbody>
        </table>
      )}
    </section>
  );
}
