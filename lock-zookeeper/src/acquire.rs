//! Acquiring in a queue of ephemeral sequential nodes, the same way for
//! every kind of hold: locks and readers (see [`crate::locks`]) and
//! permits (see [`crate::permits`]), each a [`Queue`].
//!
//! A pass creates our node ([`Queue::enter`]), then looks at the queue
//! ([`Queue::look`]): holding, the node is handed to a [`ZkHeld`];
//! otherwise a `Try` withdraws it, and a wait watches what the kind says
//! ([`Queue::wait`]) and looks again. A node that vanished while we
//! waited (taken away from the queue, or its container reclaimed) ends
//! the pass, and the acquire starts over with a new one, a few times.
//!
//! Our node is watched ([`NodeWatch`]) from the first look at the queue:
//! at once for a waiter (if its node went unnoticed, it could take the
//! lock without one), after [`OWN_WATCH_DELAY`] for a node that holds at
//! once.
//!
//! Cancel-safety: until the acquire returns, a [`DeleteOnDrop`] deletes
//! the node — or, while the create's reply is outstanding, a
//! [`CleanupOnDrop`] finds it by its guid and deletes it.
//!
//! [`OWN_WATCH_DELAY`]: crate::watch::OWN_WATCH_DELAY

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use lock_core::backend::{AcquireRequest, Acquired, CleanupOnDrop, Renewal, WaitMode};
use lock_core::{FencingToken, LockError};

use crate::cleanup::DeleteOnDrop;
use crate::contender::{list, withdraw_by_guid, Contender};
use crate::curator::owners::Registered;
use crate::held::ZkHeld;
use crate::layout::Layout;
use crate::names::NodeName;
use crate::session::Session;
use crate::watch::NodeWatch;

/// How often an acquire starts over when its node vanished while it
/// waited.
const MAX_RESTARTS: usize = 3;

/// Our node in the queue, with the directory's listing if its create
/// brought one.
pub(crate) type Entered = (Contender, Option<Vec<String>>);

/// The node a pass enters.
#[derive(Clone, Copy)]
pub(crate) struct NewNode<'a> {
    /// The queue's directory.
    pub(crate) dir: &'a str,
    /// The guid its name carries, to find it after a lost reply.
    pub(crate) guid: &'a str,
    /// Its data: the owner and the holder's value (see [`node_data`]).
    pub(crate) data: &'a [u8],
}

/// A listing of the queue, as a pass looks at it.
pub(crate) struct Look<'l, 'a> {
    /// Our node.
    pub(crate) me: &'l Contender,
    /// Our node's data (owner and value).
    pub(crate) data: &'l [u8],
    /// The queue, in sequence order (see [`crate::names::queue`]).
    pub(crate) nodes: &'a [NodeName<'a>],
    /// Where our node stands in `nodes`.
    pub(crate) position: usize,
    /// Whether this is the pass's first look at the queue.
    pub(crate) first: bool,
}

/// What to do after [`Queue::wait`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// What we waited for released the hold it had: ours now.
    Hold,
    /// The queue changed in a way that needs a fresh listing.
    Relist,
}

/// One kind of queue an acquire waits in: the node it enters, when that
/// node holds, and what it watches while it does not.
pub(crate) trait Queue: Sync {
    /// What our node waits for, as a listing names it.
    type Ahead<'a>: Send;

    /// What our node is called in messages.
    const NODE: &'static str;

    /// The directory the queue's nodes live in.
    fn dir(&self) -> &str;

    /// How the queue's nodes are named, ordered and written.
    fn layout(&self) -> Layout {
        Layout::Distlock
    }

    /// Creates our `node` and returns it, with the directory's listing if
    /// that came with the create. After a lost reply, finds the node by
    /// its guid instead of creating a second one.
    fn enter(
        &self,
        session: &Session,
        node: NewNode<'_>,
    ) -> impl Future<Output = Result<Entered, LockError>> + Send;

    /// Whether our node, standing in `look`, holds (`None`), or else what
    /// it waits for. A kind may tell the others what it saw.
    fn look<'a>(&self, session: &Session, look: &Look<'_, 'a>) -> Option<Self::Ahead<'a>>;

    /// Whether a holder's release marks its node for the waiter behind
    /// it (see [`crate::ahead`]).
    fn marks_release(&self) -> bool;

    /// Watches `ahead` and returns once the queue may have changed for
    /// us, or our own node (`own`) is gone.
    fn wait<'w>(
        &'w self,
        session: &'w Session,
        ahead: Self::Ahead<'w>,
        own: &'w NodeWatch,
    ) -> impl Future<Output = Result<Next, LockError>> + Send + 'w;
}

/// How one pass through the queue ended.
enum Pass {
    /// The hold is ours.
    Acquired(Acquired),
    /// A [`WaitMode::Try`] that found the object busy.
    NotAcquired,
    /// Our node disappeared while we waited; enter the queue again.
    Removed,
}

/// Takes the hold `request` asks for in `queue`; `Ok(None)` when a
/// [`WaitMode::Try`] finds it busy.
pub(crate) async fn acquire<Q: Queue>(
    session: &Arc<Session>,
    request: &AcquireRequest,
    queue: &Q,
) -> Result<Option<Acquired>, LockError> {
    let dir = queue.dir();
    for _ in 0..MAX_RESTARTS {
        match pass(session, request, queue).await? {
            Pass::Acquired(acquired) => return Ok(Some(acquired)),
            Pass::NotAcquired => return Ok(None),
            Pass::Removed => {
                tracing::debug!(dir, "distlock: our {} vanished; queueing again", Q::NODE);
            }
        }
    }
    Err(LockError::Backend {
        message: format!(
            "our {} under {dir} kept being removed while waiting",
            Q::NODE
        ),
        source: None,
    })
}

/// Enters `queue` with a new node and waits for its turn.
async fn pass<Q: Queue>(
    session: &Arc<Session>,
    request: &AcquireRequest,
    queue: &Q,
) -> Result<Pass, LockError> {
    let layout = queue.layout();
    let guid = layout.new_guid();
    let requested_at = Instant::now();
    // Before the node exists, so that whoever reads it finds its owner.
    let registered = layout.register_owner(&guid, request.owner.as_str());
    // Armed before the create is sent: if we are dropped before its reply,
    // the node is found by its guid and deleted.
    let by_guid = {
        let (session, dir, guid) = (Arc::clone(session), queue.dir().to_owned(), guid.clone());
        CleanupOnDrop::new(move || withdraw_by_guid(session, dir, guid, layout))
    };
    let data = layout.node_data(request.owner.as_str(), &request.value);
    let node = NewNode {
        dir: queue.dir(),
        guid: &guid,
        data: &data,
    };
    let (me, listing) = queue.enter(session, node).await?;
    let cleanup = DeleteOnDrop::new(Arc::clone(session), me.path.clone());
    by_guid.disarm();
    let ours = Ours {
        me,
        data,
        cleanup,
        requested_at,
        layout,
        registered,
    };
    take_turn(session, request, queue, ours, listing).await
}

/// Our node while a pass waits with it.
struct Ours<'r> {
    me: Contender,
    /// Its data (owner and value).
    data: Cow<'r, [u8]>,
    /// Deletes it unless it holds or is gone.
    cleanup: DeleteOnDrop,
    requested_at: Instant,
    /// The queue's layout.
    layout: Layout,
    /// Our owner id, for readers of this process (Curator's layout).
    registered: Option<Registered>,
}

/// Looks at the queue (`listing`, if the create brought one, first) and
/// waits until our node holds, vanishes, or, for a `Try`, is found
/// waiting.
async fn take_turn<Q: Queue>(
    session: &Arc<Session>,
    request: &AcquireRequest,
    queue: &Q,
    ours: Ours<'_>,
    mut listing: Option<Vec<String>>,
) -> Result<Pass, LockError> {
    let mut own_watch: Option<NodeWatch> = None;
    let (mut first, mut waited) = (true, false);
    loop {
        let children = match listing.take() {
            Some(children) => children,
            None => list(session, queue.dir()).await?,
        };
        let nodes = queue.layout().queue(&children);
        let me = &ours.me;
        let Some(position) = nodes.iter().position(|n| n.sequence == me.sequence) else {
            ours.cleanup.disarm();
            return Ok(Pass::Removed);
        };
        let look = Look {
            me,
            data: &ours.data,
            nodes: &nodes,
            position,
            first: std::mem::take(&mut first),
        };
        let Some(ahead) = queue.look(session, &look) else {
            let own = own_watch.unwrap_or_else(|| {
                NodeWatch::after_delay(session, me.path.clone(), request.loss.clone())
            });
            let marked = waited && queue.marks_release();
            return Ok(held(session, request, ours, own, marked));
        };
        waited = true;
        if request.wait == WaitMode::Try {
            // Deleted before returning, so the next acquirer never queues
            // behind us; if this fails, the armed clean-up retries.
            let delete = session.client().delete(&me.path, None);
            if session.request(delete).await.is_ok() {
                ours.cleanup.disarm();
            }
            return Ok(Pass::NotAcquired);
        }
        let own = own_watch
            .take()
            .unwrap_or_else(|| NodeWatch::start(session, me.path.clone(), request.loss.clone()));
        match queue.wait(session, ahead, &own).await? {
            Next::Hold => {
                let marked = queue.marks_release();
                return Ok(held(session, request, ours, own, marked));
            }
            Next::Relist => own_watch = Some(own),
        }
    }
}

/// The hold is ours: hand the node to a [`ZkHeld`] (whose release marks
/// the node if `marked`) — unless the node is already known to have
/// vanished, then queue again.
fn held(
    session: &Arc<Session>,
    request: &AcquireRequest,
    ours: Ours<'_>,
    own: NodeWatch,
    marked: bool,
) -> Pass {
    let Ours {
        me,
        cleanup,
        requested_at,
        layout,
        registered,
        ..
    } = ours;
    cleanup.disarm();
    if !own.hold() {
        return Pass::Removed;
    }
    Pass::Acquired(Acquired {
        // czxid: the zxid of the node's creation, ensemble-wide increasing
        // and persisted, unlike sequence numbers, which restart when a
        // reclaimed container directory is created again.
        token: FencingToken::new(me.czxid.unsigned_abs()),
        requested_at,
        renewal: Renewal::Managed,
        held: Box::new(
            ZkHeld::new(
                Arc::clone(session),
                request.owner.clone(),
                me.path,
                own,
                marked,
                requested_at,
            )
            .in_layout(layout, registered),
        ),
    })
}
