//! Read-write locks under faults: a holder frozen (`SIGSTOP`) past its
//! lease in a child process is replaced by the other kind of holder; once
//! resumed it is told it lost, and the access it still makes with its old
//! token is refused by a fencing register. At no time do a reader and a
//! writer hold at once — which the register, not the test's own
//! bookkeeping, shows.
//!
//! - [`frozen_writer_is_replaced`]: a writer in a child process holds;
//!   readers of this process queue behind it (seen waiting in the store,
//!   not by sleeping); the writer is frozen past its lease; the readers
//!   get in with tokens above the writer's; the resumed writer is told it
//!   lost, and its late writes are refused.
//! - [`frozen_reader_is_replaced`]: the same with a reader in the child
//!   and a writer here; the resumed reader's fenced read-check (no writer
//!   with a higher token has written) is flagged.
//! - [`frozen_holder_is_kept`]: for a store whose locks never expire (the
//!   file store, where the kernel keeps a frozen process's `flock`), the
//!   replacement cannot happen; what must hold instead: the other kind
//!   stays out for as long as the holder is frozen, and gets in once the
//!   holder's process is gone.
//!
//! **The register** ([`RwRegister`]) is the resource the holders use,
//! each access carrying the holder's fencing token, as a storage service
//! that checks tokens would: a write is refused when a higher token has
//! been seen (a higher write, through the testkit's
//! [`FencedResource`]; or a read of a higher token, by the register's read
//! fence: that reader got the lock after the writer lost it); a read is
//! flagged when a writer with a higher token has written (the reader's
//! lock was taken by that writer). Every access is logged in order, so
//! that [`RwRegister::exclusive`] can check the spans of accepted accesses:
//! no writer's span meets another holder's, and they follow token order.
//! Because the register refuses what would overlap, an overlap shows as a
//! refusal: the scenarios accept refusals only from the frozen holder, and
//! only after it was resumed.
//!
//! **The child** is this test binary run again through
//! [`TestChild`], executing an ignored test of the store's test binary
//! that calls [`child_holder`]; it is told what to hold by an environment
//! variable (`MODE KEY URL`, see [`HoldMode::split`]) and reports on its
//! stdout. A store's test binary:
//!
//! ```ignore
//! #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
//! #[ignore = "child process of the read-write fault tests"]
//! async fn rw_child() {
//!     rw_faults::child_holder(CHILD_VAR, |url| async move { connect(&url).await }).await;
//! }
//! ```

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use lock_core::{HoldKind, LockError, LockOptions, Locker};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::child::{HoldMode, TestChild};
use crate::fencing::{FencedResource, StaleToken};
use crate::{eventually, pause_group, resume_group, signal_group};

/// How long requests may take to show as waiting in the store, and the
/// child to report.
const SHOW_WITHIN: Duration = Duration::from_secs(10);
/// How often a holder of this process uses the register.
const ACCESS_EVERY: Duration = Duration::from_millis(20);
/// How often the child uses the register.
const CHILD_ACCESS_EVERY: Duration = Duration::from_millis(50);
/// What starts every line the child reports on (the test harness may
/// print its own text on the same stdout).
const CHILD_LINE: &str = "rw-child:";

// ------------------------------------------------------------ register

/// What a holder does with the resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Access {
    /// A read, as a read lock's holder makes.
    Read,
    /// A write, as a write lock's holder makes.
    Write,
}

impl Access {
    /// What a holder in `mode` does: reads with a read lock, writes
    /// otherwise.
    pub fn of(mode: HoldMode) -> Self {
        match mode {
            HoldMode::Read => Self::Read,
            HoldMode::Lock | HoldMode::Write => Self::Write,
        }
    }
}

/// One access presented to an [`RwRegister`], as it logged it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Op {
    /// Its place in the register's log (0 first).
    pub seq: usize,
    /// Who made it, as named by the caller.
    pub who: String,
    /// A read or a write.
    pub access: Access,
    /// The fencing token it came with.
    pub token: u64,
    /// `None` if accepted; else the higher token that refused it.
    pub refused: Option<StaleToken>,
}

impl Op {
    /// `Ok` if accepted, else the token that refused it.
    pub fn outcome(&self) -> Result<(), StaleToken> {
        self.refused.map_or(Ok(()), Err)
    }
}

/// The accepted accesses of one token: from the first to the last, by
/// place in the register's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Span {
    /// Read or write.
    pub access: Access,
    /// The token.
    pub token: u64,
    /// Who made them.
    pub who: String,
    /// The place of the first.
    pub first: usize,
    /// The place of the last.
    pub last: usize,
}

/// A resource read and written under a read-write lock, checking every
/// access's fencing token (see the [module docs](self)). Clones share one
/// state.
#[derive(Clone, Debug, Default)]
pub struct RwRegister {
    writes: FencedResource,
    log: Arc<Mutex<Log>>,
}

#[derive(Debug, Default)]
struct Log {
    /// The highest token of an accepted read.
    highest_read: Option<u64>,
    ops: Vec<Op>,
}

impl RwRegister {
    /// An empty register.
    pub fn new() -> Self {
        Self::default()
    }

    /// A write by `who` with `token`: refused when a read with a higher
    /// token was accepted (the read fence), or by the writes'
    /// [`FencedResource`] (a higher write).
    pub fn write(&self, who: &str, token: u64) -> Result<(), StaleToken> {
        self.present(who, Access::Write, token).outcome()
    }

    /// A read by `who` with `token`, checking that no writer with a
    /// higher token has written: flagged (`Err`) if one has.
    pub fn read(&self, who: &str, token: u64) -> Result<(), StaleToken> {
        self.present(who, Access::Read, token).outcome()
    }

    /// An access of either kind, as the register logged it.
    pub fn present(&self, who: &str, access: Access, token: u64) -> Op {
        let mut log = self.log();
        let result = match access {
            Access::Write => match log.highest_read.filter(|&read| token < read) {
                Some(highest) => Err(StaleToken {
                    presented: token,
                    highest,
                }),
                None => self.writes.write(token, who),
            },
            Access::Read => match self.writes.highest().filter(|&write| write > token) {
                Some(highest) => Err(StaleToken {
                    presented: token,
                    highest,
                }),
                None => {
                    log.highest_read = log.highest_read.max(Some(token));
                    Ok(())
                }
            },
        };
        let op = Op {
            seq: log.ops.len(),
            who: who.to_owned(),
            access,
            token,
            refused: result.err(),
        };
        log.ops.push(op.clone());
        op
    }

    /// The writes' fencing resource: the highest token written, the last
    /// write, how many were accepted and rejected by it.
    pub fn writes(&self) -> &FencedResource {
        &self.writes
    }

    /// Every access so far, in order.
    pub fn ops(&self) -> Vec<Op> {
        self.log().ops.clone()
    }

    /// The place the next access will take in the log.
    pub fn next_seq(&self) -> usize {
        self.log().ops.len()
    }

    /// The accesses refused or flagged so far.
    pub fn refused(&self) -> Vec<Op> {
        let log = self.log();
        log.ops
            .iter()
            .filter(|op| op.refused.is_some())
            .cloned()
            .collect()
    }

    /// The span of each token's accepted accesses, by token.
    pub fn spans(&self) -> Vec<Span> {
        let mut spans: BTreeMap<(u64, Access), Span> = BTreeMap::new();
        for op in self.log().ops.iter().filter(|op| op.refused.is_none()) {
            spans
                .entry((op.token, op.access))
                .and_modify(|span| span.last = op.seq)
                .or_insert_with(|| Span {
                    access: op.access,
                    token: op.token,
                    who: op.who.clone(),
                    first: op.seq,
                    last: op.seq,
                });
        }
        spans.into_values().collect()
    }

    /// `Ok` when the accepted accesses show no reader beside a writer and
    /// no two writers at once: every writer's span and every other span
    /// are apart, the lower token's first. `Err` names the pair.
    pub fn exclusive(&self) -> Result<(), String> {
        let spans = self.spans();
        for (i, a) in spans.iter().enumerate() {
            for b in &spans[i + 1..] {
                let apart = a.token == b.token
                    || (a.access == Access::Read && b.access == Access::Read)
                    || (a.token < b.token && a.last < b.first)
                    || (b.token < a.token && b.last < a.first);
                if !apart {
                    return Err(format!(
                        "{} ({:?}, token {}, accesses {}..={}) and {} ({:?}, token {}, \
                         accesses {}..={}) held at once",
                        a.who,
                        a.access,
                        a.token,
                        a.first,
                        a.last,
                        b.who,
                        b.access,
                        b.token,
                        b.first,
                        b.last
                    ));
                }
            }
        }
        Ok(())
    }

    fn log(&self) -> MutexGuard<'_, Log> {
        // Updated in one step under the lock: valid even if poisoned.
        self.log.lock().unwrap_or_else(|e| e.into_inner())
    }
}

// ------------------------------------------------------------ the child

/// The body of the child holder: run by an ignored test of the store's
/// test binary (see the [module docs](self)). Does nothing unless `var`
/// is set (the ignored test run on its own).
///
/// With `var` = `MODE KEY URL` it connects with `connect(URL)`, takes
/// `KEY` in `MODE` ([`HoldMode`]: `read`, `write`, or `lock`), says
/// `HELD <mode> <token>`, then every 50 ms makes its access — says `READ
/// <token>` or `WRITE <token>`, which the parent presents to its
/// register — and only then looks at its guard (work first: the first
/// access after a freeze is one a holder makes before it hears of its
/// loss, which is what fencing is for). Once the guard reports the loss
/// it says `LOST <reason>` (the [`LossReason`](lock_core::LossReason)'s
/// name), releases and says `RELEASE released|lost|error <e>`, then waits
/// to be killed.
pub async fn child_holder<F, Fut>(var: &str, connect: F)
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = Locker>,
{
    let Ok(spec) = std::env::var(var) else {
        return;
    };
    let (mode, rest) = HoldMode::split(&spec);
    let (key, url) = rest
        .split_once(' ')
        .unwrap_or_else(|| panic!("{var}: MODE KEY URL, not {spec:?}"));
    let locker = connect(url.to_owned()).await;
    let guard = match mode.take(&locker, key, LockOptions::new()).await {
        Ok(guard) => guard,
        Err(error) => {
            say(&format!("FAILED {error}"));
            return;
        }
    };
    let token = guard.token().get();
    say(&format!("HELD {mode} {token}"));
    let access = match Access::of(mode) {
        Access::Read => "READ",
        Access::Write => "WRITE",
    };
    let reason = loop {
        tokio::time::sleep(CHILD_ACCESS_EVERY).await;
        say(&format!("{access} {token}"));
        if let Some(reason) = guard.loss_signal().loss_reason() {
            break reason;
        }
    };
    say(&format!("LOST {reason:?}"));
    let outcome = match guard.release().await {
        Ok(()) => "released".to_owned(),
        Err(LockError::Lost { .. }) => "lost".to_owned(),
        Err(error) => format!("error {error}"),
    };
    say(&format!("RELEASE {outcome}"));
    std::future::pending::<()>().await
}

fn say(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{CHILD_LINE} {line}");
    let _ = out.flush();
}

/// Which ignored test of this binary runs the child, told what to hold
/// through which variable, and the URL it connects with.
#[derive(Clone, Copy, Debug)]
pub struct ChildRun<'a> {
    /// The ignored test calling [`child_holder`].
    pub test: &'a str,
    /// The variable it reads.
    pub var: &'a str,
    /// The locker URL: the same store and namespace as the parent's
    /// lockers.
    pub url: &'a str,
}

/// What the child reported, its accesses as the register judged them.
#[derive(Debug)]
enum Event {
    Held(HoldMode, u64),
    Access(Op),
    Lost(String),
    Released(String),
    Failed(String),
}

/// The child holder, its lines turned into [`Event`]s by a task of its
/// own that presents its accesses to the register as they come.
struct Child {
    process: TestChild,
    who: String,
    events: mpsc::UnboundedReceiver<Event>,
}

impl Child {
    async fn spawn(run: &ChildRun<'_>, mode: HoldMode, key: &str, register: &RwRegister) -> Self {
        assert!(!key.contains(' '), "a child's key has no spaces: {key:?}");
        let spec = mode.spec(&format!("{key} {}", run.url));
        let mut process = TestChild::spawn(run.test, run.var, &spec).await;
        let (_, empty) = mpsc::unbounded_channel();
        let mut lines = std::mem::replace(&mut process.lines, empty);
        let who = format!("the child {}", noun(mode));
        let (tx, events) = mpsc::unbounded_channel();
        let (register, name) = (register.clone(), who.clone());
        tokio::spawn(async move {
            while let Some(line) = lines.recv().await {
                let Some((_, said)) = line.split_once(CHILD_LINE) else {
                    continue;
                };
                let event = parse_event(said.trim(), &name, &register);
                if tx.send(event).is_err() {
                    return;
                }
            }
        });
        Self {
            process,
            who,
            events,
        }
    }

    fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// The next event within `limit`.
    async fn next(&mut self, limit: Duration) -> Event {
        let who = &self.who;
        match tokio::time::timeout(limit, self.events.recv()).await {
            Ok(Some(Event::Failed(error))) => panic!("{who} failed to take its lock: {error}"),
            Ok(Some(event)) => event,
            Ok(None) => panic!("{who} exited"),
            Err(_) => panic!("{who} said nothing for {limit:?}"),
        }
    }

    /// Its token, once it holds in `mode`, and its first access, which
    /// must have been accepted.
    async fn holding(&mut self, mode: HoldMode) -> u64 {
        // Started, connected and holding: a process start and a session.
        let token = match self.next(SHOW_WITHIN * 2).await {
            Event::Held(held, token) if held == mode => token,
            other => panic!("{} said {other:?} before it held", self.who),
        };
        match self.next(SHOW_WITHIN).await {
            Event::Access(op) if op.refused.is_none() => token,
            other => panic!("{} (token {token}): {other:?} first", self.who),
        }
    }

    /// Every event since the last call, none waited for.
    fn said_so_far(&mut self) -> Vec<Event> {
        let mut events = Vec::new();
        while let Ok(event) = self.events.try_recv() {
            events.push(event);
        }
        events
    }

    /// What it did from now until it released after hearing its loss,
    /// within `limit`.
    async fn until_released(&mut self, limit: Duration) -> Resumed {
        let deadline = tokio::time::Instant::now() + limit;
        let (mut accesses, mut lost): (Vec<Op>, _) = (Vec::new(), None);
        loop {
            let event = tokio::time::timeout_at(deadline, self.events.recv()).await;
            let Ok(Some(event)) = event else {
                let refused = accesses.iter().filter(|op| op.refused.is_some()).count();
                panic!(
                    "{} did not hear its loss and release within {limit:?} of its resume \
                     (heard: {lost:?}): it went on as if it held, {} accesses since, {refused} of \
                     them refused by the register; the first: {:?}",
                    self.who,
                    accesses.len(),
                    accesses.first()
                );
            };
            match event {
                Event::Access(op) => accesses.push(op),
                Event::Lost(reason) => lost = Some(reason),
                Event::Released(release) => {
                    let lost = lost
                        .unwrap_or_else(|| panic!("{} released without hearing a loss", self.who));
                    return Resumed {
                        accesses,
                        lost,
                        release,
                    };
                }
                other => panic!("{}: {other:?} after it was resumed", self.who),
            }
        }
    }
}

fn parse_event(said: &str, who: &str, register: &RwRegister) -> Event {
    let (word, rest) = said.split_once(' ').unwrap_or((said, ""));
    let token = |text: &str| -> u64 {
        text.parse()
            .unwrap_or_else(|_| panic!("{who}: no token in {said:?}"))
    };
    match word {
        "HELD" => {
            let (mode, token_text) = rest.split_once(' ').unwrap_or_default();
            let mode = HoldMode::parse(mode).unwrap_or_else(|| panic!("{who}: {said:?}"));
            Event::Held(mode, token(token_text))
        }
        "READ" | "WRITE" => {
            let access = if word == "READ" {
                Access::Read
            } else {
                Access::Write
            };
            Event::Access(register.present(who, access, token(rest)))
        }
        "LOST" => Event::Lost(rest.to_owned()),
        "RELEASE" => Event::Released(rest.to_owned()),
        "FAILED" => Event::Failed(rest.to_owned()),
        _ => panic!("{who} said {said:?}"),
    }
}

/// What a resumed child did until it released.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resumed {
    /// Its accesses after it was resumed, as the register judged them.
    pub accesses: Vec<Op>,
    /// The [`LossReason`](lock_core::LossReason) it heard, by name.
    pub lost: String,
    /// How its release ended: `lost` (what it must be), `released`, or
    /// `error <e>`.
    pub release: String,
}

// ------------------------------------------------------------ holders here

/// A holder of this process: takes its lock in a task of its own, then
/// uses the register every 20 ms until stopped, and releases.
struct Holder {
    who: String,
    granted: Arc<OnceLock<Result<(u64, Instant), String>>>,
    stop: Arc<AtomicBool>,
    task: JoinHandle<HolderEnd>,
}

/// How a [`Holder`] ended.
#[derive(Debug)]
struct HolderEnd {
    refused: Vec<StaleToken>,
    lost: Option<lock_core::LossReason>,
    released: Result<(), LockError>,
}

impl Holder {
    fn spawn(
        locker: &Locker,
        key: &str,
        mode: HoldMode,
        register: &RwRegister,
        (who, wait): (String, Duration),
    ) -> Self {
        let granted = Arc::new(OnceLock::new());
        let stop = Arc::new(AtomicBool::new(false));
        let (locker, key, register) = (locker.clone(), key.to_owned(), register.clone());
        let (got, stopped, name) = (granted.clone(), stop.clone(), who.clone());
        let task = tokio::spawn(async move {
            let guard = match mode
                .take(&locker, &key, LockOptions::new().wait(wait))
                .await
            {
                Ok(guard) => guard,
                Err(error) => {
                    let _ = got.set(Err(error.to_string()));
                    return HolderEnd {
                        refused: Vec::new(),
                        lost: None,
                        released: Err(error),
                    };
                }
            };
            let token = guard.token().get();
            let _ = got.set(Ok((token, Instant::now())));
            let mut refused = Vec::new();
            loop {
                if let Some(stale) = register.present(&name, Access::of(mode), token).refused {
                    refused.push(stale);
                }
                if stopped.load(Ordering::SeqCst) {
                    break;
                }
                tokio::time::sleep(ACCESS_EVERY).await;
            }
            let lost = guard.loss_signal().loss_reason();
            HolderEnd {
                refused,
                lost,
                released: guard.release().await,
            }
        });
        Self {
            who,
            granted,
            stop,
            task,
        }
    }

    /// Panics if it got its lock: `what` says beside whom.
    fn assert_out(&self, what: &str) {
        if let Some(granted) = self.granted.get() {
            match granted {
                Ok((token, _)) => panic!("{} got in with token {token} {what}", self.who),
                Err(error) => panic!("{} failed: {error}", self.who),
            }
        }
    }

    /// Its token and when it got it, within `limit`.
    async fn granted(&self, limit: Duration) -> (u64, Instant) {
        let what = format!("{} to get in (its lock's holder frozen or gone)", self.who);
        let granted = eventually(limit, &what, || async { self.granted.get().cloned() })
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        granted.unwrap_or_else(|e| panic!("{} failed: {e}", self.who))
    }

    /// Stops it; panics unless it was never refused, never lost its lock
    /// and released it.
    async fn finish(self) {
        self.stop.store(true, Ordering::SeqCst);
        let end = self.task.await.expect("the holder's task");
        let who = &self.who;
        assert!(
            end.refused.is_empty(),
            "{who} was refused while it held: {:?}",
            end.refused
        );
        assert_eq!(end.lost, None, "{who} lost its lock");
        end.released
            .unwrap_or_else(|e| panic!("{who} could not release: {e}"));
    }
}

// ------------------------------------------------------------ the store

/// What a scenario reads from a store from outside distlock.
pub trait RwStore {
    /// How many requests for lock `key` (as `Locker::name` names it in
    /// the lockers' namespace) wait in the store without holding: queue
    /// entries, nodes or rows that are not the holders'.
    fn waiting(&self, key: &str) -> impl Future<Output = Result<usize, String>>;
}

/// The store-specific set-up of the replacement scenarios.
#[derive(Debug)]
pub struct RwFaults<'a> {
    /// Lockers of this process on the child's store and namespace (two
    /// or more): the readers of [`frozen_writer_is_replaced`], the writer
    /// of [`frozen_reader_is_replaced`] (the first).
    pub lockers: &'a [Locker],
    /// The child holder.
    pub child: ChildRun<'a>,
    /// How long a frozen child's lease (or session) still runs at least
    /// after the freeze: nobody may get in sooner.
    pub lease_left: Duration,
    /// How long after the freeze the waiters may take to get in, and the
    /// resumed child to hear its loss and release.
    pub within: Duration,
    /// The loss reasons (by name, as `{:?}` writes them) the resumed
    /// child may hear.
    pub reasons: &'a [&'a str],
}

/// What a replacement scenario saw, for a store's own further checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replaced {
    /// The frozen child's token.
    pub frozen: u64,
    /// The tokens of the holders that replaced it.
    pub replacing: Vec<u64>,
    /// What the child did once resumed.
    pub resumed: Resumed,
}

/// A writer in a child process holds `key`; two readers of this process
/// queue behind it (seen waiting in `store`); the writer is frozen past
/// its lease; the readers get in, no sooner than the lease ran out, with
/// tokens above the writer's; resumed, the writer hears its loss, its
/// release finds the lock lost, and every write it made after the resume
/// was refused by the register. Panics naming the step that failed.
pub async fn frozen_writer_is_replaced(
    plan: &RwFaults<'_>,
    store: &impl RwStore,
    key: &str,
) -> Replaced {
    replace_frozen(plan, store, key, HoldMode::Write).await
}

/// A reader in a child process holds `key`; a writer of this process
/// queues behind it (seen waiting in `store`); the reader is frozen past
/// its lease; the writer gets in, no sooner than the lease ran out, with a
/// token above the reader's; resumed, the reader hears its loss, its
/// release finds the lock lost, and every read-check it made after the
/// resume was flagged by the register. Panics naming the step that
/// failed.
pub async fn frozen_reader_is_replaced(
    plan: &RwFaults<'_>,
    store: &impl RwStore,
    key: &str,
) -> Replaced {
    replace_frozen(plan, store, key, HoldMode::Read).await
}

/// The other kind: readers replace a writer, a writer a reader.
fn replacing_mode(frozen: HoldMode) -> HoldMode {
    match frozen {
        HoldMode::Read => HoldMode::Write,
        HoldMode::Lock | HoldMode::Write => HoldMode::Read,
    }
}

/// What a holder in `mode` is called.
fn noun(mode: HoldMode) -> &'static str {
    match mode {
        HoldMode::Lock => "holder",
        HoldMode::Read => "reader",
        HoldMode::Write => "writer",
    }
}

/// How each kind holds, as `holders` lists it.
fn kind_of(mode: HoldMode) -> HoldKind {
    match mode {
        HoldMode::Read => HoldKind::Shared,
        HoldMode::Lock | HoldMode::Write => HoldKind::Exclusive,
    }
}

async fn replace_frozen(
    plan: &RwFaults<'_>,
    store: &impl RwStore,
    key: &str,
    frozen_mode: HoldMode,
) -> Replaced {
    assert!(plan.lockers.len() >= 2, "two lockers or more");
    let register = RwRegister::new();
    let mut child = Child::spawn(&plan.child, frozen_mode, key, &register).await;
    let frozen = child.holding(frozen_mode).await;
    let look = plan.lockers[0].rwlock(key).expect("the lock");
    holders_are(&look, kind_of(frozen_mode), &[frozen], "before the freeze").await;
    let holders = queue_behind(plan, store, key, &register, (frozen_mode, frozen)).await;
    holders_are(
        &look,
        kind_of(frozen_mode),
        &[frozen],
        "with the others queued",
    )
    .await;

    pause_group(child.pid()).await.expect("freeze the child");
    let paused_at = Instant::now();
    let replacing = got_in(plan, &holders, paused_at, frozen).await;
    let mode = replacing_mode(frozen_mode);
    holders_are(&look, kind_of(mode), &replacing, "the child frozen").await;
    // Each replacing holder used the register before the child wakes.
    let used = "each replacing holder's first access";
    eventually(SHOW_WITHIN, used, || async {
        let ops = register.ops();
        replacing
            .iter()
            .all(|t| ops.iter().any(|op| op.token == *t && op.refused.is_none()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    accepted_before_the_freeze(&mut child);

    let resumed_from = register.next_seq();
    resume_group(child.pid()).expect("resume the child");
    let resumed = child.until_released(plan.within + SHOW_WITHIN).await;
    told_and_fenced(plan, &child.who, &resumed, (frozen, &replacing));

    // The replacing holders kept their lock through the child's return.
    holders_are(&look, kind_of(mode), &replacing, "the child resumed").await;
    for holder in holders {
        holder.finish().await;
    }
    never_together(&register, &child.who, resumed_from);
    // What the register refused is exactly what the child did once resumed.
    assert_eq!(
        register.refused(),
        resumed.accesses,
        "the register's refusals"
    );
    if frozen_mode == HoldMode::Write {
        // No late write landed: the last write is the child's, from before.
        let last = register.writes().last_write().map(|(token, _)| token);
        assert_eq!(last, Some(frozen), "a write after the frozen writer's");
    } else {
        let highest = register.writes().highest();
        assert_eq!(
            highest,
            replacing.last().copied(),
            "the replacing writer's writes"
        );
    }
    Replaced {
        frozen,
        replacing,
        resumed,
    }
}

/// The other kind — two readers, or one writer — queued behind the live
/// child holding `frozen` in its mode: seen waiting in `store`, none of
/// them let in meanwhile.
async fn queue_behind(
    plan: &RwFaults<'_>,
    store: &impl RwStore,
    key: &str,
    register: &RwRegister,
    (frozen_mode, frozen): (HoldMode, u64),
) -> Vec<Holder> {
    let mode = replacing_mode(frozen_mode);
    let count = if mode == HoldMode::Read { 2 } else { 1 };
    let wait = plan.within * 2 + SHOW_WITHIN;
    let holders: Vec<Holder> = (0..count)
        .map(|i| {
            let who = format!("{} {}", noun(mode), i + 1);
            let locker = &plan.lockers[i % plan.lockers.len()];
            Holder::spawn(locker, key, mode, register, (who, wait))
        })
        .collect();
    let beside = format!(
        "beside the live child {} (token {frozen})",
        noun(frozen_mode)
    );
    let queued = format!("{count} {}(s) waiting in the store", noun(mode));
    eventually(SHOW_WITHIN, &queued, || async {
        holders.iter().for_each(|h| h.assert_out(&beside));
        match store.waiting(key).await? {
            n if n == count => Ok(()),
            n => Err(format!("{n} waiting")),
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    holders.iter().for_each(|h| h.assert_out(&beside));
    holders
}

/// The tokens, in order, of `holders` once each got in: no sooner than
/// the lease of the child frozen at `paused_at` ran out, above its token
/// `frozen`.
async fn got_in(
    plan: &RwFaults<'_>,
    holders: &[Holder],
    paused_at: Instant,
    frozen: u64,
) -> Vec<u64> {
    let mut replacing = Vec::new();
    for holder in holders {
        let (token, at) = holder.granted(plan.within).await;
        let after = at.duration_since(paused_at);
        assert!(
            after >= plan.lease_left,
            "{} got in {after:?} after the freeze, while the frozen child's lease still ran \
             (at least {:?})",
            holder.who,
            plan.lease_left
        );
        assert!(
            token > frozen,
            "{}'s token {token} is not above the frozen child's {frozen}",
            holder.who
        );
        replacing.push(token);
    }
    replacing.sort_unstable();
    replacing
}

/// Panics unless every access the child made before the freeze (and not
/// looked at yet) was accepted.
fn accepted_before_the_freeze(child: &mut Child) {
    for event in child.said_so_far() {
        if let Event::Access(op) = event {
            assert_eq!(op.refused, None, "the child before the freeze: {op:?}");
        }
    }
}

/// Panics unless the resumed child `who` (token `frozen`) made an access,
/// each one refused, heard one of the plan's loss reasons, and found its
/// lock lost when it released.
fn told_and_fenced(
    plan: &RwFaults<'_>,
    who: &str,
    resumed: &Resumed,
    (frozen, replacing): (u64, &[u64]),
) {
    assert!(
        !resumed.accesses.is_empty(),
        "{who} made no access once resumed"
    );
    for op in &resumed.accesses {
        assert_eq!(op.token, frozen, "{who}: {op:?}");
        assert!(
            op.refused.is_some(),
            "{who}'s late {:?} with token {frozen} was accepted, after {replacing:?} got in: \
             {op:?}",
            op.access,
        );
    }
    assert!(
        plan.reasons.contains(&resumed.lost.as_str()),
        "{who} heard {}, not one of {:?}",
        resumed.lost,
        plan.reasons
    );
    assert_eq!(
        resumed.release, "lost",
        "{who}'s release after its loss ended {}",
        resumed.release
    );
}

/// Panics unless the register shows no reader beside a writer, and
/// refused or flagged nothing but accesses of `stale` from `from` on.
fn never_together(register: &RwRegister, stale: &str, from: usize) {
    register.exclusive().unwrap_or_else(|e| panic!("{e}"));
    for op in register.refused() {
        assert!(
            op.who == stale && op.seq >= from,
            "refused while its lock was live: {op:?} (a reader and a writer at once)"
        );
    }
}

/// Panics unless `lock`'s holders are exactly `tokens`, each of `kind`.
async fn holders_are(lock: &lock_core::RwLock, kind: HoldKind, tokens: &[u64], when: &str) {
    let holders = lock.holders().await.expect("list the holders");
    let mut seen: Vec<(u64, HoldKind)> = holders.iter().map(|h| (h.token.get(), h.kind)).collect();
    seen.sort_unstable_by_key(|(token, _)| *token);
    let expected: Vec<(u64, HoldKind)> = tokens.iter().map(|t| (*t, kind)).collect();
    assert_eq!(seen, expected, "the holders {when}");
}

// ------------------------------------------------------------ no expiry

/// The set-up of [`frozen_holder_is_kept`].
#[derive(Debug)]
pub struct KeptPlan<'a> {
    /// A locker of this process on the child's store and namespace.
    pub locker: &'a Locker,
    /// The child holder.
    pub child: ChildRun<'a>,
    /// How long the child stays frozen: well past the locker's ttl.
    pub frozen_for: Duration,
    /// How long the other kind may take to get in once the child is
    /// killed.
    pub within: Duration,
}

/// For a store whose locks do not expire (no
/// [`Expiry`](lock_core::backend::Capability::Expiry)): a child holds
/// `key` in `mode`; the other kind waits in this process; the child is
/// frozen for `frozen_for` and the waiter stays out all along (the holders
/// still the child alone); resumed, the child still holds and its access
/// is accepted; killed, its lock is given back by the store and the
/// waiter gets in with a higher token. The register shows no reader
/// beside a writer and refused nothing. Panics naming the step that
/// failed.
pub async fn frozen_holder_is_kept(plan: &KeptPlan<'_>, key: &str, mode: HoldMode) {
    let caps = plan.locker.capabilities();
    assert!(
        !caps.expiry,
        "the store expires locks: run the replacement scenarios"
    );
    let register = RwRegister::new();
    let mut child = Child::spawn(&plan.child, mode, key, &register).await;
    let held = child.holding(mode).await;
    let look = plan.locker.rwlock(key).expect("the lock");
    holders_are(&look, kind_of(mode), &[held], "before the freeze").await;
    let other = replacing_mode(mode);
    let wait = plan.frozen_for + plan.within + SHOW_WITHIN;
    let waiter = Holder::spawn(
        plan.locker,
        key,
        other,
        &register,
        (format!("the {}", noun(other)), wait),
    );

    pause_group(child.pid()).await.expect("freeze the child");
    let frozen_at = Instant::now();
    let beside = format!("beside the frozen child {} (token {held})", noun(mode));
    while frozen_at.elapsed() < plan.frozen_for {
        waiter.assert_out(&beside);
        tokio::time::sleep(ACCESS_EVERY).await;
    }
    waiter.assert_out(&beside);
    holders_are(&look, kind_of(mode), &[held], "the child frozen").await;
    for event in child.said_so_far() {
        if let Event::Access(op) = event {
            assert_eq!(op.refused, None, "the child before the freeze: {op:?}");
        }
    }

    resume_group(child.pid()).expect("resume the child");
    match child.next(SHOW_WITHIN).await {
        Event::Access(op) if op.refused.is_none() && op.token == held => {}
        other => panic!("the resumed child, still holding: {other:?}"),
    }
    waiter.assert_out(&beside);

    signal_group(child.pid(), libc::SIGKILL).expect("kill the child");
    let (token, _) = waiter.granted(plan.within).await;
    assert!(
        token > held,
        "token {token} after the killed child's {held}"
    );
    holders_are(&look, kind_of(other), &[token], "the child killed").await;
    eventually(SHOW_WITHIN, "the waiter's first access", || async {
        register.ops().iter().any(|op| op.token == token)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    waiter.finish().await;
    register.exclusive().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(register.refused(), Vec::new(), "refused accesses");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_below_a_read_is_refused_and_a_read_below_a_write_flagged() {
        let register = RwRegister::new();
        register.write("w1", 3).unwrap();
        // Readers share, whatever their order.
        register.read("r1", 5).unwrap();
        register.read("r2", 4).unwrap();
        register.read("r1", 5).unwrap();
        // The writer that held before the readers: refused by the read fence.
        let refused = register.write("w1", 3).unwrap_err();
        assert_eq!((refused.presented, refused.highest), (3, 5));
        assert_eq!(register.writes().rejected(), 0, "refused before the writes");
        // The next writer is in; the readers before it are flagged.
        register.write("w3", 7).unwrap();
        let flagged = register.read("r2", 4).unwrap_err();
        assert_eq!((flagged.presented, flagged.highest), (4, 7));
        // A writer above the readers but below a higher write: refused by
        // the fenced resource.
        assert!(register.write("w2", 6).is_err());
        assert_eq!(register.writes().rejected(), 1);
        assert_eq!(register.writes().last_write(), Some((7, "w3".to_owned())));

        let refused: Vec<_> = register.refused().iter().map(|op| op.seq).collect();
        assert_eq!(refused, [4, 6, 7]);
        let spans: Vec<_> = register
            .spans()
            .into_iter()
            .map(|s| (s.token, s.access, s.first, s.last))
            .collect();
        assert_eq!(
            spans,
            [
                (3, Access::Write, 0, 0),
                (4, Access::Read, 2, 2),
                (5, Access::Read, 1, 3),
                (7, Access::Write, 5, 5)
            ]
        );
        register.exclusive().unwrap();
    }

    #[test]
    fn accepted_accesses_never_overlap_a_write() {
        // Whatever the order of presentation, what is accepted keeps every
        // writer's span apart from the others, in token order.
        for seed in 0..200_u64 {
            let register = RwRegister::new();
            let mut rng = fastrand::Rng::with_seed(seed);
            for _ in 0..40 {
                let token = rng.u64(1..8);
                let access = if token.is_multiple_of(3) {
                    Access::Write
                } else {
                    Access::Read
                };
                let _ = register.present(&format!("h{token}"), access, token);
            }
            register
                .exclusive()
                .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        }
    }
}
