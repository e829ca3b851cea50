# Shared by scripts/broker.sh and scripts/search.sh (sourced, not run): one local JVM
# server run from jars that Maven resolves, with a pid file, a log file, a readiness wait
# and the down / status / logs commands.
#
# The sourcing script sets, before calling anything here:
#   NAME         log prefix ("broker", "search")
#   WHAT         what the messages call the process ("broker", "server")
#   HOST, PORT   where it listens; ADDRESS how the messages show it
#   STATE_DIR    its state folder; PID_FILE, LOG_FILE inside it
#   PID_PATTERN  a string its java command line holds (tells our process from a reused pid)
#   STEP_S       seconds between readiness probes
# and defines `server_answers` (true once the server serves requests).

log() { echo "$NAME: $*" >&2; }
die() { echo "$NAME: error: $*" >&2; exit 1; }

# Java 17+ on PATH (and javac with the argument "javac").
require_java() {
    command -v java >/dev/null 2>&1 \
        || die "java not found on PATH; install a Java 17+ runtime (e.g. apt-get install openjdk-17-jdk-headless)"
    if [[ "${1:-}" == javac ]]; then
        command -v javac >/dev/null 2>&1 \
            || die "javac not found on PATH; install a Java 17 JDK (e.g. apt-get install openjdk-17-jdk-headless)"
    fi
    local version major
    # First line looks like: openjdk version "17.0.15" 2025-04-15  (or "1.8.0_392" for Java 8)
    version="$(java -version 2>&1 | awk -F'"' '/version/ {print $2; exit}')"
    major="${version%%.*}"
    if [[ "$major" == 1 ]]; then major="$(echo "$version" | cut -d. -f2)"; fi
    [[ "$major" =~ ^[0-9]+$ ]] || die "could not read the Java version from 'java -version' (got '$version')"
    (( major >= 17 )) || die "Java 17+ is required, found Java $version at $(command -v java)"
}

# maven_jars POM DEST TMP: the runtime jars of POM copied into DEST by Maven; on failure
# Maven's output is shown, TMP (the caller's half-made folder) removed, and the script exits.
maven_jars() {
    command -v mvn >/dev/null 2>&1 \
        || die "mvn (Apache Maven) not found on PATH; it is needed once to fetch the jars (e.g. apt-get install maven)"
    local out  # Maven prints everything (errors too) to stdout; kept for the error case only
    if ! out="$(mvn -q -B -Dstyle.color=never -f "$1" dependency:copy-dependencies \
            -DincludeScope=runtime -DoutputDirectory="$2" 2>&1)"; then
        echo "$out" >&2
        rm -rf "$3"
        die "mvn could not resolve the jars for $1 (is Maven Central reachable?)"
    fi
}

# The recorded pid, if that process is alive and really is our server (a stale pid file
# whose pid was reused by something else does not count).
server_pid() {
    [[ -f "$PID_FILE" ]] || return 1
    local pid
    pid="$(cat "$PID_FILE")"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$PID_PATTERN" || return 1
    echo "$pid"
}

port_open() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

# Dies when one of the ports is taken by a process that is not our recorded server.
require_free_ports() {
    local port
    for port in "$@"; do
        if port_open "$port"; then
            die "port $HOST:$port is already in use by another process (not the $WHAT recorded in $PID_FILE)"
        fi
    done
}

log_tail() {
    if [[ -f "$LOG_FILE" ]]; then
        echo "----- last 40 lines of $LOG_FILE -----" >&2
        tail -n 40 "$LOG_FILE" >&2
        echo "-----" >&2
    fi
}

# launch COMMAND...: starts the server detached (setsid: Ctrl-C on the caller does not take
# it down), its output in LOG_FILE (the previous one kept as .1); prints its pid. The inner
# shell records its own pid, then exec's the command, so the pid file holds the JVM's pid.
launch() {
    if [[ -f "$LOG_FILE" ]]; then mv -f "$LOG_FILE" "$LOG_FILE.1"; fi
    setsid bash -c 'echo $$ >"$0"; exec "$@"' "$PID_FILE" "$@" </dev/null >"$LOG_FILE" 2>&1 &
    for _ in $(seq 50); do [[ -s "$PID_FILE" ]] && break; sleep 0.1; done
    local pid
    pid="$(cat "$PID_FILE" 2>/dev/null || true)"
    [[ -n "$pid" ]] || die "$WHAT did not start (no pid recorded)"
    echo "$pid"
}

# await_ready PID TIMEOUT_S: waits until the port opens and `server_answers`; dies (with
# the log's tail) when the process exits or the time runs out (the server is left running).
await_ready() {
    local pid="$1" deadline=$((SECONDS + $2))
    until port_open "$PORT" && server_answers; do
        if ! kill -0 "$pid" 2>/dev/null; then
            log_tail
            rm -f "$PID_FILE"
            die "$WHAT process $pid exited during startup (see $LOG_FILE)"
        fi
        if (( SECONDS >= deadline )); then
            log_tail
            die "$WHAT (pid $pid) not ready on $HOST:$PORT after ${2}s; it is left running - see above, '$0 logs' or '$0 down'"
        fi
        sleep "$STEP_S"
    done
}

cmd_down() {
    local pid
    if ! pid="$(server_pid)"; then
        rm -f "$PID_FILE"
        log "not running"
        return 0
    fi
    log "stopping $WHAT (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 300); do   # 30 s in 0.1 s steps
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        log "still alive after 30 s; sending KILL"
        kill -KILL "$pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
    rm -f "$PID_FILE"
    log "stopped"
}

cmd_status() {
    local pid
    if pid="$(server_pid)"; then
        if port_open "$PORT"; then
            echo "running (pid $pid, $ADDRESS, state in $STATE_DIR)"
            return 0
        fi
        echo "starting or unresponsive (pid $pid alive, $HOST:$PORT not listening)"
        return 3
    fi
    echo "not running"
    return 3
}

cmd_logs() {
    [[ -f "$LOG_FILE" ]] || die "no log yet at $LOG_FILE"
    if [[ "${1:-}" == "-f" ]]; then
        exec tail -n 100 -F "$LOG_FILE"
    fi
    tail -n 100 "$LOG_FILE"
}

# Dies when the server is running (reset wipes state only when it is down).
require_down() {
    local pid
    if pid="$(server_pid)"; then
        die "$WHAT is running (pid $pid); run '$0 down' first"
    fi
}

usage() {
    sed -n '2,8s/^# \{0,1\}//p' "$0" >&2
    exit 2
}

# The script's command line: up, down, status, logs [-f], reset.
dispatch() {
    case "${1:-}" in
        up) cmd_up ;;
        down) cmd_down ;;
        status) cmd_status ;;
        logs) shift; cmd_logs "$@" ;;
        reset) cmd_reset ;;
        *) usage ;;
    esac
}
