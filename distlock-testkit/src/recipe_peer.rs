//! A peer process of a mixed fleet: a client of Curator's recipe layout
//! (Apache Curator itself in a JVM, see [`curator`](crate::curator), or
//! kazoo, see [`kazoo`](crate::kazoo)) driven over its stdin and stdout,
//! one command and one answer line at a time. A peer holds at most one
//! thing at a time.

use std::process::{Command, Stdio};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{ChildStdin, ChildStdout};

use crate::{signal_group, spawn_child};

/// Something a peer takes and holds until [`RecipePeer::release`]: each
/// is one of Curator's recipes on a ZooKeeper path (absolute, with no
/// chroot: the peer connects to the servers' root).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Take {
    /// `InterProcessMutex(path).acquire()`.
    Mutex(String),
    /// `InterProcessReadWriteLock(path).readLock().acquire()`.
    Read(String),
    /// `InterProcessReadWriteLock(path).writeLock().acquire()`.
    Write(String),
    /// One lease of `InterProcessSemaphoreV2(path, limit)`.
    Permit(String, u32),
    /// `LeaderLatch(path, id)` started, until it leads.
    Latch(String, String),
}

impl Take {
    /// The command line the peer reads for it.
    fn command(&self) -> String {
        match self {
            Self::Mutex(path) => format!("mutex {path}"),
            Self::Read(path) => format!("read {path}"),
            Self::Write(path) => format!("write {path}"),
            Self::Permit(path, limit) => format!("permit {path} {limit}"),
            Self::Latch(path, id) => format!("latch {path} {id}"),
        }
    }
}

/// What a peer holds: the ZooKeeper node its recipe created and that
/// node's czxid, the fencing token distlock's `layout=curator` gives the
/// same hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    /// The node's czxid.
    pub czxid: u64,
    /// The node's name (last path segment), e.g. `_c_<uuid>-lock-0000000003`.
    pub node: String,
}

/// One client of Curator's recipe layout in a process of its own (a JVM
/// running Curator, or kazoo), in its own process group (see
/// [`spawn_child`]), driven over its stdin and stdout; killed when
/// dropped.
#[derive(Debug)]
pub struct RecipePeer {
    child: std::process::Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl RecipePeer {
    /// Starts `command` (a peer program: stdin and stdout are piped here)
    /// and waits until it says it reads commands; `what` names it in
    /// errors.
    pub(crate) async fn start(mut command: Command, what: &str) -> Result<Self, String> {
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = spawn_child(command)
            .await
            .map_err(|e| format!("cannot start {what}: {e}"))?;
        let pipes = (child.stdin.take(), child.stdout.take());
        let (Some(stdin), Some(stdout)) = pipes else {
            return Err(format!("the pipes of {what} were not set up"));
        };
        let stdin = ChildStdin::from_std(stdin).map_err(|e| format!("peer stdin: {e}"))?;
        let stdout = ChildStdout::from_std(stdout).map_err(|e| format!("peer stdout: {e}"))?;
        let mut peer = Self {
            child,
            stdin,
            stdout: BufReader::new(stdout).lines(),
        };
        match peer.answer().await?.as_str() {
            "ready" => Ok(peer),
            other => Err(format!("{what} started with {other:?}")),
        }
    }

    /// The peer's pid, also its process group: for
    /// [`pause_group`](crate::pause_group) and
    /// [`signal_group`].
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Takes `take`, waiting as long as the recipe waits (wrap it in a
    /// timeout); the hold lasts until [`release`](Self::release).
    pub async fn take(&mut self, take: &Take) -> Result<Held, String> {
        self.begin(take).await?;
        self.held().await
    }

    /// Asks for `take` without waiting for it: the peer blocks in the
    /// recipe until it holds, and [`held`](Self::held) reads the result.
    /// Meanwhile the peer reads no other command.
    pub async fn begin(&mut self, take: &Take) -> Result<(), String> {
        self.send(&take.command()).await
    }

    /// The result of the [`begin`](Self::begin) before it: what the peer
    /// now holds, or the error it answered.
    pub async fn held(&mut self) -> Result<Held, String> {
        let answer = self.answer().await?;
        let rest = answer
            .strip_prefix("held ")
            .or_else(|| answer.strip_prefix("leader "))
            .ok_or_else(|| format!("the peer answered {answer:?}, not a hold"))?;
        let (czxid, node) = rest
            .split_once(' ')
            .ok_or_else(|| format!("the peer's hold {answer:?} names no node"))?;
        let czxid = czxid
            .parse()
            .map_err(|e| format!("the peer's czxid in {answer:?}: {e}"))?;
        Ok(Held {
            czxid,
            node: node.to_owned(),
        })
    }

    /// The participant id of the leader of the `LeaderLatch` at `path`, in
    /// the order LeaderLatch itself ranks its nodes; `None` when nobody
    /// takes part. The peer does not join the election to answer.
    pub async fn leader_of(&mut self, path: &str) -> Result<Option<String>, String> {
        self.send(&format!("leader? {path}")).await?;
        let answer = self.answer().await?;
        if answer == "none" {
            return Ok(None);
        }
        answer
            .strip_prefix("leader-id ")
            .map(|id| Some(id.to_owned()))
            .ok_or_else(|| format!("the peer answered {answer:?}, not a leader"))
    }

    /// The czxid of what the peer believes it holds. Curator's locks do not
    /// notice a lost session by themselves, so after a freeze this still
    /// names the old hold: a fenced resource is what refuses it.
    pub async fn holding(&mut self) -> Result<Option<u64>, String> {
        self.send("holding?").await?;
        let answer = self.answer().await?;
        if answer == "not-holding" {
            return Ok(None);
        }
        answer
            .strip_prefix("holding ")
            .and_then(|czxid| czxid.parse().ok())
            .map(Some)
            .ok_or_else(|| format!("the peer answered {answer:?} to holding?"))
    }

    /// Gives back what the peer holds (release, lease returned, latch
    /// closed); nothing when it holds nothing.
    pub async fn release(&mut self) -> Result<(), String> {
        self.send("release").await?;
        match self.answer().await?.as_str() {
            "released" => Ok(()),
            other => Err(format!("the peer answered {other:?} to release")),
        }
    }

    /// Releases what the peer holds, closes its session and waits for the
    /// JVM to exit.
    pub async fn quit(mut self) -> Result<(), String> {
        self.send("quit").await?;
        match self.answer().await?.as_str() {
            "bye" => Ok(()),
            other => Err(format!("the peer answered {other:?} to quit")),
        }
    }

    async fn send(&mut self, line: &str) -> Result<(), String> {
        let line = format!("{line}\n");
        self.stdin
            .write_all(line.as_bytes())
            .await
            .map_err(|e| format!("writing to the peer: {e}"))?;
        self.stdin
            .flush()
            .await
            .map_err(|e| format!("writing to the peer: {e}"))
    }

    /// The next answer line; an `error ...` answer is an `Err`.
    async fn answer(&mut self) -> Result<String, String> {
        let line = self
            .stdout
            .next_line()
            .await
            .map_err(|e| format!("reading from the peer: {e}"))?
            .ok_or("the peer exited")?;
        match line.strip_prefix("error ") {
            Some(error) => Err(format!("the peer failed: {error}")),
            None => Ok(line),
        }
    }
}

impl Drop for RecipePeer {
    fn drop(&mut self) {
        let _ = signal_group(self.child.id(), libc::SIGKILL);
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::Take;

    #[test]
    fn commands_name_the_recipe_and_its_arguments() {
        assert_eq!(Take::Mutex("/a/k".into()).command(), "mutex /a/k");
        assert_eq!(Take::Permit("/a/s".into(), 3).command(), "permit /a/s 3");
        assert_eq!(
            Take::Latch("/a/e".into(), "p1".into()).command(),
            "latch /a/e p1"
        );
    }
}
