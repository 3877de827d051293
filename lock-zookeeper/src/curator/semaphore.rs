//! Curator's InterProcessSemaphoreV2 at a name's znode `K`: an
//! InterProcessMutex at `K/locks` that serializes acquires, and the
//! leases, ephemeral sequential `K/leases/_c_<uuid>-lease-<seq>` nodes
//! whose data is the holder's value.
//!
//! An acquire (as Curator 5.x does it) takes the mutex, creates its lease,
//! and then, still holding the mutex, lists `leases` with a child watch:
//! once `leases` has at most `limit` children, the permit is granted;
//! otherwise it waits for the watch and lists again. The mutex is released
//! either way, so waiters are served one at a time in the mutex's order
//! (first come, first served), and only the first of them watches the
//! leases. Giving the permit back deletes the lease.
//!
//! The limit is stored nowhere: each client passes its own, and clients
//! of one semaphore must agree on it (a convention Curator documents for
//! InterProcessSemaphoreV2 without a shared count). A request under
//! another limit cannot be told apart, so it is no error here.
//!
//! Cancel-safety: a dropped acquire deletes its lease (found by its UUID
//! if the create's reply was outstanding) and releases the mutex.

use std::sync::Arc;
use std::time::Instant;

use lock_core::backend::{
    loss_channel, spawn_detached, AcquireRequest, Acquired, CleanupOnDrop, HeldLock, HoldKind,
    Renewal, Taking, WaitMode,
};
use lock_core::{FencingToken, LockError};
use zookeeper_client::{Error as ZkError, EventType};

use super::nodes::{node_prefix, other_recipe, Recipe, LEASE};
use super::queue::RecipeQueue;
use crate::acquire::acquire as acquire_in;
use crate::cleanup::DeleteOnDrop;
use crate::contender::{list, withdraw_by_guid, Contender};
use crate::error;
use crate::held::ZkHeld;
use crate::layout::Layout;
use crate::locks::{create_node, Creation};
use crate::session::Session;
use crate::watch::NodeWatch;

/// The child of `K` that holds the semaphore's mutex.
pub(crate) const LOCKS_DIR: &str = "locks";
/// The child of `K` that holds the leases.
pub(crate) const LEASES_DIR: &str = "leases";

/// The leases directory of the semaphore at `path`.
pub(crate) fn leases_dir(path: &str) -> String {
    format!("{path}/{LEASES_DIR}")
}

/// Takes one of `limit` permits of the semaphore at znode `path`;
/// `Ok(None)` when a [`WaitMode::Try`] finds them all held (or the mutex
/// busy, as Curator's does).
pub(crate) async fn acquire(
    session: &Arc<Session>,
    request: &AcquireRequest,
    path: &str,
    limit: u32,
) -> Result<Option<Acquired>, LockError> {
    let children = list(session, path).await?;
    if let Some(other) = other_recipe(&children, Recipe::Semaphore) {
        return Err(LockError::invalid_config(format!(
            "{path} is used by Curator's {}; taking a permit there would not exclude its \
             holders, so distlock refuses to mix recipes on one path",
            other.describe(),
        )));
    }
    let Some(mutex) = take_mutex(session, request, path).await? else {
        return Ok(None);
    };
    let granted = lease(session, request, path, limit).await;
    mutex.release().await;
    granted
}

/// The semaphore's mutex while we hold it; released in the background if
/// dropped (a dropped acquire).
struct MutexHold(Option<Box<dyn HeldLock>>);

impl MutexHold {
    async fn release(mut self) {
        if let Some(held) = self.0.take() {
            if let Err(e) = held.release().await {
                tracing::debug!(%e, "distlock: releasing a semaphore's mutex failed; the session's end will");
            }
        }
    }
}

impl Drop for MutexHold {
    fn drop(&mut self) {
        if let Some(held) = self.0.take() {
            spawn_detached(None, async move {
                let _ = held.release().await;
            });
        }
    }
}

/// Takes the mutex at `<path>/locks` as `request` waits; `None` for a
/// `Try` that finds it busy.
async fn take_mutex(
    session: &Arc<Session>,
    request: &AcquireRequest,
    path: &str,
) -> Result<Option<MutexHold>, LockError> {
    let dir = format!("{path}/{LOCKS_DIR}");
    let queue = RecipeQueue::mutex(&dir);
    // Its loss is no loss of the permit: a reporter nobody listens to.
    let (loss, _) = loss_channel();
    let mutex_request = AcquireRequest {
        name: request.name.clone(),
        owner: request.owner.clone(),
        ttl: request.ttl,
        wait: request.wait,
        value: String::new(),
        kind: HoldKind::Exclusive,
        taking: Taking::Lock,
        loss,
    };
    let acquired = acquire_in(session, &mutex_request, &queue).await?;
    Ok(acquired.map(|acquired| MutexHold(Some(acquired.held))))
}

/// Creates our lease and waits, holding the mutex, until it is one of
/// `limit`.
async fn lease(
    session: &Arc<Session>,
    request: &AcquireRequest,
    path: &str,
    limit: u32,
) -> Result<Option<Acquired>, LockError> {
    let dir = leases_dir(path);
    let layout = Layout::Curator;
    let guid = layout.new_guid();
    let requested_at = Instant::now();
    let registered = layout.register_owner(&guid, request.owner.as_str());
    let by_guid = {
        let (session, dir, guid) = (Arc::clone(session), dir.clone(), guid.clone());
        CleanupOnDrop::new(move || withdraw_by_guid(session, dir, guid, layout))
    };
    let prefix = node_prefix(&dir, LEASE, &guid);
    let creation = Creation {
        dir: &dir,
        prefix: &prefix,
        data: request.value.as_bytes(),
    };
    let (me, _) = create_node(session, &creation, &guid, layout, true).await?;
    let cleanup = DeleteOnDrop::new(Arc::clone(session), me.path.clone());
    by_guid.disarm();
    let own = NodeWatch::start(session, me.path.clone(), request.loss.clone());
    if !wait_for_room(session, &dir, &me, limit, request.wait, &own).await? {
        let delete = session.client().delete(&me.path, None);
        if session.request(delete).await.is_ok() {
            cleanup.disarm();
        }
        return Ok(None);
    }
    cleanup.disarm();
    if !own.hold() {
        return Err(vanished(&me.path));
    }
    let held = ZkHeld::new(
        Arc::clone(session),
        request.owner.clone(),
        me.path,
        own,
        false,
        requested_at,
    );
    Ok(Some(Acquired {
        token: FencingToken::new(me.czxid.unsigned_abs()),
        requested_at,
        renewal: Renewal::Managed,
        held: Box::new(held.in_layout(layout, registered)),
    }))
}

/// Lists the leases (with a child watch) until at most `limit` are
/// there; false for a `Try` that finds more.
async fn wait_for_room(
    session: &Session,
    dir: &str,
    me: &Contender,
    limit: u32,
    wait: WaitMode,
    own: &NodeWatch,
) -> Result<bool, LockError> {
    let name = me.path.rsplit('/').next().unwrap_or(&me.path);
    loop {
        let listing = session.client().list_and_watch_children(dir);
        let (children, watcher) = match session.request(listing).await {
            Ok(listed) => listed,
            Err(ZkError::NoNode) => return Err(vanished(&me.path)),
            Err(e) => return Err(error::map(&format!("list {dir}"), e)),
        };
        if !children.iter().any(|child| child == name) {
            return Err(vanished(&me.path));
        }
        if children.len() <= limit as usize {
            return Ok(true);
        }
        if wait == WaitMode::Try {
            return Ok(false);
        }
        tokio::select! {
            event = watcher.changed() => {
                if event.event_type == EventType::Session && event.session_state.is_terminated() {
                    return Err(error::map("wait for a permit", ZkError::SessionExpired));
                }
            }
            () = own.gone() => return Err(vanished(&me.path)),
        }
    }
}

/// Our lease was deleted while we waited.
fn vanished(path: &str) -> LockError {
    LockError::Backend {
        message: format!("our lease {path} was removed while waiting for a permit"),
        source: None,
    }
}
