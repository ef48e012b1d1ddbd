// Drives the browser test: bundles test/browser/page.js with esbuild (the
// "browser" export condition picks the fetch transport), serves it from a
// local HTTP server on its own port (so the page's origin differs from the
// gateway's), and runs it in Debian's headless Chromium through
// playwright-core. Chromium is never downloaded: /usr/bin/chromium (or
// STRATA_CHROMIUM) must exist; .ci/run installs it.
import { build } from "esbuild";
import { existsSync } from "node:fs";
import { createServer } from "node:http";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { AddressInfo } from "node:net";
import { chromium } from "playwright-core";

const here = dirname(fileURLToPath(import.meta.url));
export const chromiumPath = process.env.STRATA_CHROMIUM ?? "/usr/bin/chromium";

/**
 * runBrowserTest runs test/browser/page.ts in Chromium against gateway:
 * 20 records produced to topic and consumed again by group browser-group.
 * A token is given to the page's client; an https gateway's certificate is
 * accepted without a trust store (the browser's TLS is the browser's: a
 * real page relies on a CA the browser trusts).
 */
export async function runBrowserTest(gateway: string, topic: string, token?: string): Promise<{ acks: number; consumed: string[]; error?: string }> {
  if (!existsSync(chromiumPath)) throw new Error(`${chromiumPath} is missing: install Debian's chromium (apt-get install -y chromium)`);
  const bundle = await build({
    entryPoints: [join(here, "..", "browser", "page.js")],
    bundle: true,
    format: "esm",
    platform: "browser",
    write: false,
    logLevel: "silent",
  });
  const js = bundle.outputFiles[0]!.text;
  const html = `<!doctype html><meta charset="utf-8"><title>strata</title><script type="module" src="/page.js"></script>`;
  const server = createServer((req, res) => {
    if (req.url === "/page.js") {
      res.writeHead(200, { "content-type": "text/javascript" });
      res.end(js);
    } else {
      res.writeHead(200, { "content-type": "text/html" });
      res.end(html);
    }
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as AddressInfo).port;
  // Playwright starts Chromium with a fresh temporary --user-data-dir of its own.
  const browser = await chromium.launch({
    executablePath: chromiumPath,
    headless: true,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
  try {
    const page = await browser.newPage({ ignoreHTTPSErrors: gateway.startsWith("https:") });
    const logs: string[] = [];
    page.on("console", (m) => logs.push(m.text()));
    page.on("pageerror", (e) => logs.push(String(e)));
    await page.goto(`http://127.0.0.1:${port}/`);
    await page.waitForFunction(() => typeof window.strataTest === "function", undefined, { timeout: 30_000 });
    const r = await page.evaluate(([g, t, k]) => window.strataTest(g!, t!, k || undefined), [gateway, topic, token ?? ""]);
    if (r.error) r.error += "\nbrowser console:\n" + logs.join("\n");
    return r;
  } finally {
    await browser.close();
    server.close();
  }
}
