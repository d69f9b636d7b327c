//! The rma-run bootstrap: a key-value space and a barrier served by the launcher over a
//! Unix socket, one line per request (`hello RANK`, `put KEY HEX`, `get KEY`, `barrier`,
//! `bye`).
//!
//! The server watches its ranks: a rank's connection that closes after `bye` is a rank
//! that left normally (its World was dropped), one that closes without it a rank that
//! died. Requests that can no longer be answered because of such a rank (a barrier it
//! never joined, a key it never published) fail at once with `err gone RANK dead` or
//! `err gone RANK departed`, which the client turns into
//! [`TransportError::PeerUnreachable`] or [`TransportError::PeerDeparted`]: nobody waits
//! for the launcher's timeout.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use rma_core::bootstrap::SpawnCommand;
use rma_core::{BackendError, Bootstrap, Error, Rank, TransportError};

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
    socket: PathBuf,
    /// Reader, writer, and whether `bye` was sent.
    conn: Mutex<(BufReader<UnixStream>, UnixStream, bool)>,
    tags: rma_core::bootstrap::Tags,
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
        // A spawned process's job is one of the server's others, named in its hello.
        let named = std::env::var_os(env::SPAWNED).is_some();
        Self::open(Path::new(&socket), rank, size, job, named).map(Some)
    }

    /// For a process that rma-run spawned: the job of its parents and itself
    /// (`RMA_RUN_PARENT_*`), if it was spawned.
    pub fn parent_from_env() -> Result<Option<RunClient>, Error> {
        let Ok(job) = std::env::var(env::PARENT_JOB) else {
            return Ok(None);
        };
        let socket = std::env::var(env::SOCKET).unwrap_or_default();
        let bad = |what: &str| -> Error {
            TransportError::Failed(format!("rma-run gave a bad {what}")).into()
        };
        let number = |var: &str| -> Result<usize, Error> {
            std::env::var(var)
                .ok()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| bad(var))
        };
        let (rank, size) = (number(env::PARENT_RANK)?, number(env::PARENT_SIZE)?);
        if rank >= size || !job.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(bad("parent job"));
        }
        Self::open(Path::new(&socket), rank as Rank, size, job, true).map(Some)
    }

    /// Connects to the rma-run server at `socket` as `rank` of `size` in `job`.
    pub fn connect(
        socket: &Path,
        rank: Rank,
        size: usize,
        job: String,
    ) -> Result<RunClient, Error> {
        Self::open(socket, rank, size, job, false)
    }

    /// As [`connect`](Self::connect), for a job the server made for a spawn (named in
    /// the hello; the launched job is the server's unnamed one).
    pub(crate) fn connect_named(
        socket: &Path,
        rank: Rank,
        size: usize,
        job: String,
    ) -> Result<RunClient, Error> {
        Self::open(socket, rank, size, job, true)
    }

    /// As [`connect`](Self::connect); `named`: see [`connect_named`](Self::connect_named).
    fn open(
        socket: &Path,
        rank: Rank,
        size: usize,
        job: String,
        named: bool,
    ) -> Result<RunClient, Error> {
        let path = socket.to_path_buf();
        let socket = socket.display();
        let stream = UnixStream::connect(socket.to_string())
            .map_err(|e| BackendError::new(format!("reaching rma-run at {socket}"), e))?;
        stream.set_read_timeout(Some(boot_timeout())).ok();
        let reader = BufReader::new(
            stream
                .try_clone()
                .map_err(|e| BackendError::new("duplicating the connection to rma-run", e))?,
        );
        let hello = if named {
            format!("hello {rank} {job}")
        } else {
            format!("hello {rank}")
        };
        let client = RunClient {
            rank,
            size,
            job,
            socket: path,
            node: super::node_id(),
            conn: Mutex::new((reader, stream, false)),
            tags: rma_core::bootstrap::Tags::default(),
        };
        // Tell the server which rank this connection is, so that it knows who is gone
        // when the connection closes.
        let r = client.request(&hello)?;
        client.expect_ok(r)?;
        Ok(client)
    }

    fn request(&self, line: &str) -> Result<String, TransportError> {
        let mut c = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        let (reader, writer, _) = &mut *c;
        writer
            .write_all(line.as_bytes())
            .and_then(|_| writer.write_all(b"\n"))
            .map_err(|e| {
                let cmd = line.split(' ').next().unwrap_or("");
                BackendError::new(format!("sending `{cmd}` to rma-run"), e)
            })?;
        let mut reply = String::new();
        match reader.read_line(&mut reply) {
            Ok(0) => Err(TransportError::Failed(
                "rma-run closed the connection".into(),
            )),
            // Only the line end: `val ` (an empty value) keeps its space.
            Ok(_) => Ok(reply.trim_end_matches(['\n', '\r']).to_string()),
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
            Err(e) => {
                let cmd = line.split(' ').next().unwrap_or("");
                Err(BackendError::new(format!("reading rma-run's answer to `{cmd}`"), e).into())
            }
        }
    }

    fn expect_ok(&self, reply: String) -> Result<String, TransportError> {
        match reply.split_once(' ') {
            Some(("err", msg)) => Err(gone_error(msg)
                .unwrap_or_else(|| TransportError::Failed(format!("rma-run: {msg}")))),
            _ if reply == "ok" => Ok(reply),
            Some(("val", _)) => Ok(reply),
            _ => Err(TransportError::Failed(format!(
                "rma-run sent a garbled reply: {reply:.60}"
            ))),
        }
    }
}

/// `gone RANK dead|departed`: the typed error for a request a gone rank made impossible.
fn gone_error(msg: &str) -> Option<TransportError> {
    let mut words = msg.split(' ');
    if words.next() != Some("gone") {
        return None;
    }
    let rank: Rank = words.next()?.parse().ok()?;
    match words.next()? {
        "dead" => Some(TransportError::PeerUnreachable(rank)),
        "departed" => Some(TransportError::PeerDeparted(rank)),
        _ => None,
    }
}

impl Drop for RunClient {
    fn drop(&mut self) {
        self.depart();
    }
}

impl Bootstrap for RunClient {
    fn tags(&self) -> Option<&rma_core::bootstrap::Tags> {
        Some(&self.tags)
    }
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
    /// Leaving normally: the server tells peers waiting on us in a collective that we
    /// departed (not died). Best effort and once: a server that is gone has nobody to
    /// tell.
    fn depart(&self) {
        let mut c = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        if !std::mem::replace(&mut c.2, true) {
            let _ = c.1.write_all(b"bye\n");
        }
    }
    fn spawn(&self, commands: &[SpawnCommand], parents: usize) -> Result<String, TransportError> {
        let mut line = format!("spawn {parents}");
        for c in commands {
            line.push_str(&format!(
                " {} {} {}",
                c.processes,
                hex(c.program.as_bytes()),
                hex(c.args.join("\0").as_bytes())
            ));
        }
        let r = self.request(&line)?;
        let r = self.expect_ok(r)?;
        r.strip_prefix("val ")
            .filter(|j| !j.is_empty() && j.chars().all(|c| c.is_ascii_alphanumeric()))
            .map(|job| format!("{}\n{job}", self.socket.display()))
            .ok_or_else(|| TransportError::Failed(format!("rma-run's spawn reply: {r:.60}")))
    }
    fn parent(&self) -> Result<Option<(Arc<dyn Bootstrap>, usize)>, TransportError> {
        let Some(client) = Self::parent_from_env()
            .map_err(|e| BackendError::new("joining the parents' job", e))?
        else {
            return Ok(None);
        };
        let parents = std::env::var(env::PARENT_COUNT)
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|p| *p < client.size)
            .ok_or_else(|| {
                TransportError::Failed("rma-run gave a bad RMA_RUN_PARENT_COUNT".into())
            })?;
        Ok(Some((Arc::new(client), parents)))
    }
    fn gone(&self) -> Vec<Rank> {
        let reply = match self.request("gone") {
            Ok(r) => r,
            Err(_) => return Vec::new(),
        };
        reply
            .strip_prefix("val")
            .unwrap_or("")
            .split([' ', ','])
            .filter_map(|r| r.parse().ok())
            .collect()
    }
}

/// Why a rank is gone, as the server saw its connection close.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gone {
    /// Closed after `bye`: its World was dropped.
    Departed,
    /// Closed without `bye`: the process died.
    Dead,
}

#[derive(Default)]
struct State {
    kv: HashMap<String, String>,
    /// Ranks in the current barrier generation.
    arrived: Vec<bool>,
    generation: u64,
    /// Ranks whose connection closed.
    gone: Vec<Option<Gone>>,
}

impl State {
    fn new(size: usize) -> State {
        State {
            arrived: vec![false; size],
            gone: vec![None; size],
            ..State::default()
        }
    }

    /// The reply for a request that waits on `rank`, gone for `why`.
    fn gone_reply(rank: usize, why: Gone) -> String {
        let why = match why {
            Gone::Dead => "dead",
            Gone::Departed => "departed",
        };
        format!("err gone {rank} {why}")
    }

    /// A gone rank the current barrier waits for (dead ones first: they explain more).
    fn barrier_blocker(&self) -> Option<String> {
        let missing = |want: Gone| {
            (0..self.gone.len()).find(|&r| !self.arrived[r] && self.gone[r] == Some(want))
        };
        missing(Gone::Dead)
            .map(|r| Self::gone_reply(r, Gone::Dead))
            .or_else(|| missing(Gone::Departed).map(|r| Self::gone_reply(r, Gone::Departed)))
    }

    /// A gone rank that makes `key` impossible: the rank it names (`TAG:RANK`, the
    /// allgather convention) if that one died, else any dead rank (the cause: it may have
    /// been the one to publish it, and a rank that left may have left because of it), else
    /// the named rank if it left.
    fn get_blocker(&self, key: &str) -> Option<String> {
        let owner = key
            .rsplit_once(':')
            .and_then(|(_, r)| r.parse::<usize>().ok())
            .filter(|r| *r < self.gone.len());
        let owner_gone = owner.and_then(|r| self.gone[r].map(|why| (r, why)));
        if let Some((r, Gone::Dead)) = owner_gone {
            return Some(Self::gone_reply(r, Gone::Dead));
        }
        (0..self.gone.len())
            .find(|&r| self.gone[r] == Some(Gone::Dead))
            .map(|r| Self::gone_reply(r, Gone::Dead))
            .or_else(|| owner_gone.map(|(r, why)| Self::gone_reply(r, why)))
    }
}

/// The jobs a server serves: the launched one (named "" on the wire), and for each
/// spawn the children's own job and the job of parents and children together.
struct Jobs {
    jobs: HashMap<String, State>,
    /// Spawns asked for and not yet taken by the launcher.
    requests: Vec<SpawnRequest>,
    /// Outcomes of spawns, by request id: the union job's id, or why not.
    outcomes: HashMap<u64, Result<String, String>>,
    next_spawn: u64,
}

/// A spawn the launcher is asked to make (see [`RunServer::take_spawns`]).
#[derive(Debug, Clone)]
pub struct SpawnRequest {
    /// Its id, for [`RunServer::spawned`].
    pub id: u64,
    /// The commands of a spawn-multiple.
    pub commands: Vec<SpawnCommand>,
    /// How many parents join the union job (ranks 0..parents of it).
    pub parents: usize,
}

type Shared = Arc<(Mutex<Jobs>, Condvar)>;

/// The launcher's side: serves the key-value space and barrier to `size` ranks, and
/// to the jobs its ranks spawn.
pub struct RunServer {
    path: PathBuf,
    shared: Shared,
}

impl std::fmt::Debug for RunServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunServer")
            .field("path", &self.path)
            .finish()
    }
}

impl RunServer {
    /// Listens on a fresh socket in `dir` for a job of `size` ranks.
    pub fn start(dir: &Path, size: usize) -> std::io::Result<RunServer> {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join("rma-run.sock");
        let listener = UnixListener::bind(&path)?;
        // Only this user may talk to the job's key-value store, whatever the umask.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        let jobs = Jobs {
            jobs: HashMap::from([(String::new(), State::new(size))]),
            requests: Vec::new(),
            outcomes: HashMap::new(),
            next_spawn: 0,
        };
        let shared: Shared = Arc::new((Mutex::new(jobs), Condvar::new()));
        let s = shared.clone();
        std::thread::Builder::new()
            .name("rma-run-server".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    let Ok(conn) = conn else { break };
                    let s = s.clone();
                    let _ = std::thread::Builder::new()
                        .name("rma-run-conn".into())
                        .spawn(move || serve(conn, s));
                }
            })?;
        Ok(RunServer { path, shared })
    }

    /// The socket path to give the ranks.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The launcher saw `rank`'s process end (`clean`: exit status 0). A rank that dies
    /// before it ever reached the server, or whose connection is still draining, is gone
    /// from now on too; one already known gone keeps what its connection said.
    pub fn rank_exited(&self, rank: usize, clean: bool) {
        self.exited("", rank, clean);
    }

    /// As [`rank_exited`](Self::rank_exited), for rank `rank` of job `job` (a spawned
    /// job, or the union of a spawn).
    pub fn exited(&self, job: &str, rank: usize, clean: bool) {
        let (lock, cv) = &*self.shared;
        let mut jobs = lock.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(g) = jobs.jobs.get_mut(job).and_then(|st| st.gone.get_mut(rank)) {
            g.get_or_insert(if clean { Gone::Departed } else { Gone::Dead });
        }
        cv.notify_all();
    }

    /// Spawns the ranks asked for since the last call; the launcher starts their
    /// processes, then calls [`spawned`](Self::spawned).
    pub fn take_spawns(&self) -> Vec<SpawnRequest> {
        let mut jobs = self.shared.0.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::take(&mut jobs.requests)
    }

    /// The jobs of a spawn the launcher is about to start: the children's own `child`
    /// of `children` ranks and `union` of `all` ranks (parents and children). Made before
    /// any child starts, so that each finds its jobs at its hello.
    pub fn add_jobs(&self, child: &str, children: usize, union: &str, all: usize) {
        self.add_job(child, children);
        self.add_job(union, all);
    }

    /// A job named `name` of `size` ranks, besides the launched one.
    pub fn add_job(&self, name: &str, size: usize) {
        let mut jobs = self.shared.0.lock().unwrap_or_else(|e| e.into_inner());
        jobs.jobs.insert(name.to_string(), State::new(size));
    }

    /// The launcher made spawn `id` (`Ok`: the union job, see
    /// [`add_jobs`](Self::add_jobs)) or could not (`Err`: why): answers the parent.
    pub fn spawned(&self, id: u64, outcome: Result<String, String>) {
        let (lock, cv) = &*self.shared;
        let mut jobs = lock.lock().unwrap_or_else(|e| e.into_inner());
        jobs.outcomes.insert(id, outcome);
        cv.notify_all();
    }

    /// Wakes every waiting request (used when the job is torn down).
    pub fn shutdown(&self) {
        self.shared.1.notify_all();
    }
}

/// `spawn PARENTS N HEX(PROGRAM) HEX(ARGS joined by NUL) ...` (one quadruple per
/// command after PARENTS): the request, or why it is malformed.
fn parse_spawn(rest: &str) -> Option<(usize, Vec<SpawnCommand>)> {
    let mut words = rest.split(' ');
    let parents = words.next()?.parse().ok()?;
    let mut commands = Vec::new();
    while let Some(n) = words.next() {
        let processes = n.parse().ok()?;
        let program = String::from_utf8(unhex(words.next()?)?).ok()?;
        let args = String::from_utf8(unhex(words.next()?)?).ok()?;
        let args = if args.is_empty() {
            Vec::new()
        } else {
            args.split('\0').map(str::to_string).collect()
        };
        commands.push(SpawnCommand {
            program,
            args,
            processes,
        });
    }
    (!commands.is_empty()).then_some((parents, commands))
}

/// Writes one reply line.
fn answer(write: &mut UnixStream, reply: &str) -> std::io::Result<()> {
    write.write_all(reply.as_bytes())?;
    write.write_all(b"\n")
}

fn serve(conn: UnixStream, shared: Shared) {
    let Ok(write) = conn.try_clone() else { return };
    let mut write = write;
    let reader = BufReader::new(conn);
    let (lock, cv) = &*shared;
    // The job and rank this connection belongs to (after `hello`), and whether it said
    // `bye`. A connection that never said hello (an older client) is of the launched job.
    let mut job = String::new();
    let mut rank: Option<usize> = None;
    let mut said_bye = false;
    for line in reader.lines() {
        let Ok(line) = line else { break };
        let mut parts = line.splitn(3, ' ');
        let (verb, a, b) = (parts.next(), parts.next(), parts.next());
        let mut jobs = lock.lock().unwrap_or_else(|e| e.into_inner());
        if verb == Some("hello") {
            let named = b.unwrap_or("");
            let size = jobs.jobs.get(named).map(|st| st.arrived.len());
            let reply = match (a.and_then(|r| r.parse::<usize>().ok()), size) {
                (Some(r), Some(size)) if r < size => {
                    (job, rank) = (named.to_string(), Some(r));
                    "ok"
                }
                (_, None) => "err unknown job",
                _ => "err bad rank",
            };
            drop(jobs);
            if answer(&mut write, reply).is_err() {
                break;
            }
            continue;
        }
        if verb == Some("spawn") {
            let request = line.strip_prefix("spawn ").and_then(parse_spawn);
            let reply = match request {
                None => "err bad spawn request".to_string(),
                Some((parents, commands)) => {
                    let id = jobs.next_spawn;
                    jobs.next_spawn += 1;
                    jobs.requests.push(SpawnRequest {
                        id,
                        commands,
                        parents,
                    });
                    let deadline = Instant::now() + boot_timeout();
                    loop {
                        if let Some(outcome) = jobs.outcomes.remove(&id) {
                            break match outcome {
                                Ok(union) => format!("val {union}"),
                                Err(why) => format!("err spawn failed: {why}"),
                            };
                        }
                        let left = deadline.saturating_duration_since(Instant::now());
                        if left.is_zero() {
                            break "err spawn: the launcher did not answer".to_string();
                        }
                        jobs = cv
                            .wait_timeout(jobs, left)
                            .unwrap_or_else(|e| e.into_inner())
                            .0;
                    }
                }
            };
            drop(jobs);
            if answer(&mut write, &reply).is_err() {
                break;
            }
            continue;
        }
        let Some(st) = jobs.jobs.get_mut(&job) else {
            break;
        };
        let reply = match (verb, a, b) {
            (Some("bye"), None, None) => {
                // No more collectives from this rank: whoever waits on it learns it now,
                // not when its process ends (it may linger for its peers first).
                said_bye = true;
                if let Some(r) = rank {
                    st.gone[r].get_or_insert(Gone::Departed);
                    cv.notify_all();
                }
                continue;
            }
            (Some("gone"), None, None) => {
                let gone: Vec<String> = (0..st.gone.len())
                    .filter(|r| st.gone[*r].is_some())
                    .map(|r| r.to_string())
                    .collect();
                format!("val {}", gone.join(","))
            }
            (Some("put"), Some(key), Some(val)) => {
                st.kv.insert(key.to_string(), val.to_string());
                cv.notify_all();
                "ok".to_string()
            }
            (Some("get"), Some(key), None) => {
                let deadline = Instant::now() + boot_timeout();
                loop {
                    let st = jobs.jobs.get(&job).expect("jobs are never removed");
                    if let Some(v) = st.kv.get(key) {
                        break format!("val {v}");
                    }
                    if let Some(err) = st.get_blocker(key) {
                        break err;
                    }
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break format!("err key {key} never appeared");
                    }
                    jobs = cv
                        .wait_timeout(jobs, left)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            }
            (Some("barrier"), None, None) => {
                let generation = st.generation;
                let me = rank.unwrap_or_else(|| st.arrived.iter().position(|a| !a).unwrap_or(0));
                st.arrived[me] = true;
                if st.arrived.iter().all(|a| *a) {
                    st.arrived.iter_mut().for_each(|a| *a = false);
                    st.generation += 1;
                    cv.notify_all();
                    "ok".to_string()
                } else {
                    let deadline = Instant::now() + boot_timeout();
                    loop {
                        let st = jobs.jobs.get(&job).expect("jobs are never removed");
                        if st.generation != generation {
                            break "ok".to_string();
                        }
                        if let Some(err) = st.barrier_blocker() {
                            break err;
                        }
                        let left = deadline.saturating_duration_since(Instant::now());
                        if left.is_zero() {
                            break "err barrier timed out: a rank never arrived".to_string();
                        }
                        jobs = cv
                            .wait_timeout(jobs, left)
                            .unwrap_or_else(|e| e.into_inner())
                            .0;
                    }
                }
            }
            _ => "err unknown request".to_string(),
        };
        drop(jobs);
        if answer(&mut write, &reply).is_err() {
            break;
        }
    }
    // The connection closed: the rank is gone, normally or not. Wake whoever waits on it.
    if let Some(r) = rank {
        let mut jobs = lock.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(st) = jobs.jobs.get_mut(&job) {
            st.gone[r] = Some(if said_bye { Gone::Departed } else { Gone::Dead });
        }
        cv.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_socket_and_its_directory_are_private_whatever_the_umask() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("rma-run-perm-test-{}", std::process::id()));
        // SAFETY: umask(2) only swaps the process's file mode mask; restored below.
        let old = unsafe { libc::umask(0) };
        let made = crate::launcher::private_dir(&dir);
        let server = made.and_then(|()| RunServer::start(&dir, 1));
        // SAFETY: as above.
        unsafe { libc::umask(old) };
        let server = server.unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(server.path()), 0o600);
        // An existing directory (someone else's, say) is never adopted.
        assert!(crate::launcher::private_dir(&dir).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn empty_values_round_trip_and_a_reused_tag_is_an_error() {
        let dir = std::env::temp_dir().join(format!("rma-run-kv-test-{}", std::process::id()));
        crate::launcher::private_dir(&dir).unwrap();
        let server = RunServer::start(&dir, 1).unwrap();
        let client = RunClient::connect(server.path(), 0, 1, "kvtest".into()).unwrap();
        client.put("empty", b"").unwrap();
        assert_eq!(client.get("empty").unwrap(), Vec::<u8>::new());
        assert_eq!(
            client.allgather("nothing", b"").unwrap(),
            vec![Vec::<u8>::new()]
        );
        assert_eq!(client.allgather("one", b"\x01").unwrap(), vec![vec![1u8]]);
        let again = client.allgather("one", b"\x02");
        assert!(
            matches!(&again, Err(TransportError::Failed(m)) if m.contains("used twice")),
            "{again:?}"
        );
        drop(client);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_spawn_reaches_the_launcher_and_its_outcome_the_parent() {
        let dir = std::env::temp_dir().join(format!("rma-run-spawn-test-{}", std::process::id()));
        crate::launcher::private_dir(&dir).unwrap();
        let server = RunServer::start(&dir, 1).unwrap();
        let client = Arc::new(RunClient::connect(server.path(), 0, 1, "sp".into()).unwrap());
        let ask = |c: &Arc<RunClient>| {
            let c = c.clone();
            std::thread::spawn(move || {
                c.spawn(
                    &[SpawnCommand {
                        program: "a prog".into(),
                        args: vec!["x".into(), "y z".into(), String::new()],
                        processes: 2,
                    }],
                    1,
                )
            })
        };
        let take = || loop {
            let mut got = server.take_spawns();
            if let Some(r) = got.pop() {
                break r;
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        // Granted: the parent gets the union job, which then takes hellos (3 ranks).
        let asked = ask(&client);
        let req = take();
        assert_eq!(req.parents, 1);
        assert_eq!(req.commands[0].program, "a prog");
        assert_eq!(req.commands[0].args, vec!["x", "y z", ""]);
        assert_eq!(req.commands[0].processes, 2);
        server.add_jobs("spc0", 2, "spu0", 3);
        server.spawned(req.id, Ok("spu0".into()));
        let at = format!("{}\nspu0", server.path().display());
        assert_eq!(asked.join().unwrap().unwrap(), at);
        assert!(crate::bootstrap::join_rendezvous(&at, 2, 3).is_ok());
        assert!(
            crate::bootstrap::join_rendezvous(&at, 3, 4).is_err(),
            "a rank past the job"
        );
        let nojob = format!("{}\nnojob", server.path().display());
        assert!(
            crate::bootstrap::join_rendezvous(&nojob, 0, 1).is_err(),
            "an unknown job"
        );
        // Refused: the launcher's reason reaches the parent.
        let asked = ask(&client);
        let req = take();
        server.spawned(req.id, Err("cannot start a prog: no such file".into()));
        let err = asked.join().unwrap().unwrap_err();
        assert!(err.to_string().contains("cannot start a prog"), "{err}");
        drop(client);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn hex_round_trips_and_rejects_garbage() {
        assert_eq!(unhex(&hex(&[0, 1, 254, 255])), Some(vec![0, 1, 254, 255]));
        assert_eq!(unhex("zz"), None);
        assert_eq!(unhex("abc"), None);
    }
}
