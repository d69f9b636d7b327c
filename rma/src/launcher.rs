//! The embedded launcher behind `rma-run`: starts N local processes, serves their
//! bootstrap, reaps them promptly, and cleans up after them.

use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use crate::bootstrap::{env, RunServer};
use crate::topology::{self, BindTo, Machine, Placement, RawCpuSet};

/// What to launch.
#[derive(Debug, Clone)]
pub struct Launch {
    /// Number of processes.
    pub ranks: usize,
    /// Program to run.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Extra environment for every rank.
    pub env: Vec<(String, String)>,
    /// After one rank fails, how long the others may run on (to report the failure
    /// themselves) before they are killed.
    pub grace: Duration,
    /// Kill the whole job after this long.
    pub timeout: Option<Duration>,
    /// Simulated hosts: network namespaces of these names, made beforehand (for example
    /// by `ci/netns/up.sh`). Ranks are spread over them in blocks, and each runs in its
    /// namespace and in a UTS namespace of its own whose host name is the namespace's
    /// name, so that the ranks of one "host" share a node identity and a network stack
    /// that only a veth link joins to the others. A name `uts:NAME` is a host name only
    /// (a UTS namespace on this machine's network stack). Empty: every rank here, as is.
    pub hosts: Vec<String>,
    /// How ranks are bound to CPUs (`rma-run --bind-to`; see [`crate::topology`]): one
    /// core each by default, kept as they are when this process is already bound.
    pub bind: BindTo,
}

impl Launch {
    /// `ranks` copies of `program` with `args`, 15 s grace, no timeout.
    pub fn new(ranks: usize, program: impl Into<PathBuf>, args: Vec<String>) -> Launch {
        Launch {
            ranks,
            program: program.into(),
            args,
            env: Vec::new(),
            grace: Duration::from_secs(15),
            timeout: None,
            hosts: Vec::new(),
            bind: BindTo::default(),
        }
    }
}

/// How the job ended.
#[derive(Debug)]
pub struct Outcome {
    /// Each rank's exit status, in rank order.
    pub statuses: Vec<ExitStatus>,
    /// The job was killed by the timeout.
    pub timed_out: bool,
    /// The job's id (segment names in /dev/shm start with `rma-<job>-`).
    pub job: String,
}

impl Outcome {
    /// Whether every rank exited with status 0.
    pub fn success(&self) -> bool {
        !self.timed_out && self.statuses.iter().all(|s| s.success())
    }
    /// A process exit code for the launcher: 0, the first failing rank's code, or 128 +
    /// signal.
    pub fn code(&self) -> i32 {
        use std::os::unix::process::ExitStatusExt;
        if self.timed_out {
            return 124;
        }
        self.statuses.iter().find(|s| !s.success()).map_or(0, |s| {
            s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0))
        })
    }
}

fn job_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("j{}x{}", std::process::id(), nanos % 1_000_000_000_000)
}

/// Removes whatever segments of `job` are left in /dev/shm (a rank that crashed before
/// unlinking its names).
pub fn cleanup_segments(job: &str) {
    let prefix = format!("rma-{job}-");
    if let Ok(dir) = std::fs::read_dir("/dev/shm") {
        for e in dir.flatten() {
            if e.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

/// Removes /dev/shm entries named after one of `pids` (`<pid>:...`), once those
/// processes are gone.
fn cleanup_pid_segments(pids: &[u32]) {
    if let Ok(dir) = std::fs::read_dir("/dev/shm") {
        for e in dir.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let owner = name.split(':').next().and_then(|p| p.parse::<u32>().ok());
            if owner.is_some_and(|p| pids.contains(&p)) && name.contains(':') {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

/// Creates `dir` for this user alone (0700, whatever the umask); an existing one is an
/// error (never adopted).
pub fn private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new().mode(0o700).create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

fn kill(child: &mut Child) {
    let _ = child.kill();
}

/// Where each of `ranks` local ranks goes under `bind`; nobody is bound when the
/// machine cannot be read (no hwloc in this build, or hwloc failed).
fn placements(bind: BindTo, ranks: usize) -> Vec<Placement> {
    let unbound = vec![Placement::default(); ranks];
    if bind == BindTo::None {
        return unbound;
    }
    match (Machine::detect(), topology::current_affinity()) {
        (Ok(machine), Ok(inherited)) => machine.plan(bind, ranks, &inherited),
        (Err(e), _) => {
            tracing::debug!(error = %e, "rma-run: ranks not bound");
            unbound
        }
        (_, Err(e)) => {
            tracing::debug!(error = %e, "rma-run: ranks not bound (sched_getaffinity)");
            unbound
        }
    }
}

/// Makes `cmd` start on its placement: bound to its CPUs from before exec (every
/// thread it starts inherits them), told its agent's core (`RMA_AGENT_CPUS`, read by
/// [`World::init`](crate::World::init)) and its nearest RDMA device (`RMA_VERBS_DEVICE`),
/// each unless the user set it.
fn place(cmd: &mut Command, placement: &Placement, env: &[(String, String)]) {
    use std::os::unix::process::CommandExt;
    if let Some(cpus) = &placement.cpus {
        let raw = RawCpuSet::new(cpus);
        // SAFETY: the closure runs in the child between fork and exec: it only makes
        // one system call on a set built beforehand (no allocation, no lock).
        unsafe { cmd.pre_exec(move || topology::set_affinity(&raw)) };
    }
    // What the user set stays.
    let chosen = |k: &str| std::env::var_os(k).is_some() || env.iter().any(|(e, _)| e == k);
    if let Some(agent) = placement
        .agent
        .as_ref()
        .filter(|_| !chosen(topology::AGENT_CPUS))
    {
        cmd.env(topology::AGENT_CPUS, agent.to_string());
    }
    if let Some(device) = placement
        .device
        .as_ref()
        .filter(|_| !chosen("RMA_VERBS_DEVICE"))
    {
        cmd.env("RMA_VERBS_DEVICE", device);
    }
}

/// Runs the job to its end.
pub fn launch(l: &Launch) -> std::io::Result<Outcome> {
    let job = job_id();
    let dir = std::env::temp_dir().join(format!("rma-run-{job}"));
    private_dir(&dir)?;
    let server = RunServer::start(&dir, l.ranks)?;
    let placements = placements(l.bind, l.ranks);
    let mut children = Vec::with_capacity(l.ranks);
    for (rank, placement) in placements.iter().enumerate() {
        let mut cmd = if l.hosts.is_empty() {
            Command::new(&l.program)
        } else {
            // ip netns exec and unshare exec in place, and so does the shell: the child's
            // pid is the rank's own (liveness checks and cleanup by pid stay right).
            let host = &l.hosts[rank * l.hosts.len() / l.ranks];
            let mut c = match host.strip_prefix("uts:") {
                // A host name only, on this network stack (soft-RoCE before Linux 7.1
                // serves init_net only, so its simulated hosts cannot have their own).
                Some(name) => {
                    let mut c = Command::new("unshare");
                    c.args(["--uts", "--", "sh", "-c"])
                        .arg(r#"hostname "$0" && exec "$@""#);
                    c.arg(name);
                    c
                }
                None => {
                    let mut c = Command::new("ip");
                    c.args(["netns", "exec", host, "unshare", "--uts", "--", "sh", "-c"])
                        .arg(r#"hostname "$0" && exec "$@""#)
                        .arg(host);
                    c
                }
            };
            c.arg(&l.program);
            c
        };
        // Our ranks answer to us: hide any outer launcher (an rma-run started inside an
        // mpirun or srun step must not have its children join that job).
        for (k, _) in std::env::vars_os() {
            let k = k.to_string_lossy();
            if k.starts_with("PMI_") || k.starts_with("PMIX_") || k == "RMA_BOOTSTRAP" {
                cmd.env_remove(&*k);
            }
        }
        cmd.args(&l.args)
            .env(env::SOCKET, server.path())
            .env(env::RANK, rank.to_string())
            .env(env::SIZE, l.ranks.to_string())
            .env(env::JOB, &job)
            .envs(l.env.iter().map(|(k, v)| (k, v)));
        place(&mut cmd, placement, &l.env);
        match cmd.spawn() {
            Ok(c) => children.push(c),
            Err(e) => {
                for c in &mut children {
                    kill(c);
                    let _ = c.wait();
                }
                let _ = std::fs::remove_dir_all(&dir);
                return Err(std::io::Error::new(
                    e.kind(),
                    format!("cannot start {}: {e}", l.program.display()),
                ));
            }
        }
    }
    let mut pids: Vec<u32> = children.iter().map(Child::id).collect();
    let start = Instant::now();
    let mut statuses: Vec<Option<ExitStatus>> = vec![None; l.ranks];
    // For each process spawned by the ranks: its (job, rank) in its own job and in the
    // job of parents and children.
    let mut spawned: Vec<Option<[(String, usize); 2]>> = vec![None; l.ranks];
    let mut failed_at: Option<Instant> = None;
    let mut timed_out = false;
    while statuses.iter().any(Option::is_none) {
        for req in server.take_spawns() {
            let child_job = format!("{job}c{}", req.id);
            let union_job = format!("{job}u{}", req.id);
            let n: usize = req.commands.iter().map(|c| c.processes).sum();
            server.add_jobs(&child_job, n, &union_job, req.parents + n);
            let mut started = Vec::new();
            let mut failure = None;
            'commands: for command in &req.commands {
                let (program, args) = (&command.program, &command.args);
                for _ in 0..command.processes {
                    let rank = started.len();
                    let mut cmd = Command::new(program);
                    for (k, _) in std::env::vars_os() {
                        let k = k.to_string_lossy();
                        if k.starts_with("PMI_") || k.starts_with("PMIX_") || k == "RMA_BOOTSTRAP" {
                            cmd.env_remove(&*k);
                        }
                    }
                    cmd.args(args)
                        .env(env::SOCKET, server.path())
                        .env(env::RANK, rank.to_string())
                        .env(env::SIZE, n.to_string())
                        .env(env::JOB, &child_job)
                        .env(env::SPAWNED, "1")
                        .env(env::PARENT_JOB, &union_job)
                        .env(env::PARENT_RANK, (req.parents + rank).to_string())
                        .env(env::PARENT_SIZE, (req.parents + n).to_string())
                        .env(env::PARENT_COUNT, req.parents.to_string())
                        .envs(l.env.iter().map(|(k, v)| (k, v)));
                    match cmd.spawn() {
                        Ok(c) => started.push(c),
                        Err(e) => {
                            failure = Some(format!("cannot start {program}: {e}"));
                            break 'commands;
                        }
                    }
                }
            }
            match failure {
                Some(why) => {
                    for c in &mut started {
                        kill(c);
                        let _ = c.wait();
                    }
                    server.spawned(req.id, Err(why));
                }
                None => {
                    server.spawned(req.id, Ok(union_job.clone()));
                    for (rank, c) in started.into_iter().enumerate() {
                        pids.push(c.id());
                        children.push(c);
                        statuses.push(None);
                        spawned.push(Some([
                            (child_job.clone(), rank),
                            (union_job.clone(), req.parents + rank),
                        ]));
                    }
                }
            }
        }
        for (i, c) in children.iter_mut().enumerate() {
            if statuses[i].is_none() {
                // Reap at once: a dead rank must not linger as a zombie its peers see alive.
                if let Ok(Some(s)) = c.try_wait() {
                    // Peers blocked in the bootstrap on this rank learn it now.
                    match &spawned[i] {
                        None => server.rank_exited(i, s.success()),
                        Some(jobs) => {
                            for (j, r) in jobs {
                                server.exited(j, *r, s.success());
                            }
                        }
                    }
                    if !s.success() && failed_at.is_none() {
                        failed_at = Some(Instant::now());
                    }
                    statuses[i] = Some(s);
                }
            }
        }
        let grace_over = failed_at.is_some_and(|t| t.elapsed() > l.grace);
        let time_over = l.timeout.is_some_and(|t| start.elapsed() > t);
        if grace_over || time_over {
            timed_out |= time_over;
            for (i, c) in children.iter_mut().enumerate() {
                if statuses[i].is_none() {
                    kill(c);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    server.shutdown();
    cleanup_segments(&job);
    // libfabric's shm provider names its segments "<pid>:..."; a rank that did not close
    // its endpoint (killed, or a provider that does not unlink) leaves them behind.
    cleanup_pid_segments(&pids);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(Outcome {
        statuses: statuses
            .into_iter()
            .map(|s| s.expect("all reaped"))
            .collect(),
        timed_out,
        job,
    })
}
