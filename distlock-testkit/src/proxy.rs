//! A TCP proxy that injects network faults between a client and a server.
//!
//! Point the client at [`FaultProxy::addr`] instead of the server, then
//! [`cut`](FaultProxy::cut) the network (connections reset at once),
//! [`blackhole`](FaultProxy::blackhole) it (a silent partition: nothing
//! moves, nothing fails), add [`latency`](FaultProxy::set_latency), and
//! [`restore`](FaultProxy::restore) it.
//!
//! Each proxy runs on its own thread with its own single-threaded tokio
//! runtime, so it works the same whichever runtime (or none) the test
//! uses, keeps running when a test's runtime ends, and its timing does not
//! depend on a busy test runtime. Dropping the proxy stops the thread and
//! closes every connection.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{sleep, sleep_until, Instant};

/// Bytes read at once from one side.
const CHUNK: usize = 16 * 1024;
/// Chunks in flight per direction (read, waiting out the latency or a
/// blackhole); beyond that the proxy stops reading.
const QUEUE: usize = 64;
/// Longest time [`FaultProxy::cut`] waits for connections to close.
const CUT_WAIT: Duration = Duration::from_secs(2);

/// What the proxy does with traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Forward both ways.
    Normal,
    /// Reset all connections, new ones too.
    Cut,
    /// Hold every connection open, move nothing.
    Blackhole,
}

/// State shared by the proxy handle and its tasks.
#[derive(Debug)]
struct Shared {
    mode: watch::Sender<Mode>,
    latency_nanos: AtomicU64,
    live: AtomicUsize,
}

impl Shared {
    fn latency(&self) -> Duration {
        Duration::from_nanos(self.latency_nanos.load(Ordering::Relaxed))
    }
}

/// A fault-injecting TCP proxy in front of one loopback server.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    target: SocketAddr,
    shared: Arc<Shared>,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl FaultProxy {
    /// Starts a proxy listening on `127.0.0.1:<free port>` that forwards
    /// to `target`.
    ///
    /// Fails with `InvalidInput` if `target` is not a loopback address:
    /// tests may only send traffic to this machine.
    pub fn start(target: SocketAddr) -> io::Result<FaultProxy> {
        if !target.ip().to_canonical().is_loopback() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("FaultProxy refuses non-loopback target {target}"),
            ));
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let listener = {
            let _in_runtime = runtime.enter();
            let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
            listener.set_nonblocking(true)?;
            TcpListener::from_std(listener)?
        };
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            mode: watch::Sender::new(Mode::Normal),
            latency_nanos: AtomicU64::new(0),
            live: AtomicUsize::new(0),
        });
        let (shutdown, stop) = oneshot::channel();
        let task_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("fault-proxy-{}", addr.port()))
            .spawn(move || {
                runtime.block_on(async {
                    tokio::select! {
                        () = accept_loop(listener, target, task_shared) => {}
                        _ = stop => {}
                    }
                });
                // Dropping the runtime drops every connection task, which
                // closes their sockets.
                drop(runtime);
            })?;
        Ok(FaultProxy {
            addr,
            target,
            shared,
            shutdown: Some(shutdown),
            thread: Some(thread),
        })
    }

    /// The address clients should connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The proxy's port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The server the proxy forwards to.
    pub fn target(&self) -> SocketAddr {
        self.target
    }

    /// Cuts the network: resets (TCP RST) every live connection on both
    /// sides, and resets new connections right after accepting them, until
    /// [`FaultProxy::restore`]. Clients see errors at once. Returns when
    /// the live connections are closed (or after 2 s at most).
    pub fn cut(&self) {
        self.shared.mode.send_replace(Mode::Cut);
        let deadline = std::time::Instant::now() + CUT_WAIT;
        while self.connections() > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// A silent partition: connections stay open but no byte moves either
    /// way, and new connections are accepted but not forwarded (the server
    /// does not see them). Clients notice only through their own timeouts.
    ///
    /// On [`FaultProxy::restore`], bytes held meanwhile are delivered, as
    /// TCP would after a healed partition, unless the connection was
    /// closed; held new connections then reach the server. Call
    /// [`FaultProxy::cut`] before restoring to drop them instead.
    pub fn blackhole(&self) {
        self.shared.mode.send_replace(Mode::Blackhole);
    }

    /// Back to normal forwarding. Connections reset by a cut stay closed;
    /// new connections work.
    pub fn restore(&self) {
        self.shared.mode.send_replace(Mode::Normal);
    }

    /// Delays every chunk by `latency` in each direction (a round trip
    /// takes twice as long more), preserving byte order. Applies to chunks
    /// read from now on; zero turns it off.
    pub fn set_latency(&self, latency: Duration) {
        let nanos = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.shared.latency_nanos.store(nanos, Ordering::Relaxed);
    }

    /// Number of client connections currently open through the proxy
    /// (including ones held by a blackhole).
    pub fn connections(&self) -> usize {
        self.shared.live.load(Ordering::Relaxed)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Accepts clients forever, one task per connection.
async fn accept_loop(listener: TcpListener, target: SocketAddr, shared: Arc<Shared>) {
    loop {
        let client = match listener.accept().await {
            Ok((client, _)) => client,
            Err(_) => {
                // E.g. out of file descriptors: back off instead of spinning.
                sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        if *shared.mode.borrow() == Mode::Cut {
            reset(&client);
            continue;
        }
        // Counted before the task runs, so `cut` waits for it too.
        let live = LiveConnection::new(shared.clone());
        tokio::spawn(serve(client, target, live));
    }
}

/// Counts one live connection while it exists.
struct LiveConnection(Arc<Shared>);

impl LiveConnection {
    fn new(shared: Arc<Shared>) -> Self {
        shared.live.fetch_add(1, Ordering::Relaxed);
        Self(shared)
    }
}

impl Drop for LiveConnection {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Connects `client` to the target and relays until either side closes,
/// an error, or a cut.
async fn serve(client: TcpStream, target: SocketAddr, live: LiveConnection) {
    let shared = &*live.0;
    let mut mode = shared.mode.subscribe();
    // A connection accepted during a blackhole must not reach the server
    // before the partition ends.
    let ready = mode.wait_for(|m| *m != Mode::Blackhole).await.map(|m| *m);
    if !matches!(ready, Ok(Mode::Normal)) {
        return reset(&client);
    }
    let upstream = match TcpStream::connect(target).await {
        Ok(upstream) => upstream,
        Err(_) => return reset(&client),
    };
    // Small writes must not wait for Nagle: latency tests measure the proxy.
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    relay(client, upstream, shared).await;
}

/// Pipes both directions; resets both sockets on a cut or an error so each
/// side sees the failure at once.
async fn relay(mut client: TcpStream, mut upstream: TcpStream, shared: &Shared) {
    let mut mode = shared.mode.subscribe();
    let clean = {
        let (client_read, client_write) = client.split();
        let (upstream_read, upstream_write) = upstream.split();
        let both = async {
            tokio::try_join!(
                pipe(client_read, upstream_write, shared),
                pipe(upstream_read, client_write, shared),
            )
        };
        tokio::select! {
            done = both => done.is_ok(),
            _ = mode.wait_for(|m| *m == Mode::Cut) => false,
        }
    };
    if !clean {
        reset(&client);
        reset(&upstream);
    }
}

/// Copies `from` to `to` until end of stream, delaying each chunk by the
/// current latency and holding it during a blackhole. A reader and a
/// writer run concurrently, joined by a queue, so latency delays each
/// chunk without slowing the stream down.
async fn pipe(from: ReadHalf<'_>, to: WriteHalf<'_>, shared: &Shared) -> io::Result<()> {
    // An empty chunk marks the end of the stream.
    let (queue, chunks) = mpsc::channel::<(Instant, Vec<u8>)>(QUEUE);
    tokio::try_join!(
        read_chunks(from, queue, shared),
        write_chunks(chunks, to, shared)
    )?;
    Ok(())
}

/// Reads chunks into `queue`, stamped with when they are due.
async fn read_chunks(
    mut from: ReadHalf<'_>,
    queue: mpsc::Sender<(Instant, Vec<u8>)>,
    shared: &Shared,
) -> io::Result<()> {
    let mut mode = shared.mode.subscribe();
    let mut buf = vec![0u8; CHUNK];
    loop {
        // Stop reading during a blackhole; a cut ends the whole relay.
        let _ = mode.wait_for(|m| *m != Mode::Blackhole).await;
        let n = from.read(&mut buf).await?;
        let due = Instant::now() + shared.latency();
        if queue.send((due, buf[..n].to_vec())).await.is_err() || n == 0 {
            return Ok(());
        }
    }
}

/// Writes queued chunks once due and not blackholed.
async fn write_chunks(
    mut chunks: mpsc::Receiver<(Instant, Vec<u8>)>,
    mut to: WriteHalf<'_>,
    shared: &Shared,
) -> io::Result<()> {
    let mut mode = shared.mode.subscribe();
    while let Some((due, chunk)) = chunks.recv().await {
        sleep_until(due).await;
        let _ = mode.wait_for(|m| *m != Mode::Blackhole).await;
        if chunk.is_empty() {
            // Pass the end of stream on, keeping the other direction open.
            return to.shutdown().await;
        }
        to.write_all(&chunk).await?;
    }
    Ok(())
}

/// Makes the next close of `stream` send a TCP RST instead of a FIN, so
/// the peer gets "connection reset" at once rather than a clean EOF.
fn reset(stream: &TcpStream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt reads `size_of::<linger>()` bytes from a valid
    // `linger` value; the fd is open for the lifetime of `stream`.
    unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}
