import "@picocss/pico/css/pico.min.css";
import "./style.css";
import { lazy, StrictMode, Suspense, useEffect, useState, type FormEvent } from "react";
import { createRoot } from "react-dom/client";
import { Link, Route, Router, Switch } from "wouter";
import { errorText, gateway, getToken, isUnauthenticated, setToken } from "./api";
import { ClusterProvider, useCluster } from "./cluster";
import { HomePage } from "./pages/home";
import { TopicPage } from "./pages/topic";
import { GroupsPage } from "./pages/groups";
// The group page carries the chart library; it loads when first opened.
const GroupPage = lazy(() => import("./pages/group").then((m) => ({ default: m.GroupPage })));

/** Auth asks who the gateway takes the page for; it asks for a token when the gateway wants one. */
function Auth() {
  const [who, setWho] = useState<string>();
  const [needToken, setNeedToken] = useState(false);
  const [error, setError] = useState<string>();
  const [draft, setDraft] = useState("");
  const check = async () => {
    try {
      const r = await gateway.whoAmI({});
      setWho(r.principal);
      setNeedToken(false);
      setError(undefined);
    } catch (e) {
      if (isUnauthenticated(e)) {
        setNeedToken(true);
        if (getToken()) setError(errorText(e));
      } else setError(errorText(e));
    }
  };
  useEffect(() => {
    void check();
  }, []);
  const submit = (e: FormEvent) => {
    e.preventDefault();
    setToken(draft.trim());
    void check();
  };
  if (needToken) {
    return (
      <main className="container">
        <article className="login">
          <h2>Sign in to Strata</h2>
          <p>This gateway requires authentication. Paste a bearer token (from <code>strata user create</code>).</p>
          <form onSubmit={submit}>
            <input type="password" placeholder="token" value={draft} onChange={(e) => setDraft(e.target.value)} data-testid="token" autoFocus />
            <button type="submit">Sign in</button>
          </form>
          {error && <p className="error">{error}</p>}
        </article>
      </main>
    );
  }
  if (!who) {
    return <main className="container">{error ? <p className="error">{error}</p> : <p aria-busy="true">Connecting to the gateway…</p>}</main>;
  }
  return (
    <ClusterProvider>
      <Shell who={who} signOut={getToken() ? () => { setToken(""); setWho(undefined); void check(); } : undefined} />
    </ClusterProvider>
  );
}

function Shell({ who, signOut }: { who: string; signOut?: () => void }) {
  const { error, overview } = useCluster();
  return (
    <>
      <header className="container-fluid topbar">
        <nav>
          <ul>
            <li><Link href="/" className="brand">Strata Console</Link></li>
            <li><Link href="/">Overview</Link></li>
            <li><Link href="/groups">Consumer groups</Link></li>
          </ul>
          <ul>
            <li className="muted" data-testid="live">
              {error ? <span className="bad">stream down: {error}</span> : overview ? <span className="good">● live</span> : "connecting…"}
            </li>
            <li className="muted">{who}</li>
            {signOut && <li><a href="#" onClick={(e) => { e.preventDefault(); signOut(); }}>Sign out</a></li>}
          </ul>
        </nav>
      </header>
      <main className="container-fluid">
        <Switch>
          <Route path="/" component={HomePage} />
          <Route path="/topics/:name/:tab?">{(p) => <TopicPage name={decodeURIComponent(p.name)} tab={p.tab ?? "partitions"} />}</Route>
          <Route path="/groups" component={GroupsPage} />
          <Route path="/groups/:id">{(p) => <Suspense fallback={<p aria-busy="true">Loading…</p>}><GroupPage id={decodeURIComponent(p.id)} /></Suspense>}</Route>
          <Route><p>Nothing here. <Link href="/">Back to the overview</Link></p></Route>
        </Switch>
      </main>
    </>
  );
}

createRoot(document.getElementById("root")!).render(
  <StrictMode>
    <Router base="/console">
      <Auth />
    </Router>
  </StrictMode>,
);
