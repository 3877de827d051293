//! The hub's task: one watch stream, reopened when it breaks.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use etcd_client::{EventType, WatchClient, WatchRequestSender, WatchResponse, WatchResponseStream};
use lock_core::backend::Backoff;
use tokio::sync::mpsc;
use tokio::time::{sleep_until, Instant};

use super::delayed::Delayed;
use super::fired::{Fired, Listener, RangeFired};
use super::target::{Target, Watch};
use super::waiters::{WaiterIndex, Waiters, LINGER, MOST_WATCHES};

/// What the hub's task is asked to do.
pub(super) enum Command {
    /// Create this watch on the server now.
    Add { id: i64, watch: Watch },
    /// Add a waiter for `key`'s deletion after revision `after`, on the
    /// key's lingering watch (see [`super::waiters`]).
    Wait {
        id: i64,
        /// The id for the key's watch, if it must be created.
        new_watch_id: i64,
        key: Vec<u8>,
        after: i64,
        listener: Listener,
    },
    /// Cancel this watch, or remove this waiter.
    Remove { id: i64 },
    /// A delayed watch was queued while none was: set a timer.
    Wake,
}

/// Pause before reconnecting a broken stream: from 20 ms up to 1 s.
const FIRST_RECONNECT: Duration = Duration::from_millis(20);
const LONGEST_RECONNECT: Duration = Duration::from_secs(1);

type Stream = (WatchRequestSender, WatchResponseStream);

/// The hub's task: applies commands, sends delayed watches when due,
/// dispatches events, and reconnects. Ends when every [`WatchHub`] clone
/// is gone.
///
/// [`WatchHub`]: super::WatchHub
pub(super) async fn run(
    mut client: WatchClient,
    mut commands: mpsc::UnboundedReceiver<Command>,
    delayed: Arc<Mutex<Delayed>>,
) {
    let mut watches: HashMap<i64, Watch> = HashMap::new();
    let mut index = WaiterIndex::default();
    let mut stream: Option<Stream> = None;
    let reconnects = Backoff::exponential(FIRST_RECONNECT, LONGEST_RECONNECT);
    let mut pauses = reconnects.delays();
    let mut retry_at = Instant::now();
    loop {
        if stream.is_none() && !watches.is_empty() && Instant::now() >= retry_at {
            match connect(&mut client, &watches).await {
                Ok(connected) => {
                    stream = Some(connected);
                    pauses = reconnects.delays();
                }
                Err(error) => {
                    tracing::debug!(%error, "distlock: etcd watch stream failed to open");
                    // The pauses never run out: the fallback is never used.
                    retry_at = Instant::now() + pauses.next().unwrap_or(LONGEST_RECONNECT);
                }
            }
        }
        let reconnecting = stream.is_none() && !watches.is_empty();
        let next_due = lock(&delayed).next_due();
        let next_close = index.idle.front().map(|(since, _)| *since + LINGER);
        tokio::select! {
            command = commands.recv() => {
                let Some(command) = command else { return };
                if !apply(command, &mut watches, &mut index, &mut stream).await {
                    stream = None;
                }
            }
            () = sleep_until(next_due.unwrap_or_else(Instant::now)), if next_due.is_some() => {
                let due = lock(&delayed).take_due(Instant::now());
                for (id, watch) in due {
                    if !apply(Command::Add { id, watch }, &mut watches, &mut index, &mut stream).await {
                        stream = None;
                    }
                }
            }
            () = sleep_until(next_close.unwrap_or_else(Instant::now)), if next_close.is_some() => {
                for id in close_idle(&mut watches, &mut index, Instant::now()) {
                    cancel(&mut stream, id).await;
                }
            }
            message = next_message(&mut stream) => match message {
                Ok(Some(response)) => {
                    if let Some(ended) = dispatch(response, &mut watches, &mut index) {
                        cancel(&mut stream, ended).await;
                    }
                    for id in close_idle(&mut watches, &mut index, Instant::now()) {
                        cancel(&mut stream, id).await;
                    }
                }
                Ok(None) | Err(_) => {
                    tracing::debug!("distlock: etcd watch stream ended, reconnecting");
                    stream = None;
                    retry_at = Instant::now();
                }
            },
            () = sleep_until(retry_at), if reconnecting => {}
        }
    }
}

/// Opens a stream with every current watch. The first watch rides on the
/// stream's opening request (`etcd-client` needs one).
async fn connect(
    client: &mut WatchClient,
    watches: &HashMap<i64, Watch>,
) -> Result<Stream, etcd_client::Error> {
    let mut all = watches.iter();
    let Some((first_id, first)) = all.next() else {
        return Err(etcd_client::Error::WatchError("no watch to open".into()));
    };
    let (mut sender, responses) = client
        .watch(first.key.clone(), Some(first.options(*first_id)))
        .await?
        .split();
    for (id, watch) in all {
        sender
            .watch(watch.key.clone(), Some(watch.options(*id)))
            .await?;
    }
    Ok((sender, responses))
}

fn lock(delayed: &Mutex<Delayed>) -> MutexGuard<'_, Delayed> {
    delayed.lock().unwrap_or_else(|p| p.into_inner())
}

/// Cancels watch `id` on the server (a failure shows on the stream).
async fn cancel(stream: &mut Option<Stream>, id: i64) {
    if let Some((sender, _)) = stream.as_mut() {
        let _ = sender.cancel(id).await;
    }
}

/// Applies one command; false if the stream failed.
async fn apply(
    command: Command,
    watches: &mut HashMap<i64, Watch>,
    index: &mut WaiterIndex,
    stream: &mut Option<Stream>,
) -> bool {
    match command {
        Command::Add { id, watch } => add(id, watch, watches, stream).await,
        Command::Wait {
            id,
            new_watch_id,
            key,
            after,
            listener,
        } => {
            if let Some(&watch_id) = index.by_key.get(&key) {
                if let Some(Target::Waiters(waiters)) =
                    watches.get_mut(&watch_id).map(|watch| &mut watch.target)
                {
                    waiters.join(id, after, listener);
                    index.by_waiter.insert(id, watch_id);
                    return true;
                }
            }
            let mut waiters = Waiters::default();
            waiters.join(id, after, listener);
            index.by_key.insert(key.clone(), new_watch_id);
            index.by_waiter.insert(id, new_watch_id);
            let watch = Watch {
                key,
                next_revision: 0,
                target: Target::Waiters(waiters),
            };
            add(new_watch_id, watch, watches, stream).await
        }
        Command::Remove { id } => {
            if let Some(watch_id) = index.by_waiter.remove(&id) {
                if let Some(Target::Waiters(waiters)) =
                    watches.get_mut(&watch_id).map(|watch| &mut watch.target)
                {
                    let now = Instant::now();
                    if waiters.leave(id, now) {
                        index.idle.push_back((now, watch_id));
                    }
                }
                return true;
            }
            // A one-shot watch; a waiter that was already told is in
            // no index, and its id names no watch.
            match (watches.remove(&id), stream.as_mut()) {
                (Some(_), Some((sender, _))) => sender.cancel(id).await.is_ok(),
                _ => true,
            }
        }
        // The loop reads the next due time on every turn.
        Command::Wake => true,
    }
}

/// Creates `watch` on the server (or at the next reconnect); false if the
/// stream failed.
async fn add(
    id: i64,
    watch: Watch,
    watches: &mut HashMap<i64, Watch>,
    stream: &mut Option<Stream>,
) -> bool {
    let sent = match stream.as_mut() {
        Some((sender, _)) => {
            sender
                .watch(watch.key.clone(), Some(watch.options(id)))
                .await
        }
        // Created when the stream (re)opens.
        None => Ok(()),
    };
    watches.insert(id, watch);
    sent.is_ok()
}

/// Forgets the waiters' watches idle for [`LINGER`] by `now`, and idle
/// ones while there are more than [`MOST_WATCHES`]; returns their ids,
/// to cancel.
fn close_idle(
    watches: &mut HashMap<i64, Watch>,
    index: &mut WaiterIndex,
    now: Instant,
) -> Vec<i64> {
    let mut closed = Vec::new();
    while let Some(&(since, id)) = index.idle.front() {
        let still_idle = match watches.get(&id).map(|watch| &watch.target) {
            Some(Target::Waiters(waiters)) => waiters.idle_since() == Some(since),
            _ => false,
        };
        if still_idle && since + LINGER > now && index.by_key.len() <= MOST_WATCHES {
            break;
        }
        index.idle.pop_front();
        if still_idle {
            if let Some(watch) = watches.remove(&id) {
                index.by_key.remove(&watch.key);
            }
            closed.push(id);
        }
    }
    closed
}

/// The next message of `stream`; pending forever without a stream.
async fn next_message(
    stream: &mut Option<Stream>,
) -> Result<Option<WatchResponse>, etcd_client::Error> {
    match stream.as_mut() {
        Some((_, responses)) => responses.message().await,
        None => std::future::pending().await,
    }
}

/// Hands a response's outcome to its watch's listeners. Returns the id of
/// a watch to cancel on the server (a one-shot one that fired).
fn dispatch(
    response: WatchResponse,
    watches: &mut HashMap<i64, Watch>,
    index: &mut WaiterIndex,
) -> Option<i64> {
    let id = response.watch_id();
    if response.canceled() {
        end(&response, watches, index);
        return None;
    }
    let watch = watches.get_mut(&id)?;
    if response.created() {
        // A watch "from now" has no start yet: events after this revision
        // will come, and a reopened stream must not ask for older ones. A
        // watch with a start keeps it until its events arrive (they follow
        // this answer, and a stream may break in between).
        let revision = response.header().map_or(0, |h| h.revision());
        if watch.next_revision <= 0 {
            watch.next_revision = revision + 1;
        }
        match &mut watch.target {
            Target::Once(listener) => listener(Fired::Created { revision }),
            Target::Waiters(waiters) => waiters.created(revision),
            Target::Range(_) => {}
        }
    }
    if let Target::Range(listener) = &mut watch.target {
        if let Some(last) = response.events().last() {
            let revision = last.kv().map_or(0, |kv| kv.mod_revision());
            watch.next_revision = watch.next_revision.max(revision + 1);
            listener(RangeFired::Events(response.events().to_vec()));
        }
        return None;
    }
    for event in response.events() {
        let revision = event.kv().map_or(0, |kv| kv.mod_revision());
        watch.next_revision = watch.next_revision.max(revision + 1);
        if event.event_type() != EventType::Delete {
            continue;
        }
        if let Target::Waiters(waiters) = &mut watch.target {
            let now = Instant::now();
            let gone = waiters.deleted(revision, now);
            if !gone.is_empty() {
                index.idle.push_back((now, id));
            }
            for waiter in gone {
                index.by_waiter.remove(&waiter);
            }
            continue;
        }
        if let Target::Once(mut listener) = watches.remove(&id)?.target {
            listener(Fired::Deleted { revision });
        }
        return Some(id);
    }
    None
}

/// Tells the listeners of a watch the server cancelled why it ended
/// (history compacted, or refused), and forgets it.
fn end(response: &WatchResponse, watches: &mut HashMap<i64, Watch>, index: &mut WaiterIndex) {
    // Also the answer to our own cancel of a removed watch: no entry.
    let Some(watch) = watches.remove(&response.watch_id()) else {
        return;
    };
    let fired = if response.compact_revision() > 0 {
        Fired::Compacted
    } else {
        Fired::Refused(response.cancel_reason().to_owned())
    };
    match watch.target {
        Target::Once(mut listener) => listener(fired),
        Target::Range(mut listener) => listener(match fired {
            Fired::Compacted => RangeFired::Compacted,
            _ => RangeFired::Refused(response.cancel_reason().to_owned()),
        }),
        Target::Waiters(waiters) => {
            index.by_key.remove(&watch.key);
            for waiter in waiters.end(&fired) {
                index.by_waiter.remove(&waiter);
            }
        }
    }
}
