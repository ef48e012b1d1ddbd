// The console against `strata dev --secure`: the page's files load without
// credentials, the page asks for a token, and then shows only what that
// user may see (a topic it may describe, not another; no nodes or
// controllers without describe on the cluster).
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { chromium, type Browser } from "playwright-core";
import { DevCluster, repoRoot } from "./cluster.js";

const chromiumPath = process.env.STRATA_CHROMIUM ?? "/usr/bin/chromium";
const shots = join(repoRoot, "tests", "console", "screenshots");

let cluster: DevCluster;
let browser: Browser;

before(async () => {
  if (!existsSync(chromiumPath)) throw new Error(`${chromiumPath} is missing: install Debian's chromium (apt-get install -y chromium)`);
  mkdirSync(shots, { recursive: true });
  [cluster, browser] = await Promise.all([
    DevCluster.start(1, ["--secure"]),
    chromium.launch({ executablePath: chromiumPath, headless: true, args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"] }),
  ]);
});

after(async () => {
  await browser?.close();
  await cluster?.stop();
});

test("with --secure the console asks for a token and shows only what the user may see", async () => {
  const env = cluster.adminEnv();
  const cli = (args: string[]) => cluster.strata(args, undefined, env);
  cli(["topic", "create", "visible", "-p", "1", "-r", "1"]);
  cli(["topic", "create", "hidden", "-p", "1", "-r", "1"]);
  const m = /^STRATA_TOKEN=(\S+)$/.exec(cli(["user", "create", "alice"]).trim());
  assert.ok(m, "strata user create printed no STRATA_TOKEN= line");
  cli(["acl", "create", "--principal", "User:alice", "--allow", "describe", "--topic", "visible"]);

  const page = await browser.newPage({ ignoreHTTPSErrors: true, viewport: { width: 1400, height: 900 } });
  page.setDefaultTimeout(30_000);
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(`${env.STRATA_GATEWAY}/console/`);
  await page.getByTestId("token").fill("not-a-token");
  await page.getByTestId("token").press("Enter");
  assert.match(await page.locator(".login .error").innerText(), /^unauthenticated: /);
  await page.getByTestId("token").fill(m[1]!);
  await page.getByTestId("token").press("Enter");
  await page.getByTestId("topic-visible").waitFor();
  assert.equal(await page.getByTestId("topic-hidden").count(), 0);
  assert.equal(await page.getByTestId("nodes").count(), 0);
  assert.equal(await page.getByTestId("controllers").count(), 0);
  await page.getByTestId("no-cluster-access").waitFor();
  assert.match(await page.locator("header").innerText(), /User:alice/);
  await page.screenshot({ path: join(shots, "secure.png"), fullPage: true });
  assert.deepEqual(errors, []);
});
