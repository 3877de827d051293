//! etcd's `etcdctl lock` and `etcdctl elect` beside distlock's
//! `layout=concurrency`, on one etcd member with fsync (as deployed).

use std::process::Stdio;
use std::time::Instant;

use async_trait::async_trait;
use distlock_testkit::etcd::{etcd_spec, etcd_url, keys_under, raw_client};
use distlock_testkit::etcdctl::Etcdctl;
use distlock_testkit::Server;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;
use tokio::sync::oneshot;

use super::{census, Census, Contender, Family, Primitive};

/// One `etcdctl lock NAME` (no command: it holds until SIGTERM) or
/// `etcdctl elect NAME VALUE` process per hold.
#[derive(Debug)]
pub struct EtcdctlContender {
    etcdctl: Etcdctl,
    name: String,
    primitive: Primitive,
    child: Option<Child>,
    first_line: Option<oneshot::Receiver<Instant>>,
}

impl EtcdctlContender {
    /// A contender for `name` through `etcdctl`.
    pub fn new(etcdctl: Etcdctl, name: &str, primitive: Primitive) -> Self {
        Self {
            etcdctl,
            name: name.to_owned(),
            primitive,
            child: None,
            first_line: None,
        }
    }
}

#[async_trait]
impl Contender for EtcdctlContender {
    async fn ask(&mut self) -> Result<(), String> {
        let mut command = match self.primitive {
            Primitive::Lock => {
                let mut command = self.etcdctl.command();
                command.args(["lock", &self.name]);
                command
            }
            Primitive::Leader => self.etcdctl.elect(&self.name, "etcdctl"),
        };
        command.stdout(Stdio::piped()).stdin(Stdio::null());
        let mut child = tokio::process::Command::from(command)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start etcdctl: {e}"))?;
        let stdout = child.stdout.take().ok_or("etcdctl's stdout")?;
        let (tell, told) = oneshot::channel();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            // The first line (the key it holds) is printed once it holds.
            if let Ok(Some(_)) = lines.next_line().await {
                let _ = tell.send(Instant::now());
            }
            while let Ok(Some(_)) = lines.next_line().await {}
        });
        self.child = Some(child);
        self.first_line = Some(told);
        Ok(())
    }

    async fn held(&mut self) -> Result<Instant, String> {
        let told = self.first_line.take().ok_or("held() without ask()")?;
        told.await
            .map_err(|_| "etcdctl exited before it held".to_owned())
    }

    async fn give_back(&mut self) -> Result<(), String> {
        let mut child = self.child.take().ok_or("give_back() without a hold")?;
        let pid = child.id().ok_or("etcdctl already exited")?;
        let pid = libc::pid_t::try_from(pid).map_err(|e| e.to_string())?;
        // SAFETY: kill(2) has no memory-safety preconditions; the pid is
        // our unreaped child's.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let status = child.wait().await.map_err(|e| e.to_string())?;
        // etcdctl exits non-zero when interrupted; it released before.
        let _ = status;
        Ok(())
    }
}

/// etcd with fsync, `etcdctl` on it, and distlock with
/// `layout=concurrency`.
pub struct EtcdFamily {
    _server: Server,
    url: String,
    etcdctl: Etcdctl,
    raw: etcd_client::Client,
}

impl std::fmt::Debug for EtcdFamily {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdFamily")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl EtcdFamily {
    /// Starts the member (with fsync, as deployed) and finds etcdctl.
    pub async fn start() -> Result<Self, String> {
        let server = etcd_spec("peer-bench-etcd", true)?.start().await?;
        let url = etcd_url([server.addr()]);
        let etcdctl = Etcdctl::for_url(&url)?;
        let raw = raw_client(&url).await.map_err(|e| e.to_string())?;
        Ok(Self {
            _server: server,
            url,
            etcdctl,
            raw,
        })
    }
}

#[async_trait]
impl Family for EtcdFamily {
    fn store(&self) -> &'static str {
        "etcd"
    }

    fn peer(&self) -> &'static str {
        "etcdctl"
    }

    fn distlock_url(&self) -> String {
        format!("{}?layout=concurrency", self.url)
    }

    async fn peer_contender(
        &self,
        key: &str,
        primitive: Primitive,
    ) -> Result<Box<dyn Contender>, String> {
        let etcdctl = self.etcdctl.clone();
        Ok(Box::new(EtcdctlContender::new(etcdctl, key, primitive)))
    }

    fn census(&self, key: &str) -> Census {
        census(
            (self.raw.clone(), format!("{key}/")),
            |(raw, prefix)| async move {
                let count = keys_under(&raw, &prefix).await.map_err(|e| e.to_string())?;
                Ok(usize::try_from(count).unwrap_or(0))
            },
        )
    }
}
