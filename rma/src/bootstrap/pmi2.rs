//! The PMI-2 wire protocol over `PMI_FD`, as Slurm's `srun --mpi=pmi2` and MPICH's
//! Hydra serve it: each command is a 6-character decimal length followed by that many
//! bytes of `key=value;` pairs (`cmd=fullinit`, `job-getid`, `kvs-put`, `kvs-fence`,
//! `kvs-get`, `finalize`). No C library.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::Mutex;

use rma_core::{BackendError, Bootstrap, Error, Rank, TransportError};

/// A PMI-2 client on the fd the launcher gave us.
#[derive(Debug)]
pub struct Pmi2 {
    rank: Rank,
    size: usize,
    jobid: String,
    job: String,
    node: String,
    conn: Mutex<UnixStream>,
    watch: super::Watch,
    tags: rma_core::bootstrap::Tags,
    barriers: std::sync::atomic::AtomicU64,
    /// `cmd=finalize;` sent (at the World's departure, or at drop).
    finalized: std::sync::atomic::AtomicBool,
}

fn err(msg: impl Into<String>) -> TransportError {
    TransportError::Failed(format!("PMI-2: {}", msg.into()))
}

/// Parses `k=v;k=v;` (with `;;` standing for a literal `;` inside a value).
fn parse(body: &str) -> Option<HashMap<String, String>> {
    let mut map = HashMap::new();
    let mut chars = body.chars().peekable();
    let (mut key, mut val, mut in_val) = (String::new(), String::new(), false);
    while let Some(c) = chars.next() {
        match c {
            '=' if !in_val => in_val = true,
            ';' if chars.peek() == Some(&';') => {
                chars.next();
                val.push(';');
            }
            ';' => {
                if !in_val || key.is_empty() {
                    return None;
                }
                map.insert(std::mem::take(&mut key), std::mem::take(&mut val));
                in_val = false;
            }
            c if in_val => val.push(c),
            c => key.push(c),
        }
    }
    (key.is_empty() && !in_val).then_some(map)
}

impl Pmi2 {
    /// Connects over `PMI_FD` (`Ok(None)` if unset) and runs `fullinit`.
    pub fn from_env() -> Result<Option<Pmi2>, Error> {
        let Some(stream) = super::pmi_socket()? else {
            return Ok(None);
        };
        let rank: Rank = std::env::var("PMI_RANK")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| err("PMI_RANK missing"))?;
        let mut me = Pmi2 {
            rank,
            size: 0,
            jobid: String::new(),
            job: String::new(),
            node: super::node_id(),
            conn: Mutex::new(stream),
            watch: super::Watch::default(),
            tags: rma_core::bootstrap::Tags::default(),
            barriers: std::sync::atomic::AtomicU64::new(0),
            finalized: std::sync::atomic::AtomicBool::new(false),
        };
        // The PMI-2 handshake starts in PMI-1's line format (what Slurm's pmi2 plugin and
        // Hydra expect), then every command uses PMI-2's length-prefixed frames.
        me.init_line()?;
        // Slurm wants the job id it gave us back; Hydra ignores it.
        let jobid = std::env::var("PMI_JOBID")
            .map(|j| format!("pmijobid={j};"))
            .unwrap_or_default();
        let fullinit = format!("cmd=fullinit;{jobid}pmirank={rank};threaded=FALSE;");
        let r = me.call(&fullinit, "fullinit-response")?;
        me.size = r
            .get("size")
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| err("fullinit without size"))?;
        if let Some(r2) = r.get("rank").and_then(|v| v.parse::<Rank>().ok()) {
            me.rank = r2;
        }
        if me.rank as usize >= me.size {
            return Err(err("rank outside size").into());
        }
        let j = me.call("cmd=job-getid;", "job-getid-response")?;
        me.jobid = j
            .get("jobid")
            .cloned()
            .ok_or_else(|| err("job-getid without jobid"))?;
        me.job = me
            .jobid
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .collect();
        Ok(Some(me))
    }

    fn init_line(&self) -> Result<(), TransportError> {
        let mut s = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        s.write_all(b"cmd=init pmi_version=2 pmi_subversion=0\n")
            .map_err(|e| BackendError::new("sending init to the PMI-2 launcher", e))?;
        let mut line = Vec::new();
        let mut byte = [0u8; 1];
        self.watch.readable(&s, "init")?;
        while byte[0] != b'\n' {
            s.read_exact(&mut byte)
                .map_err(|e| BackendError::new("reading the PMI-2 launcher's answer to init", e))?;
            line.push(byte[0]);
            if line.len() > 1024 {
                return Err(err("init reply too long"));
            }
        }
        let line = String::from_utf8_lossy(&line);
        let ok = line.contains("cmd=response_to_init")
            && line.contains("rc=0")
            && line.contains("pmi_version=2");
        if ok {
            Ok(())
        } else {
            Err(err(format!("launcher refused PMI-2: {}", line.trim())))
        }
    }

    fn call(&self, cmd: &str, expect: &str) -> Result<HashMap<String, String>, TransportError> {
        let mut s = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        s.write_all(format!("{:<6}{cmd}", cmd.len()).as_bytes())
            .map_err(|e| {
                BackendError::new(format!("sending `{cmd:.30}` to the PMI-2 launcher"), e)
            })?;
        self.watch.readable(&s, cmd)?;
        let mut len = [0u8; 6];
        s.read_exact(&mut len).map_err(|e| {
            BackendError::new(
                format!("reading the PMI-2 launcher's answer to `{cmd:.30}`"),
                e,
            )
        })?;
        let n: usize = std::str::from_utf8(&len)
            .ok()
            .and_then(|l| l.trim().parse().ok())
            .filter(|n| *n <= 1 << 20)
            .ok_or_else(|| {
                err(format!(
                    "garbled length {:?}",
                    String::from_utf8_lossy(&len)
                ))
            })?;
        let mut body = vec![0u8; n];
        s.read_exact(&mut body).map_err(|e| {
            BackendError::new(
                format!("reading the PMI-2 launcher's {n}-byte reply to `{cmd:.30}`"),
                e,
            )
        })?;
        let body = String::from_utf8(body).map_err(|_| err("reply is not text"))?;
        let map = parse(&body).ok_or_else(|| err(format!("garbled reply: {body:.60}")))?;
        if map.get("cmd").map(String::as_str) != Some(expect) {
            return Err(err(format!("expected cmd={expect}, got: {body:.60}")));
        }
        if map.get("rc").is_some_and(|rc| rc != "0") {
            return Err(err(format!("{expect} failed: {body:.80}")));
        }
        Ok(map)
    }
}

impl Pmi2 {
    /// Tells the PMI server this process is done with it, once.
    fn finalize(&self) {
        if !self
            .finalized
            .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            let _ = self.call("cmd=finalize;", "finalize-response");
        }
    }
}

impl Bootstrap for Pmi2 {
    fn tags(&self) -> Option<&rma_core::bootstrap::Tags> {
        Some(&self.tags)
    }

    /// As PMI-1's: finalize when the World leaves, so that the launcher does not take
    /// this process's exit for a failure.
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
        self.call(
            &format!("cmd=kvs-put;key={key};value={};", super::hex(value)),
            "kvs-put-response",
        )
        .map(drop)
    }
    fn get(&self, key: &str) -> Result<Vec<u8>, TransportError> {
        // A key another rank put before its fence may not be there yet: Hydra's PMI-2
        // fence does not wait for the other ranks. Ask again until it is, or time out.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let mut polls = 0u32;
        loop {
            let r = self.call(
                &format!("cmd=kvs-get;jobid={};srcid=-1;key={key};", self.jobid),
                "kvs-get-response",
            )?;
            if r.get("found").map(String::as_str) == Some("TRUE") {
                return r
                    .get("value")
                    .and_then(|v| super::unhex(v))
                    .ok_or_else(|| err("garbled value"));
            }
            if std::time::Instant::now() > deadline {
                return Err(err(format!(
                    "key {key} never appeared: a rank never arrived or died"
                )));
            }
            if polls % 100 == 99 {
                // About every 100 ms: is a peer gone that this wait depends on?
                self.watch.check()?;
            }
            polls += 1;
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
    fn barrier(&self) -> Result<(), TransportError> {
        // kvs-fence publishes our puts but is no barrier under every launcher (Hydra's
        // returns at once): each rank also puts an arrival key and waits for everyone's.
        let n = self
            .barriers
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.put(&format!("rma-bar{n}-{}", self.rank), &[1])?;
        self.call("cmd=kvs-fence;", "kvs-fence-response")?;
        for r in 0..self.size {
            self.get(&format!("rma-bar{n}-{r}"))?;
        }
        Ok(())
    }
    fn set_watch(&self, watch: rma_core::bootstrap::LivenessWatch) {
        self.watch.set(watch);
    }
}

impl Drop for Pmi2 {
    fn drop(&mut self) {
        self.finalize();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_pairs_with_escaped_semicolons() {
        let m = parse("cmd=kvs-get-response;found=TRUE;value=a;;b;rc=0;").unwrap();
        assert_eq!(m["value"], "a;b");
        assert_eq!(m["rc"], "0");
        assert!(parse("cmd=x;dangling").is_none());
        assert!(parse("=v;").is_none());
    }
}
