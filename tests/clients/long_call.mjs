// One long tool call through the official MCP TypeScript SDK over stdio, with the SDK's DEFAULT
// request timeout (60 s) plus resetTimeoutOnProgress, as a kernel engineer's client would make it.
//
//   node tests/clients/long_call.mjs TOOL -- SERVER_COMMAND [ARGS...]   (stdio)
//   node tests/clients/long_call.mjs TOOL -- http://HOST:PORT/mcp         (streamable HTTP; bearer token
//                                                                          from KOPT_MCP_TOKEN if set)
//
// Prints one JSON object on stdout: ok, error, duration_s, sdk version, the progress notifications
// (t_s since the call, progress, total, message), the log messages, and the result's structured
// content. Exit status 0 when the call returned a result that is not an error, 1 otherwise.
// The server inherits the SDK's default environment plus PYTHONPATH and KOPT_* variables.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport, getDefaultEnvironment } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { LoggingMessageNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const argv = process.argv.slice(2);
const sep = argv.indexOf("--");
if (sep !== 1 || argv.length < 3) {
  console.error("usage: node long_call.mjs TOOL -- SERVER_COMMAND [ARGS...]");
  process.exit(2);
}
const tool = argv[0];
const [command, ...args] = argv.slice(sep + 1);

// the SDK's version: walk up from its resolved entry point to its own package.json
const require = createRequire(import.meta.url);
let dir = dirname(require.resolve("@modelcontextprotocol/sdk/client/index.js"));
let sdkVersion = null;
for (; dir !== dirname(dir); dir = dirname(dir)) {
  try {
    const pkg = JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
    if (pkg.name === "@modelcontextprotocol/sdk") { sdkVersion = pkg.version; break; }
  } catch { /* no package.json here */ }
}

const env = getDefaultEnvironment();
for (const [k, v] of Object.entries(process.env)) {
  if (k === "PYTHONPATH" || k.startsWith("KOPT_")) env[k] = v;
}
const http = /^https?:\/\//.test(command) && args.length === 0;
const token = process.env.KOPT_MCP_TOKEN;
const transport = http
  ? new StreamableHTTPClientTransport(new URL(command),
    token ? { requestInit: { headers: { Authorization: `Bearer ${token}` } } } : undefined)
  : new StdioClientTransport({ command, args, env, stderr: "inherit" });
const client = new Client({ name: "kopt-long-call", version: "1.0.0" });
const progress = [];
const logs = [];
// The SDK hands notifications to their handlers in a microtask but responses at once: when the last
// progress notification and the response arrive in one read, the response removes the progress
// handler first and the notification is reported here as "unknown token". Record those.
const dropped = [];
client.onerror = (e) => {
  const m = /progress notification for an unknown token: (\{.*\})$/s.exec(String(e?.message ?? e));
  if (m) dropped.push({ t_s: (Date.now() - t0) / 1000, ...JSON.parse(m[1]).params });
};
client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
  logs.push({ t_s: (Date.now() - t0) / 1000, level: n.params.level, data: n.params.data });
});

let t0 = Date.now();
const out = { client: "@modelcontextprotocol/sdk", sdk_version: sdkVersion, node: process.version, tool,
  transport: http ? "streamable-http" : "stdio" };
try {
  await client.connect(transport);
  out.server = client.getServerVersion();
  out.logging_capability = Boolean(client.getServerCapabilities()?.logging);
  if (out.logging_capability) await client.setLoggingLevel("info");
  t0 = Date.now();
  const result = await client.callTool({ name: tool, arguments: {} }, undefined, {
    resetTimeoutOnProgress: true, // the only non-default setting: timeout stays the SDK default (60 s)
    onprogress: (p) => progress.push({ t_s: (Date.now() - t0) / 1000, progress: p.progress, total: p.total, message: p.message }),
  });
  out.ok = !result.isError;
  out.is_error = Boolean(result.isError);
  out.structured = result.structuredContent ?? null;
  if (result.isError) out.error = result.content?.map((c) => c.text).join("\n");
} catch (e) {
  out.ok = false;
  out.error = String(e?.message ?? e);
  out.error_code = e?.code ?? null;
}
out.duration_s = (Date.now() - t0) / 1000;
out.progress = progress;
out.dropped_progress = dropped;
out.logs = logs;
await client.close().catch(() => {});
process.stdout.write(JSON.stringify(out) + "\n");
process.exit(out.ok ? 0 : 1);
