// The console in a real browser (Debian's headless Chromium through
// playwright-core) against a real strata dev cluster: the first page reads
// the live cluster, a topic created and a message produced from the forms
// is found in the message browser at its offset, a group's lag appears and
// falls to 0 after a CLI consume, and a killed storage node shows as down
// with its partitions under-replicated, then recovers. Every page is saved
// as a screenshot under tests/console/screenshots/ (not committed).
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { BinaryReader } from "@bufbuild/protobuf/wire";
import { chromium, type Browser, type Page, type Request } from "playwright-core";
import { DevCluster, repoRoot, waitFor } from "./cluster.js";

const chromiumPath = process.env.STRATA_CHROMIUM ?? "/usr/bin/chromium";
const shots = join(repoRoot, "tests", "console", "screenshots");

let cluster: DevCluster;
let browser: Browser;
let page: Page;
const pageErrors: string[] = [];

async function shot(name: string): Promise<void> {
  await page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
}

before(async () => {
  if (!existsSync(chromiumPath)) throw new Error(`${chromiumPath} is missing: install Debian's chromium (apt-get install -y chromium)`);
  mkdirSync(shots, { recursive: true });
  [cluster, browser] = await Promise.all([
    DevCluster.start(3),
    chromium.launch({
      executablePath: chromiumPath,
      headless: true,
      args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
    }),
  ]);
  page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  page.setDefaultTimeout(30_000);
  page.on("pageerror", (e) => pageErrors.push(String(e)));
});

after(async () => {
  await browser?.close();
  await cluster?.stop();
  assert.deepEqual(pageErrors, [], "the page threw");
});

test("strata dev prints the console URL", () => {
  assert.match(cluster.logs(), new RegExp(`console +${cluster.gateway.replace(/[.]/g, "\\.")}/console/\n`));
});

test("the first page shows the overview and the topics by name without a click", async () => {
  cluster.strata(["topic", "create", "preexisting", "-p", "2", "-r", "3"]);
  await page.goto(`${cluster.gateway}/console/`);
  await page.getByTestId("topic-preexisting").waitFor();
  for (const id of [1, 2, 3]) assert.equal(await page.getByTestId(`node-${id}`).getAttribute("data-state"), "up");
  assert.match(await page.getByTestId("controllers").innerText(), /active/);
  assert.equal(await page.getByTestId("under-replicated").innerText(), "0");
  await shot("overview");
});

test("a topic created and a message produced from the forms is in the message browser at its offset", async () => {
  await page.goto(`${cluster.gateway}/console/`);
  await page.getByTestId("new-topic").click();
  const form = page.getByTestId("create-topic");
  await form.locator("input[name=name]").fill("payments");
  await form.locator("input[name=partitions]").fill("3");
  await form.locator("input[name=rf]").fill("3");
  await form.locator("textarea[name=configs]").fill("retention.ms=86400000");
  await form.locator("button[type=submit]").click();
  await page.getByTestId("topic-page").waitFor();
  await page.getByTestId("partition-2").waitFor();
  // Some history first, so the produced message is not at offset 0.
  cluster.strata(["produce", "payments", "-p", "1"], "a\nb\nc\n");
  await page.getByTestId("tab-messages").click();
  await page.getByTestId("produce-key").fill("order-17");
  await page.getByTestId("produce-value").fill('{"amount": 42, "currency": "EUR"}');
  await page.getByTestId("produce-headers").fill("source=console");
  await page.getByTestId("produce-partition").selectOption("1");
  await page.getByTestId("produce-send").click();
  const result = page.getByTestId("produce-result");
  await result.waitFor();
  assert.equal(await result.getAttribute("data-partition"), "1");
  const offset = await result.getAttribute("data-offset");
  assert.equal(offset, "3");

  await page.getByTestId("browse-partition").selectOption("1");
  await page.getByTestId("browse-from").selectOption("offset");
  await page.getByTestId("browse-offset").fill(offset!);
  await page.getByTestId("browse-load").click();
  // Choosing partition 1 loaded its end, offsets 0 to 3, so the row of
  // offset 3 may be on the page before this load answers: wait for the
  // table to start at the offset asked for.
  await waitFor(`the load from offset ${offset}`, async () =>
    (await page.getByTestId("records").locator("tbody tr").first().getAttribute("data-testid")) === `record-${offset}`);
  const row = page.getByTestId(`record-${offset}`);
  const text = await row.innerText();
  assert.match(text, /order-17/);
  assert.match(text, /"amount": 42/);
  assert.match(text, /source/);
  await page.getByTestId("browse-format").selectOption("json");
  await page.getByTestId(`record-${offset}`).locator("details.json").first().waitFor();

  // From a time an hour back: the whole partition, which search narrows
  // to the one message.
  const hourAgo = new Date(Date.now() - 3600_000);
  // Whole seconds other than 0: Chromium shows hh:mm:00 as hh:mm, and
  // Playwright then takes the filled value for malformed.
  hourAgo.setSeconds(30, 0);
  const local = new Date(hourAgo.getTime() - hourAgo.getTimezoneOffset() * 60_000).toISOString().slice(0, 19);
  await page.getByTestId("browse-from").selectOption("timestamp");
  await page.getByTestId("browse-time").fill(local);
  await page.getByTestId("browse-load").click();
  await page.getByTestId("record-0").waitFor();
  assert.equal(await page.getByTestId("records").locator("tbody tr").count(), 4);
  await page.getByTestId("browse-search").fill("order-17");
  await waitFor("search to leave one message", async () => (await page.getByTestId("records").locator("tbody tr").count()) === 1);
  await page.getByTestId("browse-search").fill("");

  // Live tail: a message produced with the CLI appears without a click.
  await page.getByTestId("browse-tail").check();
  cluster.strata(["produce", "payments", "-p", "1"], "tailed\n");
  await page.getByTestId("record-4").waitFor();
  assert.match(await page.getByTestId("record-4").innerText(), /tailed/);
  await page.getByTestId("browse-tail").uncheck();
  await shot("messages");

  cluster.strata(["produce", "payments", "-p", "0"], "x\ny\n");
  cluster.strata(["produce", "payments", "-p", "2"], "z\n");
  // The partitions tab shows the new high watermark.
  await page.goto(`${cluster.gateway}/console/topics/payments`);
  await waitFor("partition 1's high watermark of 5", async () => (await page.getByTestId("hw-1").innerText()) === "5");
  await shot("topic");
});

/** isolationOf reads FetchJSONRequest.isolation_level (field 7; 0 when unset) from a call's binary body. */
function isolationOf(req: Request): number {
  const r = new BinaryReader(req.postDataBuffer() ?? new Uint8Array());
  while (r.pos < r.len) {
    const [field, wire] = r.tag();
    if (field === 7) return r.int32();
    r.skip(wire, field);
  }
  return 0;
}

test("the message browser reads committed records unless switched to uncommitted ones", async () => {
  // IsolationLevel: 1 read_uncommitted, 2 read_committed.
  const levels: number[] = [];
  const onRequest = (req: Request) => {
    if (req.url().endsWith("/strata.gateway.v1.GatewayService/FetchJSON")) levels.push(isolationOf(req));
  };
  page.on("request", onRequest);
  try {
    cluster.strata(["topic", "create", "isolation", "-p", "1", "-r", "3"]);
    cluster.strata(["produce", "isolation", "-p", "0"], "one\ntwo\nthree\n");
    await page.goto(`${cluster.gateway}/console/topics/isolation/messages`);
    await page.getByTestId("record-2").waitFor();
    const status = page.getByTestId("browse-status");
    assert.equal(await page.getByTestId("browse-uncommitted").isChecked(), false);
    assert.match(await status.innerText(), /committed records only/);
    assert.ok(levels.length > 0 && !levels.some((l) => l !== 2), `read_committed by default, got ${levels}`);

    // Switched on, the window is loaded again to the high watermark. No
    // producer can write a transaction yet, so the records are the same.
    levels.length = 0;
    await page.getByTestId("browse-uncommitted").check();
    await waitFor("a read_uncommitted load", () => levels.includes(1));
    await waitFor("the status to say so", async () => /uncommitted records included/.test(await status.innerText()));
    await page.getByTestId("record-2").waitFor();
    assert.equal(await page.getByTestId("records").locator("tbody tr").count(), 3);
    assert.ok(!levels.some((l) => l !== 1), `read_uncommitted once switched, got ${levels}`);

    levels.length = 0;
    await page.getByTestId("browse-uncommitted").uncheck();
    await waitFor("a read_committed load", () => levels.includes(2));
    await waitFor("the status to say so", async () => /committed records only/.test(await status.innerText()));
    await shot("messages-isolation");
  } finally {
    page.off("request", onRequest);
  }
});

test("a topic's configuration is changed and reset, and the topic deleted after confirmation", async () => {
  cluster.strata(["topic", "create", "scratch", "-p", "1", "-r", "3"]);
  await page.goto(`${cluster.gateway}/console/topics/scratch/config`);
  const row = page.getByTestId("config-retention.ms");
  await row.waitFor();
  assert.match(await row.innerText(), /default/);
  await page.getByTestId("alter-config").locator("textarea").fill("retention.ms=3600000");
  await page.getByTestId("alter-config").locator("button[type=submit]").click();
  await waitFor("retention.ms overridden", async () => /3600000\s+topic override/.test(await row.innerText()));
  assert.match(cluster.strata(["topic", "describe", "scratch", "--output", "json"]), /3600000/);
  await row.getByText("reset to default").click();
  await waitFor("retention.ms back to its default", async () => /604800000\s+default/.test(await row.innerText()));

  await page.getByTestId("delete-topic").click();
  await page.getByTestId("confirm").waitFor();
  assert.equal(await page.getByTestId("confirm-button").isDisabled(), true);
  await page.getByTestId("confirm-input").fill("scratch");
  await page.getByTestId("confirm-button").click();
  await page.getByTestId("topics").waitFor();
  await waitFor("scratch gone from the list", async () => (await page.getByTestId("topic-scratch").count()) === 0);
  assert.doesNotMatch(cluster.strata(["topic", "list"]), /scratch/);
});

test("an error is shown in words with the server's reason", async () => {
  await page.goto(`${cluster.gateway}/console/`);
  await page.getByTestId("new-topic").click();
  const form = page.getByTestId("create-topic");
  await form.locator("input[name=name]").fill("payments");
  await form.locator("button[type=submit]").click();
  const err = await page.getByTestId("error").innerText();
  assert.match(err, /^already exists: .*payments/);
});

test("a group's lag appears, and falls to 0 after a CLI consume", async () => {
  cluster.strata(["topic", "create", "events", "-p", "2", "-r", "3"]);
  cluster.strata(["produce", "events"], Array.from({ length: 10 }, (_, i) => `event-${i}`).join("\n") + "\n");
  cluster.strata(["consume", "events", "-g", "billing", "-n", "4"]);
  await page.goto(`${cluster.gateway}/console/groups`);
  // The page polls every 2 s and the gateway sums each group's lag live,
  // so the figure appears within a poll or two; the deadline is for a
  // loaded machine, and a timeout says what was shown last.
  const lag = page.getByTestId("group-lag-billing");
  const shows = (what: string, read: () => Promise<string | null>, want: string) =>
    waitFor(what, async () => {
      const v = await read();
      if (v !== want) throw new Error(`shown: ${v}`);
      return true;
    }, 90_000);
  await shows("billing's lag of 6", () => lag.getAttribute("data-lag"), "6");
  await shot("groups");
  await page.getByTestId("group-billing").getByRole("link").click();
  await shows("billing's total lag of 6 on its page", () => page.getByTestId("group-total-lag").innerText(), "6");
  cluster.strata(["consume", "events", "-g", "billing", "-e"]);
  await shows("billing's total lag of 0", () => page.getByTestId("group-total-lag").innerText(), "0");
  // A live member shows with its assignment, and offsets cannot be reset
  // until it has left.
  const member = cluster.background(["consume", "events", "-g", "billing"]);
  await waitFor("a member owning both partitions", async () => /events: 0, 1/.test(await page.getByTestId("members").innerText()));
  assert.equal(await page.getByTestId("reset").count(), 0);
  await shot("group-member");
  member.kill("SIGTERM");
  // The member leaves as it exits, or else at its session timeout: on a
  // loaded machine either can take longer than a click's 30 s.
  await page.getByTestId("reset-dry-run").click({ timeout: 120_000 });
  await page.getByTestId("reset-plan").waitFor();
  await shot("group");
  await page.goto(`${cluster.gateway}/console/groups`);
  await shows("billing's lag of 0 in the list", () => lag.getAttribute("data-lag"), "0");
});

test("a killed storage node shows as down and its partitions under-replicated, then recovers", async () => {
  await page.goto(`${cluster.gateway}/console/`);
  await page.getByTestId("node-3").waitFor();
  const killed = cluster.kill("storage", 3);
  const t0 = Date.now();
  await waitFor("node 3 down", async () => (await page.getByTestId("node-3").getAttribute("data-state")) === "down", 60_000);
  await waitFor("under-replicated partitions", async () => Number(await page.getByTestId("under-replicated").innerText()) > 0, 60_000);
  const downAfter = Date.now() - t0;
  await shot("node-down");
  cluster.restart(killed);
  await waitFor("node 3 up", async () => (await page.getByTestId("node-3").getAttribute("data-state")) === "up", 60_000);
  await waitFor("no under-replicated partitions", async () => (await page.getByTestId("under-replicated").innerText()) === "0", 60_000);
  console.log(`node 3 shown down after ${downAfter} ms; recovered after ${Date.now() - t0} ms`);
});
