// Validates Strimzi objects (JSON, one per line on stdin) against Strimzi's CRD schemas as the pinned
// @kubernetes-models/strimzi-kafka-operator compiles them; prints one JSON line per object: its kind, name
// and the error, or null. Run by tests/unit/test_helm_chart.py; it sits beside the node_modules that
// `npm ci` installs here (ESM imports resolve from the script's own folder).
import { createInterface } from "node:readline";

const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  if (!line.trim()) continue;
  const object = JSON.parse(line);
  const version = object.apiVersion.split("/")[1];
  let error = null;
  try {
    const module = await import(`@kubernetes-models/strimzi-kafka-operator/kafka.strimzi.io/${version}/${object.kind}`);
    new module[object.kind](object).validate();
  } catch (exc) {
    error = String(exc.message || exc);
  }
  console.log(JSON.stringify({ kind: object.kind, name: object.metadata.name, error }));
}
