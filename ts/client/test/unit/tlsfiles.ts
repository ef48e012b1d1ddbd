// Throwaway certificates for the TLS tests, made with the openssl command
// (Debian's; a missing openssl fails the test, it never skips it): a CA,
// a server certificate for 127.0.0.1 and localhost, and a client
// certificate whose Subject CN is the user, all ECDSA P-256 and valid for a
// day, as lib/tlsconfig/devca issues them for strata dev --secure.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** A CA with a server and a client certificate it signed, as PEM text. */
export interface TestPKI {
  ca: string;
  serverCert: string;
  serverKey: string;
  clientCert: string;
  clientKey: string;
}

function openssl(dir: string, args: string[]): void {
  try {
    execFileSync("openssl", args, { cwd: dir, stdio: ["ignore", "pipe", "pipe"] });
  } catch (e) {
    const err = e as { code?: string; stderr?: Buffer };
    if (err.code === "ENOENT") throw new Error("openssl is not installed (apt-get install openssl)");
    throw new Error(`openssl ${args[0]}: ${String(err.stderr ?? e)}`);
  }
}

/** makePKI makes a CA (Subject CN caName) and a server and a client (CN user) certificate from it. */
export function makePKI(caName: string, user: string): TestPKI {
  const dir = mkdtempSync(join(tmpdir(), "strata-ts-pki-"));
  try {
    const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
    openssl(dir, ["req", "-x509", ...ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "1", "-subj", `/CN=${caName}`,
      "-addext", "basicConstraints=critical,CA:TRUE,pathlen:0", "-addext", "keyUsage=critical,keyCertSign,cRLSign"]);
    const leaf = (name: string, subject: string, ext: string) => {
      writeFileSync(join(dir, `${name}.ext`), ext);
      openssl(dir, ["req", ...ec, "-keyout", `${name}.key`, "-out", `${name}.csr`, "-subj", subject]);
      openssl(dir, ["x509", "-req", "-in", `${name}.csr`, "-CA", "ca.pem", "-CAkey", "ca.key", "-set_serial", String(Date.now()),
        "-days", "1", "-out", `${name}.pem`, "-extfile", `${name}.ext`]);
    };
    leaf("server", "/CN=server", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature\n");
    leaf("client", `/CN=${user}`, "extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature\n");
    const read = (f: string) => readFileSync(join(dir, f), "utf8");
    return {
      ca: read("ca.pem"),
      serverCert: read("server.pem"),
      serverKey: read("server.key"),
      clientCert: read("client.pem"),
      clientKey: read("client.key"),
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
