#!/usr/bin/env bash
# scripts/bench.sh — measure every backend in one run, so ratios between
# them and against each store's raw floor hold on a noisy machine.
#
#   scripts/bench.sh                         # all backends, 16 clients, 1 and 1000 keys, 5 s each
#   DURATION=2s CLIENTS=8 scripts/bench.sh
#   BACKENDS="redis etcd" scripts/bench.sh   # a subset, in this order
#   scripts/bench.sh --json                  # machine-readable, one JSON object per run
#   HOLD="1000 10000" HOLD_FOR=10s           # what holding many locks costs (default);
#                                            # HOLD= (empty) skips it
#   WARMUP=5s                                # unreported warm-up per server (default);
#                                            # WARMUP=0 skips it
#   BASELINE=/path/to/other/distlock         # each run also with another build of
#                                            # the command, right after ours, on the
#                                            # same servers (a before/after comparison
#                                            # within one run)
#
# Backends (default: all but redis-sentinel, in this order):
#   file           file:// in a temp dir
#   mem            mem://, in process
#   redis          one redis-server
#   redis-cluster  Redis Cluster of 3 masters, no replicas
#   redis-sentinel a master, its replica and 3 sentinels (only when named)
#   redlock        Redlock over 5 independent redis-server masters
#   etcd           one etcd member, WITH fsync (no --unsafe-no-fsync), as a
#                  real deployment runs; its data dir is under $TMPDIR
#   zookeeper      one standalone ZooKeeper (fsyncs its log by default)
#   postgres       one PostgreSQL server with its default settings (fsync
#                  and synchronous_commit on); its data dir is under $TMPDIR
#
# Servers are started by the `distlock-test-servers` binary of
# distlock-testkit (the harness the tests use) on free loopback ports,
# with temp data dirs and without persistence for Redis. It runs as a
# coprocess; the servers die with it when this script exits, on error,
# Ctrl-C or SIGTERM (its stdin closes), and its temp dirs are removed.
# Servers run on the same machine as the clients and compete for its cores.
#
# Each server first gets an unreported warm-up run (`distlock bench` for
# WARMUP on one key, then on 1000). A freshly started ZooKeeper runs its
# Java code interpreted for its first seconds of load: measured here, its
# CPU per acquisition falls from ~2 ms to ~0.75 ms over the first ~10 s,
# and its one-key rate rises from ~720/s to ~1,250/s. `distlock bench`
# measures ours before the floor, so a cold server would make ours look
# slower than the same code on a server that has been up a while.
set -euo pipefail

script_dir=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
cd "$script_dir/.."

DURATION=${DURATION:-5s}
CLIENTS=${CLIENTS:-16}
BACKENDS=${BACKENDS:-file mem redis redis-cluster redlock etcd zookeeper postgres}
HOLD=${HOLD-1000 10000}
HOLD_FOR=${HOLD_FOR:-10s}
WARMUP=${WARMUP:-5s}
BASELINE=${BASELINE:-}
extra=("$@")
if [[ -n $BASELINE && ! -x $BASELINE ]]; then
    echo "bench.sh: BASELINE '$BASELINE' is not an executable file" >&2
    exit 2
fi

# Timeouts a benchmark on a loaded 2-core machine will not trip (the
# tests use 500 ms to 2 s so that an unreachable server fails fast). The
# ZooKeeper session timeout is the test server's maximum (20 ticks of
# 500 ms; the default, the 30 s ttl, would be cut to it anyway).
REDIS_OPTS="connect_timeout=5s&response_timeout=5s"
ETCD_OPTS="connect_timeout=5s&response_timeout=10s"
ZK_OPTS="connect_timeout=10s&session_timeout=10s"
PG_OPTS="connect_timeout=5s&response_timeout=10s"

read -r -a backends <<<"$BACKENDS"
servers=()
for backend in "${backends[@]}"; do
    case $backend in
    file | mem) ;;
    redis | redis-cluster | redis-sentinel | redlock | etcd | zookeeper | postgres) servers+=("$backend") ;;
    *)
        echo "bench.sh: unknown backend '$backend' in BACKENDS" \
            "(known: file mem redis redis-cluster redis-sentinel redlock etcd zookeeper postgres)" >&2
        exit 2
        ;;
    esac
done
if ((${#backends[@]} == 0)); then
    echo "bench.sh: BACKENDS is empty" >&2
    exit 2
fi

# Always every store, so that a subset does not rebuild with other
# features (etcd's needs protoc; see distlock-cli/Cargo.toml).
target="${CARGO_TARGET_DIR:-target}"
cargo build -q --release -p distlock-cli --features redis,etcd,zookeeper,postgres
bin="$target/release/distlock"
if ((${#servers[@]})); then
    cargo build -q --release -p distlock-testkit --bin distlock-test-servers
fi

work=$(mktemp -d)
servers_pid="" servers_in=""
cleanup() {
    local status=$?
    trap - EXIT INT TERM
    if [[ -n $servers_pid ]]; then
        # EOF on its stdin makes distlock-test-servers kill the servers;
        # SIGTERM does too, should the pipe still be shared somewhere.
        [[ -z $servers_in ]] || exec {servers_in}>&-
        kill -TERM "$servers_pid" 2>/dev/null || true
        wait "$servers_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

declare -A urls=([file]="file://$work/file" [mem]="mem://bench")
if ((${#servers[@]})); then
    coproc SERVERS { exec "$target/release/distlock-test-servers" "${servers[@]}"; }
    servers_in=${SERVERS[1]}
    servers_pid=$SERVERS_PID
    # Bash closes the coprocess's fds when it exits: keep our own copy of
    # its output so an error message is read to the end.
    exec {servers_out}<&"${SERVERS[0]}"
    ready=""
    while read -r -u "$servers_out" name url; do
        if [[ $name == ready ]]; then
            ready=1
            break
        fi
        case $name in
        redis | redis-cluster | redis-sentinel | redlock) urls[$name]="$url?$REDIS_OPTS" ;;
        etcd) urls[$name]="$url?$ETCD_OPTS" ;;
        zookeeper) urls[$name]="$url?$ZK_OPTS" ;;
        postgres) urls[$name]="$url?$PG_OPTS" ;;
        esac
    done
    if [[ -z $ready ]]; then
        echo "bench.sh: distlock-test-servers failed to start ${servers[*]} (see above)" >&2
        exit 1
    fi
fi

# One measurement of `binary` (ours or the baseline) under `title`.
run_one() {
    local binary=$1 title=$2 url=$3 keys=$4
    printf '\n=== %s ===\n' "$title"
    "$binary" --url "$url" bench --clients "$CLIENTS" --keys "$keys" --duration "$DURATION" "${extra[@]}"
}

runs=0
run() {
    local label=$1 url=$2 keys=$3
    local title="$label, $CLIENTS clients, $keys key(s), $DURATION"
    if [[ -z $BASELINE ]]; then
        run_one "$bin" "$title" "$url" "$keys"
        return
    fi
    # Ours and the baseline take turns going first, so neither always
    # meets a server the other has just warmed or filled.
    if ((runs++ % 2 == 0)); then
        run_one "$bin" "$title" "$url" "$keys"
        run_one "$BASELINE" "$title, baseline $BASELINE" "$url" "$keys"
    else
        run_one "$BASELINE" "$title, baseline $BASELINE" "$url" "$keys"
        run_one "$bin" "$title" "$url" "$keys"
    fi
}

if [[ $WARMUP != 0 ]]; then
    for backend in "${servers[@]}"; do
        for keys in 1 1000; do
            "$bin" --url "${urls[$backend]}" bench --clients "$CLIENTS" --keys "$keys" \
                --duration "$WARMUP" >/dev/null 2>&1 ||
                echo "bench.sh: warm-up of $backend on $keys key(s) failed (the runs below will say why)" >&2
        done
    done
fi

printf 'distlock bench on %s (%s cores), %s\n' "$(uname -srm)" "$(nproc)" "$(date -u +%FT%TZ)"
for keys in 1 1000; do
    for backend in "${backends[@]}"; do
        run "$backend" "${urls[$backend]}" "$keys"
    done
done

# What holding many locks costs (renewal / keepalive / heartbeat traffic and
# memory), on the stores that keep leases alive over the network, at each
# size in HOLD so that growth with the number of locks shows. Each run is
# alone: the counters cover every write of the process.
read -r -a holds <<<"$HOLD"
for held in "${holds[@]}"; do
    for backend in "${backends[@]}"; do
        case $backend in
        file | mem) continue ;;
        esac
        printf '\n=== %s, holding %s locks for %s ===\n' "$backend" "$held" "$HOLD_FOR"
        "$bin" --url "${urls[$backend]}&ttl=3s" bench --hold "$held" --hold-for "$HOLD_FOR" "${extra[@]}"
    done
done
