//! Process creation (MPI_Comm_spawn, MPI_Comm_spawn_multiple): parents start new
//! processes through their launcher and get an [`InterComm`] to them; the children get
//! one to their parents ([`World::parent`]); [`InterComm::merge`] gives one
//! communicator over both, on which windows and collectives work.
//!
//! Both sides join a job of parents and children together (parents first), which the
//! launcher makes for the spawn: a World of its own, with its own transport, beside
//! each process's first World. rma-run, MPICH's Hydra (PMI-1) and Open MPI's mpirun
//! (PMIx) spawn; under srun the call is a typed error (Slurm cannot start processes into
//! a job step).

use rma_core::bootstrap::SpawnCommand;
use rma_core::{Comm, Config, Group, PeerError, Rank, Result, TransportError, UsageError};

use crate::World;

/// An inter-communicator: this process's group (the parents, or the children of one
/// spawn) and the remote group, over the World of both.
pub struct InterComm {
    world: World,
    local: Group,
    remote: Group,
}

impl std::fmt::Debug for InterComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterComm")
            .field("local", &self.local)
            .field("remote", &self.remote)
            .finish()
    }
}

impl InterComm {
    /// The children's side: of `union`'s ranks, the first `parents` are the parents.
    pub(crate) fn children(union: World, parents: usize) -> Result<InterComm> {
        let n = union.size();
        let all: Vec<Rank> = (0..n).collect();
        Ok(InterComm {
            local: Group::new(&all[parents..], n)?,
            remote: Group::new(&all[..parents], n)?,
            world: union,
        })
    }

    /// This process's rank in its own group.
    pub fn rank(&self) -> Rank {
        self.local
            .rank_of(self.world.rank())
            .expect("a member of its own group")
    }
    /// Size of this process's group.
    pub fn size(&self) -> Rank {
        self.local.size()
    }
    /// Size of the other group.
    pub fn remote_size(&self) -> Rank {
        self.remote.size()
    }
    /// The World of both groups (ranks: parents first), for what `merge` does not give.
    pub fn world(&self) -> &World {
        &self.world
    }

    /// One communicator over both groups (MPI_Intercomm_merge): collective over both;
    /// the group that passes `high == false` comes first (parents first if both pass the
    /// same), each in its order.
    pub fn merge(&self, high: bool) -> Result<Comm> {
        let w = self.world.comm();
        let key = (i64::from(high) << 32) | i64::from(w.rank());
        Ok(w.split(Some(0), key)?.expect("a color"))
    }
}

impl World {
    /// For a process started by [`spawn`](Self::spawn): the inter-communicator to its
    /// parents (MPI_Comm_get_parent); `None` otherwise.
    pub fn parent(&self) -> Option<&InterComm> {
        self.parent.as_deref()
    }

    /// Starts `processes` copies of `program` with `args` (MPI_Comm_spawn), asked by
    /// `root` of `comm`: collective over `comm`; returns the inter-communicator to the
    /// children, whose World::init joins it. A program that does not start is an error on
    /// every rank of `comm` (at the root the launcher's; elsewhere
    /// [`PeerError::CollectiveFailed`] naming the root).
    pub fn spawn(
        &self,
        comm: &Comm,
        program: &str,
        args: &[&str],
        processes: usize,
        root: Rank,
    ) -> Result<InterComm> {
        self.spawn_multiple(
            comm,
            &[SpawnCommand {
                program: program.into(),
                args: args.iter().map(|a| a.to_string()).collect(),
                processes,
            }],
            root,
        )
    }

    /// Several programs at once (MPI_Comm_spawn_multiple): the children's ranks follow
    /// the commands' order.
    pub fn spawn_multiple(
        &self,
        comm: &Comm,
        commands: &[SpawnCommand],
        root: Rank,
    ) -> Result<InterComm> {
        if root >= comm.size() {
            return Err(UsageError::RankOutOfRange {
                rank: root,
                size: comm.size(),
            }
            .into());
        }
        let children: usize = commands.iter().map(|c| c.processes).sum();
        let parents = comm.size() as usize;
        // The root asks the launcher; every parent learns the outcome from it.
        let mine = if comm.rank() == root {
            let missing = commands.iter().find(|c| !executable(&c.program));
            let asked = if children == 0 {
                Err(TransportError::Failed("a spawn of no processes".into()))
            } else if let Some(c) = missing {
                // Checked here: a launcher that fails to start it later (Hydra) may take
                // the whole job down instead of answering.
                Err(TransportError::Failed(format!(
                    "cannot start {}: not an executable file here or on PATH",
                    c.program
                )))
            } else {
                self.bootstrap.spawn(commands, parents)
            };
            match asked {
                Ok(job) => [&[0u8][..], job.as_bytes()].concat(),
                Err(TransportError::Unsupported(_)) if std::env::var_os("SLURM_STEP_ID").is_some() => {
                    b"\x01spawn under srun: Slurm cannot start processes into a running job step (launch with rma-run)".to_vec()
                }
                // With its causes: the parents have only this text.
                Err(e) => [&[1u8][..], rma_core::with_causes(&e).as_bytes()].concat(),
            }
        } else {
            Vec::new()
        };
        let all = comm.allgather_bytes(&mine)?;
        let theirs = &all[root as usize];
        let root_world = comm.group().world_rank(root).expect("checked");
        let text = String::from_utf8_lossy(theirs.get(1..).unwrap_or_default()).into_owned();
        match theirs.first() {
            Some(0) => {}
            _ if comm.rank() == root => return Err(TransportError::Failed(text).into()),
            _ => {
                return Err(PeerError::CollectiveFailed {
                    rank: root_world,
                    call: "spawn",
                    reason: text,
                }
                .into())
            }
        }
        let boot = crate::bootstrap::join_rendezvous(&text, comm.rank(), parents + children)?;
        let union = World::init_over(boot, Config::from_env()?)?;
        let n = union.size();
        let all: Vec<Rank> = (0..n).collect();
        Ok(InterComm {
            local: Group::new(&all[..parents], n)?,
            remote: Group::new(&all[parents..], n)?,
            world: union,
        })
    }
}

/// Whether `program` names an executable file (a path, or a name found on PATH).
fn executable(program: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let is_exec = |p: &std::path::Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        return is_exec(std::path::Path::new(program));
    }
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| is_exec(&dir.join(program))))
}
