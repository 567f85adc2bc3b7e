#!/usr/bin/env bash
# Hosts of their own on this machine: Linux network namespaces joined by a bridge, each with its own address,
# so that services configured by addresses alone run as they would on separate machines (their 127.0.0.1 is
# their own loopback: a service that still dials it for a peer finds nothing there). Needs root. No traffic
# leaves the machine: the bridge has no uplink.
#   rig.sh up NAME=ADDRESS ...   make the bridge (PREFIX0, the root namespace's address .1 of the /24) and, per
#                                host, namespace PREFIX-NAME with its link (eth0) at ADDRESS/24
#   rig.sh cut NAME | heal NAME  take a host's link down (nothing in or out) and bring it back
#   rig.sh exec NAME CMD ...     run CMD on host NAME
#   rig.sh certs DIR NAME=ADDRESS ...
#                                a certificate authority (DIR/ca.pem) and, per host, a certificate for its
#                                address signed by it, with its key (DIR/NAME.pem: PKCS#8 key, then the
#                                certificate; good for TLS servers and clients), valid 2 days
#   rig.sh down                  remove every namespace and link of the rig, and the bridge
# Settings (env): MERIDIAN_RIG_PREFIX (mrd: namespaces mrd-NAME, bridge mrd0, links mrdv-NAME; NAME at most
#                 9 characters), MERIDIAN_RIG_SUBNET (10.77.0: the bridge is 10.77.0.1/24).
set -euo pipefail
prefix="${MERIDIAN_RIG_PREFIX:-mrd}"
subnet="${MERIDIAN_RIG_SUBNET:-10.77.0}"
bridge="${prefix}0"

need_root() { [ "$(id -u)" = 0 ] || { echo "rig.sh: making network namespaces needs root" >&2; exit 2; }; }

up() {
  need_root
  if ! ip link show "$bridge" >/dev/null 2>&1; then
    ip link add "$bridge" type bridge
    ip addr add "$subnet.1/24" dev "$bridge"
    ip link set "$bridge" up
  fi
  local spec name address
  for spec in "$@"; do
    name="${spec%%=*}" address="${spec#*=}"
    [[ "$name" =~ ^[a-z0-9]{1,9}$ ]] || { echo "rig.sh: a host's name is 1-9 of a-z0-9, got '$name'" >&2; exit 2; }
    [[ "$address" == "$subnet".* ]] || { echo "rig.sh: $name's address $address is not in $subnet.0/24" >&2; exit 2; }
    ip netns add "$prefix-$name"
    ip link add "${prefix}v-$name" type veth peer name eth0 netns "$prefix-$name"
    ip link set "${prefix}v-$name" master "$bridge" up
    ip -n "$prefix-$name" addr add "$address/24" dev eth0
    ip -n "$prefix-$name" link set eth0 up
    ip -n "$prefix-$name" link set lo up
  done
}

cut() { need_root; ip link set "${prefix}v-$1" down; }
heal() { need_root; ip link set "${prefix}v-$1" up; }

run_on() { local name="$1"; shift; exec ip netns exec "$prefix-$name" "$@"; }

certs() {
  local dir="$1" spec name address; shift
  mkdir -p "$dir"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$dir/ca.key" -out "$dir/ca.pem" -days 2 \
    -subj "/CN=meridian-rig-ca" 2>/dev/null
  for spec in "$@"; do
    name="${spec%%=*}" address="${spec#*=}"
    openssl req -newkey rsa:2048 -nodes -keyout "$dir/$name.key" -out "$dir/$name.csr" -subj "/CN=$name" 2>/dev/null
    openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial -days 2 \
      -out "$dir/$name.crt" -extfile <(printf 'subjectAltName=IP:%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$address") 2>/dev/null
    cat "$dir/$name.key" "$dir/$name.crt" > "$dir/$name.pem"
    rm -f "$dir/$name.csr" "$dir/$name.key" "$dir/$name.crt"
  done
  chmod 600 "$dir"/*.pem "$dir/ca.key"
}

down() {
  need_root
  local ns
  for ns in $(ip netns list | awk '{print $1}' | grep "^$prefix-" || true); do
    ip link delete "${prefix}v-${ns#"$prefix"-}" 2>/dev/null || true
    ip netns delete "$ns"
  done
  ip link delete "$bridge" 2>/dev/null || true
}

case "${1:-}" in
  up) shift; up "$@" ;;
  cut | heal) "$1" "${2:?a host name}" ;;
  exec) shift; run_on "$@" ;;
  certs) shift; certs "$@" ;;
  down) down ;;
  *) echo "usage: $0 up NAME=ADDRESS ... | cut NAME | heal NAME | exec NAME CMD ... | certs DIR NAME=ADDRESS ... | down" >&2
     exit 2 ;;
esac
