//! The ZooKeeper raw recipe of the observe row: watches carry no data, so
//! a raw watcher re-reads the node once its watch fires. Each of the
//! observers is a session of its own, opened as the floor's, in
//! `get_and_watch_data` on one EPHEMERAL_SEQUENTIAL node of a writer
//! session, which changes it with `set_data`.

use std::time::{Duration, Instant};

use distlock::LockError;
use lock_zookeeper::ZkConfig;
use tokio::sync::mpsc;
use zookeeper_client::{Acls, Client, CreateMode, Error as ZkError, EventType, OneshotWatcher};

use super::error;
use crate::bench::floor::{NotifyProbe, PAYLOAD};

/// One watcher's news of a change: when its watch fired, and when its
/// re-read (which watches again) returned the node at `version`.
#[derive(Debug)]
struct Heard {
    observer: usize,
    event: Instant,
    reread: Instant,
    version: i32,
}

/// The writer's session and node, and what the watchers hear.
#[derive(Debug)]
pub(super) struct ZkNotify {
    /// Its node lives as long as this session: dropping it ends the
    /// watchers (their watch fires, their re-read finds no node).
    writer: Client,
    path: String,
    observers: usize,
    heard: mpsc::UnboundedReceiver<Heard>,
}

/// Creates the node under `dir` (made if missing) and has `observers`
/// sessions of their own watch it.
pub(super) async fn open(
    config: &ZkConfig,
    acls: Acls<'static>,
    dir: &str,
    observers: usize,
) -> Result<ZkNotify, LockError> {
    let writer = config.connect().await?;
    let prefix = format!("{dir}/notify-");
    let node = CreateMode::EphemeralSequential.with_acls(acls);
    let created = match writer.create(&prefix, PAYLOAD.as_bytes(), &node).await {
        Err(ZkError::NoNode) => {
            let dirs = CreateMode::Container.with_acls(acls);
            writer
                .mkdir(dir, &dirs)
                .await
                .map_err(|e| error(&format!("create {dir}"), e))?;
            writer.create(&prefix, PAYLOAD.as_bytes(), &node).await
        }
        other => other,
    };
    let (_, sequence) = created.map_err(|e| error("create the notify node", e))?;
    let path = format!("{prefix}{sequence}");
    let (sender, heard) = mpsc::unbounded_channel();
    for observer in 0..observers {
        let client = config.connect().await?;
        let (_, _, watcher) = client
            .get_and_watch_data(&path)
            .await
            .map_err(|e| error("get_and_watch_data", e))?;
        let sender = sender.clone();
        let path = path.clone();
        // Not aborted: it ends when the writer's node goes, or when nobody
        // listens any more (see the session monitor of lock-zookeeper on
        // cancelling zookeeper-client's waits).
        tokio::spawn(watch(observer, client, path, watcher, sender));
    }
    Ok(ZkNotify {
        writer,
        path,
        observers,
        heard,
    })
}

/// One raw watcher: waits for its watch, re-reads (watching again), says
/// so, and again, until the node or the listener is gone.
async fn watch(
    observer: usize,
    client: Client,
    path: String,
    mut watcher: OneshotWatcher,
    heard: mpsc::UnboundedSender<Heard>,
) {
    loop {
        let event = watcher.changed().await;
        let fired = Instant::now();
        if event.event_type != EventType::NodeDataChanged {
            return;
        }
        let Ok((_, stat, next)) = client.get_and_watch_data(&path).await else {
            return;
        };
        let reread = Instant::now();
        let news = Heard {
            observer,
            event: fired,
            reread,
            version: stat.version,
        };
        if heard.send(news).is_err() {
            return;
        }
        watcher = next;
    }
}

#[async_trait::async_trait]
impl NotifyProbe for ZkNotify {
    fn describe(&self) -> String {
        format!(
            "{} sessions in get_and_watch_data, re-read on the watch; set_data",
            self.observers
        )
    }

    async fn notify_once(&mut self) -> Result<Vec<(Duration, Duration)>, LockError> {
        let stat = self
            .writer
            .set_data(&self.path, PAYLOAD.as_bytes(), None)
            .await
            .map_err(|e| error("set_data", e))?;
        let changed = Instant::now();
        let mut arrived: Vec<Option<(Duration, Duration)>> = vec![None; self.observers];
        let mut missing = self.observers;
        while missing > 0 {
            let Some(news) = self.heard.recv().await else {
                return Err(LockError::Backend {
                    message: "floor probe: every raw watcher ended".to_owned(),
                    source: None,
                });
            };
            let slot = &mut arrived[news.observer];
            if slot.is_none() && news.version == stat.version {
                *slot = Some((
                    news.event.saturating_duration_since(changed),
                    news.reread.saturating_duration_since(changed),
                ));
                missing -= 1;
            }
        }
        Ok(arrived.into_iter().flatten().collect())
    }
}
