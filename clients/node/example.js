// permindex from Node.js with @grpc/grpc-js and @grpc/proto-loader, on the repository's
// protos/permindex/v1/index.proto (see docs/guides/other-languages.md).
//
//   npm ci && node example.js 127.0.0.1:50051 [COLLECTION]
//
// Health check, add by text, by fingerprint and by hex, query, check-and-add, and the refusals of
// malformed hex fingerprints. One JSON object per line on stdout (tests/test_node_client.py reads
// them); exit code 0 when every step did what it should, 1 otherwise.
"use strict";

const path = require("path");
const grpc = require("@grpc/grpc-js");
const protoLoader = require("@grpc/proto-loader");
const health = require("grpc-health-check");

// The loader options that keep 64-bit values exact: fixed64 fields arrive as decimal strings
// ("8924765359055242433"), never as a JavaScript number (exact only below 2^53). keepCase keeps
// the .proto's field names (fingerprint_hex, not fingerprintHex), as grpcurl and JSON write them.
const LOADER_OPTIONS = {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
};

const PROTO = path.resolve(__dirname, "..", "..", "protos", "permindex", "v1", "index.proto");

/** A fixed64 as the loader gives it (a decimal string) in the 16 hex digits permindex writes. */
function hex(decimal) {
  return BigInt(decimal).toString(16).padStart(16, "0");
}

/** A callback-style unary call as a promise. */
function call(client, method, request) {
  return new Promise((resolve, reject) => {
    const deadline = new Date(Date.now() + 30000);
    client[method](request, { deadline }, (error, reply) => (error ? reject(error) : resolve(reply)));
  });
}

function print(object) {
  process.stdout.write(JSON.stringify(object) + "\n");
}

/** What the loader sends for a fixed64 it is given, decoded back (no server involved). */
function sentAsFixed64(definition, value) {
  const add = definition.permindex.v1.PermIndex.service.Add;
  const bytes = add.requestSerialize({ documents: [{ key: "probe", fingerprint: value }] });
  return add.requestDeserialize(bytes).documents[0].fingerprint;
}

async function main() {
  const address = process.argv[2];
  const collection = process.argv[3] || "";
  if (!address) {
    process.stderr.write("usage: node example.js HOST:PORT [COLLECTION]\n");
    return 2;
  }
  const definition = grpc.loadPackageDefinition(protoLoader.loadSync(PROTO, LOADER_OPTIONS));
  const healthDefinition = grpc.loadPackageDefinition(
    protoLoader.loadSync(health.protoPath, LOADER_OPTIONS),
  );
  const credentials = grpc.credentials.createInsecure();
  const client = new definition.permindex.v1.PermIndex(address, credentials);
  const healthClient = new healthDefinition.grpc.health.v1.Health(address, credentials);
  let ok = true;
  const expect = (condition, what) => {
    if (!condition) {
      ok = false;
      process.stderr.write(`unexpected: ${what}\n`);
    }
  };

  // Health: the standard gRPC health service, for the whole server ("") and for permindex.
  for (const service of ["", "permindex.v1.PermIndex"]) {
    const reply = await call(healthClient, "Check", { service });
    print({ step: "health", service, status: reply.status });
    expect(reply.status === "SERVING", `health ${service}: ${reply.status}`);
  }

  // Add by text (the server fingerprints it), by fingerprint (a decimal string: exact), by hex.
  const text = "the quick brown fox jumps over the lazy dog near the river bank today";
  const added = await call(client, "Add", {
    collection,
    documents: [
      { key: "node/text", text },
      { key: "node/fixed64", fingerprint: "8924765359055242433" }, // 0x7bdb22cf023304c1
      { key: "node/hex", fingerprint_hex: "7bdb22cf023304c0" },
    ],
  });
  for (const result of added.results) {
    print({ step: "add", key: result.key, status: result.status, fingerprint: hex(result.fingerprint) });
  }
  expect(added.added === "3", `added ${added.added}`);

  // Query: by hex and by fixed64, the same answer; matches sorted by distance, then key.
  const byHex = await call(client, "Query", { collection, fingerprints_hex: ["7bdb22cf023304c1"], k: 3 });
  const byFixed64 = await call(client, "Query", { collection, fingerprints: ["8924765359055242433"], k: 3 });
  const matches = byHex.results[0].matches.map((m) => [m.key, hex(m.fingerprint), m.distance]);
  print({ step: "query", fingerprint: "7bdb22cf023304c1", matches });
  expect(JSON.stringify(byHex) === JSON.stringify(byFixed64), "hex and fixed64 queries differ");

  // Check-and-add: a near-duplicate of node/fixed64 is not added; a new fingerprint is.
  const checked = await call(client, "CheckAndAdd", {
    collection,
    documents: [
      { key: "node/near", fingerprint_hex: "7bdb22cf023304c3" },
      { key: "node/new", fingerprint_hex: "0123456789abcdef" },
    ],
  });
  for (const result of checked.results) {
    const near = result.matches.map((m) => [m.key, m.distance]);
    print({ step: "check_and_add", key: result.key, status: result.status, matches: near });
  }

  // The silent-0 hazard: given these for a fixed64, the loader sends 0 (or another number)
  // without a word, so no server can refuse them...
  const hazards = ["abc", "0x10", -5, 2 ** 64, "18446744073709551616", "7bdb22cf023304c1"];
  for (const value of hazards) {
    print({ step: "fixed64_sent", value: String(value), sent: sentAsFixed64(definition, value) });
  }
  // ...sent in hex instead, each reaches the server as it is and is refused.
  for (const value of ["abc", "0x10", -5, 2 ** 64, 2n ** 64n]) {
    for (const method of ["Add", "Query"]) {
      const request =
        method === "Add"
          ? { collection, documents: [{ key: "node/bad", fingerprint_hex: value }] }
          : { collection, fingerprints_hex: [value] };
      try {
        await call(client, method, request);
        print({ step: "refused", method, value: String(value), code: "OK" });
        expect(false, `${method} accepted ${String(value)}`);
      } catch (error) {
        const code = grpc.status[error.code];
        print({ step: "refused", method, value: String(value), code, details: error.details });
        expect(code === "INVALID_ARGUMENT", `${method} ${String(value)}: ${code}`);
      }
    }
  }
  // Both forms of a document's oneof set at once (the loader encodes both): refused too.
  try {
    await call(client, "Add", {
      collection,
      documents: [{ key: "node/both", fingerprint: "5", fingerprint_hex: "0000000000000006" }],
    });
    print({ step: "refused", method: "Add", value: "both", code: "OK" });
    expect(false, "Add accepted a document with both forms");
  } catch (error) {
    print({ step: "refused", method: "Add", value: "both", code: grpc.status[error.code], details: error.details });
  }

  const got = await call(client, "Get", { collection, keys: ["node/bad", "node/both"] });
  expect(got.results.every((r) => !r.found), "a refused document was stored");
  client.close();
  healthClient.close();
  return ok ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (error) => {
    process.stderr.write(`${error.stack || error}\n`);
    process.exit(1);
  },
);
