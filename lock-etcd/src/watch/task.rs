//! The hub's task: one watch stream, reopened when it breaks.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use etcd_client::{EventType, WatchClient, WatchRequestSender, WatchResponse, WatchResponseStream};
use tokio::sync::mpsc;
use tokio::time::{sleep_until, Instant};

use super::delayed::Delayed;
use super::{Command, Fired, Watch};

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
    let mut stream: Option<Stream> = None;
    let mut pause = FIRST_RECONNECT;
    let mut retry_at = Instant::now();
    loop {
        if stream.is_none() && !watches.is_empty() && Instant::now() >= retry_at {
            match connect(&mut client, &watches).await {
                Ok(connected) => {
                    stream = Some(connected);
                    pause = FIRST_RECONNECT;
                }
                Err(error) => {
                    tracing::debug!(%error, "distlock: etcd watch stream failed to open");
                    retry_at = Instant::now() + pause;
                    pause = (pause * 2).min(LONGEST_RECONNECT);
                }
            }
        }
        let reconnecting = stream.is_none() && !watches.is_empty();
        let next_due = lock(&delayed).next_due();
        tokio::select! {
            command = commands.recv() => {
                let Some(command) = command else { return };
                if !apply(command, &mut watches, &mut stream).await {
                    stream = None;
                }
            }
            () = sleep_until(next_due.unwrap_or_else(Instant::now)), if next_due.is_some() => {
                let due = lock(&delayed).take_due(Instant::now());
                for (id, watch) in due {
                    if !apply(Command::Add { id, watch }, &mut watches, &mut stream).await {
                        stream = None;
                    }
                }
            }
            message = next_message(&mut stream) => match message {
                Ok(Some(response)) => {
                    if let Some(cancel) = dispatch(response, &mut watches) {
                        if let Some((sender, _)) = stream.as_mut() {
                            let _ = sender.cancel(cancel).await;
                        }
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

/// Applies one command; false if the stream failed.
async fn apply(
    command: Command,
    watches: &mut HashMap<i64, Watch>,
    stream: &mut Option<Stream>,
) -> bool {
    match command {
        Command::Add { id, watch } => {
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
        Command::Remove { id } => match (watches.remove(&id), stream.as_mut()) {
            (Some(_), Some((sender, _))) => sender.cancel(id).await.is_ok(),
            _ => true,
        },
        // The loop reads the next due time on every turn.
        Command::Wake => true,
    }
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

/// Hands a response's outcome to its watch's listener. Returns the id of
/// a watch to cancel on the server (one that fired on a deletion).
fn dispatch(response: WatchResponse, watches: &mut HashMap<i64, Watch>) -> Option<i64> {
    let id = response.watch_id();
    if response.canceled() {
        // Also the answer to our own cancel of a removed watch: no entry.
        let mut watch = watches.remove(&id)?;
        let fired = if response.compact_revision() > 0 {
            Fired::Compacted
        } else {
            Fired::Refused(response.cancel_reason().to_owned())
        };
        (watch.listener)(fired);
        return None;
    }
    let watch = watches.get_mut(&id)?;
    if response.created() {
        // Events after this revision will come; a reopened stream must
        // not ask for older ones (a watch "from now" has no start yet).
        let revision = response.header().map_or(0, |h| h.revision());
        watch.next_revision = watch.next_revision.max(revision + 1);
        (watch.listener)(Fired::Created { revision });
    }
    for event in response.events() {
        let revision = event.kv().map_or(0, |kv| kv.mod_revision());
        watch.next_revision = watch.next_revision.max(revision + 1);
        if event.event_type() == EventType::Delete {
            let mut watch = watches.remove(&id)?;
            (watch.listener)(Fired::Deleted { revision });
            return Some(id);
        }
    }
    None
}
