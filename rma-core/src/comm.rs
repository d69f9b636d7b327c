//! Communicators: a group of processes with its own context, the collectives over its
//! members, windows over it, and new communicators made from it (split, split_shared,
//! create/exclude, dup).
//!
//! Every collective involves the communicator's members only: a process outside never
//! takes part, never blocks. Ranks are the communicator's (a member's index in its
//! [`Group`]); errors name World ranks, which identify a process in every communicator.
//!
//! Where every member shares memory with every other (one node), barrier, broadcast,
//! allgather, allreduce, reduce and allreduce_loc run in that memory
//! ([`node_collective`](crate::node_collective): a flag and a slot per member, no
//! message). Otherwise, the cost over `p` members with `n` bytes each in messages of the
//! backend: barrier, allgather, allreduce:
//! ceil(log2 p) rounds (dissemination, Bruck's allgather; allreduce gathers every
//! member's `n` bytes and reduces them in rank order, so each rank moves `(p - 1) n`
//! bytes and every rank computes the same bits, floats included); broadcast, gather,
//! scatter, reduce: binomial trees, ceil(log2 p) rounds on the longest path.
//!
//! ```
//! use rma_core::{sim, AccOp};
//! sim::run(4, sim::Profile::ActiveMessages, 5, |engine| {
//!     let world = engine.world();
//!     // Two halves; each rank keeps its order within its half.
//!     let half = world.split(Some(world.rank() / 2), 0)?.expect("a color");
//!     assert_eq!((half.size(), half.rank()), (2, world.rank() % 2));
//!     let sum = half.allreduce(&[world.rank() as u64], AccOp::Sum)?;
//!     assert_eq!(sum[0], if world.rank() < 2 { 1 } else { 5 });
//!     // A window over the half: ranks 0 and 1 are the half's.
//!     let win = half.allocate::<u64>(1)?;
//!     win.fence(rma_core::Assert::NONE)?;
//!     win.put(&[10 + world.rank() as u64], 1 - half.rank(), 0)?;
//!     win.fence(rma_core::Assert::NONE)?;
//!     let partner = half.group().world_rank(1 - half.rank()).unwrap();
//!     assert_eq!(win.local_to_vec(), vec![10 + partner as u64]);
//!     win.free()?;
//!     Ok(())
//! }).unwrap();
//! ```

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use crate::collective::Step;
use crate::datatype::{accumulate, AccOp, Element};
use crate::engine::Engine;
use crate::error::{Error, ErrorKind, PeerError, Result, TransportError, UsageError};
use crate::group::Group;
use crate::node_collective::{Arena, NodeCollectives};
use crate::window::Window;
use crate::Rank;

/// A communicator: a [`Group`] of the job's processes with a context of its own, so that
/// its collectives and windows never mix with another communicator's.
/// [`Engine::world`] is the first; the others come from it.
#[derive(Clone)]
pub struct Comm {
    inner: Arc<CommInner>,
}

struct CommInner {
    engine: Engine,
    group: Group,
    /// Agreed by the members at creation, distinct from every other live context of each
    /// member; 0 is the World's.
    context: u32,
    /// This process's rank in the communicator.
    rank: Rank,
    /// Collective calls made on it so far (shared by every handle of the World).
    calls: Arc<AtomicU32>,
    /// How its barrier, allreduce and broadcast run (shared by every handle of the
    /// World): in shared memory where its members share it.
    node: Arc<Mutex<NodeCollectives>>,
}

impl std::fmt::Debug for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Comm")
            .field("context", &self.inner.context)
            .field("rank", &self.inner.rank)
            .field("group", &self.inner.group)
            .finish()
    }
}

/// MINLOC and MAXLOC of [`Comm::allreduce_loc`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocOp {
    /// The smallest value, with the smallest index among equal ones.
    MinLoc,
    /// The largest value, with the smallest index among equal ones.
    MaxLoc,
}

impl Comm {
    /// Runs the body of the public call `call`, saying on its error which call and rank
    /// raised it.
    #[inline]
    fn raised<R>(&self, call: &'static str, body: impl FnOnce() -> Result<R>) -> Result<R> {
        body().map_err(|e| {
            let e = self.inner.engine.shared.explained(e);
            e.raised_in(call, self.inner.engine.rank(), None)
        })
    }

    pub(crate) fn world(
        engine: Engine,
        calls: Arc<AtomicU32>,
        node: Arc<Mutex<NodeCollectives>>,
    ) -> Comm {
        let group = Group::world(engine.size());
        Comm {
            inner: Arc::new(CommInner {
                rank: engine.rank(),
                engine,
                group,
                context: 0,
                calls,
                node,
            }),
        }
    }

    /// This process's rank in the communicator.
    pub fn rank(&self) -> Rank {
        self.inner.rank
    }
    /// Number of members.
    pub fn size(&self) -> Rank {
        self.inner.group.size()
    }
    /// The members, as World ranks in this communicator's order.
    pub fn group(&self) -> &Group {
        &self.inner.group
    }
    /// The engine under it.
    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }
    /// Whether this is the World (every process, World numbering).
    pub fn is_world(&self) -> bool {
        self.inner.context == 0
    }

    fn tag(&self) -> u64 {
        (u64::from(self.inner.context) << 32)
            | u64::from(self.inner.calls.fetch_add(1, Ordering::Relaxed))
    }

    fn members(&self) -> Members<'_> {
        Members {
            engine: &self.inner.engine,
            world: self.inner.group.members(),
            me: self.inner.rank as usize,
        }
    }

    fn check_root(&self, root: Rank) -> Result<usize> {
        if root < self.size() {
            Ok(root as usize)
        } else {
            Err(UsageError::RankOutOfRange {
                rank: root,
                size: self.size(),
            }
            .into())
        }
    }

    // ---- collectives ----

    /// Runs `f` on the communicator's arena where its collectives run in shared memory
    /// ([`node_collective`](crate::node_collective)), deciding that at the first call;
    /// `None`: they run by message.
    fn in_shared_memory<R>(
        &self,
        call: &'static str,
        f: impl FnOnce(&mut Arena) -> Result<R>,
    ) -> Result<Option<R>> {
        // Held for the call: a communicator's collectives are called in one order by
        // every member, so one thread at a time calls them anyway.
        let mut node = self.inner.node.lock().unwrap_or_else(|x| x.into_inner());
        if let NodeCollectives::Undecided = *node {
            *node = NodeCollectives::decide(self, call)?;
        }
        match &mut *node {
            NodeCollectives::Shared(arena) => {
                self.inner.engine.shared.stats.collective_in_shared_memory();
                f(arena).map(Some)
            }
            _ => Ok(None),
        }
    }

    /// Blocks until every member called it: in shared memory where the members share it
    /// (a flag each), otherwise by dissemination (ceil(log2 p) rounds of messages).
    pub fn barrier(&self) -> Result<()> {
        self.raised("barrier", || {
            if self.in_shared_memory("barrier", Arena::barrier)?.is_some() {
                return Ok(());
            }
            self.members().barrier("barrier", self.tag())
        })
    }

    /// Every member's bytes, in rank order (Bruck's allgather).
    pub fn allgather_bytes(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.raised("allgather_bytes", || self.allgather_for("allgather", mine))
    }

    /// Every member's bytes for the public call `call`: in shared memory where the
    /// members share it. (The library's own agreements, in creations, take
    /// [`allgather_as`](Self::allgather_as): by message, which the arena's creation is
    /// made of.)
    fn allgather_for(&self, call: &'static str, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        if let Some(all) = self.in_shared_memory(call, |a| a.allgather(call, mine))? {
            return Ok(all);
        }
        self.members().allgather(call, self.tag(), mine)
    }

    pub(crate) fn allgather_as(&self, call: &'static str, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.members().allgather(call, self.tag(), mine)
    }

    /// Every member's `mine` one after the other, in rank order; every member gives the
    /// same number of elements.
    pub fn allgather<T: Element>(&self, mine: &[T]) -> Result<Vec<T>> {
        self.raised("allgather", || {
            let all = self.allgather_bytes(bytemuck::cast_slice(mine))?;
            same_lengths(&all)?;
            Ok(all.iter().flat_map(|b| from_bytes::<T>(b)).collect())
        })
    }

    /// `data` of `root` on every member (binomial tree); every member gives a buffer of
    /// the same length, which the root's values overwrite.
    pub fn broadcast<T: Element>(&self, data: &mut [T], root: Rank) -> Result<()> {
        self.raised("broadcast", || {
            let root = self.check_root(root)?;
            let bytes: &mut [u8] = bytemuck::cast_slice_mut(data);
            if self
                .in_shared_memory("broadcast", |a| a.broadcast(bytes, root))?
                .is_some()
            {
                return Ok(());
            }
            let mine = bytemuck::cast_slice(data).to_vec();
            let got = self.members().broadcast(self.tag(), root, mine)?;
            if got.len() != std::mem::size_of_val(data) {
                return Err(UsageError::BadGroup {
                    why: "broadcast buffers of different lengths",
                }
                .into());
            }
            bytemuck::cast_slice_mut(data).copy_from_slice(&got);
            Ok(())
        })
    }

    /// Every member's `mine`, in rank order, at `root` (`None` elsewhere); binomial tree.
    pub fn gather<T: Element>(&self, mine: &[T], root: Rank) -> Result<Option<Vec<T>>> {
        self.raised("gather", || {
            let root = self.check_root(root)?;
            let all =
                self.members()
                    .gather(self.tag(), root, bytemuck::cast_slice(mine).to_vec())?;
            let Some(all) = all else { return Ok(None) };
            same_lengths(&all)?;
            Ok(Some(all.iter().flat_map(|b| from_bytes::<T>(b)).collect()))
        })
    }

    /// Part `rank` of the root's `data` (cut into `size()` equal parts) on each member;
    /// binomial tree. Only the root's `data` is read (others may give `None`).
    pub fn scatter<T: Element>(&self, data: Option<&[T]>, root: Rank) -> Result<Vec<T>> {
        self.raised("scatter", || {
            let root_index = self.check_root(root)?;
            let parts = if self.inner.rank as usize == root_index {
                let data = data.ok_or(UsageError::BadGroup {
                    why: "the root of scatter gives no data",
                })?;
                if !data.len().is_multiple_of(self.size() as usize) {
                    return Err(UsageError::BadGroup {
                        why: "scatter data is not a multiple of the communicator's size",
                    }
                    .into());
                }
                let n = data.len() / self.size() as usize;
                Some(
                    data.chunks(n.max(1))
                        .map(|c| bytemuck::cast_slice(c).to_vec())
                        .chain(std::iter::repeat_with(Vec::new))
                        .take(self.size() as usize)
                        .collect(),
                )
            } else {
                None
            };
            let mine = self.members().scatter(self.tag(), root_index, parts)?;
            Ok(from_bytes(&mine))
        })
    }

    /// `op` over every member's `mine`, element by element, on every member. Every member
    /// computes the same result bit for bit (reduced in rank order, floats included).
    pub fn allreduce<T: Element>(&self, mine: &[T], op: AccOp) -> Result<Vec<T>> {
        self.raised("allreduce", || {
            check_reduction::<T>(op)?;
            if let Some(out) =
                self.in_shared_memory("allreduce", |a| a.allreduce("allreduce", mine, op))?
            {
                return Ok(out);
            }
            let all = self.allgather_as("allreduce", bytemuck::cast_slice(mine))?;
            reduce_in_order::<T>(&all, op)
        })
    }

    /// As [`allreduce`](Self::allreduce), with the result at `root` only.
    pub fn reduce<T: Element>(&self, mine: &[T], op: AccOp, root: Rank) -> Result<Option<Vec<T>>> {
        self.raised("reduce", || {
            check_reduction::<T>(op)?;
            let root = self.check_root(root)?;
            if let Some(out) =
                self.in_shared_memory("reduce", |a| a.allreduce("reduce", mine, op))?
            {
                return Ok((self.inner.rank as usize == root).then_some(out));
            }
            let all = self.members().gather_as(
                "reduce",
                self.tag(),
                root,
                bytemuck::cast_slice(mine).to_vec(),
            )?;
            all.map(|all| reduce_in_order::<T>(&all, op)).transpose()
        })
    }

    /// MINLOC or MAXLOC over (value, index) pairs, element by element, on every member:
    /// the extreme value and, among members holding it, the smallest index.
    pub fn allreduce_loc<T: Element + PartialOrd>(
        &self,
        mine: &[(T, u64)],
        op: LocOp,
    ) -> Result<Vec<(T, u64)>> {
        self.raised("allreduce_loc", || {
            let mut bytes = Vec::with_capacity(mine.len() * (std::mem::size_of::<T>() + 8));
            for (v, i) in mine {
                bytes.extend_from_slice(bytemuck::bytes_of(v));
                bytes.extend_from_slice(&i.to_le_bytes());
            }
            let all = self.allgather_for("allreduce", &bytes)?;
            same_lengths(&all)?;
            let pairs = |b: &[u8]| -> Vec<(T, u64)> {
                b.chunks_exact(std::mem::size_of::<T>() + 8)
                    .map(|c| {
                        let (v, i) = c.split_at(std::mem::size_of::<T>());
                        (
                            bytemuck::pod_read_unaligned(v),
                            u64::from_le_bytes(i.try_into().expect("8 bytes")),
                        )
                    })
                    .collect()
            };
            let mut out = pairs(&all[0]);
            for b in &all[1..] {
                for (o, (v, i)) in out.iter_mut().zip(pairs(b)) {
                    let better = match op {
                        LocOp::MinLoc => v < o.0,
                        LocOp::MaxLoc => v > o.0,
                    };
                    if better || (v == o.0 && i < o.1) {
                        *o = (v, i);
                    }
                }
            }
            Ok(out)
        })
    }

    // ---- new communicators ----

    /// MPI_Comm_split: members giving the same `color` form a new communicator, ordered
    /// by `key` then by rank here; `None` (MPI_UNDEFINED) joins none and gets `None`.
    /// Collective over this communicator: one allgather (ceil(log2 p) rounds).
    pub fn split(&self, color: Option<u32>, key: i64) -> Result<Option<Comm>> {
        self.raised("split", || {
            let e = self.inner.engine.clone();
            let _creating = e.creation_lock();
            let mut mine = Vec::with_capacity(16);
            mine.extend_from_slice(&color.map_or(0, |c| u64::from(c) + 1).to_le_bytes());
            mine.extend_from_slice(&key.to_le_bytes());
            mine.extend_from_slice(&e.proposed_context().to_le_bytes());
            let all = self.allgather_as("split", &mine)?;
            let Some(color) = color else { return Ok(None) };
            let mut chosen = Vec::new();
            for (rank, b) in all.iter().enumerate() {
                let bad = || PeerError::Malformed {
                    from: self.inner.group.members()[rank],
                    reason: "short split message",
                };
                let (c, rest) = b.split_at_checked(8).ok_or_else(bad)?;
                let (k, p) = rest.split_at_checked(8).ok_or_else(bad)?;
                let c = u64::from_le_bytes(c.try_into().expect("8 bytes"));
                let k = i64::from_le_bytes(k.try_into().expect("8 bytes"));
                let p = u32::from_le_bytes(p.try_into().map_err(|_| bad())?);
                if c == u64::from(color) + 1 {
                    chosen.push((k, rank, p));
                }
            }
            chosen.sort_by_key(|&(k, rank, _)| (k, rank));
            let context = chosen
                .iter()
                .map(|c| c.2)
                .max()
                .expect("this rank chose it");
            let world: Vec<Rank> = chosen
                .iter()
                .map(|&(_, rank, _)| self.inner.group.members()[rank])
                .collect();
            Ok(Some(self.derived(&world, context)?))
        })
    }

    /// MPI_Comm_split_type(SHARED): one communicator per set of members that share
    /// memory (a node's ranks on a backend with shared memory), in this one's order.
    pub fn split_shared(&self) -> Result<Comm> {
        self.raised("split_shared", || {
            let e = &self.inner.engine;
            let me = e.rank();
            // The lowest World rank this process shares memory with names the node.
            let node = self
                .inner
                .group
                .members()
                .iter()
                .copied()
                .filter(|&r| r == me || e.shares_memory_with(r))
                .min()
                .unwrap_or(me);
            Ok(self
                .split(Some(node), 0)?
                .expect("every member gives a color"))
        })
    }

    /// A communicator over these ranks of this one, in this order (MPI_Comm_create_group):
    /// collective over those ranks only, which all call it with the same list; the
    /// others do not call it and never block. A caller that is not in the list gets a
    /// usage error.
    pub fn create(&self, ranks: &[Rank]) -> Result<Comm> {
        self.raised("create", || {
            let world = self.inner.group.world_ranks(ranks)?;
            let new = Group::new(&world, self.inner.engine.size())?;
            let Some(me) = new.rank_of(self.inner.engine.rank()) else {
                return Err(UsageError::BadGroup {
                    why: "create is called by the members of the new communicator only",
                }
                .into());
            };
            let e = self.inner.engine.clone();
            let mut creating = e.creation_lock();
            // No context of the new group to tag the agreement with yet: a tag of the parent
            // and the member list, numbered per list (members make the same calls in order).
            let mut h = std::collections::hash_map::DefaultHasher::new();
            (self.inner.context, &world).hash(&mut h);
            let list = h.finish();
            let n = creating.next(self.inner.context, list);
            let mut h = std::collections::hash_map::DefaultHasher::new();
            (list, n).hash(&mut h);
            let tag = (1 << 63) | (h.finish() >> 1);
            let members = Members {
                engine: &e,
                world: &world,
                me: me as usize,
            };
            let all = members.allgather("create", tag, &e.proposed_context().to_le_bytes())?;
            let context = all
                .iter()
                .zip(&world)
                .map(|(b, &from)| {
                    b.as_slice()
                        .try_into()
                        .map(u32::from_le_bytes)
                        .map_err(|_| PeerError::Malformed {
                            from,
                            reason: "bad context proposal",
                        })
                })
                .collect::<std::result::Result<Vec<_>, _>>()?
                .into_iter()
                .max()
                .expect("one member at least");
            self.derived(&world, context)
        })
    }

    /// Alias of [`create`](Self::create) (MPI_Group_incl then MPI_Comm_create_group).
    pub fn include(&self, ranks: &[Rank]) -> Result<Comm> {
        self.raised("include", || self.create(ranks))
    }

    /// A communicator over the ranks of this one not in `ranks`, in order: collective
    /// over those ranks only (see [`create`](Self::create)).
    pub fn exclude(&self, ranks: &[Rank]) -> Result<Comm> {
        self.raised("exclude", || {
            self.inner.group.world_ranks(ranks)?;
            let kept: Vec<Rank> = (0..self.size() as Rank)
                .filter(|r| !ranks.contains(r))
                .collect();
            self.create(&kept)
        })
    }

    /// The same group with a context of its own (MPI_Comm_dup).
    pub fn dup(&self) -> Result<Comm> {
        self.raised("dup", || {
            let e = self.inner.engine.clone();
            let _creating = e.creation_lock();
            let all = self.allgather_as("dup", &e.proposed_context().to_le_bytes())?;
            let mut context = 0;
            for (b, &from) in all.iter().zip(self.inner.group.members()) {
                let p = b
                    .as_slice()
                    .try_into()
                    .map(u32::from_le_bytes)
                    .map_err(|_| PeerError::Malformed {
                        from,
                        reason: "bad context proposal",
                    })?;
                context = context.max(p);
            }
            self.derived(self.inner.group.members(), context)
        })
    }

    fn derived(&self, world: &[Rank], context: u32) -> Result<Comm> {
        let e = &self.inner.engine;
        e.context_taken(context);
        let group = Group::new(world, e.size())?;
        let rank = group.rank_of(e.rank()).expect("a member");
        Ok(Comm {
            inner: Arc::new(CommInner {
                engine: e.clone(),
                group,
                context,
                rank,
                calls: Arc::new(AtomicU32::new(0)),
                node: Arc::new(Mutex::new(NodeCollectives::Undecided)),
            }),
        })
    }

    // ---- windows ----

    /// MPI_Win_allocate over this communicator: `len` elements on each member; targets
    /// are ranks of this communicator.
    pub fn allocate<T: Element>(&self, len: usize) -> Result<Window<T>> {
        self.raised("allocate", || self.inner.engine.allocate_in(self, len))
    }
    /// MPI_Win_allocate_shared over this communicator (its members must share memory:
    /// see [`split_shared`](Self::split_shared)).
    pub fn allocate_shared<T: Element>(&self, len: usize) -> Result<Window<T>> {
        self.raised("allocate_shared", || {
            self.inner.engine.allocate_shared_in(self, len)
        })
    }
    /// MPI_Win_create over this communicator, on memory the user hands over.
    pub fn create_window<T: Element>(&self, memory: Vec<T>) -> Result<Window<T>> {
        self.raised("create_window", || {
            self.inner.engine.create_in(self, memory)
        })
    }
    /// MPI_Win_create over this communicator on memory that stays where it is: peers
    /// reach it in place (over shared memory by cross-memory attach, each op a system
    /// call, accumulates by message) and this process may load and store it through
    /// [`Window::local_base`] between synchronizations, as MPI's unified memory model
    /// has it. [`create_window`](Self::create_window) copies the memory into the
    /// backend's instead where that is faster (shared memory: native atomics), and hands
    /// it back at free.
    pub fn create_window_in_place<T: Element>(
        &self,
        memory: Box<dyn crate::transport::UserMemory>,
    ) -> Result<Window<T>> {
        self.raised("create_window_in_place", || {
            self.inner.engine.create_in_place(self, memory)
        })
    }
    /// MPI_Win_create_dynamic over this communicator.
    pub fn create_dynamic<T: Element>(&self) -> Result<Window<T>> {
        self.raised("create_dynamic", || {
            self.inner.engine.create_dynamic_in(self)
        })
    }
}

/// The members of a collective: their World ranks in order, and this process's index.
pub(crate) struct Members<'a> {
    engine: &'a Engine,
    world: &'a [Rank],
    me: usize,
}

fn log2(mask: usize) -> u32 {
    mask.trailing_zeros()
}

impl Members<'_> {
    fn p(&self) -> usize {
        self.world.len()
    }

    fn at(&self, index: usize) -> Rank {
        self.world[index % self.p()]
    }

    fn step(
        &self,
        call: &'static str,
        tag: u64,
        step: u32,
        send: Option<(usize, &[u8])>,
        receive: Option<usize>,
    ) -> Result<Option<Vec<u8>>> {
        let sends: Vec<(Rank, &[u8])> = send.map(|(to, d)| (self.at(to), d)).into_iter().collect();
        let receives: Vec<Rank> = receive.map(|from| self.at(from)).into_iter().collect();
        let mut got = self.engine.shared.exchange(Step {
            call,
            tag,
            step,
            sends: &sends,
            receives: &receives,
        })?;
        Ok(got.pop())
    }

    /// Dissemination barrier: round k sends to `me + 2^k`, waits for `me - 2^k`.
    fn barrier(&self, call: &'static str, tag: u64) -> Result<()> {
        let (p, me) = (self.p(), self.me);
        let mut dist = 1;
        while dist < p {
            self.step(
                call,
                tag,
                log2(dist),
                Some((me + dist, &[])),
                Some(me + p - dist),
            )?;
            dist <<= 1;
        }
        Ok(())
    }

    /// Bruck's allgather: after round k this rank holds the blocks of the next 2^(k+1)
    /// members; round k sends the first min(2^k, p - 2^k) of them to `me - 2^k`.
    pub(crate) fn allgather(
        &self,
        call: &'static str,
        tag: u64,
        mine: &[u8],
    ) -> Result<Vec<Vec<u8>>> {
        let (p, me) = (self.p(), self.me);
        let mut blocks = vec![mine.to_vec()];
        let mut dist = 1;
        while dist < p {
            let count = dist.min(p - dist);
            let payload = encode_blocks(&blocks[..count]);
            let got = self
                .step(
                    call,
                    tag,
                    log2(dist),
                    Some((me + p - dist, &payload)),
                    Some(me + dist),
                )?
                .unwrap_or_default();
            blocks.extend(decode_blocks(&got, count, self.at(me + dist))?);
            dist <<= 1;
        }
        // blocks[j] is member me + j's.
        blocks.rotate_right(me);
        Ok(blocks)
    }

    /// Binomial broadcast of the root's bytes.
    fn broadcast(&self, tag: u64, root: usize, mine: Vec<u8>) -> Result<Vec<u8>> {
        let (p, call) = (self.p(), "broadcast");
        let v = (self.me + p - root) % p;
        let mut data = mine;
        let mut mask = 1;
        while mask < p {
            if v & mask != 0 {
                data = self
                    .step(call, tag, log2(mask), None, Some(v - mask + root))?
                    .unwrap_or_default();
                break;
            }
            mask <<= 1;
        }
        mask >>= 1;
        while mask > 0 {
            if v + mask < p {
                self.step(call, tag, log2(mask), Some((v + mask + root, &data)), None)?;
            }
            mask >>= 1;
        }
        Ok(data)
    }

    fn gather(&self, tag: u64, root: usize, mine: Vec<u8>) -> Result<Option<Vec<Vec<u8>>>> {
        self.gather_as("gather", tag, root, mine)
    }

    /// Binomial gather: each subtree's blocks travel up once.
    fn gather_as(
        &self,
        call: &'static str,
        tag: u64,
        root: usize,
        mine: Vec<u8>,
    ) -> Result<Option<Vec<Vec<u8>>>> {
        let p = self.p();
        let v = (self.me + p - root) % p;
        let mut held = vec![mine];
        let mut mask = 1;
        while mask < p {
            if v & mask != 0 {
                let payload = encode_blocks(&held);
                self.step(
                    call,
                    tag,
                    log2(mask),
                    Some((v - mask + root, &payload)),
                    None,
                )?;
                return Ok(None);
            }
            let child = v + mask;
            if child < p {
                let got = self
                    .step(call, tag, log2(mask), None, Some(child + root))?
                    .unwrap_or_default();
                held.extend(decode_blocks(
                    &got,
                    mask.min(p - child),
                    self.at(child + root),
                )?);
            }
            mask <<= 1;
        }
        // held[j] is member root + j's.
        held.rotate_right(root);
        Ok(Some(held))
    }

    /// Binomial scatter: the root's parts travel down, each subtree's once.
    fn scatter(&self, tag: u64, root: usize, parts: Option<Vec<Vec<u8>>>) -> Result<Vec<u8>> {
        let (p, call) = (self.p(), "scatter");
        let v = (self.me + p - root) % p;
        let mut held = match parts {
            Some(mut parts) if v == 0 => {
                parts.rotate_left(root);
                parts
            }
            _ => Vec::new(),
        };
        let mut mask = 1;
        while mask < p {
            if v & mask != 0 {
                let got = self
                    .step(call, tag, log2(mask), None, Some(v - mask + root))?
                    .unwrap_or_default();
                held = decode_blocks(&got, mask.min(p - v), self.at(v - mask + root))?;
                break;
            }
            mask <<= 1;
        }
        mask >>= 1;
        while mask > 0 {
            if v + mask < p {
                let end = held.len().min(2 * mask);
                let payload = encode_blocks(&held[mask..end]);
                self.step(
                    call,
                    tag,
                    log2(mask),
                    Some((v + mask + root, &payload)),
                    None,
                )?;
                held.truncate(mask);
            }
            mask >>= 1;
        }
        Ok(held.into_iter().next().unwrap_or_default())
    }
}

/// Blocks as (u64 length, bytes) one after the other.
fn encode_blocks(blocks: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(blocks.iter().map(|b| b.len() + 8).sum());
    for b in blocks {
        out.extend_from_slice(&(b.len() as u64).to_le_bytes());
        rma_sync::copy::extend(&mut out, b);
    }
    out
}

fn decode_blocks(mut bytes: &[u8], count: usize, from: Rank) -> Result<Vec<Vec<u8>>> {
    let bad = PeerError::Malformed {
        from,
        reason: "bad blocks in a collective message",
    };
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let (len, rest) = bytes.split_at_checked(8).ok_or(bad.clone())?;
        let len = u64::from_le_bytes(len.try_into().expect("8 bytes"));
        let len = usize::try_from(len).map_err(|_| bad.clone())?;
        let (block, rest) = rest.split_at_checked(len).ok_or(bad.clone())?;
        out.push(block.to_vec());
        bytes = rest;
    }
    if !bytes.is_empty() {
        return Err(bad.into());
    }
    Ok(out)
}

fn from_bytes<T: Element>(b: &[u8]) -> Vec<T> {
    bytemuck::pod_collect_to_vec(&b[..b.len() - b.len() % std::mem::size_of::<T>()])
}

fn same_lengths(all: &[Vec<u8>]) -> Result<()> {
    if all.windows(2).all(|w| w[0].len() == w[1].len()) {
        Ok(())
    } else {
        Err(UsageError::BadGroup {
            why: "members gave buffers of different lengths to one collective",
        }
        .into())
    }
}

fn check_reduction<T: Element>(op: AccOp) -> Result<()> {
    if crate::datatype::computable(op, T::DATATYPE) && !matches!(op, AccOp::Replace | AccOp::NoOp) {
        Ok(())
    } else {
        Err(UsageError::BadReduction {
            op,
            datatype: T::DATATYPE,
        }
        .into())
    }
}

/// `op` over the blocks in member order: the same bits on every member.
fn reduce_in_order<T: Element>(all: &[Vec<u8>], op: AccOp) -> Result<Vec<T>> {
    same_lengths(all)?;
    let mut out = all.first().cloned().unwrap_or_default();
    for b in &all[1..] {
        accumulate(op, T::DATATYPE, &mut out, b);
    }
    Ok(from_bytes(&out))
}

/// What a comm's gather for a transport's shared allocation maps errors to (the
/// transport's error type has no place for a peer's collective failure).
pub(crate) fn as_transport_error(e: Error) -> TransportError {
    match e.into_kind() {
        ErrorKind::Peer(PeerError::Dead { rank }) => TransportError::PeerUnreachable(rank),
        ErrorKind::Peer(PeerError::Departed { rank, .. }) => TransportError::PeerDeparted(rank),
        ErrorKind::Transport(t) => t,
        e => TransportError::Failed(e.to_string()),
    }
}

/// Creations of groups per (parent context, member list): the tag of the next one.
#[derive(Default)]
pub(crate) struct GroupCreations {
    counts: HashMap<(u32, u64), u32>,
}

impl GroupCreations {
    pub(crate) fn next(&mut self, context: u32, list: u64) -> u32 {
        let n = self.counts.entry((context, list)).or_default();
        *n += 1;
        *n
    }
}
