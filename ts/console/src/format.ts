// Formatting helpers shared by the pages.

export function bytes(n: bigint | number): string {
  const v = Number(n);
  if (v < 0) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let x = v;
  let i = 0;
  while (x >= 1024 && i < units.length - 1) {
    x /= 1024;
    i++;
  }
  return i === 0 ? `${x} B` : `${x.toFixed(1)} ${units[i]}`;
}

export function num(n: bigint | number): string {
  return Number(n).toLocaleString("en-US");
}

export function time(ms: bigint | number): string {
  const v = Number(ms);
  if (v <= 0) return "–";
  return new Date(v).toISOString().replace("T", " ").replace("Z", "");
}

const utf8 = new TextEncoder();

/** hex renders text or bytes as space-separated hex pairs. */
export function hex(v: string | Uint8Array): string {
  const b = typeof v === "string" ? utf8.encode(v) : v;
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join(" ");
}

/** tryJSON parses v as JSON, or returns undefined. */
export function tryJSON(v: string): unknown {
  const t = v.trim();
  if (!(t.startsWith("{") || t.startsWith("["))) return undefined;
  try {
    return JSON.parse(t);
  } catch {
    return undefined;
  }
}
