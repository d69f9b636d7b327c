//! The PMI-1 wire protocol over `PMI_FD`, as MPICH's Hydra (`mpiexec`) serves it: text
//! lines of `key=value` pairs (`cmd=init`, `get_maxes`, `get_my_kvsname`, `put`,
//! `barrier_in`, `get`, `finalize`). No C library.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};

use rma_core::bootstrap::SpawnCommand;
use rma_core::{BackendError, Bootstrap, Error, Rank, TransportError};

/// A PMI-1 client on the fd the launcher gave us.
#[derive(Debug)]
pub struct Pmi1 {
    rank: Rank,
    size: usize,
    kvsname: String,
    job: String,
    node: String,
    vallen_max: usize,
    conn: Mutex<(BufReader<UnixStream>, UnixStream)>,
    watch: super::Watch,
    tags: rma_core::bootstrap::Tags,
    /// The rendezvous of the spawns this process asked for, kept while it lives.
    spawns: Mutex<Vec<super::Rendezvous>>,
    /// `cmd=finalize` sent (at the World's departure, or at drop).
    finalized: std::sync::atomic::AtomicBool,
}

/// The PMI key a spawn preputs for its children: where the job of parents and children
/// meets (`PATH\nPARENTS\nJOB`, hex).
const UNION_KEY: &str = "rmaunion";

fn err(msg: impl Into<String>) -> TransportError {
    TransportError::Failed(format!("PMI-1: {}", msg.into()))
}

/// Parses `cmd=x a=b c=d` into a map; `None` for a garbled line.
fn parse(line: &str) -> Option<HashMap<&str, &str>> {
    line.split_whitespace()
        .map(|kv| kv.split_once('='))
        .collect()
}

impl Pmi1 {
    /// Connects if `PMI_FD` is set (`Ok(None)` otherwise) and runs the init handshake.
    pub fn from_env() -> Result<Option<Pmi1>, Error> {
        let Some(stream) = super::pmi_socket()? else {
            return Ok(None);
        };
        let reader = BufReader::new(stream.try_clone().map_err(|e| {
            TransportError::from(BackendError::new(
                "duplicating the PMI-1 launcher's socket",
                e,
            ))
        })?);
        let mut me = Pmi1 {
            rank: 0,
            size: 1,
            kvsname: String::new(),
            job: String::new(),
            node: super::node_id(),
            vallen_max: 1024,
            conn: Mutex::new((reader, stream)),
            watch: super::Watch::default(),
            tags: rma_core::bootstrap::Tags::default(),
            spawns: Mutex::new(Vec::new()),
            finalized: std::sync::atomic::AtomicBool::new(false),
        };
        let r = me.call(
            "cmd=init pmi_version=1 pmi_subversion=1",
            "response_to_init",
        )?;
        if r.get("rc").is_some_and(|rc| *rc != "0") {
            return Err(err("init refused").into());
        }
        let maxes = me.call("cmd=get_maxes", "maxes")?;
        me.vallen_max = maxes
            .get("vallen_max")
            .and_then(|v| v.parse().ok())
            .unwrap_or(1024);
        let kvs = me.call("cmd=get_my_kvsname", "my_kvsname")?;
        me.kvsname = kvs
            .get("kvsname")
            .ok_or_else(|| err("no kvsname"))?
            .to_string();
        me.job = me
            .kvsname
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .collect();
        let num = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<usize>().ok());
        me.rank = num("PMI_RANK").ok_or_else(|| err("PMI_RANK missing"))? as Rank;
        me.size = num("PMI_SIZE").ok_or_else(|| err("PMI_SIZE missing"))?;
        if me.rank as usize >= me.size {
            return Err(err("PMI_RANK outside PMI_SIZE").into());
        }
        Ok(Some(me))
    }

    /// Writes lines that get no answer of their own.
    fn send(&self, lines: &str) -> Result<(), TransportError> {
        let mut c = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        c.1.write_all(format!("{lines}\n").as_bytes()).map_err(|e| {
            BackendError::new(format!("sending `{lines:.30}` to the PMI-1 launcher"), e).into()
        })
    }

    fn call(&self, line: &str, expect: &str) -> Result<HashMap<String, String>, TransportError> {
        let mut c = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        let (reader, writer) = &mut *c;
        writer
            .write_all(format!("{line}\n").as_bytes())
            .map_err(|e| {
                BackendError::new(format!("sending `{line:.30}` to the PMI-1 launcher"), e)
            })?;
        if reader.buffer().is_empty() {
            self.watch.readable(reader.get_ref(), line)?;
        }
        let mut reply = String::new();
        match reader.read_line(&mut reply) {
            Ok(0) => return Err(err("launcher closed the connection")),
            Ok(_) => {}
            Err(e) => {
                let doing = format!("reading the PMI-1 launcher's answer to `{line:.30}`");
                return Err(BackendError::new(doing, e).into());
            }
        }
        let map = parse(reply.trim())
            .ok_or_else(|| err(format!("garbled reply: {:.60}", reply.trim())))?;
        if map.get("cmd") != Some(&expect) {
            return Err(err(format!(
                "expected cmd={expect}, got: {:.60}",
                reply.trim()
            )));
        }
        Ok(map
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect())
    }
}

impl Pmi1 {
    /// Tells the PMI server this process is done with it, once.
    fn finalize(&self) {
        if !self
            .finalized
            .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            let _ = self.call("cmd=finalize", "finalize_ack");
        }
    }
}

impl Bootstrap for Pmi1 {
    fn tags(&self) -> Option<&rma_core::bootstrap::Tags> {
        Some(&self.tags)
    }

    /// The World leaves: PMI's finalize now, not when the last reference to this
    /// bootstrap goes (which a process may never reach before it exits: the conformance
    /// binary's ranks never sent it). MPICH's Hydra takes a process that exits without
    /// finalize for a failed one and kills its peers still running (SIGKILL): 4-rank
    /// `comm_ops` under mpiexec failed so in 6 of 30 runs, the ranks that finished first
    /// killing the others.
    fn depart(&self) {
        self.finalize();
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
        let v = super::hex(value);
        if v.len() > self.vallen_max {
            return Err(err(format!(
                "value of {} bytes exceeds vallen_max",
                value.len()
            )));
        }
        let r = self.call(
            &format!("cmd=put kvsname={} key={key} value={v}", self.kvsname),
            "put_result",
        )?;
        match r.get("rc").map(String::as_str) {
            Some("0") => Ok(()),
            _ => Err(err(format!("put {key} refused"))),
        }
    }
    fn get(&self, key: &str) -> Result<Vec<u8>, TransportError> {
        let r = self.call(
            &format!("cmd=get kvsname={} key={key}", self.kvsname),
            "get_result",
        )?;
        if r.get("rc").map(String::as_str) != Some("0") {
            return Err(err(format!("key {key} not found")));
        }
        let v = r
            .get("value")
            .ok_or_else(|| err("get_result without value"))?;
        super::unhex(v).ok_or_else(|| err("garbled value"))
    }
    fn barrier(&self) -> Result<(), TransportError> {
        self.call("cmd=barrier_in", "barrier_out").map(drop)
    }
    /// Hydra's spawn (`mcmd=spawn` blocks, one per command); parents and children then
    /// meet at an rma-run server of this process, whose socket the children find under
    /// `rmaunion` in their key-value space: all of them on this node (a Unix socket).
    fn spawn(&self, commands: &[SpawnCommand], parents: usize) -> Result<String, TransportError> {
        let n: usize = commands.iter().map(|c| c.processes).sum();
        let meet = super::Rendezvous::start(parents, n)?;
        let value = super::hex(meet.for_children.as_bytes());
        let joined = meet.for_parents.clone();
        self.spawns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(meet);
        let mut blocks = Vec::new();
        for (i, c) in commands.iter().enumerate() {
            if [&c.program]
                .into_iter()
                .chain(&c.args)
                .any(|a| a.contains('\n'))
            {
                return Err(err("a spawn argument with a line break"));
            }
            let mut b = format!(
                "mcmd=spawn\nnprocs={}\nexecname={}\ntotspawns={}\nspawnssofar={}\nargcnt={}\n",
                c.processes,
                c.program,
                commands.len(),
                i + 1,
                c.args.len()
            );
            for (j, a) in c.args.iter().enumerate() {
                b.push_str(&format!("arg{}={a}\n", j + 1));
            }
            b.push_str(&format!(
                "preput_num=1\npreput_key_0={UNION_KEY}\npreput_val_0={value}\ninfo_num=0\nendcmd"
            ));
            blocks.push(b);
        }
        // Hydra answers once, after the last block.
        let last = blocks.pop().expect("a command at least");
        for b in blocks {
            self.send(&b)?;
        }
        let r = self.call(&last, "spawn_result")?;
        match r.get("rc").map(String::as_str) {
            Some("0") => Ok(joined),
            rc => Err(err(format!("the launcher refused the spawn (rc {rc:?})"))),
        }
    }
    fn set_watch(&self, watch: rma_core::bootstrap::LivenessWatch) {
        self.watch.set(watch);
    }
    fn parent(&self) -> Result<Option<(Arc<dyn Bootstrap>, usize)>, TransportError> {
        if std::env::var("PMI_SPAWNED").as_deref() != Ok("1") {
            return Ok(None);
        }
        // Spawned by something else than rma (no rendezvous preput): no parent of ours.
        let Ok(value) = self.get(UNION_KEY) else {
            return Ok(None);
        };
        let told = String::from_utf8_lossy(&value).into_owned();
        super::child_rendezvous(&told, self.rank, self.size).map(Some)
    }
}

impl Drop for Pmi1 {
    fn drop(&mut self) {
        self.finalize();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_replies_and_refuses_garbage() {
        let m = parse("cmd=get_result rc=0 value=0a0b").unwrap();
        assert_eq!(m["value"], "0a0b");
        assert!(parse("cmd=get_result garbage").is_none());
    }
}
