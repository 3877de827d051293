//! The long help texts of the subcommands (`distlock run --help` …).
//! They sit on the subcommands: set on the argument structs, the
//! variants' doc comments would replace them.

/// `distlock run --help`.
pub(super) const RUN_LONG_ABOUT: &str = "\
Takes the lock KEY, runs CMD while holding it (renewing it in the background), \
releases it when CMD exits, and exits with CMD's code.

CMD gets DISTLOCK_KEY, DISTLOCK_TOKEN (the fencing token), DISTLOCK_OWNER and \
DISTLOCK_NAMESPACE in its environment and inherits stdin/stdout/stderr.

CMD and every process it starts are one job, and the lock is released only when \
all of it is gone. CMD runs in a process group of its own (in the foreground of \
distlock's terminal, if distlock has one: Ctrl-C and Ctrl-Z reach CMD's processes). \
On Linux distlock is the child subreaper of the job, so processes that leave CMD's \
group (setsid, double-forking daemons) still belong to it. SIGINT, SIGTERM and \
SIGHUP sent to distlock are passed to the whole job, and a lost lock (--on-lost \
kill) sends it SIGTERM; whatever is left after --grace gets SIGKILL. If CMD exits \
leaving processes running, the lock is kept until they end (if a signal killed \
CMD, they are stopped). If distlock itself is SIGKILLed, the kernel kills CMD \
(Linux, --on-lost kill) but not what CMD started.";

/// `distlock elect --help`.
pub(super) const ELECT_LONG_ABOUT: &str = "\
Campaigns in the election NAME with --value, waits its turn (candidates are served \
in the store's queue order), runs CMD while leader, resigns when CMD exits, and \
exits with CMD's code. An election is the lock NAME: its holder is the leader, its \
fencing token the leader's term, its value the leader's value.

CMD gets the variables `run` sets (DISTLOCK_KEY is NAME, DISTLOCK_TOKEN the term) \
plus DISTLOCK_TERM, and inherits stdin/stdout/stderr. Signals are passed on as by \
`run`, and CMD with everything it starts is one job as for `run`: the leadership is \
given up only when all of it is gone. A leadership lost while CMD ran ends in exit \
code 76 whatever --on-lost says: `kill` stops the job at once, `ignore` lets it \
finish.";

/// `distlock leader --help`.
pub(super) const LEADER_LONG_ABOUT: &str = "\
Prints who leads the election NAME: `NAME: led by OWNER, term T, value \"V\"` or \
`NAME: no leader` (the value is quoted, with escapes, so that it stays on one \
line). Exits 0 either way.

With --watch it prints the current state, then one line per change of leader or \
of its value, pushed by the store, until SIGINT, SIGTERM or SIGHUP (exit 0): every \
change on memory, Redis (one instance, Cluster, Sentinel) and etcd; on files, \
Redlock, ZooKeeper and PostgreSQL changes closer together than one re-read may \
be merged (an intermediate leader may not appear). With \
--json each line is one object with exactly the fields name, value, term and owner \
(value, term and owner are null when nobody leads).";

/// `distlock bench --help`.
pub(super) const BENCH_LONG_ABOUT: &str = "\
Measures, in one run so that ratios hold on a noisy machine: uncontended \
lock+release latency against the store's raw floor (the same round trips without \
distlock), handoff latency from release() to the next waiter's lock(), and \
throughput with --clients clients on --keys keys, with Jain's fairness index over \
the clients. Locks live in a fresh namespace `bench-<random>`.

Leader election rows: failover after resign (resign() called -> the waiting \
candidate's campaign() returns) against two raw round trips (the store's raw \
lock+release); failover after a leader crash (ttl 1 s: a leaked lease on stores \
with per-lock leases, elsewhere a child `distlock elect` killed with SIGKILL); \
and observe latency (a change committed -> each of 16 observers \
notified, the slowest and each one) against one raw round trip.

With --hold N it measures instead what holding locks costs the client: one locker \
takes N distinct locks and, one second after the last is taken (so that work \
following each acquisition once is not counted), holds them for --hold-for while \
distlock reads its own write system calls and bytes written per second (renewals, lease keepalives, \
session heartbeats, runtime wake-ups; from /proc/self/io, Linux only, n/a \
elsewhere) and its resident memory per held lock (RSS before taking the locks and \
at the end of the window, over N). The counters cover every write of the distlock \
process, so --hold runs alone: it skips the other measurements and refuses their \
options. The URL's ttl sets the renewal rate. The kernel counts \
write/writev/pwrite, not send/sendmsg; the Redis, etcd and ZooKeeper clients \
write with the former.";

/// `distlock schema --help`.
pub(super) const SCHEMA_LONG_ABOUT: &str = "\
Prints the SQL that creates the PostgreSQL store's layout (schema, tables, \
indexes, functions and version row) in the schema the URL's `schema` option names \
(default `distlock`): for operators who create it themselves, with a role allowed \
to, and run distlock with create_schema=false. The text is the one the store runs \
on first use; running it twice changes nothing. Nothing is sent to the server.

Exits 2 naming the problem for a URL of another store, a bad URL or a bad schema \
name.";

/// The exit codes of `run` and `elect`.
pub(super) const RUN_EXIT_CODES: &str = "Exit codes:\n  \
                  CMD's own   CMD's exit code (128+N if CMD died of signal N)\n  \
                  75          not acquired (run) or not elected (elect) within --wait\n  \
                  76          the lock or leadership was lost while CMD ran (run: with --on-lost\n              \
                  kill; elect: always); also when the loss is only found at release:\n              \
                  CMD's work may have overlapped another holder's\n  \
                  69          the store is unavailable (refused, no answer, down)\n  \
                  77          permission denied: credentials or ACL refused, lock directory\n              \
                  not writable\n  \
                  126, 127    CMD could not be started, was not found\n  \
                  128+N       distlock got signal N while waiting\n  \
                  2           bad usage: arguments, key, value, URL; the URL points at another\n              \
                  kind of server, or its TLS settings cannot work\n  \
                  1           other errors";
