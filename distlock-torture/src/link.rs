//! [`RegisterLink`], the transport between a client and the register:
//! a direct call from a task of the runner ([`DirectLink`]), or a Unix
//! socket from a client process ([`SocketLink`], served by [`serve`]).
//!
//! The socket protocol is one JSON line per request and per answer: first
//! `{"client":N}`, then each [`Op`] answered by its [`Verdict`]. A client
//! waits for each answer before it goes on, so the register sees each
//! client's operations in order, at the moment they arrive.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Mutex;

use crate::register::{ClientId, Op, Register, Verdict};

/// Where a client sends its operations.
#[async_trait]
pub trait RegisterLink: Send + Sync {
    /// Sends `op` and returns the register's verdict.
    async fn send(&self, op: Op) -> Result<Verdict, String>;
}

/// A client task of the runner: calls the register directly.
#[derive(Debug)]
pub struct DirectLink {
    register: Arc<Register>,
    client: ClientId,
}

impl DirectLink {
    /// The link of client `client`.
    pub fn new(register: Arc<Register>, client: ClientId) -> Self {
        Self { register, client }
    }
}

#[async_trait]
impl RegisterLink for DirectLink {
    async fn send(&self, op: Op) -> Result<Verdict, String> {
        Ok(self.register.apply(self.client, op))
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Hello {
    client: ClientId,
}

/// A client process: sends operations over the runner's socket.
#[derive(Debug)]
pub struct SocketLink {
    stream: Mutex<(BufReader<OwnedReadHalf>, OwnedWriteHalf)>,
}

impl SocketLink {
    /// Connects to the register at `path` as client `client`.
    pub async fn connect(path: &Path, client: ClientId) -> Result<Self, String> {
        let stream = UnixStream::connect(path)
            .await
            .map_err(|e| format!("register socket {}: {e}", path.display()))?;
        let (read, mut write) = stream.into_split();
        write_line(&mut write, &Hello { client }).await?;
        Ok(Self {
            stream: Mutex::new((BufReader::new(read), write)),
        })
    }
}

#[async_trait]
impl RegisterLink for SocketLink {
    async fn send(&self, op: Op) -> Result<Verdict, String> {
        let mut stream = self.stream.lock().await;
        let (read, write) = &mut *stream;
        write_line(write, &op).await?;
        read_line(read)
            .await?
            .ok_or_else(|| "the register closed the socket".to_owned())
    }
}

/// Serves the register on `listener` until the task is dropped: one task
/// per client process.
pub async fn serve(register: Arc<Register>, listener: UnixListener) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let register = Arc::clone(&register);
        tokio::spawn(async move {
            let (read, mut write) = stream.into_split();
            let mut read = BufReader::new(read);
            let Ok(Some(Hello { client })) = read_line::<Hello>(&mut read).await else {
                return;
            };
            while let Ok(Some(op)) = read_line::<Op>(&mut read).await {
                let verdict = register.apply(client, op);
                if write_line(&mut write, &verdict).await.is_err() {
                    return;
                }
            }
        });
    }
}

async fn write_line<T: Serialize>(write: &mut OwnedWriteHalf, value: &T) -> Result<(), String> {
    let mut line = serde_json::to_vec(value).map_err(|e| e.to_string())?;
    line.push(b'\n');
    write
        .write_all(&line)
        .await
        .map_err(|e| format!("register socket: {e}"))
}

/// The next line as a `T`; `None` at the end of the stream.
async fn read_line<T: for<'de> Deserialize<'de>>(
    read: &mut BufReader<OwnedReadHalf>,
) -> Result<Option<T>, String> {
    let mut line = String::new();
    let n = read
        .read_line(&mut line)
        .await
        .map_err(|e| format!("register socket: {e}"))?;
    if n == 0 {
        return Ok(None);
    }
    serde_json::from_str(&line)
        .map(Some)
        .map_err(|e| format!("register socket: bad line {line:?}: {e}"))
}
