//! The child holder: its body ([`child_holder`]), run in a child process,
//! and the parent's side ([`Child`]), which turns the lines it reports into
//! [`Event`]s, its accesses presented to the register as they come.

use std::future::Future;
use std::time::Duration;

use lock_core::{LockError, LockOptions, Locker};
use tokio::sync::mpsc;

use super::{noun, Access, Op, RwRegister, SHOW_WITHIN};
use crate::child::{HoldMode, TestChild};

/// How often the child uses the register.
const CHILD_ACCESS_EVERY: Duration = Duration::from_millis(50);
/// What starts every line the child reports on (the test harness may
/// print its own text on the same stdout).
const CHILD_LINE: &str = "rw-child:";

/// The body of the child holder: run by an ignored test of the store's
/// test binary (see the [module docs](super)). Does nothing unless `var`
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
pub(super) enum Event {
    Held(HoldMode, u64),
    Access(Op),
    Lost(String),
    Released(String),
    Failed(String),
}

/// The child holder, its lines turned into [`Event`]s by a task of its
/// own that presents its accesses to the register as they come.
pub(super) struct Child {
    process: TestChild,
    pub(super) who: String,
    events: mpsc::UnboundedReceiver<Event>,
}

impl Child {
    pub(super) async fn spawn(
        run: &ChildRun<'_>,
        mode: HoldMode,
        key: &str,
        register: &RwRegister,
    ) -> Self {
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

    pub(super) fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// The next event within `limit`.
    pub(super) async fn next(&mut self, limit: Duration) -> Event {
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
    pub(super) async fn holding(&mut self, mode: HoldMode) -> u64 {
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
    pub(super) fn said_so_far(&mut self) -> Vec<Event> {
        let mut events = Vec::new();
        while let Ok(event) = self.events.try_recv() {
            events.push(event);
        }
        events
    }

    /// What it did from now until it released after hearing its loss,
    /// within `limit`.
    pub(super) async fn until_released(&mut self, limit: Duration) -> Resumed {
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

/// Panics unless every access the child made before the freeze (and not
/// looked at yet) was accepted.
pub(super) fn accepted_before_the_freeze(child: &mut Child) {
    for event in child.said_so_far() {
        if let Event::Access(op) = event {
            assert_eq!(op.refused, None, "the child before the freeze: {op:?}");
        }
    }
}
