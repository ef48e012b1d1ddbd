// Logging as kafkajs does it: a numeric logLevel and a logCreator that
// turns each entry into whatever the application logs with. Every failure
// the client absorbs (a refresh that failed, a commit retried at the next
// interval, a listener that threw) is logged here with its cause, so nothing
// is dropped in silence. The default writes one JSON line per entry to the
// console at WARN and above; entries never carry a token or a key (errors
// hold the server's one line, and credentials print redacted).

/** Log levels, numbered as kafkajs' logLevel. */
export const logLevel = { NOTHING: 0, ERROR: 1, WARN: 2, INFO: 4, DEBUG: 5 } as const;
/** One of logLevel's values. */
export type LogLevel = (typeof logLevel)[keyof typeof logLevel];

/** One log entry as a logCreator's function receives it (kafkajs' shape). */
export interface LogEntry {
  /** Which part of the client logged it: "Consumer", "Producer", "Admin", "Cluster". */
  namespace: string;
  level: LogLevel;
  /** "ERROR", "WARN", "INFO" or "DEBUG". */
  label: string;
  log: { message: string; timestamp: string; [key: string]: unknown };
}

/** Makes the function that writes entries at or below a level (kafkajs' logCreator). */
export type LogCreator = (level: LogLevel) => (entry: LogEntry) => void;

/** A logger of one namespace. Safe to share; every method is synchronous and never throws. */
export interface Logger {
  error(message: string, extra?: Record<string, unknown>): void;
  warn(message: string, extra?: Record<string, unknown>): void;
  info(message: string, extra?: Record<string, unknown>): void;
  debug(message: string, extra?: Record<string, unknown>): void;
  /** namespace returns a logger for a part of the client, sharing level and output. */
  namespace(name: string): Logger;
}

const labels: Record<number, string> = { 1: "ERROR", 2: "WARN", 4: "INFO", 5: "DEBUG" };

/** consoleLogCreator writes one JSON line per entry: errors and warnings to stderr (console.error), the rest to console.log. */
export const consoleLogCreator: LogCreator = () => (e) => {
  const line = JSON.stringify({ level: e.label, namespace: e.namespace, ...e.log });
  if (e.level <= logLevel.WARN) console.error(line);
  else console.log(line);
};

/** newLogger makes the root logger of a client. */
export function newLogger(level: LogLevel, creator: LogCreator, namespace = ""): Logger {
  const write = creator(level);
  const make = (ns: string): Logger => {
    const at = (lv: LogLevel) => (message: string, extra?: Record<string, unknown>) => {
      if (lv > level || level === logLevel.NOTHING) return;
      try {
        write({ namespace: ns, level: lv, label: labels[lv]!, log: { timestamp: new Date().toISOString(), message, ...describeExtra(extra) } });
      } catch {
        // A broken log sink must not take the client down; there is nowhere left to report it.
      }
    };
    return { error: at(logLevel.ERROR), warn: at(logLevel.WARN), info: at(logLevel.INFO), debug: at(logLevel.DEBUG), namespace: (n) => make(ns ? `${ns}.${n}` : n) };
  };
  return make(namespace);
}

/** describeExtra turns error values into {name, message, cause chain} so a JSON sink shows them. */
function describeExtra(extra: Record<string, unknown> | undefined): Record<string, unknown> {
  if (!extra) return {};
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(extra)) out[k] = v instanceof Error ? describeError(v) : v;
  return out;
}

/** describeError is an error as a log line wants it: name, message and each cause's, at most 5 deep. */
export function describeError(e: unknown, depth = 0): unknown {
  if (!(e instanceof Error)) return String(e);
  const o: Record<string, unknown> = { name: e.name, message: e.message };
  const code = (e as { codeName?: unknown }).codeName;
  const reason = (e as { reason?: unknown }).reason;
  if (typeof code === "string" && code) o["code"] = code;
  if (typeof reason === "string" && reason) o["reason"] = reason;
  if (e.cause !== undefined && depth < 5) o["cause"] = describeError(e.cause, depth + 1);
  return o;
}
