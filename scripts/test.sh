#!/usr/bin/env bash
# scripts/test.sh — the one test command of distlock.
#
#   scripts/test.sh                      # every test of the workspace
#   scripts/test.sh -- --nocapture       # extra arguments go to `cargo test`
#   scripts/test.sh -p lock-core         # ... including package selection
#
# What it does:
#   1. Makes sure the tools the tests need are there: protoc (to build the etcd
#      client), redis-server + redis-cli, etcd and etcdctl, ZooKeeper with a
#      Java runtime, the peers of the mixed-fleet tests (a JDK and Apache
#      Curator's jars, Python's kazoo), PostgreSQL (server programs:
#      initdb, postgres, pg_ctl, pg_basebackup; on Debian under
#      /usr/lib/postgresql/<major>/bin, the highest major is used) and
#      PgBouncer. On Debian/Ubuntu as root it installs whatever is missing with
#      apt-get (and runs `apt-get update` only when something is missing, so a
#      second run is fast). Elsewhere it prints what to install, or lets the
#      tests use servers that are already running (DISTLOCK_TEST_REDIS_URL /
#      DISTLOCK_TEST_ETCD_URL / DISTLOCK_TEST_ZK_URL / DISTLOCK_TEST_PG_URL,
#      e.g. from `docker compose up -d`, see docs/containers.md).
#   2. Runs `cargo test --workspace --all-features "$@"`.
#   3. Without arguments, runs every example of examples/ once (file store).
#
# The tests never use a system service started by a package install: the
# harness in distlock-testkit spawns its own servers on free loopback ports
# with temporary data directories (PostgreSQL and PgBouncer refuse root, so
# under root the harness runs them as the user `nobody`).
#
# Environment:
#   CI=true                      plain output (CARGO_TERM_COLOR=never), no
#                                incremental build caches (CARGO_INCREMENTAL=0)
#   DISTLOCK_TEST_REDIS_URL      use this Redis instead of spawning redis-server
#   DISTLOCK_TEST_ETCD_URL       use this etcd instead of spawning etcd
#   DISTLOCK_TEST_ZK_URL         use this ZooKeeper instead of spawning one
#   DISTLOCK_TEST_PG_URL         use this PostgreSQL (postgres://user:password@host:port/db)
#                                for the tests of a shared server instead of spawning
#                                one (fault, standby and PgBouncer tests still spawn theirs)
#   DISTLOCK_TEST_DATA_ROOT      where spawned servers keep their data (default:
#                                /dev/shm when it has 2 GiB free, else the temp dir)
#   DISTLOCK_TEST_SETUP_ONLY=1   check/install the tools, print the banner, and
#                                stop before running cargo
set -euo pipefail

script_dir=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(cd -- "$script_dir/.." && pwd)
cd "$repo_root"

if [[ "${CI:-}" == "true" ]]; then
    export CARGO_TERM_COLOR=never
    # A one-off build gains nothing from incremental caches, which take
    # over a GB of a machine's disk.
    export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
fi

say() { printf '[test.sh] %s\n' "$*" >&2; }
have() { command -v "$1" >/dev/null 2>&1; }

# Where Debian's zookeeper/libzookeeper-java packages put the server.
ZK_DEBIAN_JAR=/usr/share/java/zookeeper.jar
ZK_DEBIAN_SCRIPT=/usr/share/zookeeper/bin/zkServer.sh

# etcd 3.4 refuses to start on arm64 unless told that is fine.
if [[ "$(uname -m)" == "aarch64" && -z "${ETCD_UNSUPPORTED_ARCH:-}" ]]; then
    export ETCD_UNSUPPORTED_ARCH=arm64
fi

protobuf_includes_present() {
    [[ -f /usr/include/google/protobuf/descriptor.proto ]] && return 0
    [[ -n "${PROTOC_INCLUDE:-}" && -f "$PROTOC_INCLUDE/google/protobuf/descriptor.proto" ]] && return 0
    [[ -f /usr/local/include/google/protobuf/descriptor.proto ]]
}

# The dir of PostgreSQL's server programs: Debian's highest major version, else
# wherever initdb is on PATH. Prints nothing when there is none.
postgres_bin_dir() {
    local dir best="" best_major=-1 major
    for dir in /usr/lib/postgresql/*/bin; do
        major=${dir#/usr/lib/postgresql/}
        major=${major%%/*}
        [[ "$major" =~ ^[0-9]+$ && -x "$dir/postgres" && -x "$dir/initdb" ]] || continue
        if ((major > best_major)); then
            best_major=$major
            best=$dir
        fi
    done
    if [[ -z "$best" ]] && have initdb; then
        best=$(dirname -- "$(command -v initdb)")
    fi
    printf '%s' "$best"
}

pgbouncer_program() {
    if have pgbouncer; then
        command -v pgbouncer
    elif [[ -x /usr/sbin/pgbouncer ]]; then
        printf '%s' /usr/sbin/pgbouncer
    fi
}

zookeeper_present() {
    [[ -f "$ZK_DEBIAN_JAR" && -f "$ZK_DEBIAN_SCRIPT" ]] && return 0
    [[ -n "${ZOOKEEPER_HOME:-}" ]] && compgen -G "$ZOOKEEPER_HOME/lib/zookeeper-*.jar" >/dev/null && return 0
    have zkServer.sh || have zkServer
}

# ---------------------------------------------------------------------------
# 1. What is missing?
# Each entry: "<debian package>|<what it provides>|<env var that replaces it>"
# An empty env var field means nothing can stand in for it.
# ---------------------------------------------------------------------------
missing=()
if ! have protoc && ! [[ -n "${PROTOC:-}" && -x "${PROTOC}" ]]; then
    missing+=("protobuf-compiler|protoc (build-time, for the etcd client)|")
fi
# protoc alone cannot build the etcd client: it imports the well-known types
# (google/protobuf/descriptor.proto), which Debian ships in libprotobuf-dev, a
# mere Recommends of protobuf-compiler that --no-install-recommends skips.
if ! protobuf_includes_present; then
    missing+=("libprotobuf-dev|protobuf well-known types (google/protobuf/*.proto)|")
fi
if ! have redis-server; then
    missing+=("redis-server|redis-server|DISTLOCK_TEST_REDIS_URL")
fi
if ! have redis-cli; then
    missing+=("redis-tools|redis-cli|DISTLOCK_TEST_REDIS_URL")
fi
if ! have etcd; then
    missing+=("etcd-server|etcd|DISTLOCK_TEST_ETCD_URL")
fi
# etcdctl is the peer of the etcd layout=concurrency tests: nothing stands in.
if ! have etcdctl; then
    missing+=("etcd-client|etcdctl (the peer of the etcd concurrency-layout tests)|")
fi
if ! zookeeper_present; then
    # Depends (not Recommends) on default-jre, so Java comes with it.
    missing+=("zookeeper|ZooKeeper server (+ Java runtime)|DISTLOCK_TEST_ZK_URL")
elif ! have java; then
    missing+=("default-jre-headless|java (to run ZooKeeper)|DISTLOCK_TEST_ZK_URL")
fi
# The Curator peer tests compile a small Java program against Debian's
# Curator jars: a JDK (javac) and the recipes, nothing stands in for them.
curator_present() {
    local jar
    for jar in curator-recipes curator-framework curator-client; do
        [[ -f "/usr/share/java/$jar.jar" ]] || return 1
    done
}
if ! have javac; then
    missing+=("default-jdk-headless|javac (builds the Curator peer of the ZooKeeper tests)|")
fi
if ! curator_present; then
    missing+=("libcurator-recipes-java|Apache Curator's recipes (the ZooKeeper tests' Curator peer)|")
fi
# kazoo is the Python peer of the ZooKeeper curator-layout tests, run by
# Debian's python3 (where python3-kazoo installs it).
kazoo_present() { [[ -x /usr/bin/python3 ]] && /usr/bin/python3 -c 'import kazoo.recipe.lock' 2>/dev/null; }
if ! kazoo_present; then
    missing+=("python3-kazoo|kazoo (the ZooKeeper tests' Python peer)|")
fi
if [[ -z "$(postgres_bin_dir)" ]]; then
    missing+=("postgresql|PostgreSQL server (initdb, postgres, pg_basebackup)|DISTLOCK_TEST_PG_URL")
fi
if [[ -z "$(pgbouncer_program)" ]]; then
    # The PgBouncer tests put one in front of a spawned server: no variable
    # stands in for it.
    missing+=("pgbouncer|pgbouncer|")
fi
pkg_of() { printf '%s' "${1%%|*}"; }
what_of() { local r=${1#*|}; printf '%s' "${r%%|*}"; }
var_of() { printf '%s' "${1##*|}"; }

is_root() { [[ "$(id -u)" -eq 0 ]]; }
is_debian_like() { [[ -f /etc/debian_version ]] || have apt-get; }

# apt-get update takes the lists lock, which DPkg::Lock::Timeout does not cover
# on every apt version: if another apt holds it, wait (up to ~5 minutes).
apt_update() {
    local i out rc
    for i in $(seq 1 60); do
        rc=0
        out=$(apt-get -q -o DPkg::Lock::Timeout=300 update 2>&1) || rc=$?
        printf '%s\n' "$out"
        if ((rc == 0)); then
            return 0
        fi
        if ! grep -qiE 'could not get lock|unable to lock' <<<"$out"; then
            say "apt-get update failed"
            return "$rc"
        fi
        say "apt is busy (another apt-get running?), waiting 5 s ($i/60)"
        sleep 5
    done
    say "apt-get update: gave up waiting for the apt lock"
    return 1
}

apt_install() {
    # zookeeper Depends on default-jre, so --no-install-recommends still brings
    # a Java runtime; the check after the install makes sure of it.
    DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=300 \
        install -y --no-install-recommends "$@"
}

if ((${#missing[@]} > 0)); then
    if is_root && is_debian_like && have apt-get; then
        pkgs=()
        for m in "${missing[@]}"; do
            pkgs+=("$(pkg_of "$m")")
        done
        say "missing: ${pkgs[*]} — installing with apt-get"
        apt_update
        apt_install "${pkgs[@]}"
        # Re-check: anything still missing is an error.
        still=()
        have protoc || [[ -n "${PROTOC:-}" && -x "${PROTOC}" ]] || still+=(protoc)
        protobuf_includes_present || still+=(libprotobuf-dev)
        have redis-server || still+=(redis-server)
        have redis-cli || still+=(redis-cli)
        have etcd || still+=(etcd)
        have etcdctl || still+=(etcdctl)
        zookeeper_present || still+=(zookeeper)
        have java || still+=(java)
        have javac || still+=(javac)
        curator_present || still+=(libcurator-recipes-java)
        kazoo_present || still+=(python3-kazoo)
        [[ -n "$(postgres_bin_dir)" ]] || still+=(postgresql)
        [[ -n "$(pgbouncer_program)" ]] || still+=(pgbouncer)
        if ((${#still[@]} > 0)); then
            say "still missing after apt-get install: ${still[*]}"
            exit 1
        fi
        # Under some init systems the packages start their own services. The
        # tests never use them (they spawn servers on free ports); just say so.
        running=()
        pgrep -x redis-server >/dev/null 2>&1 && running+=("redis-server")
        pgrep -x etcd >/dev/null 2>&1 && running+=("etcd")
        pgrep -f 'org\.apache\.zookeeper\.server' >/dev/null 2>&1 && running+=("zookeeper")
        pgrep -x postgres >/dev/null 2>&1 && running+=("postgres")
        pgrep -x pgbouncer >/dev/null 2>&1 && running+=("pgbouncer")
        if ((${#running[@]} > 0)); then
            say "note: system service(s) running: ${running[*]} (default ports 6379/2379/2181/5432/6432)." \
                "The tests do not use them and they are left alone."
        fi
    elif ((${#missing[@]} > 0)); then
        # Cannot install here: tell exactly what is needed.
        pkgs=()
        for m in "${missing[@]}"; do
            pkgs+=("$(pkg_of "$m")")
        done
        say "missing tools:"
        for m in "${missing[@]}"; do
            say "  - $(what_of "$m")   (Debian/Ubuntu package: $(pkg_of "$m"))"
        done
        if is_debian_like; then
            say "install them with:"
            say "  sudo apt-get update && sudo apt-get install -y ${pkgs[*]}"
        else
            say "install them with your package manager, e.g."
            say "  Debian/Ubuntu:  apt-get install -y ${pkgs[*]}"
            say "  macOS:          brew install protobuf redis etcd zookeeper postgresql pgbouncer"
        fi
        say "or run the servers elsewhere (e.g. 'docker compose up -d', see docs/containers.md) and set:"
        say "  DISTLOCK_TEST_REDIS_URL=redis://127.0.0.1:6379"
        say "  DISTLOCK_TEST_ETCD_URL=etcd://127.0.0.1:2379"
        say "  DISTLOCK_TEST_ZK_URL=zk://127.0.0.1:2181"
        say "  DISTLOCK_TEST_PG_URL=postgres://user:password@127.0.0.1:5432/postgres"
        # Continue only if every missing server has its variable set.
        uncovered=()
        for m in "${missing[@]}"; do
            v=$(var_of "$m")
            if [[ -z "$v" || -z "${!v:-}" ]]; then
                uncovered+=("$(what_of "$m")")
            fi
        done
        if ((${#uncovered[@]} > 0)); then
            say "cannot run the tests without: ${uncovered[*]}"
            exit 1
        fi
        say "continuing: the missing servers are replaced by the DISTLOCK_TEST_*_URL variables"
    fi
fi

if ! have cargo; then
    say "cargo not found: install Rust (https://rustup.rs) first"
    exit 1
fi

# ---------------------------------------------------------------------------
# 2. Banner
# ---------------------------------------------------------------------------
# First line of a command's output (stdout and stderr); never fails the script.
ver() {
    local out
    out=$("$@" 2>&1) || true
    out=${out%%$'\n'*}
    printf '%s' "${out%$'\r'}"
}
ver_redis="not installed"
have redis-server && ver_redis=$(ver redis-server --version)
ver_etcd="not installed"
have etcd && ver_etcd=$(ver etcd --version)
ver_java="not installed"
have java && ver_java=$(ver java -version)
ver_protoc="not installed"
if [[ -n "${PROTOC:-}" && -x "${PROTOC}" ]]; then
    ver_protoc="$(ver "$PROTOC" --version) (PROTOC=$PROTOC)"
elif have protoc; then
    ver_protoc=$(ver protoc --version)
fi
ver_zk="not installed"
if [[ -f "$ZK_DEBIAN_JAR" ]] && have java; then
    ver_zk=$(ver java -cp "$ZK_DEBIAN_JAR" org.apache.zookeeper.version.VersionInfoMain)
    [[ -n "$ver_zk" ]] || ver_zk="present ($ZK_DEBIAN_JAR)"
elif zookeeper_present; then
    ver_zk="present"
fi

pg_bin=$(postgres_bin_dir)
ver_pg="not installed"
[[ -n "$pg_bin" ]] && ver_pg="$(ver "$pg_bin/postgres" --version) ($pg_bin)"
pgbouncer_bin=$(pgbouncer_program)
ver_pgbouncer="not installed"
[[ -n "$pgbouncer_bin" ]] && ver_pgbouncer=$(ver "$pgbouncer_bin" --version)

ver_etcdctl=$(ver etcdctl version)
ver_curator="not installed"
curator_present && ver_curator=$(dpkg-query -W -f '${Version}' libcurator-recipes-java 2>/dev/null || echo present)
ver_kazoo="not installed"
kazoo_present && ver_kazoo=$(/usr/bin/python3 -c 'import kazoo.version as v; print(v.__version__)' 2>/dev/null || echo present)

echo "== distlock tests =="
echo "   redis:     $ver_redis${DISTLOCK_TEST_REDIS_URL:+  (tests use DISTLOCK_TEST_REDIS_URL=$DISTLOCK_TEST_REDIS_URL)}"
echo "   etcd:      $ver_etcd${DISTLOCK_TEST_ETCD_URL:+  (tests use DISTLOCK_TEST_ETCD_URL=$DISTLOCK_TEST_ETCD_URL)}"
echo "   zookeeper: $ver_zk${DISTLOCK_TEST_ZK_URL:+  (tests use DISTLOCK_TEST_ZK_URL=$DISTLOCK_TEST_ZK_URL)}"
echo "   postgres:  $ver_pg${DISTLOCK_TEST_PG_URL:+  (shared-server tests use DISTLOCK_TEST_PG_URL)}"
echo "   pgbouncer: $ver_pgbouncer"
echo "   java:      $ver_java"
echo "   peers:     $ver_etcdctl; Curator $ver_curator; kazoo $ver_kazoo"
echo "   protoc:    $ver_protoc"
echo "   cargo:     $(ver cargo --version)"

if [[ "${DISTLOCK_TEST_SETUP_ONLY:-}" == "1" ]]; then
    say "DISTLOCK_TEST_SETUP_ONLY=1: tools are ready, not running cargo test"
    exit 0
fi

# ---------------------------------------------------------------------------
# 3. Test
# ---------------------------------------------------------------------------
echo "== cargo test --workspace --all-features $* =="
cargo test --workspace --all-features "$@"

# ---------------------------------------------------------------------------
# 4. The examples (full runs only): each runs once against the file store
#    and checks what it shows; built with the test run's features, so
#    nothing is compiled twice.
# ---------------------------------------------------------------------------
if [[ $# -eq 0 ]]; then
    echo "== examples =="
    # A plain `cargo build` / `cargo run --example` at the root must not
    # need protoc: the workspace's default members leave etcd's client out.
    if cargo tree -q -e all -i etcd-client >/dev/null 2>&1; then
        say "the workspace's default members pull in etcd-client (and so protoc); see default-members in Cargo.toml"
        exit 1
    fi
    cargo build -q --workspace --all-features --examples
    # fenced_update (lock-postgres) starts a throwaway PostgreSQL of its own.
    for example in cron_job leader_worker fenced_sqlite http_busy prometheus fenced_update; do
        if env -u DISTLOCK_URL "${CARGO_TARGET_DIR:-target}/debug/examples/$example" >/dev/null; then
            echo "   $example: ok"
        else
            say "example $example failed (run: cargo run --example $example)"
            exit 1
        fi
    done
fi

# ---------------------------------------------------------------------------
# 5. The torture runner's short schedule (full runs only): every topology's
#    row of the fault classes its docs call safe, and one row per class they
#    do not promise, each class injected at least once; fails when a row the
#    docs call safe was not. Two schedules (Redis and files; etcd, ZooKeeper
#    and PostgreSQL) run side by side: the rows mostly wait for their faults.
#    RELIABILITY.md holds a long run.
# ---------------------------------------------------------------------------
if [[ $# -eq 0 ]]; then
    echo "== distlock-torture --mix, two schedules side by side =="
    cargo build -q --workspace --all-features --bins
    torture="${CARGO_TARGET_DIR:-target}/debug/distlock-torture"
    torture_logs=$(mktemp -d)
    "$torture" --store file,redis,redis+cluster,redis+sentinel,redlock --mix --duration 90s \
        >"$torture_logs/redis" 2>&1 &
    redis_schedule=$!
    "$torture" --store etcd,zk,postgres --mix --duration 90s \
        >"$torture_logs/others" 2>&1 &
    others_schedule=$!
    torture_failed=0
    wait "$redis_schedule" || torture_failed=1
    wait "$others_schedule" || torture_failed=1
    cat "$torture_logs/redis" "$torture_logs/others"
    rm -rf -- "$torture_logs"
    if ((torture_failed)); then
        say "distlock-torture: a schedule failed (see above)"
        exit 1
    fi
fi
