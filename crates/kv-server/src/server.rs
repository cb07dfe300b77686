//! Starting and stopping the server: the store, the listener, the connection tasks.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pmem_structures::{Store, StoreOptions};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::watch;

use crate::config::ServerConfig;
use crate::connection;
use crate::db::Db;
use crate::error::ServerError;
use crate::shared::Shared;

/// How long a stop waits for connections to finish the requests they have read.
const DRAIN: Duration = Duration::from_secs(5);

/// The Redis-protocol server (RESP2 and RESP3) over a store.
pub struct Server;

impl Server {
    /// Open (or create) the pool, bind the address and start serving on worker threads.
    /// Returns once the server accepts connections.
    pub fn start(config: ServerConfig) -> Result<RunningServer, ServerError> {
        config.validate().map_err(ServerError::Config)?;
        let mut options = StoreOptions::new();
        if let Some(granularity) = config.granularity {
            options = options.granularity(granularity);
        }
        let store =
            Store::open_or_create(&config.pool, config.pool_size, &options).map_err(|source| {
                ServerError::Store {
                    path: config.pool.clone(),
                    source,
                }
            })?;
        let granularity = store.granularity();
        let db = Db::open(store).map_err(|source| ServerError::Store {
            path: config.pool.clone(),
            source,
        })?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(config.threads)
            .thread_name("pmem-kv-worker")
            .enable_all()
            .build()
            .map_err(ServerError::Runtime)?;
        let listener = runtime
            .block_on(TcpListener::bind(config.bind))
            .map_err(|source| ServerError::Bind {
                addr: config.bind,
                source,
            })?;
        let addr = listener.local_addr().map_err(ServerError::Runtime)?;
        let shared = Arc::new(Shared::new(
            db,
            config.limits,
            addr,
            granularity,
            config.threads,
            config.pipeline_batches,
        ));
        let (stop, stopped) = watch::channel(false);
        // Installed before `start` returns, so a signal sent as soon as the server is up
        // (the binary prints its address then) stops it cleanly.
        let signals = if config.stop_on_signals {
            let _context = runtime.enter();
            Some(StopSignals::install().map_err(ServerError::Runtime)?)
        } else {
            None
        };
        let thread = std::thread::Builder::new()
            .name("pmem-kv-server".into())
            .spawn(move || {
                runtime.block_on(serve(listener, shared, stopped, signals));
                // Connection tasks stuck writing to clients that stopped reading are
                // dropped here; the store closes when the last `Shared` goes.
                runtime.shutdown_timeout(DRAIN);
            })
            .map_err(ServerError::Runtime)?;
        Ok(RunningServer {
            addr,
            stop,
            thread: Some(thread),
        })
    }
}

/// A started server; dropping it stops it as [`RunningServer::shutdown`] does.
pub struct RunningServer {
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    thread: Option<JoinHandle<()>>,
}

impl RunningServer {
    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stop: refuse new connections, let each connection finish the requests it has read
    /// (their replies sent), close them, and close the store (which releases its file
    /// lock). Returns when all of that is done.
    pub fn shutdown(mut self) {
        let _ = self.stop.send(true);
        self.join();
    }

    /// Wait until the server stops (on SIGTERM or SIGINT when the configuration asks for
    /// them), with the store closed.
    pub fn wait(mut self) {
        self.join();
    }

    fn join(&mut self) {
        if let Some(thread) = self.thread.take() {
            if let Err(panic) = thread.join() {
                std::panic::resume_unwind(panic);
            }
        }
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        self.join();
    }
}

async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut stopped: watch::Receiver<bool>,
    signals: Option<StopSignals>,
) {
    // Told to the connections once the server stops, whatever stopped it.
    let (close, closing) = watch::channel(false);
    let signal = StopSignals::received(signals);
    tokio::pin!(signal);
    let expiry = tokio::spawn(active_expiry(shared.clone(), closing.clone()));
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((socket, _)) => admit(socket, &shared, &closing).await,
                // Out of descriptors and the like: the listener stays; back off a little.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
            _ = stopped.changed() => break,
            _ = &mut signal => break,
        }
    }
    drop(listener);
    // Wake the connections waiting for requests; they close once their replies are out. The
    // background task ends too, and is waited for: one stopped in the middle of a cycle
    // (outside the runtime, in `block_in_place`) would go on to poll its timer after the
    // runtime's drivers shut down.
    let _ = close.send(true);
    let _ = expiry.await;
    // Counted rather than joined: a JoinSet would take its lock at every wake of every
    // connection, on the hot path, for the sake of this one wait.
    let drain_until = Instant::now() + DRAIN;
    while shared.clients.load(Ordering::Acquire) > 0 && Instant::now() < drain_until {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Active expiry: a cycle every period (see `crate::expiry`), and a cycle of reclaiming
/// deleted hashes' fields (see `crate::hashes`). A cycle that fails (a full pool) leaves the
/// keys for the next one, and for lazy expiry.
async fn active_expiry(shared: Arc<Shared>, mut closing: watch::Receiver<bool>) {
    let mut ticks = tokio::time::interval(crate::expiry::CYCLE_PERIOD);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = closing.changed() => return,
        }
        if shared.db.may_have_deadlines() {
            // Blocking store work: the worker's other tasks move to another thread.
            tokio::task::block_in_place(|| {
                let _ = shared.db.expire_cycle(crate::expiry::CYCLE_BUDGET);
            });
        }
        if shared.db.has_reclaimable() {
            tokio::task::block_in_place(|| {
                let _ = shared.db.reclaim_cycle(crate::expiry::CYCLE_BUDGET);
            });
        }
    }
}

async fn admit(mut socket: TcpStream, shared: &Arc<Shared>, closing: &watch::Receiver<bool>) {
    if shared.clients.load(Ordering::Relaxed) >= shared.limits.max_connections {
        shared.rejected_connections.fetch_add(1, Ordering::Relaxed);
        let _ = socket
            .write_all(b"-ERR max number of clients reached\r\n")
            .await;
        return;
    }
    shared.clients.fetch_add(1, Ordering::Relaxed);
    let _ = socket.set_nodelay(true);
    let session = shared.new_session(socket.peer_addr().ok());
    let shared = shared.clone();
    let closing = closing.clone();
    tokio::spawn(async move {
        connection::serve(socket, session, &shared, closing).await;
        shared.clients.fetch_sub(1, Ordering::Release);
    });
}

/// The handlers of SIGTERM and SIGINT.
struct StopSignals {
    terminate: Signal,
    interrupt: Signal,
}

impl StopSignals {
    /// Install both handlers (inside the runtime's context).
    fn install() -> std::io::Result<StopSignals> {
        Ok(StopSignals {
            terminate: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
        })
    }

    /// Completes when either signal arrives; never without handlers.
    async fn received(signals: Option<StopSignals>) {
        let Some(mut signals) = signals else {
            return std::future::pending().await;
        };
        tokio::select! {
            _ = signals.terminate.recv() => {}
            _ = signals.interrupt.recv() => {}
        }
    }
}
