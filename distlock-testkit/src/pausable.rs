//! What a fault scenario can freeze and thaw, crash and start again: a
//! test server, whatever processes it is made of.

use std::fmt::Debug;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;

use crate::postgres::PgServer;
use crate::signals::{pause_group, resume_group};
use crate::Server;

/// The future of [`Pausable::pause`].
pub type PauseFuture<'a> = Pin<Box<dyn Future<Output = Result<(), String>> + Send + 'a>>;

/// A server that can be frozen with `SIGSTOP` (connections stay open,
/// nothing is answered) and resumed.
pub trait Pausable: Debug + Sync {
    /// Freezes every process that could answer a client; resolves once
    /// all have stopped.
    fn pause(&self) -> PauseFuture<'_>;

    /// Resumes what [`pause`](Self::pause) froze.
    fn resume(&self) -> Result<(), String>;
}

impl Pausable for Server {
    /// The server's process group.
    fn pause(&self) -> PauseFuture<'_> {
        Box::pin(Server::pause(self))
    }

    fn resume(&self) -> Result<(), String> {
        Server::resume(self)
    }
}

impl Pausable for PgServer {
    /// The postmaster and every backend: each backend is a process group
    /// of its own, so freezing the postmaster's group alone would leave
    /// open connections answering.
    fn pause(&self) -> PauseFuture<'_> {
        Box::pin(async move {
            self.server().pause().await?;
            for child in self.processes() {
                pause_group(child).await?;
            }
            Ok(())
        })
    }

    fn resume(&self) -> Result<(), String> {
        for child in self.processes() {
            resume_group(child).map_err(|e| format!("SIGCONT to {child}: {e}"))?;
        }
        self.server().resume()
    }
}

/// A server a fault run can also crash and start again on its data.
pub trait Restartable: Pausable + Send {
    /// Where its clients connect.
    fn addr(&self) -> SocketAddr;

    /// Kills it at once, like a crash: every process it is made of.
    fn crash(&self) -> PauseFuture<'_>;

    /// Starts it again on the same port and data after
    /// [`crash`](Self::crash), waiting until it serves clients.
    fn start_again(&self) -> PauseFuture<'_>;
}

impl Restartable for Server {
    fn addr(&self) -> SocketAddr {
        Server::addr(self)
    }

    fn crash(&self) -> PauseFuture<'_> {
        self.stop();
        Box::pin(std::future::ready(Ok(())))
    }

    fn start_again(&self) -> PauseFuture<'_> {
        Box::pin(Server::restart(self))
    }
}

impl Restartable for PgServer {
    fn addr(&self) -> SocketAddr {
        self.server().addr()
    }

    fn crash(&self) -> PauseFuture<'_> {
        Box::pin(PgServer::kill(self))
    }

    /// Crash recovery replays the WAL first.
    fn start_again(&self) -> PauseFuture<'_> {
        Box::pin(self.server().restart())
    }
}
