//! Apache Curator as a peer: a small Java program on Debian's Curator jars
//! (`java/CuratorPeer.java`) that takes Curator's own locks, leaderships
//! and leases on a ZooKeeper, for tests of a mixed fleet where distlock's
//! `layout=curator` must exclude Curator clients and be excluded by them.
//!
//! The program is compiled once per test binary into the cargo target dir,
//! in a directory named after a hash of its source (so an edited source is
//! compiled again and parallel test binaries never see a half-written
//! class: each compiles into a temporary directory and renames it). Each
//! [`CuratorPeer`] is one JVM with one ZooKeeper session, talked to over
//! its stdin and stdout, one command and one answer line at a time; it
//! holds at most one thing at a time.
//!
//! Missing `java`, `javac` or the jars fail with what to install, never a
//! silent skip.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use lock_core::{LockGuard, Locker};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{ChildStdin, ChildStdout};
use tokio::sync::OnceCell;

use crate::{find_program, signal_group, spawn_child};

/// The peer's source, compiled on first use.
const SOURCE: &str = include_str!("../java/CuratorPeer.java");
/// The class the JVM runs.
const MAIN_CLASS: &str = "CuratorPeer";
/// Curator's recipes jar: its manifest's `Class-Path` brings the framework,
/// the client, ZooKeeper, Guava and SLF4J's API.
pub const CURATOR_RECIPES_JAR: &str = "/usr/share/java/curator-recipes.jar";
/// The jars the peer needs, each checked before use.
const JARS: [&str; 5] = [
    CURATOR_RECIPES_JAR,
    "/usr/share/java/curator-framework.jar",
    "/usr/share/java/curator-client.jar",
    crate::zookeeper::ZOOKEEPER_JAR,
    crate::zookeeper::SLF4J_NOP_JAR,
];
/// What to do when the JDK or the jars are missing.
const HINT: &str = "run scripts/test.sh (it installs Debian's default-jdk-headless and \
                    libcurator-recipes-java)";

/// Something a peer takes and holds until [`CuratorPeer::release`]: each
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

/// What a holder of a mixed fleet ([`Holder`]) takes: the same hold on
/// either side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A plain lock (Curator's InterProcessMutex).
    Mutex,
    /// A read lock.
    Read,
    /// A write lock.
    Write,
    /// One permit of a semaphore with this limit.
    Permit(u32),
}

/// A holder of a mixed fleet: a Curator peer on a ZooKeeper path, or a
/// distlock locker (`layout=curator`) on the key stored at that path.
#[derive(Debug)]
pub enum Holder {
    /// A Curator peer and the absolute path of the recipe.
    Curator(CuratorPeer, String),
    /// A distlock locker and the key.
    Distlock(Locker, String),
}

/// A hold a [`Holder`] took: its fencing token (the node's czxid on both
/// sides) and, for distlock, the guard.
#[derive(Debug)]
pub struct MixedHold {
    /// The hold's fencing token.
    pub token: u64,
    guard: Option<LockGuard>,
}

impl Holder {
    /// Takes `kind`, waiting as long as it takes; fails with the side's
    /// error.
    pub async fn take(&mut self, kind: Kind) -> Result<MixedHold, String> {
        let guard = match self {
            Self::Curator(peer, path) => {
                let path = path.clone();
                let take = match kind {
                    Kind::Mutex => Take::Mutex(path),
                    Kind::Read => Take::Read(path),
                    Kind::Write => Take::Write(path),
                    Kind::Permit(limit) => Take::Permit(path, limit),
                };
                let token = peer.take(&take).await?.czxid;
                return Ok(MixedHold { token, guard: None });
            }
            Self::Distlock(locker, key) => match kind {
                Kind::Mutex => locker.lock(key).await,
                Kind::Read => locker.rwlock(key).map_err(|e| e.to_string())?.read().await,
                Kind::Write => locker.rwlock(key).map_err(|e| e.to_string())?.write().await,
                Kind::Permit(limit) => {
                    let pool = locker.semaphore(key, limit).map_err(|e| e.to_string())?;
                    pool.acquire().await
                }
            },
        };
        let guard = guard.map_err(|e| e.to_string())?;
        let token = guard.token().get();
        Ok(MixedHold {
            token,
            guard: Some(guard),
        })
    }

    /// Gives `hold` back.
    pub async fn release(&mut self, hold: MixedHold) -> Result<(), String> {
        match (self, hold.guard) {
            (Self::Curator(peer, _), _) => peer.release().await,
            (Self::Distlock(..), Some(guard)) => guard.release().await.map_err(|e| e.to_string()),
            (Self::Distlock(..), None) => Err("a distlock hold without its guard".into()),
        }
    }
}

/// One Curator client in a JVM of its own, in its own process group (see
/// [`spawn_child`]); killed when dropped.
#[derive(Debug)]
pub struct CuratorPeer {
    child: std::process::Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl CuratorPeer {
    /// Starts a peer connected to `connect_string` (`host:port,...`, as
    /// Curator takes it) with session timeout `session_timeout`, and waits
    /// until it reads commands. Compiles the program first if this test
    /// binary has not yet.
    ///
    /// Fails naming what is missing (java, javac, a jar), javac's errors,
    /// or why the JVM did not start.
    pub async fn spawn(connect_string: &str, session_timeout: Duration) -> Result<Self, String> {
        let (java, classpath) = runtime().await?;
        let mut command = Command::new(java);
        command
            // One GC thread and the quick compiler: several peers share a
            // small machine with the servers and the tests.
            .args(["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xmx128m"])
            .args(["-cp", classpath.as_str(), MAIN_CLASS, connect_string])
            .arg(session_timeout.as_millis().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = spawn_child(command)
            .await
            .map_err(|e| format!("cannot start the Curator peer: {e}"))?;
        let pipes = (child.stdin.take(), child.stdout.take());
        let (Some(stdin), Some(stdout)) = pipes else {
            return Err("the Curator peer's pipes were not set up".into());
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
            other => Err(format!("the Curator peer started with {other:?}")),
        }
    }

    /// The peer's pid, also its process group: for
    /// [`pause_group`](crate::pause_group) and
    /// [`signal_group`](crate::signal_group).
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
            .ok_or_else(|| format!("the Curator peer answered {answer:?}, not a hold"))?;
        let (czxid, node) = rest
            .split_once(' ')
            .ok_or_else(|| format!("the Curator peer's hold {answer:?} names no node"))?;
        let czxid = czxid
            .parse()
            .map_err(|e| format!("the Curator peer's czxid in {answer:?}: {e}"))?;
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
            .ok_or_else(|| format!("the Curator peer answered {answer:?}, not a leader"))
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
            .ok_or_else(|| format!("the Curator peer answered {answer:?} to holding?"))
    }

    /// Gives back what the peer holds (release, lease returned, latch
    /// closed); nothing when it holds nothing.
    pub async fn release(&mut self) -> Result<(), String> {
        self.send("release").await?;
        match self.answer().await?.as_str() {
            "released" => Ok(()),
            other => Err(format!("the Curator peer answered {other:?} to release")),
        }
    }

    /// Releases what the peer holds, closes its session and waits for the
    /// JVM to exit.
    pub async fn quit(mut self) -> Result<(), String> {
        self.send("quit").await?;
        match self.answer().await?.as_str() {
            "bye" => Ok(()),
            other => Err(format!("the Curator peer answered {other:?} to quit")),
        }
    }

    async fn send(&mut self, line: &str) -> Result<(), String> {
        let line = format!("{line}\n");
        self.stdin
            .write_all(line.as_bytes())
            .await
            .map_err(|e| format!("writing to the Curator peer: {e}"))?;
        self.stdin
            .flush()
            .await
            .map_err(|e| format!("writing to the Curator peer: {e}"))
    }

    /// The next answer line; an `error ...` answer is an `Err`.
    async fn answer(&mut self) -> Result<String, String> {
        let line = self
            .stdout
            .next_line()
            .await
            .map_err(|e| format!("reading from the Curator peer: {e}"))?
            .ok_or("the Curator peer exited")?;
        match line.strip_prefix("error ") {
            Some(error) => Err(format!("the Curator peer failed: {error}")),
            None => Ok(line),
        }
    }
}

impl Drop for CuratorPeer {
    fn drop(&mut self) {
        let _ = signal_group(self.child.id(), libc::SIGKILL);
        let _ = self.child.wait();
    }
}

/// `java` and the class path with the compiled peer, compiling it on the
/// first call of this process.
async fn runtime() -> Result<(PathBuf, String), String> {
    static COMPILED: OnceCell<(PathBuf, String)> = OnceCell::const_new();
    COMPILED
        .get_or_try_init(|| async {
            tokio::task::spawn_blocking(prepare)
                .await
                .map_err(|e| format!("compiling the Curator peer: {e}"))?
        })
        .await
        .cloned()
}

/// Finds the programs and jars and compiles the peer (once per source).
fn prepare() -> Result<(PathBuf, String), String> {
    let java = find_program(&["java"], HINT)?;
    let javac = find_program(&["javac"], HINT)?;
    if let Some(missing) = JARS.iter().find(|jar| !Path::new(jar).is_file()) {
        return Err(format!("{missing} not found: {HINT}"));
    }
    let jars = JARS.join(":");
    let classes = compiled(&javac, &jars)?;
    Ok((java, format!("{jars}:{}", classes.display())))
}

/// The directory holding the compiled peer for this source, compiling it
/// into a temporary sibling and renaming that into place if it is not
/// there yet.
fn compiled(javac: &Path, jars: &str) -> Result<PathBuf, String> {
    let parent = build_dir().join("curator-peer");
    let dir = parent.join(format!("{:016x}", fnv1a(SOURCE.as_bytes())));
    let class = format!("{MAIN_CLASS}.class");
    if dir.join(&class).is_file() {
        return Ok(dir);
    }
    std::fs::create_dir_all(&parent).map_err(|e| format!("create {}: {e}", parent.display()))?;
    let temp = tempfile::Builder::new()
        .prefix(".compiling-")
        .tempdir_in(&parent)
        .map_err(|e| format!("temporary dir in {}: {e}", parent.display()))?;
    let source = temp.path().join(format!("{MAIN_CLASS}.java"));
    std::fs::write(&source, SOURCE).map_err(|e| format!("write {}: {e}", source.display()))?;
    let output = Command::new(javac)
        .args(["-nowarn", "-Xlint:-path", "-cp", jars, "-d"])
        .arg(temp.path())
        .arg(&source)
        .output()
        .map_err(|e| format!("run {}: {e}", javac.display()))?;
    if !output.status.success() {
        return Err(format!(
            "javac failed on the Curator peer ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    // Another test binary may have renamed its copy into place first:
    // then this one is dropped, and theirs is the same program.
    let renamed = std::fs::rename(temp.path(), &dir);
    if dir.join(&class).is_file() {
        return Ok(dir);
    }
    Err(format!(
        "the compiled Curator peer did not land in {}: {renamed:?}",
        dir.display()
    ))
}

/// The cargo profile dir this test binary was built in
/// (`target/<profile>`, the parent of `deps/`), else the temp dir.
fn build_dir() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| {
            exe.ancestors()
                .find(|dir| dir.file_name().is_some_and(|name| name == "deps"))
                .and_then(Path::parent)
                .map(Path::to_path_buf)
        })
        .unwrap_or_else(std::env::temp_dir)
}

/// FNV-1a, 64 bits: a hash that is the same in every build, for naming
/// the compiled program after its source.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::{fnv1a, Take};

    #[test]
    fn commands_name_the_recipe_and_its_arguments() {
        assert_eq!(Take::Mutex("/a/k".into()).command(), "mutex /a/k");
        assert_eq!(Take::Permit("/a/s".into(), 3).command(), "permit /a/s 3");
        assert_eq!(
            Take::Latch("/a/e".into(), "p1".into()).command(),
            "latch /a/e p1"
        );
    }

    #[test]
    fn the_source_hash_is_stable() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
