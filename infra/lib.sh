# Shared by infra/*/*.sh: start, wait for and stop a daemon recorded in a pid file.

# running PIDFILE: the recorded process is alive
running() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# wait_healthy NAME PIDFILE TRIES DELAY LOG CHECK...: run CHECK until it succeeds; fail if the process dies
wait_healthy() {
  local name="$1" pidfile="$2" tries="$3" delay="$4" log="$5"; shift 5
  for _ in $(seq 1 "$tries"); do
    if "$@" 2>/dev/null; then return 0; fi
    if [ -f "$pidfile" ] && ! running "$pidfile"; then
      echo "$name exited during start; see $log" >&2; tail -20 "$log" >&2; return 1
    fi
    sleep "$delay"
  done
  echo "$name did not become healthy; see $log" >&2
  return 1
}

# stop_pidfile NAME PIDFILE: SIGTERM, wait up to 30 s, then SIGKILL
stop_pidfile() {
  local name="$1" pidfile="$2" pid
  if running "$pidfile"; then
    pid="$(cat "$pidfile")"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -9 "$pid" 2>/dev/null || true
    echo "$name stopped"
  fi
  rm -f "$pidfile"
}

# run_command "$@": the scripts' shared command line; each script defines install, start, stop, health, status
run_command() {
  case "${1:-}" in
    install | start | stop | health | status) "$1" ;;
    *) echo "usage: $0 install|start|stop|health|status" >&2; exit 2 ;;
  esac
}
