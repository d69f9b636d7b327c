//! The rma-run bootstrap: a key-value space and a barrier served by the launcher over a
//! Unix socket, one line per request (`put KEY HEX`, `get KEY`, `barrier`).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use rma_core::{Bootstrap, Error, Rank, TransportError};

use super::{env, hex, unhex};

/// How long a rank waits for the launcher before it gives up (`RMA_BOOT_TIMEOUT_MS`).
fn boot_timeout() -> Duration {
    let ms = std::env::var("RMA_BOOT_TIMEOUT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60_000);
    Duration::from_millis(ms)
}

/// A process's connection to its rma-run launcher.
#[derive(Debug)]
pub struct RunClient {
    rank: Rank,
    size: usize,
    job: String,
    node: String,
    conn: Mutex<(BufReader<UnixStream>, UnixStream)>,
}

impl RunClient {
    /// Connects if rma-run's variables are set; `Ok(None)` if they are not.
    pub fn from_env() -> Result<Option<RunClient>, Error> {
        let Ok(socket) = std::env::var(env::SOCKET) else {
            return Ok(None);
        };
        let bad = |what: &str| -> Error {
            TransportError::Failed(format!("rma-run gave a bad {what}")).into()
        };
        let rank: Rank = std::env::var(env::RANK)
            .ok()
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| bad(env::RANK))?;
        let size: usize = std::env::var(env::SIZE)
            .ok()
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| bad(env::SIZE))?;
        let job = std::env::var(env::JOB).map_err(|_| bad(env::JOB))?;
        if rank as usize >= size || !job.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(bad("rank or job id"));
        }
        let stream = UnixStream::connect(&socket).map_err(|e| {
            TransportError::Failed(format!("cannot reach rma-run at {socket}: {e}"))
        })?;
        stream.set_read_timeout(Some(boot_timeout())).ok();
        let reader = BufReader::new(
            stream
                .try_clone()
                .map_err(|e| TransportError::Failed(e.to_string()))?,
        );
        Ok(Some(RunClient {
            rank,
            size,
            job,
            node: super::node_id(),
            conn: Mutex::new((reader, stream)),
        }))
    }

    fn request(&self, line: &str) -> Result<String, TransportError> {
        let mut c = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        let (reader, writer) = &mut *c;
        writer
            .write_all(line.as_bytes())
            .and_then(|_| writer.write_all(b"\n"))
            .map_err(|e| TransportError::Failed(format!("rma-run is gone: {e}")))?;
        let mut reply = String::new();
        match reader.read_line(&mut reply) {
            Ok(0) => Err(TransportError::Failed(
                "rma-run closed the connection".into(),
            )),
            Ok(_) => Ok(reply.trim_end().to_string()),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                Err(TransportError::Failed(format!(
                    "rma-run did not answer `{}` within {:?}: a peer never arrived or died",
                    line.split(' ').next().unwrap_or(""),
                    boot_timeout()
                )))
            }
            Err(e) => Err(TransportError::Failed(format!("rma-run: {e}"))),
        }
    }

    fn expect_ok(&self, reply: String) -> Result<String, TransportError> {
        match reply.split_once(' ') {
            Some(("err", msg)) => Err(TransportError::Failed(format!("rma-run: {msg}"))),
            _ if reply == "ok" => Ok(reply),
            Some(("val", _)) => Ok(reply),
            _ => Err(TransportError::Failed(format!(
                "rma-run sent a garbled reply: {reply:.60}"
            ))),
        }
    }
}

impl Bootstrap for RunClient {
    fn rank(&self) -> Rank {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn job_id(&self) -> &str {
        &self.job
    }
    fn node_id(&self) -> &str {
        &self.node
    }
    fn put(&self, key: &str, value: &[u8]) -> Result<(), TransportError> {
        let r = self.request(&format!("put {key} {}", hex(value)))?;
        self.expect_ok(r).map(drop)
    }
    fn get(&self, key: &str) -> Result<Vec<u8>, TransportError> {
        let r = self.request(&format!("get {key}"))?;
        let r = self.expect_ok(r)?;
        r.strip_prefix("val ").and_then(unhex).ok_or_else(|| {
            TransportError::Failed(format!("rma-run sent a garbled value for {key}"))
        })
    }
    fn barrier(&self) -> Result<(), TransportError> {
        let r = self.request("barrier")?;
        self.expect_ok(r).map(drop)
    }
}

#[derive(Default)]
struct State {
    kv: HashMap<String, String>,
    arrived: usize,
    generation: u64,
}

/// The launcher's side: serves the key-value space and barrier to `size` ranks.
pub struct RunServer {
    path: PathBuf,
    shared: Arc<(Mutex<State>, Condvar)>,
}

impl RunServer {
    /// Listens on a fresh socket in `dir` for a job of `size` ranks.
    pub fn start(dir: &Path, size: usize) -> std::io::Result<RunServer> {
        let path = dir.join("rma-run.sock");
        let listener = UnixListener::bind(&path)?;
        let shared = Arc::new((Mutex::new(State::default()), Condvar::new()));
        let s = shared.clone();
        std::thread::Builder::new()
            .name("rma-run-server".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    let Ok(conn) = conn else { break };
                    let s = s.clone();
                    let _ = std::thread::Builder::new()
                        .name("rma-run-conn".into())
                        .spawn(move || serve(conn, s, size));
                }
            })?;
        Ok(RunServer { path, shared })
    }

    /// The socket path to give the ranks.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Wakes every waiting request (used when the job is torn down).
    pub fn shutdown(&self) {
        self.shared.1.notify_all();
    }
}

fn serve(conn: UnixStream, shared: Arc<(Mutex<State>, Condvar)>, size: usize) {
    let Ok(write) = conn.try_clone() else { return };
    let mut write = write;
    let reader = BufReader::new(conn);
    let (lock, cv) = &*shared;
    for line in reader.lines() {
        let Ok(line) = line else { break };
        let mut parts = line.splitn(3, ' ');
        let reply = match (parts.next(), parts.next(), parts.next()) {
            (Some("put"), Some(key), Some(val)) => {
                lock.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .kv
                    .insert(key.to_string(), val.to_string());
                cv.notify_all();
                "ok".to_string()
            }
            (Some("get"), Some(key), None) => {
                let deadline = Instant::now() + boot_timeout();
                let mut st = lock.lock().unwrap_or_else(|e| e.into_inner());
                loop {
                    if let Some(v) = st.kv.get(key) {
                        break format!("val {v}");
                    }
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break format!("err key {key} never appeared");
                    }
                    st = cv
                        .wait_timeout(st, left)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            }
            (Some("barrier"), None, None) => {
                let mut st = lock.lock().unwrap_or_else(|e| e.into_inner());
                let generation = st.generation;
                st.arrived += 1;
                if st.arrived == size {
                    st.arrived = 0;
                    st.generation += 1;
                    cv.notify_all();
                    "ok".to_string()
                } else {
                    let deadline = Instant::now() + boot_timeout();
                    loop {
                        if st.generation != generation {
                            break "ok".to_string();
                        }
                        let left = deadline.saturating_duration_since(Instant::now());
                        if left.is_zero() {
                            break "err barrier timed out: a rank never arrived".to_string();
                        }
                        st = cv
                            .wait_timeout(st, left)
                            .unwrap_or_else(|e| e.into_inner())
                            .0;
                    }
                }
            }
            _ => "err unknown request".to_string(),
        };
        if write
            .write_all(reply.as_bytes())
            .and_then(|_| write.write_all(b"\n"))
            .is_err()
        {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_rejects_garbage() {
        assert_eq!(unhex(&hex(&[0, 1, 254, 255])), Some(vec![0, 1, 254, 255]));
        assert_eq!(unhex("zz"), None);
        assert_eq!(unhex("abc"), None);
    }
}
