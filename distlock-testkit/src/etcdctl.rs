//! etcd's own command-line client as a peer of distlock's etcd
//! `layout=concurrency`: `etcdctl lock` and `etcdctl elect` processes on
//! a test server (run them with [`TestChild::start`](crate::child::TestChild::start)),
//! and reads of the keys they make (which key holds, a
//! key's create revision) with a raw client (feature `etcd`).
//!
//! `etcdctl lock NAME CMD…` runs CMD while it holds the lock, with
//! `ETCD_LOCK_KEY` set to its key. Its `ETCD_LOCK_REV` is the revision
//! of the store when the lock was granted, not the key's create
//! revision (the fencing token distlock reports): read that with
//! `etcdctl get "$ETCD_LOCK_KEY" -w fields` (see [`CREATE_REVISION_SH`]).

use std::path::PathBuf;
use std::process::Command;

use crate::find_program;

/// A shell snippet that sets `$TOKEN` to the create revision of
/// `$ETCD_LOCK_KEY`, read with `etcdctl get -w fields` on `$ENDPOINTS`
/// (both set by [`Etcdctl::lock`]).
pub const CREATE_REVISION_SH: &str = r#"TOKEN=$("$ETCDCTL" --endpoints="$ENDPOINTS" get "$ETCD_LOCK_KEY" -w fields | sed -n 's/^"CreateRevision" : //p')"#;

/// `etcdctl` (API v3) pointed at the members of one `etcd://` URL.
#[derive(Clone, Debug)]
pub struct Etcdctl {
    program: PathBuf,
    endpoints: String,
}

impl Etcdctl {
    /// `etcdctl` from `PATH` on the members of `url`; an error naming
    /// what to install if it is missing (tests then fail, never skip).
    pub fn for_url(url: &str) -> Result<Self, String> {
        let program = find_program(
            &["etcdctl"],
            "install Debian's etcd-client package, which has etcdctl",
        )?;
        let endpoints = crate::url::url_hosts(url).join(",");
        Ok(Self { program, endpoints })
    }

    /// `etcdctl --endpoints=…` with nothing else yet; the environment has
    /// `ETCDCTL_API=3`, and `ETCDCTL` and `ENDPOINTS` for scripts that
    /// call it again.
    pub fn command(&self) -> Command {
        let mut command = Command::new(&self.program);
        command
            .env("ETCDCTL_API", "3")
            .env("ETCDCTL", &self.program)
            .env("ENDPOINTS", &self.endpoints)
            .arg(format!("--endpoints={}", self.endpoints));
        command
    }

    /// `etcdctl lock [--ttl TTL] NAME -- sh -c SCRIPT`: runs `script` while
    /// holding lock `name` on a session of `ttl_seconds` (etcdctl's
    /// default 60 s without). The script sees `ETCD_LOCK_KEY`,
    /// `ETCD_LOCK_REV`, `ETCDCTL` and `ENDPOINTS`.
    pub fn lock(&self, name: &str, ttl_seconds: Option<u64>, script: &str) -> Command {
        let mut command = self.command();
        command.arg("lock");
        if let Some(ttl) = ttl_seconds {
            command.arg(format!("--ttl={ttl}"));
        }
        command.args([name, "--", "sh", "-c", script]);
        command
    }

    /// `etcdctl elect NAME VALUE`: campaigns, prints the leader key and
    /// value once leader, and leads until stopped (SIGTERM/SIGINT resign).
    pub fn elect(&self, name: &str, value: &str) -> Command {
        let mut command = self.command();
        command.args(["elect", name, value]);
        command
    }

    /// `etcdctl elect -l NAME`: prints each leader's key and value.
    pub fn observe(&self, name: &str) -> Command {
        let mut command = self.command();
        command.args(["elect", "-l", name]);
        command
    }
}

/// One key under a prefix, as a raw read sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyEntry {
    /// The key (lossy UTF-8).
    pub key: String,
    /// Its create revision: the fencing token of a `layout=concurrency`
    /// hold.
    pub create_revision: i64,
    /// The lease it is attached to.
    pub lease: i64,
    /// Its value (lossy UTF-8).
    pub value: String,
}

/// Every key under `prefix`, oldest (lowest create revision) first: the
/// first one holds the `layout=concurrency` lock or election.
#[cfg(feature = "etcd")]
pub async fn keys_by_creation(
    client: &etcd_client::Client,
    prefix: &str,
) -> Result<Vec<KeyEntry>, etcd_client::Error> {
    use etcd_client::{GetOptions, SortOrder, SortTarget};

    let oldest_first = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend);
    let response = client.kv_client().get(prefix, Some(oldest_first)).await?;
    Ok(response
        .kvs()
        .iter()
        .map(|kv| KeyEntry {
            key: String::from_utf8_lossy(kv.key()).into_owned(),
            create_revision: kv.create_revision(),
            lease: kv.lease(),
            value: String::from_utf8_lossy(kv.value()).into_owned(),
        })
        .collect())
}

/// Deletes the first-created key under `prefix` (the holder's), if it
/// still has the create revision it was read with; whether one was
/// deleted.
#[cfg(feature = "etcd")]
pub async fn delete_first_created(
    client: &etcd_client::Client,
    prefix: &str,
) -> Result<bool, etcd_client::Error> {
    use etcd_client::{Compare, CompareOp, Txn, TxnOp};

    let Some(first) = keys_by_creation(client, prefix).await?.into_iter().next() else {
        return Ok(false);
    };
    let txn = Txn::new()
        .when([Compare::create_revision(
            first.key.clone(),
            CompareOp::Equal,
            first.create_revision,
        )])
        .and_then([TxnOp::delete(first.key, None)]);
    Ok(client.kv_client().txn(txn).await?.succeeded())
}
