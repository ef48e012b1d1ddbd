// The console's one connection: a Connect client of GatewayService on the
// page's own origin (the gateway that served it, so no CORS), with the
// user's bearer token when one was given.
import { Code, ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { GatewayService } from "./gen/strata/gateway/v1/gateway_pb";

const tokenKey = "strata.console.token";

export function getToken(): string {
  return sessionStorage.getItem(tokenKey) ?? "";
}

export function setToken(token: string): void {
  if (token) sessionStorage.setItem(tokenKey, token);
  else sessionStorage.removeItem(tokenKey);
}

const auth: Interceptor = (next) => async (req) => {
  const token = getToken();
  if (token) req.header.set("Authorization", `Bearer ${token}`);
  return next(req);
};

export type Gateway = Client<typeof GatewayService>;

export const gateway: Gateway = createClient(
  GatewayService,
  createConnectTransport({ baseUrl: window.location.origin, useBinaryFormat: true, interceptors: [auth] }),
);

/** errorText is an error in words: what went wrong and the server's reason. */
export function errorText(e: unknown): string {
  if (e instanceof ConnectError) {
    const words = Code[e.code].replace(/([a-z])([A-Z])/g, "$1 $2").toLowerCase();
    return `${words}: ${e.rawMessage}`;
  }
  if (e instanceof Error) return e.message;
  return String(e);
}

export function isUnauthenticated(e: unknown): boolean {
  return e instanceof ConnectError && e.code === Code.Unauthenticated;
}

export function isAborted(e: unknown): boolean {
  return (e instanceof ConnectError && e.code === Code.Canceled) || (e instanceof DOMException && e.name === "AbortError");
}
