#!/usr/bin/env bash
# Local single-node Apache Kafka broker for development and tests.
#   scripts/broker.sh up        start it (resolving the jars first if needed); waits until ready
#   scripts/broker.sh down      stop it (TERM, then KILL after 30 s)
#   scripts/broker.sh status    exit 0 when running and answering, 3 when not
#   scripts/broker.sh logs [-f] show the tail of the broker log (-f: follow)
#   scripts/broker.sh reset     wipe the broker's data (topics, offsets, cluster id); only when down
#   scripts/broker.sh env ROLE  secure mode: `export` lines for one role's client settings
#
# The broker runs in KRaft mode (combined broker + controller, node.id 1) on
# 127.0.0.1 only, straight from the jars Maven resolves for
# scripts/kafka/pom.xml - no docker, no tarball.
#
# Environment:
#   DRIPSTREAM_KAFKA_HOME             state folder (default: <repo>/.cache/kafka)
#   DRIPSTREAM_KAFKA_PORT             client port (default 9092; PLAINTEXT, or SASL_SSL when secure)
#   DRIPSTREAM_KAFKA_CONTROLLER_PORT  KRaft controller port (default 9093)
#   DRIPSTREAM_KAFKA_UP_TIMEOUT       seconds `up` waits for readiness (default 90)
#   DRIPSTREAM_KAFKA_SECURE           1: secure broker (see below); default 0, plain PLAINTEXT
#   KAFKA_HEAP                        broker heap flags (default "-Xmx512m -Xms256m")
#
# Layout of the state folder:
#   libs/            jars (re-resolved when scripts/kafka/pom.xml changes)
#   server.properties, log4j.properties, tools-log4j.properties   (rewritten by `up`)
#   cluster.id       KRaft cluster id, generated once
#   data/            log.dirs (and the KRaft metadata log)
#   logs/server.log  broker stdout/stderr (previous run kept as server.log.1)
#   broker.pid       pid of the running broker
#   mode             "secure" when the data was formatted for the secure broker
#
# Secure mode (DRIPSTREAM_KAFKA_SECURE=1 on `up`): the client port speaks SASL_SSL
# (TLS + SCRAM-SHA-512), also used between brokers; the KRaft controller port speaks TLS
# and requires a client certificate signed by the broker's CA (ssl.client.auth=required),
# which only the broker itself holds: a client without it (Kafka's own tools with
# --bootstrap-controller included) cannot reach the controller, so it cannot, say, add a
# PLAINTEXT listener to the broker. (KRaft controllers cannot use SCRAM: its credentials
# live in the metadata the controller serves.) KRaft's StandardAuthorizer denies whatever
# no ACL allows: the super users are "admin" and the broker's certificate (CN=localhost,
# the controller listener's principal); every other principal is one role of
# dripstream.streams.acls (ROLES below: one SCRAM user per role, each with its own
# password) and gets its ACLs from `dripstream acls apply`, run as the admin, after
# `dripstream topics create`. Only the admin may create topics, users or ACLs, or alter
# configs. Generated once per state folder, kept by `reset`:
#   tls/ca.crt                 self-signed CA to give clients (DRIPSTREAM_SSL_CAFILE)
#   tls/ca.key, tls/broker.*   CA key, broker key + certificate (127.0.0.1, localhost)
#   secrets/ROLE.password      password of SCRAM user ROLE (DRIPSTREAM_SASL_PASSWORD_FILE)
#   secrets/admin.password     password of SCRAM user "admin" (the broker's own login, tools)
#   secrets/admin.properties   client config for Kafka's command-line tools (--command-config)
#   secrets/controller.properties  the same for --bootstrap-controller (TLS, broker certificate)
# The users are created when the storage is formatted. Key, password and config files are
# mode 0600 and no secret is ever printed; `up` prints the admin's client settings as
# `export` lines on stdout (for `dripstream topics create` / `acls apply`), `env ROLE` a
# role's. A state folder holds either a plain or a secure broker, never both.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
POM="$REPO_ROOT/scripts/kafka/pom.xml"

KAFKA_HOME_DIR="${DRIPSTREAM_KAFKA_HOME:-$REPO_ROOT/.cache/kafka}"
PORT="${DRIPSTREAM_KAFKA_PORT:-9092}"
CONTROLLER_PORT="${DRIPSTREAM_KAFKA_CONTROLLER_PORT:-9093}"
UP_TIMEOUT="${DRIPSTREAM_KAFKA_UP_TIMEOUT:-90}"
HEAP="${KAFKA_HEAP:--Xmx512m -Xms256m}"
HOST=127.0.0.1
case "${DRIPSTREAM_KAFKA_SECURE:-0}" in
    1 | true | yes | on) MODE=secure ;;
    0 | false | no | off | "") MODE=plain ;;
    *) echo "broker: error: DRIPSTREAM_KAFKA_SECURE must be 0 or 1" >&2; exit 2 ;;
esac

LIBS="$KAFKA_HOME_DIR/libs"
LIBS_STAMP="$LIBS/.pom.sha256"
DATA="$KAFKA_HOME_DIR/data"
LOGS="$KAFKA_HOME_DIR/logs"
LOG_FILE="$LOGS/server.log"
PID_FILE="$KAFKA_HOME_DIR/broker.pid"
CLUSTER_ID_FILE="$KAFKA_HOME_DIR/cluster.id"
SERVER_PROPS="$KAFKA_HOME_DIR/server.properties"
LOG4J_PROPS="$KAFKA_HOME_DIR/log4j.properties"
TOOLS_LOG4J_PROPS="$KAFKA_HOME_DIR/tools-log4j.properties"
MODE_FILE="$KAFKA_HOME_DIR/mode"

# Secure mode only.
TLS_DIR="$KAFKA_HOME_DIR/tls"
CA_CERT="$TLS_DIR/ca.crt"
CA_KEY="$TLS_DIR/ca.key"
BROKER_CERT="$TLS_DIR/broker.crt"
BROKER_KEYSTORE="$TLS_DIR/broker.pem"   # PEM keystore: private key + certificate chain
SECRETS_DIR="$KAFKA_HOME_DIR/secrets"
# One SCRAM user per role: dripstream.streams.acls.ROLE_NAMES (a test keeps them equal).
ROLES=(crawler simplify label reconstruct fallback sink monitor)
ADMIN_USER=admin
BROKER_PRINCIPAL="User:CN=localhost"   # the broker certificate's subject (controller listener)
ADMIN_PASSWORD_FILE="$SECRETS_DIR/admin.password"
ADMIN_CONFIG="$SECRETS_DIR/admin.properties"
CONTROLLER_CONFIG="$SECRETS_DIR/controller.properties"
SCRAM=SCRAM-SHA-512

NAME=broker WHAT=broker ADDRESS="$HOST:$PORT" STATE_DIR="$KAFKA_HOME_DIR" STEP_S=0.5
PID_PATTERN="kafka.Kafka $SERVER_PROPS"
# shellcheck source=scripts/lib/jvm_server.sh
source "$REPO_ROOT/scripts/lib/jvm_server.sh"

# --- jars ----------------------------------------------------------------------

pom_hash() { sha256sum "$POM" | cut -d' ' -f1; }

# Copy the broker's jars into $LIBS unless they are already there for this
# exact pom. Resolves into a temporary folder first so an interrupted run never
# leaves a half-filled libs/ behind.
ensure_jars() {
    if [[ -f "$LIBS_STAMP" && "$(cat "$LIBS_STAMP")" == "$(pom_hash)" ]]; then
        return 0
    fi
    log "resolving Kafka jars with Maven (first run only) ..."
    local tmp="$KAFKA_HOME_DIR/libs.tmp.$$"
    rm -rf "$tmp"
    mkdir -p "$tmp"
    maven_jars "$POM" "$tmp" "$tmp"
    pom_hash >"$tmp/.pom.sha256"
    rm -rf "$LIBS"
    mv "$tmp" "$LIBS"
    log "jars ready in $LIBS ($(find "$LIBS" -name '*.jar' | wc -l) jars)"
}

# Run a Java class from the broker's jars, logging quietly to stderr.
kafka_java() {
    java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
        -Dlog4j.configuration="file:$TOOLS_LOG4J_PROPS" \
        -cp "$LIBS/*" "$@"
}

# --- configuration -------------------------------------------------------------

write_config() {
    mkdir -p "$DATA" "$LOGS"
    if [[ "$MODE" == secure ]]; then
        # It will hold the broker's own password: private before anything is written.
        : >"$SERVER_PROPS"
        chmod 600 "$SERVER_PROPS"
    fi
    cat >"$SERVER_PROPS" <<EOF
# Generated by scripts/broker.sh - edits are overwritten on every \`up\`.

# KRaft, one process acting as both broker and controller.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@$HOST:$CONTROLLER_PORT
controller.listener.names=CONTROLLER

$(listener_config)

log.dirs=$DATA

# Single node: every internal topic has exactly one replica.
num.partitions=1
default.replication.factor=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
min.insync.replicas=1

# Consumer groups form immediately instead of waiting 3 s for more members.
group.initial.rebalance.delay.ms=0

# Topics are created explicitly by the project, never by a stray produce/fetch.
auto.create.topics.enable=false

# Allow records/batches up to 64 MiB (large payloads); followers must be able
# to fetch what the leader accepts.
message.max.bytes=67108864
replica.fetch.max.bytes=67108864
EOF

    # Broker: everything to stdout, which `up` redirects into logs/server.log.
    cat >"$LOG4J_PROPS" <<'EOF'
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
# Per-request logging is far too chatty for a dev broker.
log4j.logger.kafka.request.logger=WARN
log4j.logger.kafka.network.RequestChannel$=WARN
log4j.logger.state.change.logger=WARN
log4j.logger.org.apache.kafka.clients=WARN
EOF

    # Command-line tools: warnings only, to stderr, so their stdout stays clean.
    cat >"$TOOLS_LOG4J_PROPS" <<'EOF'
log4j.rootLogger=WARN, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.Target=System.err
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=[%d] %p %m (%c)%n
EOF
}

listener_config() {
    if [[ "$MODE" == plain ]]; then
        cat <<EOF
listeners=PLAINTEXT://$HOST:$PORT,CONTROLLER://$HOST:$CONTROLLER_PORT
advertised.listeners=PLAINTEXT://$HOST:$PORT
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
EOF
        return 0
    fi
    cat <<EOF
# Secure mode: clients and the broker itself authenticate with $SCRAM over TLS; the
# controller listener speaks TLS and requires a client certificate from our CA (mutual
# TLS): the broker presents its own certificate, nobody else has one.
listeners=SASL_SSL://$HOST:$PORT,CONTROLLER://$HOST:$CONTROLLER_PORT
advertised.listeners=SASL_SSL://$HOST:$PORT
inter.broker.listener.name=SASL_SSL
listener.security.protocol.map=SASL_SSL:SASL_SSL,CONTROLLER:SSL
listener.name.controller.ssl.client.auth=required
sasl.enabled.mechanisms=$SCRAM
sasl.mechanism.inter.broker.protocol=$SCRAM
listener.name.sasl_ssl.${SCRAM,,}.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="$ADMIN_USER" password="$(cat "$ADMIN_PASSWORD_FILE")";
ssl.keystore.type=PEM
ssl.keystore.location=$BROKER_KEYSTORE
ssl.truststore.type=PEM
ssl.truststore.location=$CA_CERT
ssl.client.auth=none

# Whatever no ACL allows is denied; only the admin and the broker itself are exempt.
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
super.users=User:$ADMIN_USER;$BROKER_PRINCIPAL
EOF
}

# Format the KRaft storage once, with a cluster id generated on first use and
# kept in cluster.id so the data folder and the id always match.
ensure_formatted() {
    if [[ -f "$DATA/meta.properties" ]]; then
        return 0
    fi
    if [[ ! -s "$CLUSTER_ID_FILE" ]]; then
        kafka_java kafka.tools.StorageTool random-uuid | tr -d '[:space:]' >"$CLUSTER_ID_FILE"
        [[ -s "$CLUSTER_ID_FILE" ]] || die "could not generate a cluster id"
    fi
    log "formatting storage in $DATA (cluster id $(cat "$CLUSTER_ID_FILE"))"
    if [[ "$MODE" == plain ]]; then
        rm -f "$MODE_FILE"
        kafka_java kafka.tools.StorageTool format --ignore-formatted \
            -t "$(cat "$CLUSTER_ID_FILE")" -c "$SERVER_PROPS" >&2
        return 0
    fi
    echo secure >"$MODE_FILE"
    # The SCRAM users are part of the initial metadata. The passwords go through a
    # java @argfile (mode 0600, removed right after) so they never show in `ps`.
    local argfile="$SECRETS_DIR/format.args" user
    (
        umask 077
        printf '%s\n' kafka.tools.StorageTool format --ignore-formatted \
            -t "$(cat "$CLUSTER_ID_FILE")" -c "\"$SERVER_PROPS\"" >"$argfile"
        for user in "$ADMIN_USER" "${ROLES[@]}"; do
            printf '%s\n' --add-scram \
                "$SCRAM=[name=$user,password=$(cat "$(password_file "$user")")]" >>"$argfile"
        done
    )
    local status=0
    kafka_java "@$argfile" >&2 || status=$?
    rm -f "$argfile"
    (( status == 0 )) || die "formatting the storage failed"
    log "created SCRAM users '$ADMIN_USER' and, one per role, ${ROLES[*]}"
}

# A state folder holds the data of one kind of broker: the SCRAM users exist only in
# data formatted in secure mode, and a secure broker's data is useless without them.
check_mode() {
    [[ -f "$DATA/meta.properties" ]] || return 0
    local formatted=plain
    if [[ -f "$MODE_FILE" ]]; then formatted="$(cat "$MODE_FILE")"; fi
    if [[ "$formatted" != "$MODE" ]]; then
        local wanted="DRIPSTREAM_KAFKA_SECURE=$([[ "$formatted" == secure ]] && echo 1 || echo 0)"
        die "$KAFKA_HOME_DIR holds the data of a $formatted broker, but $MODE mode was asked for;" \
            "run with $wanted, use another DRIPSTREAM_KAFKA_HOME, or '$0 down' + '$0 reset'"
    fi
}

# --- secure mode: certificates and credentials -----------------------------------

require_openssl() {
    command -v openssl >/dev/null 2>&1 \
        || die "openssl not found on PATH; it is needed for the secure broker's certificates"
}

# Run openssl, showing its chatter only when it fails.
quiet_openssl() {
    local out
    if ! out="$(openssl "$@" 2>&1)"; then
        echo "$out" >&2
        die "openssl $1 failed"
    fi
}

# A self-signed CA and a broker certificate for 127.0.0.1 / localhost, made once.
ensure_tls() {
    require_openssl
    if [[ -s "$CA_CERT" && -s "$CA_KEY" && -s "$BROKER_KEYSTORE" && -s "$BROKER_CERT" ]]; then
        return 0
    fi
    local tmp="$KAFKA_HOME_DIR/tls.tmp.$$"
    rm -rf "$tmp"
    mkdir -p "$tmp"
    chmod 700 "$tmp"
    if [[ -s "$CA_CERT" && -s "$CA_KEY" ]]; then
        cp -p "$CA_CERT" "$CA_KEY" "$tmp/"   # keep the CA clients may already trust
    else
        log "generating a self-signed CA in $TLS_DIR"
        quiet_openssl req -x509 -new -newkey rsa:2048 -nodes -sha256 -days 3650 \
            -subj "/CN=dripstream local Kafka CA" \
            -addext "basicConstraints=critical,CA:TRUE" \
            -addext "keyUsage=critical,keyCertSign,cRLSign" \
            -addext "subjectKeyIdentifier=hash" \
            -keyout "$tmp/ca.key" -out "$tmp/ca.crt"
    fi
    log "generating the broker certificate (127.0.0.1, localhost)"
    quiet_openssl req -new -newkey rsa:2048 -nodes -sha256 -subj "/CN=localhost" \
        -keyout "$tmp/broker.key" -out "$tmp/broker.csr"
    cat >"$tmp/broker.ext" <<'EOF'
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=IP:127.0.0.1,DNS:localhost
subjectKeyIdentifier=hash
authorityKeyIdentifier=keyid,issuer
EOF
    quiet_openssl x509 -req -sha256 -days 825 -in "$tmp/broker.csr" \
        -CA "$tmp/ca.crt" -CAkey "$tmp/ca.key" -set_serial "0x$(openssl rand -hex 16)" \
        -extfile "$tmp/broker.ext" -out "$tmp/broker.crt"
    # PEM keystore for Kafka: the (unencrypted PKCS#8) key, then the chain.
    cat "$tmp/broker.key" "$tmp/broker.crt" "$tmp/ca.crt" >"$tmp/broker.pem"
    rm -f "$tmp/broker.csr" "$tmp/broker.ext"
    chmod 600 "$tmp"/*.key "$tmp/broker.pem"
    chmod 644 "$tmp/ca.crt" "$tmp/broker.crt"
    chmod 755 "$tmp"
    rm -rf "$TLS_DIR"
    mv "$tmp" "$TLS_DIR"
}

password_file() { echo "$SECRETS_DIR/$1.password"; }

# Random SCRAM passwords (made once, mode 0600) and the tools' client config.
ensure_secrets() {
    mkdir -p "$SECRETS_DIR"
    chmod 700 "$SECRETS_DIR"
    local user file
    for user in "$ADMIN_USER" "${ROLES[@]}"; do
        file="$(password_file "$user")"
        [[ -s "$file" ]] && continue
        if [[ -f "$DATA/meta.properties" ]]; then
            die "$file is missing but the storage in $DATA was formatted with it;" \
                "'$0 reset' formats it again with new passwords"
        fi
        (umask 077; openssl rand -hex 24 >"$file.tmp") && mv -f "$file.tmp" "$file"
        log "generated a password in $file"
    done
    : >"$ADMIN_CONFIG"
    chmod 600 "$ADMIN_CONFIG"
    cat >"$ADMIN_CONFIG" <<EOF
# Generated by scripts/broker.sh: Kafka tools as user $ADMIN_USER (--command-config).
security.protocol=SASL_SSL
sasl.mechanism=$SCRAM
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="$ADMIN_USER" password="$(cat "$ADMIN_PASSWORD_FILE")";
ssl.truststore.type=PEM
ssl.truststore.location=$CA_CERT
EOF
    : >"$CONTROLLER_CONFIG"
    chmod 600 "$CONTROLLER_CONFIG"
    cat >"$CONTROLLER_CONFIG" <<EOF
# Generated by scripts/broker.sh: Kafka tools against the controller (--bootstrap-controller
# $HOST:$CONTROLLER_PORT --command-config), with the broker's own certificate.
security.protocol=SSL
ssl.keystore.type=PEM
ssl.keystore.location=$BROKER_KEYSTORE
ssl.truststore.type=PEM
ssl.truststore.location=$CA_CERT
EOF
}

# Client settings of USER (default: the admin) for the secure broker, as shell `export`
# lines (stdout).
print_client_env() {
    local user="${1:-$ADMIN_USER}"
    printf 'export %s=%q\n' \
        DRIPSTREAM_BROKERS "$HOST:$PORT" \
        DRIPSTREAM_SECURITY_PROTOCOL SASL_SSL \
        DRIPSTREAM_SASL_MECHANISM "$SCRAM" \
        DRIPSTREAM_SASL_USERNAME "$user" \
        DRIPSTREAM_SASL_PASSWORD_FILE "$(password_file "$user")" \
        DRIPSTREAM_SSL_CAFILE "$CA_CERT"
    log "secure: SASL_SSL/$SCRAM, user '$user', password in $(password_file "$user"), CA certificate $CA_CERT"
}

# --- process helpers -----------------------------------------------------------

# True once the broker answers an ApiVersions request as node 1.
server_answers() {
    local config=()
    if [[ "$MODE" == secure ]]; then config=(--command-config "$ADMIN_CONFIG"); fi
    kafka_java kafka.admin.BrokerApiVersionsCommand \
        --bootstrap-server "$HOST:$PORT" "${config[@]}" 2>/dev/null | grep -q "(id: 1 rack"
}

# --- commands ------------------------------------------------------------------

cmd_up() {
    require_java
    mkdir -p "$KAFKA_HOME_DIR"
    check_mode

    local pid
    if pid="$(server_pid)"; then
        if port_open "$PORT"; then
            log "already running (pid $pid, $HOST:$PORT)"
            if [[ "$MODE" == secure ]]; then print_client_env; fi
            return 0
        fi
        # Ours, but not listening yet (e.g. an earlier `up` was interrupted): just wait.
        log "broker (pid $pid) is running but not listening yet; waiting"
    else
        rm -f "$PID_FILE"
        require_free_ports "$PORT" "$CONTROLLER_PORT"
        ensure_jars
        if [[ "$MODE" == secure ]]; then
            ensure_tls
            ensure_secrets
        fi
        write_config
        ensure_formatted

        log "starting Kafka on $HOST:$PORT (controller $HOST:$CONTROLLER_PORT, state in $KAFKA_HOME_DIR)"
        # shellcheck disable=SC2086  # $HEAP is a list of JVM flags
        pid="$(launch java $HEAP -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:+ExitOnOutOfMemoryError \
            -Djava.awt.headless=true \
            -Dlog4j.configuration="file:$LOG4J_PROPS" \
            -Dkafka.logs.dir="$LOGS" \
            -cp "$LIBS/*" kafka.Kafka "$SERVER_PROPS")"
    fi

    # Readiness: the port must open, then the broker must answer ApiVersions.
    await_ready "$pid" "$UP_TIMEOUT"
    log "ready: $HOST:$PORT (pid $pid)"
    if [[ "$MODE" == secure ]]; then
        print_client_env
        log "these are the admin's (topics create, acls apply); a worker's: '$0 env ROLE'" \
            "(roles: ${ROLES[*]})"
    fi
}

# `export` lines for one role's client settings (secure mode, secrets already made).
cmd_env() {
    [[ "$MODE" == secure ]] || die "'env' is for the secure broker (DRIPSTREAM_KAFKA_SECURE=1)"
    local role="${1:-}" known
    for known in "${ROLES[@]}"; do
        if [[ "$role" == "$known" ]]; then
            [[ -s "$(password_file "$role")" ]] \
                || die "no password for '$role' yet: run '$0 up' first"
            print_client_env "$role"
            return 0
        fi
    done
    die "'env' takes one role: ${ROLES[*]}"
}

cmd_reset() {
    require_down
    rm -rf "$DATA" "$CLUSTER_ID_FILE" "$MODE_FILE"
    log "wiped $DATA and the cluster id (jars kept); the next 'up' starts an empty cluster"
}

case "${1:-}" in
    env) shift; cmd_env "$@" ;;
    *) dispatch "$@" ;;
esac
