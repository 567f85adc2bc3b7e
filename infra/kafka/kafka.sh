#!/usr/bin/env bash
# Fetch, format, start, stop and health-check a real single-node Apache Kafka (KRaft) on 127.0.0.1.
#   kafka.sh install|start|stop|health|status
# Settings (env): MERIDIAN_KAFKA_PORT (9092), MERIDIAN_KAFKA_CONTROLLER_PORT (9093),
#                 MERIDIAN_VAR_DIR (var/ under the repo) for data, logs and the pid file.
#   SASL/SCRAM: with MERIDIAN_KAFKA_SASL_PORT, MERIDIAN_KAFKA_SASL_USERNAME and MERIDIAN_KAFKA_SASL_PASSWORD
#   set, a SASL_PLAINTEXT listener (SCRAM-SHA-256) is added on that port and the user is created when the
#   storage is formatted. The PLAINTEXT listener stays for the broker's own health check and replication.
#   ACLs: with MERIDIAN_KAFKA_AUTHORIZER=1 as well, the broker enforces ACLs (KRaft's StandardAuthorizer):
#   the SASL user and the PLAINTEXT listener's ANONYMOUS principal (loopback only) are super users, and
#   the users of MERIDIAN_KAFKA_SCRAM_USERS ("name:password name:password") get only what ACLs grant.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
port="${MERIDIAN_KAFKA_PORT:-9092}"
controller_port="${MERIDIAN_KAFKA_CONTROLLER_PORT:-9093}"
var="${MERIDIAN_VAR_DIR:-$root/var}"
state="$var/kafka-$port"
jars="$here/target/dependency"
pidfile="$state/kafka.pid"
# shellcheck source=../lib.sh
. "$here/../lib.sh"

java_cmd() {
  exec_args=(java -Xms256m -Xmx768m -XX:+UseG1GC -Djava.awt.headless=true
    "-Dlog4j2.configurationFile=$here/log4j2.properties" -cp "$jars/*" "$@")
  "${exec_args[@]}"
}

install() {
  if [ -f "$jars/.complete" ]; then return 0; fi
  command -v mvn >/dev/null || { echo "kafka.sh: Maven (mvn) is required to fetch the Kafka jars" >&2; exit 1; }
  (cd "$here" && mvn -q -B dependency:copy-dependencies)
  touch "$jars/.complete"
}

health() {
  # Healthy = the broker answers a Kafka ApiVersions/metadata round trip on its listener.
  python3 - "$port" <<'PY'
import sys
from kafka import KafkaAdminClient
try:
    admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{sys.argv[1]}", request_timeout_ms=3000)
    admin.list_topics()
    admin.close()
except Exception as exc:  # noqa: BLE001 - any failure means "not healthy yet"
    print(f"kafka not healthy: {exc}", file=sys.stderr)
    sys.exit(1)
PY
}

sasl_listener() {
  # later keys override earlier ones in a Java properties file
  cat >> "$1" <<EOF
listeners=PLAINTEXT://127.0.0.1:$port,SASL_PLAINTEXT://127.0.0.1:$MERIDIAN_KAFKA_SASL_PORT,CONTROLLER://127.0.0.1:$controller_port
advertised.listeners=PLAINTEXT://127.0.0.1:$port,SASL_PLAINTEXT://127.0.0.1:$MERIDIAN_KAFKA_SASL_PORT,CONTROLLER://127.0.0.1:$controller_port
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT
sasl.enabled.mechanisms=SCRAM-SHA-256
listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
EOF
  if [ "${MERIDIAN_KAFKA_AUTHORIZER:-0}" = 1 ]; then
    cat >> "$1" <<EOF
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:ANONYMOUS;User:$MERIDIAN_KAFKA_SASL_USERNAME
allow.everyone.if.no.acl.found=false
EOF
  fi
}

start() {
  install
  if running "$pidfile" && health 2>/dev/null; then echo "kafka already running on 127.0.0.1:$port"; return 0; fi
  mkdir -p "$state"
  sed -e "s|@PORT@|$port|g" -e "s|@CONTROLLER_PORT@|$controller_port|g" -e "s|@LOG_DIR@|$state/data|g" \
    "$here/server.properties.template" > "$state/server.properties"
  scram=()
  if [ -n "${MERIDIAN_KAFKA_SASL_PORT:-}" ]; then
    sasl_listener "$state/server.properties"
    scram=(--add-scram "SCRAM-SHA-256=[name=${MERIDIAN_KAFKA_SASL_USERNAME:?},password=${MERIDIAN_KAFKA_SASL_PASSWORD:?}]")
    for user in ${MERIDIAN_KAFKA_SCRAM_USERS:-}; do
      scram+=(--add-scram "SCRAM-SHA-256=[name=${user%%:*},password=${user#*:}]")
    done
  fi
  if [ ! -f "$state/data/meta.properties" ]; then
    java_cmd kafka.tools.StorageTool format --standalone -t "$(java_cmd kafka.tools.StorageTool random-uuid)" \
      -c "$state/server.properties" "${scram[@]}" > "$state/format.log"
  fi
  nohup java -Xms256m -Xmx768m -XX:+UseG1GC -Djava.awt.headless=true \
    "-Dlog4j2.configurationFile=$here/log4j2.properties" -cp "$jars/*" \
    kafka.Kafka "$state/server.properties" > "$state/kafka.log" 2>&1 &
  echo $! > "$pidfile"
  wait_healthy kafka "$pidfile" 120 0.5 "$state/kafka.log" health || { stop; exit 1; }
  echo "kafka up on 127.0.0.1:$port"
}

stop() { stop_pidfile kafka "$pidfile"; }

status() { if running "$pidfile" && health 2>/dev/null; then echo up; else echo down; exit 1; fi; }

run_command "$@"
