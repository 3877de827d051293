//! Apache Curator as a peer: a small Java program on Debian's Curator jars
//! (`java/CuratorPeer.java`) that takes Curator's own locks, leaderships
//! and leases on a ZooKeeper, for tests of a mixed fleet where distlock's
//! `layout=curator` must exclude Curator clients and be excluded by them.
//!
//! The program is compiled once per test binary into the cargo target dir,
//! in a directory named after a hash of its source (so an edited source is
//! compiled again and parallel test binaries never see a half-written
//! class: each compiles into a temporary directory and renames it). Each
//! [`RecipePeer::curator`] is one JVM with one ZooKeeper session, driven
//! as a [`RecipePeer`].
//!
//! Missing `java`, `javac` or the jars fail with what to install, never a
//! silent skip.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use lock_core::{LockGuard, Locker};
use tokio::sync::OnceCell;

use crate::find_program;
pub use crate::recipe_peer::{Held, RecipePeer, Take};

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
    Curator(RecipePeer, String),
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

impl RecipePeer {
    /// Starts a peer connected to `connect_string` (`host:port,...`, as
    /// Curator takes it) with session timeout `session_timeout`, and waits
    /// until it reads commands. Compiles the program first if this test
    /// binary has not yet.
    ///
    /// Fails naming what is missing (java, javac, a jar), javac's errors,
    /// or why the JVM did not start.
    pub async fn curator(
        connect_string: &str,
        session_timeout: Duration,
    ) -> Result<RecipePeer, String> {
        let (java, classpath) = runtime().await?;
        let mut command = Command::new(java);
        command
            // One GC thread and the quick compiler: several peers share a
            // small machine with the servers and the tests.
            .args(["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xmx128m"])
            .args(["-cp", classpath.as_str(), MAIN_CLASS, connect_string])
            .arg(session_timeout.as_millis().to_string());
        RecipePeer::start(command, "the Curator peer").await
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
    use super::fnv1a;

    #[test]
    fn the_source_hash_is_stable() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
