#!/usr/bin/env bash
# Fetch, format, start, stop and health-check a real Apache Kafka (KRaft): one node, or a cluster of
# MERIDIAN_KAFKA_BROKERS nodes, each a broker and a controller voter, on 127.0.0.1 (MERIDIAN_KAFKA_HOST), or
# one node of a cluster whose nodes live on hosts of their own.
#   kafka.sh install|start|stop|health|status
# Settings (env): MERIDIAN_KAFKA_PORT (9092), MERIDIAN_KAFKA_CONTROLLER_PORT (9093),
#                 MERIDIAN_VAR_DIR (var/ under the repo) for data, logs and the pid file,
#                 MERIDIAN_KAFKA_JAVA_OPTS (-XX:TieredStopAtLevel=1) the JVM's own options (see `java_opts`).
#   Cluster: MERIDIAN_KAFKA_BROKERS=N (default 1). Node i (1..N) listens on MERIDIAN_KAFKA_PORT + 2(i-1) and
#   its controller on the port after it; its state is in kafka-<port>/node-<i>. Topics default to
#   min(N, 3) replicas and min.insync.replicas 2 from 3 replicas on (1 below), the internal topics too.
#   `start` also restarts the nodes of a running cluster that died, and waits until all N are up.
#   Hosts of their own: MERIDIAN_KAFKA_HOSTS="A1,A2,A3" (one node per address, each listening on
#   MERIDIAN_KAFKA_PORT of its address, its controller on the next port) and MERIDIAN_KAFKA_NODE=i: this
#   host runs node i, at Ai (start, stop, health and status act on it alone; start the nodes together, a
#   node is healthy once a quorum has formed and it sees all N). Every node needs the same
#   MERIDIAN_KAFKA_CLUSTER_ID (22 characters of base64url, e.g. `kafka-storage.sh random-uuid`'s).
#   MERIDIAN_KAFKA_BROKER_SESSION_TIMEOUT_MS (Kafka's 9000): how long the controller waits for a silent
#   broker before fencing it and moving its partitions' leadership (heartbeats every third of it, 2 s at most).
#   SASL/SCRAM: with MERIDIAN_KAFKA_SASL_PORT, MERIDIAN_KAFKA_SASL_USERNAME and MERIDIAN_KAFKA_SASL_PASSWORD
#   set, a SASL_PLAINTEXT listener (SCRAM-SHA-256) is added on that port and the user is created when the
#   storage is formatted. The PLAINTEXT listener stays for the broker's own health check and replication.
#   TLS between hosts (MERIDIAN_KAFKA_HOSTS): with MERIDIAN_KAFKA_TLS_KEYSTORE (this node's PEM: its PKCS#8
#   key, then its certificate, for its address), MERIDIAN_KAFKA_TLS_CA (the CA's PEM) and the SASL user, every
#   listener is TLS: SASL_SSL with SCRAM-SHA-512 for clients and replication, mutual TLS for the controllers.
#   MERIDIAN_KAFKA_SUPER_USERS ("User:CN=kafka1;...") adds the nodes' certificate principals as super users.
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
brokers="${MERIDIAN_KAFKA_BROKERS:-1}"
host="${MERIDIAN_KAFKA_HOST:-127.0.0.1}"
IFS=', ' read -r -a hosts <<< "${MERIDIAN_KAFKA_HOSTS:-}"
if [ "${#hosts[@]}" -gt 0 ]; then
  brokers="${#hosts[@]}"
  this_node="${MERIDIAN_KAFKA_NODE:?kafka.sh: MERIDIAN_KAFKA_HOSTS needs MERIDIAN_KAFKA_NODE (the node this host runs, 1 to N)}"
  [[ "$this_node" =~ ^[1-9]$ ]] && [ "$this_node" -le "$brokers" ] \
    || { echo "kafka.sh: MERIDIAN_KAFKA_NODE must be 1 to $brokers, got '$this_node'" >&2; exit 2; }
fi
[[ "$brokers" =~ ^[1-9]$ ]] || { echo "kafka.sh: MERIDIAN_KAFKA_BROKERS must be 1 to 9, got '$brokers'" >&2; exit 2; }
replicas=$((brokers < 3 ? brokers : 3))
session_ms="${MERIDIAN_KAFKA_BROKER_SESSION_TIMEOUT_MS:-9000}"
[[ "$session_ms" =~ ^[0-9]+$ ]] && [ "$session_ms" -ge 1500 ] \
  || { echo "kafka.sh: MERIDIAN_KAFKA_BROKER_SESSION_TIMEOUT_MS must be >= 1500, got '$session_ms'" >&2; exit 2; }
min_isr=$((replicas >= 3 ? 2 : 1))
# shellcheck source=../lib.sh
. "$here/../lib.sh"

# The JIT stops at C1. With tiered compilation, C2 compiled the broker's request path for minutes: on a
# 2-core machine its compiler threads took 0.3-0.5 of a core under load and the broker 1.24-1.32 cores at
# 200 queries/s, against 0.90-0.95 with C1 only (idle: 0.24-0.46 against ~0.1). The local stack's runs
# (tests, the demo) last minutes, and `make demo` met digits' SLO in its first phase for 95-98% of queries
# instead of 44-70%. Once C2 has caught up its code is faster (a produce -> consume hop 0.7-1.4 ms against
# 1.3-2.0 ms after 8 minutes): a long-lived broker is better served by MERIDIAN_KAFKA_JAVA_OPTS="".
java_opts="${MERIDIAN_KAFKA_JAVA_OPTS--XX:TieredStopAtLevel=1}"

java_cmd() {
  # shellcheck disable=SC2086 # java_opts is a list of options
  exec_args=(java -Xms256m -Xmx768m -XX:+UseG1GC $java_opts -Djava.awt.headless=true
    "-Dlog4j2.configurationFile=$here/log4j2.properties" -cp "$jars/*" "$@")
  "${exec_args[@]}"
}

install() {
  if [ -f "$jars/.complete" ]; then return 0; fi
  command -v mvn >/dev/null || { echo "kafka.sh: Maven (mvn) is required to fetch the Kafka jars" >&2; exit 1; }
  (cd "$here" && mvn -q -B dependency:copy-dependencies)
  touch "$jars/.complete"
}

# node I's address, broker port, controller port and state directory
spread() { [ "${#hosts[@]}" -gt 0 ]; }
node_host() { if spread; then echo "${hosts[$(($1 - 1))]}"; else echo "$host"; fi; }
node_port() { if spread; then echo "$port"; else echo $((port + 2 * ($1 - 1))); fi; }
node_controller_port() {
  if [ "$brokers" = 1 ] && ! spread; then echo "$controller_port"; else echo $(($(node_port "$1") + 1)); fi
}
node_state() { if [ "$brokers" = 1 ] && ! spread; then echo "$state"; else echo "$state/node-$1"; fi; }
# the nodes this invocation runs; every node of the cluster
nodes() { if spread; then echo "$this_node"; else seq 1 "$brokers"; fi; }
cluster() { seq 1 "$brokers"; }
bootstrap() { local i out=""; for i in $(cluster); do out="$out${out:+,}$(node_host "$i"):$(node_port "$i")"; done; echo "$out"; }

node_health() {
  # Healthy = the node answers a Kafka metadata round trip on its listener, and sees all N brokers.
  python3 - "$(node_host "$1"):$(node_port "$1")" "$brokers" <<'PY'
import os, sys
from kafka import KafkaAdminClient
secured = {}
if os.environ.get("MERIDIAN_KAFKA_TLS_KEYSTORE"):
    secured = dict(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
                   sasl_plain_username=os.environ["MERIDIAN_KAFKA_SASL_USERNAME"],
                   sasl_plain_password=os.environ["MERIDIAN_KAFKA_SASL_PASSWORD"],
                   ssl_cafile=os.environ["MERIDIAN_KAFKA_TLS_CA"])
try:
    admin = KafkaAdminClient(bootstrap_servers=sys.argv[1], request_timeout_ms=3000, **secured)
    admin.list_topics()
    seen = len(admin.describe_cluster()["brokers"])
    admin.close()
    if seen < int(sys.argv[2]):
        raise RuntimeError(f"{seen} of {sys.argv[2]} brokers registered")
except Exception as exc:  # noqa: BLE001 - any failure means "not healthy yet"
    print(f"kafka not healthy: {exc}", file=sys.stderr)
    sys.exit(1)
PY
}

health() { local i; for i in $(nodes); do node_health "$i" || return 1; done; }

all_running() { local i; for i in $(nodes); do running "$(node_state "$i")/kafka.pid" || return 1; done; }

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

# scram_users MECHANISM: the SASL user and those of MERIDIAN_KAFKA_SCRAM_USERS, made when storage is formatted
scram_users() {
  format_args+=(--add-scram "$1=[name=${MERIDIAN_KAFKA_SASL_USERNAME:?},password=${MERIDIAN_KAFKA_SASL_PASSWORD:?}]")
  for user in ${MERIDIAN_KAFKA_SCRAM_USERS:-}; do
    format_args+=(--add-scram "$1=[name=${user%%:*},password=${user#*:}]")
  done
}

tls_listeners() {
  # Between hosts: clients and brokers speak SASL_SSL (SCRAM-SHA-512, the SASL user being the brokers' own),
  # the controllers mutual TLS (each node's certificate signed by the CA); no PLAINTEXT listener at all.
  local h p cp
  h="$(node_host "$2")" p="$(node_port "$2")" cp="$(node_controller_port "$2")"
  cat >> "$1" <<EOF
listeners=SASL_SSL://$h:$p,CONTROLLER://$h:$cp
advertised.listeners=SASL_SSL://$h:$p,CONTROLLER://$h:$cp
listener.security.protocol.map=CONTROLLER:SSL,SASL_SSL:SASL_SSL
inter.broker.listener.name=SASL_SSL
sasl.enabled.mechanisms=SCRAM-SHA-512
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="$MERIDIAN_KAFKA_SASL_USERNAME" password="$MERIDIAN_KAFKA_SASL_PASSWORD";
ssl.keystore.type=PEM
ssl.keystore.location=$MERIDIAN_KAFKA_TLS_KEYSTORE
ssl.truststore.type=PEM
ssl.truststore.location=${MERIDIAN_KAFKA_TLS_CA:?kafka.sh: MERIDIAN_KAFKA_TLS_KEYSTORE needs MERIDIAN_KAFKA_TLS_CA}
listener.name.controller.ssl.client.auth=required
EOF
  if [ "${MERIDIAN_KAFKA_AUTHORIZER:-0}" = 1 ]; then
    cat >> "$1" <<EOF
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:$MERIDIAN_KAFKA_SASL_USERNAME${MERIDIAN_KAFKA_SUPER_USERS:+;$MERIDIAN_KAFKA_SUPER_USERS}
allow.everyone.if.no.acl.found=false
EOF
  fi
}

quorum() {
  if [ "$brokers" = 1 ]; then echo "controller.quorum.bootstrap.servers=$(node_host 1):$(node_controller_port 1)"; return; fi
  local i voters=""
  for i in $(cluster); do voters="$voters${voters:+,}$i@$(node_host "$i"):$(node_controller_port "$i")"; done
  echo "controller.quorum.voters=$voters"
}

launch() {
  # launch NODE: write its configuration, format its storage once, start it (unless it runs)
  local i="$1" dir; dir="$(node_state "$1")"
  if running "$dir/kafka.pid"; then return 0; fi
  mkdir -p "$dir"
  sed -e "s|@HOST@|$(node_host "$i")|g" -e "s|@PORT@|$(node_port "$i")|g" -e "s|@CONTROLLER_PORT@|$(node_controller_port "$i")|g" \
    -e "s|@LOG_DIR@|$dir/data|g" -e "s|@NODE_ID@|$i|g" -e "s|@QUORUM@|$(quorum)|g" \
    -e "s|@REPLICAS@|$replicas|g" -e "s|@MIN_ISR@|$min_isr|g" \
    -e "s|@SESSION_MS@|$session_ms|g" -e "s|@HEARTBEAT_MS@|$((session_ms / 3 < 2000 ? session_ms / 3 : 2000))|g" \
    "$here/server.properties.template" > "$dir/server.properties"
  format_args=()
  if [ "$brokers" = 1 ]; then format_args=(--standalone); fi  # else a static quorum: the voters are configured
  if [ -n "${MERIDIAN_KAFKA_TLS_KEYSTORE:-}" ]; then
    tls_listeners "$dir/server.properties" "$i"
    scram_users SCRAM-SHA-512
  elif [ -n "${MERIDIAN_KAFKA_SASL_PORT:-}" ]; then
    sasl_listener "$dir/server.properties"
    scram_users SCRAM-SHA-256
  fi
  if [ ! -f "$dir/data/meta.properties" ]; then
    if [ -n "${MERIDIAN_KAFKA_CLUSTER_ID:-}" ]; then echo "$MERIDIAN_KAFKA_CLUSTER_ID" > "$state/cluster.id"; fi
    [ -f "$state/cluster.id" ] || java_cmd kafka.tools.StorageTool random-uuid > "$state/cluster.id"
    java_cmd kafka.tools.StorageTool format -t "$(cat "$state/cluster.id")" -c "$dir/server.properties" \
      "${format_args[@]}" > "$dir/format.log"
  fi
  # shellcheck disable=SC2086 # java_opts is a list of options
  nohup java -Xms256m -Xmx768m -XX:+UseG1GC $java_opts -Djava.awt.headless=true \
    "-Dlog4j2.configurationFile=$here/log4j2.properties" -cp "$jars/*" \
    kafka.Kafka "$dir/server.properties" > "$dir/kafka.log" 2>&1 &
  echo $! > "$dir/kafka.pid"
}

start() {
  install
  if spread && [ -z "${MERIDIAN_KAFKA_CLUSTER_ID:-}" ]; then
    echo "kafka.sh: MERIDIAN_KAFKA_HOSTS needs MERIDIAN_KAFKA_CLUSTER_ID to start, the same on every node" >&2; exit 2
  fi
  if [ "$brokers" != 1 ] && [ -n "${MERIDIAN_KAFKA_SASL_PORT:-}" ]; then
    echo "kafka.sh: SASL is set up for a single broker only (MERIDIAN_KAFKA_BROKERS=1)" >&2; exit 2
  fi
  if all_running && health 2>/dev/null; then echo "kafka already running on $(bootstrap)"; return 0; fi
  mkdir -p "$state"
  local i dir
  for i in $(nodes); do launch "$i"; done
  for i in $(nodes); do
    dir="$(node_state "$i")"
    wait_healthy "kafka node $i" "$dir/kafka.pid" 120 0.5 "$dir/kafka.log" node_health "$i" || { stop; exit 1; }
  done
  echo "kafka up on $(bootstrap)"
}

stop() {
  # every node at once: a node stopped last would wait for a controller quorum that is gone
  local i pids=()
  for i in $(nodes); do
    if running "$(node_state "$i")/kafka.pid"; then pids+=("$(cat "$(node_state "$i")/kafka.pid")"); fi
  done
  if [ "${#pids[@]}" -gt 0 ]; then
    kill "${pids[@]}" 2>/dev/null || true
    for _ in $(seq 1 60); do
      alive=0
      for pid in "${pids[@]}"; do if kill -0 "$pid" 2>/dev/null; then alive=1; fi; done
      [ "$alive" = 1 ] || break
      sleep 0.5
    done
    for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    echo "kafka stopped"
  fi
  for i in $(nodes); do rm -f "$(node_state "$i")/kafka.pid"; done
}

status() { if all_running && health 2>/dev/null; then echo up; else echo down; exit 1; fi; }

run_command "$@"
