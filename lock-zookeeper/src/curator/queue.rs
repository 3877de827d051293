//! The queue of Curator's mutex, leader latch and read-write lock: one
//! [`Queue`] whose node marker says which recipe it follows.
//!
//! Our node is created with the listing of its directory pipelined behind
//! it (ZooKeeper answers a session's requests in order). If that listing
//! shows another recipe's nodes, our node is deleted and the acquire
//! fails with [`LockError::InvalidConfig`] naming both recipes: a
//! LeaderLatch and a mutex on the same path, say, would each think itself
//! alone. Waiting is [`crate::ahead`]'s, without release marks: a waiter
//! watches the node it waits for (the one just ahead; a reader, the
//! nearest writer ahead), and holds once that node, first in line, is
//! deleted; any other deletion makes it list again.

use lock_core::backend::Taking;
use lock_core::LockError;

use super::nodes::{node_prefix, other_recipe, Marker, Recipe, LATCH, LOCK, READ, WRITE};
use crate::acquire::{Entered, Look, NewNode, Next, Queue};
use crate::ahead::{self, Ahead};
use crate::contender::list;
use crate::layout::Layout;
use crate::locks::{create_node, Creation};
use crate::names::NodeKind;
use crate::session::Session;
use crate::watch::NodeWatch;

/// A Curator lock-like recipe's queue at znode `dir`.
pub(crate) struct RecipeQueue<'d> {
    dir: &'d str,
    marker: Marker,
}

impl<'d> RecipeQueue<'d> {
    /// The InterProcessMutex at `dir`.
    pub(crate) fn mutex(dir: &'d str) -> Self {
        Self { dir, marker: LOCK }
    }

    /// The queue at `dir` for `taking` (a lock, a leadership, a read or
    /// write lock); `None` for a permit, which is no queue of this kind.
    ///
    /// A name has one lock, which its read-write lock shares: a plain
    /// lock taken where read-write lock nodes are queued (listed first,
    /// one more round trip for plain locks only) joins them as a writer,
    /// the exclusive hold of that recipe, so that readers and it exclude
    /// each other. Elsewhere it is an InterProcessMutex node.
    pub(crate) async fn for_taking(
        session: &Session,
        dir: &'d str,
        taking: Taking,
    ) -> Result<Option<Self>, LockError> {
        let marker = match taking {
            Taking::Lock => {
                let children = list(session, dir).await?;
                match other_recipe(&children, LOCK.recipe) {
                    Some(Recipe::ReadWrite) => WRITE,
                    _ => LOCK,
                }
            }
            Taking::Leader => LATCH,
            Taking::Read => READ,
            Taking::Write => WRITE,
            _ => return Ok(None),
        };
        Ok(Some(Self { dir, marker }))
    }
}

impl Queue for RecipeQueue<'_> {
    type Ahead<'a> = Ahead<'a>;

    const NODE: &'static str = "Curator recipe node";

    fn dir(&self) -> &str {
        self.dir
    }

    fn layout(&self) -> Layout {
        Layout::Curator
    }

    /// Creates our node, with the directory's listing; refuses a directory
    /// another recipe uses (see the module docs).
    async fn enter(&self, session: &Session, node: NewNode<'_>) -> Result<Entered, LockError> {
        let NewNode { dir, guid, data } = node;
        let prefix = node_prefix(dir, self.marker, guid);
        let creation = Creation {
            dir,
            prefix: &prefix,
            data,
        };
        let (me, listing) = create_node(session, &creation, guid, Layout::Curator, true).await?;
        let children = match listing {
            Some(children) => children,
            None => list(session, dir).await?,
        };
        if let Some(other) = other_recipe(&children, self.marker.recipe) {
            let _ = session
                .request(session.client().delete(&me.path, None))
                .await;
            return Err(LockError::invalid_config(format!(
                "{dir} is used by Curator's {}; taking it as {} would not exclude its holders, \
                 so distlock refuses to mix recipes on one path",
                other.describe(),
                self.marker.recipe.describe(),
            )));
        }
        Ok((me, Some(children)))
    }

    /// Waits for what [`ahead::blocking`] names, without release marks.
    fn look<'a>(&self, _session: &Session, look: &Look<'_, 'a>) -> Option<Ahead<'a>> {
        let shared = self.marker.kind == NodeKind::Shared;
        let ahead = ahead::blocking(look.nodes, look.me.sequence, shared)?;
        Some(Ahead {
            marks: false,
            ..ahead
        })
    }

    /// Releases only delete (see the module docs).
    fn marks_release(&self) -> bool {
        false
    }

    async fn wait<'w>(
        &'w self,
        session: &'w Session,
        ahead: Self::Ahead<'w>,
        own: &'w NodeWatch,
    ) -> Result<Next, LockError> {
        ahead::wait(session, self.dir, ahead, own).await
    }
}
