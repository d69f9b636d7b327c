//! Hybrid worlds: shared memory among the ranks of one node, a network backend (libfabric
//! or InfiniBand verbs, see [`Network`]) between nodes, in the same windows.
//!
//! Locality comes from the bootstrap's node identity (`Bootstrap::node_id`: PMIx's node
//! id, Slurm's node id, the host name of a UTS namespace), never from the rank layout.
//! [`HybridTransport`] is a [`Transport`] that holds a [`ShmTransport`] over this node's
//! ranks (renumbered 0..n by a [`NodeBootstrap`]) and a [`Network`] backend over the whole
//! job, and sends every call for a target to the one that reaches it. The network is
//! libfabric's unless `RMA_NETWORK=verbs` (or the build has only the `verbs` feature).
//!
//! Window memory is the shared-memory segment (the node's ranks load and store it),
//! registered with the network as well (the other nodes' ranks write and read it with
//! RDMA); its descriptor carries both backends' parts. Two things must meet in one place
//! whichever way a rank comes:
//! - **Atomics**: the node's ranks apply CPU atomics to the window; the other nodes'
//!   accumulates therefore go as active messages (network atomics are left out of the
//!   network capabilities), applied by the target element by element with
//!   compare-exchange loops on the same words.
//! - **Passive-target locks**: the node's ranks take the target's lock word in shared
//!   memory themselves (no target progress needed); the other nodes' ranks ask the
//!   target's lock queue by message, and the target takes the same word for them
//!   (rma-core's target side does this whenever its own lock is native).
//!
//! The fence barrier is the engine's message barrier (a shared-memory barrier word covers
//! only one node). A rank that dies is seen by its node's ranks (pids), which tell every
//! other rank through the network ([`Network::announce_failure`]).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use rma_backend::{split_descriptor, Collectives, WindowSegment};
use rma_core::transport::{
    Event, Issued, LentBuf, NativeAtomic, Notice, RemoteSegment, Segment, SharedAmong, UserMemory,
    Wake, WindowOps,
};
use rma_core::{Bootstrap, Capabilities, Rank, Transport, TransportError};
use rma_shm::ShmTransport;

use crate::{Route, Traffic};

/// Not on this node, in [`HybridTransport`]'s rank table.
const OFF_NODE: u32 = u32::MAX;

/// What a hybrid world needs from the backend between nodes, beyond [`Transport`].
pub trait Network: Transport {
    /// Registers memory that the node's shared-memory segment owns, so that other nodes'
    /// ranks reach it natively; `None` when nothing is native (then active messages).
    fn register_node_segment(
        &self,
        segment: &Arc<dyn Segment>,
    ) -> Result<Option<NetworkRegistration>, TransportError>;
    /// Makes `failed` (a rank of this node, seen dead by its pid) known to the other
    /// nodes' ranks, which cannot watch its process.
    fn announce_failure(&self, failed: Rank);
    /// Leaves normally (goodbyes, then lingers for the peers still working), leaving out
    /// the ranks of `elsewhere` (sorted): this node's, which leave by shared memory.
    fn depart(&self, elsewhere: &[Rank]);
    /// Names the network for logs and benchmarks ("libfabric tcp;ofi_rxm", "verbs rxe0").
    fn describe(&self) -> String;
}

/// A node segment's registration with the network: what peers need to reach it
/// ([`descriptor`](NetworkRegistration::descriptor)); it keeps the segment's memory
/// registered until it is dropped with the window segment.
pub use rma_backend::SegmentRegistration as NetworkRegistration;

#[cfg(feature = "ofi")]
impl Network for rma_ofi::OfiTransport {
    fn register_node_segment(
        &self,
        segment: &Arc<dyn Segment>,
    ) -> Result<Option<NetworkRegistration>, TransportError> {
        self.register_segment(segment)
    }
    fn announce_failure(&self, failed: Rank) {
        rma_ofi::OfiTransport::announce_failure(self, failed)
    }
    fn depart(&self, elsewhere: &[Rank]) {
        rma_ofi::OfiTransport::depart_except(self, elsewhere)
    }
    fn describe(&self) -> String {
        format!("libfabric {}", self.provider())
    }
}

#[cfg(feature = "verbs")]
impl Network for rma_verbs::VerbsTransport {
    fn register_node_segment(
        &self,
        segment: &Arc<dyn Segment>,
    ) -> Result<Option<NetworkRegistration>, TransportError> {
        self.register_segment(segment)
    }
    fn announce_failure(&self, _failed: Rank) {
        // Nothing to send: every rank holds a reliable connection to the dead process,
        // and the kernel reset it with the process; the next keepalive write on it fails
        // (see rma-verbs: within keepalive + 3.8 s).
    }
    fn depart(&self, elsewhere: &[Rank]) {
        rma_verbs::VerbsTransport::depart_except(self, elsewhere)
    }
    fn describe(&self) -> String {
        format!("verbs {}", self.device())
    }
}

/// The network backend of a hybrid world: `RMA_NETWORK=ofi|verbs`, by default libfabric
/// when built with it.
fn network_from_env(job: Arc<dyn Bootstrap>) -> Result<Box<dyn Network>, TransportError> {
    let wanted = std::env::var("RMA_NETWORK").ok().filter(|v| !v.is_empty());
    let default = if cfg!(feature = "ofi") {
        "ofi"
    } else {
        "verbs"
    };
    match wanted.as_deref().unwrap_or(default) {
        #[cfg(feature = "ofi")]
        "ofi" => Ok(Box::new(rma_ofi::OfiTransport::new(job)?)),
        #[cfg(feature = "verbs")]
        "verbs" => Ok(Box::new(rma_verbs::VerbsTransport::new(job)?)),
        other => {
            let _ = job;
            Err(TransportError::Failed(format!(
                "RMA_NETWORK={other}: not a network backend of this build (ofi with the \
                 `ofi` feature, verbs with `verbs`)"
            )))
        }
    }
}

/// The bootstrap of one node's ranks, inside the job's bootstrap: ranks renumbered by
/// their order in the job, keys and the job id qualified by the node, so that the node
/// transports of different nodes (which may share one host's `/dev/shm` and the job's
/// key-value space) never meet.
///
/// Its barrier is the job's barrier: every rank of the job runs its node transport's
/// collectives in the same order (the hybrid transport calls them in lockstep), which
/// keeps the count of barriers equal everywhere.
pub struct NodeBootstrap {
    job: Arc<dyn Bootstrap>,
    /// This node's ranks, in job order.
    ranks: Vec<Rank>,
    index: Rank,
    job_id: String,
    prefix: String,
}

impl std::fmt::Debug for NodeBootstrap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeBootstrap")
            .field("job_id", &self.job_id)
            .field("ranks", &self.ranks)
            .finish()
    }
}

impl NodeBootstrap {
    /// The node's view, from every rank's node id in job order (`nodes[r]`).
    pub fn new(job: Arc<dyn Bootstrap>, nodes: &[Vec<u8>]) -> NodeBootstrap {
        let me = &nodes[job.rank() as usize];
        let ranks: Vec<Rank> = (0..nodes.len() as Rank)
            .filter(|r| &nodes[*r as usize] == me)
            .collect();
        let index = ranks
            .iter()
            .position(|r| *r == job.rank())
            .expect("a rank is on its own node") as Rank;
        // The node's number: order of first appearance in the job (host names may hold
        // characters a segment name cannot).
        let mut seen: Vec<&Vec<u8>> = Vec::new();
        for n in nodes {
            if !seen.contains(&n) {
                seen.push(n);
            }
        }
        let number = seen.iter().position(|n| *n == me).expect("own node") as u32;
        NodeBootstrap {
            job_id: format!("{}-n{number}", job.job_id()),
            prefix: format!("n{number}-"),
            job,
            ranks,
            index,
        }
    }
}

impl Bootstrap for NodeBootstrap {
    fn rank(&self) -> Rank {
        self.index
    }
    fn size(&self) -> usize {
        self.ranks.len()
    }
    fn job_id(&self) -> &str {
        &self.job_id
    }
    fn node_id(&self) -> &str {
        self.job.node_id()
    }
    fn put(&self, key: &str, value: &[u8]) -> Result<(), TransportError> {
        self.job.put(&format!("{}{key}", self.prefix), value)
    }
    fn get(&self, key: &str) -> Result<Vec<u8>, TransportError> {
        self.job.get(&format!("{}{key}", self.prefix))
    }
    fn barrier(&self) -> Result<(), TransportError> {
        self.job.barrier()
    }
    /// The job's allgather, keeping this node's entries: launchers key values by the
    /// putting process (PMIx), so the node's renumbered ranks cannot name each other's
    /// keys; and every rank of the job is in the same collective anyway.
    fn allgather(&self, tag: &str, value: &[u8]) -> Result<Vec<Vec<u8>>, TransportError> {
        // One tag for every node (each rank puts its own key under it).
        let mut all = self.job.allgather(&format!("node-{tag}"), value)?;
        Ok(self
            .ranks
            .iter()
            .map(|r| std::mem::take(&mut all[*r as usize]))
            .collect())
    }
}

/// Per target: native operations and active messages this process sent through the
/// backend that reaches it.
#[derive(Debug, Default)]
struct TargetTraffic {
    native_ops: AtomicU64,
    messages: AtomicU64,
}

/// A window segment of a hybrid world: the node's shared-memory segment (owner of the
/// memory), registered with the network as well if it does anything natively. Its
/// descriptor carries both parts ([`split_descriptor`]).
type HybridSegment = WindowSegment<Arc<dyn Segment>, NetworkRegistration>;

/// Shared memory for the ranks of this node, a [`Network`] for the others (see the
/// module docs).
pub struct HybridTransport {
    /// The job's collectives.
    job: Collectives,
    rank: Rank,
    size: usize,
    node: ShmTransport,
    net: Box<dyn Network>,
    /// Per job rank: its index among this node's ranks, or [`OFF_NODE`].
    node_index: Vec<u32>,
    /// This node's ranks in job order (node index to job rank).
    node_ranks: Vec<Rank>,
    nodes: usize,
    traffic: Vec<TargetTraffic>,
}

impl std::fmt::Debug for HybridTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HybridTransport")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("node_ranks", &self.node_ranks)
            .field("nodes", &self.nodes)
            .finish()
    }
}

impl HybridTransport {
    /// Joins the node's shared memory and the job's fabric. `nodes` holds every rank's
    /// node id, in job order (one allgather the caller made).
    pub fn new(
        job: Arc<dyn Bootstrap>,
        nodes: &[Vec<u8>],
    ) -> Result<HybridTransport, TransportError> {
        let node_boot = Arc::new(NodeBootstrap::new(job.clone(), nodes));
        let node_ranks = node_boot.ranks.clone();
        let mut node_index = vec![OFF_NODE; job.size()];
        for (i, r) in node_ranks.iter().enumerate() {
            node_index[*r as usize] = i as u32;
        }
        let mut distinct: Vec<&Vec<u8>> = nodes.iter().collect();
        distinct.sort();
        distinct.dedup();
        let node = ShmTransport::new(node_boot)?;
        let net = network_from_env(job.clone())?;
        tracing::info!(
            rank = job.rank(),
            node_ranks = ?node_ranks,
            nodes = distinct.len(),
            network = net.describe(),
            "hybrid world: shared memory on this node, the network between nodes"
        );
        Ok(HybridTransport {
            rank: job.rank(),
            size: job.size(),
            traffic: (0..job.size()).map(|_| TargetTraffic::default()).collect(),
            nodes: distinct.len(),
            job: Collectives::new(job, "hy-ag"),
            node,
            net,
            node_index,
            node_ranks,
        })
    }

    /// This node's index of `target`, if it is on this node.
    fn on_node(&self, target: Rank) -> Option<Rank> {
        match self.node_index.get(target as usize) {
            Some(&i) if i != OFF_NODE => Some(i),
            _ => None,
        }
    }

    /// Which backend reaches `target`.
    pub fn route(&self, target: Rank) -> Route {
        if self.on_node(target).is_some() {
            Route::SharedMemory
        } else {
            Route::Network
        }
    }

    /// What this process sent toward `target` so far, and through which backend.
    pub fn traffic(&self, target: Rank) -> Option<Traffic> {
        let t = self.traffic.get(target as usize)?;
        Some(Traffic {
            route: self.route(target),
            native_ops: t.native_ops.load(Relaxed),
            messages: t.messages.load(Relaxed),
        })
    }

    /// Number of distinct nodes in the job.
    pub fn nodes(&self) -> usize {
        self.nodes
    }

    /// The network between nodes ([`Network::describe`]).
    pub fn network(&self) -> String {
        self.net.describe()
    }

    /// Leaves normally: marks the departure for the node's ranks
    /// ([`ShmTransport::depart`]) and says goodbye to the others
    /// ([`Network::depart`]). The node's ranks get no network goodbye: nothing went to
    /// them through the network, and one would open a connection just to say it, to a
    /// process that may have left already (over libfabric tcp the provider then retried
    /// the refused connection until the 10 s linger ran out, in every hybrid job).
    pub fn depart(&self) {
        self.node.depart();
        self.net.depart(&self.node_ranks);
    }

    fn count_op(&self, target: Rank) {
        if let Some(t) = self.traffic.get(target as usize) {
            t.native_ops.fetch_add(1, Relaxed);
        }
    }

    /// Job rank of a node transport's rank.
    fn job_rank(&self, node_rank: Rank) -> Rank {
        self.node_ranks
            .get(node_rank as usize)
            .copied()
            .unwrap_or(node_rank)
    }
}

impl HybridTransport {
    /// A put toward `target` through the backend that reaches it: `put`, or (not
    /// `acknowledged`) `put_unacknowledged`.
    fn routed_put(
        &self,
        win: u32,
        target: Rank,
        offset: u64,
        data: &[u8],
        token: u64,
        acknowledged: bool,
    ) -> Result<Issued, TransportError> {
        let issued = match (self.on_node(target), acknowledged) {
            (Some(i), true) => self.node.put(win, i, offset, data, token)?,
            (Some(i), false) => self.node.put_unacknowledged(win, i, offset, data, token)?,
            (None, true) => self.net.put(win, target, offset, data, token)?,
            (None, false) => self
                .net
                .put_unacknowledged(win, target, offset, data, token)?,
        };
        self.count_op(target);
        Ok(issued)
    }
}

impl Transport for HybridTransport {
    fn rank(&self) -> Rank {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn yields_while_waiting(&self) -> bool {
        // Either part's wish: both judge this node's ranks against its CPUs (verbs, which
        // cannot tell inside a VM, always yields).
        self.node.yields_while_waiting() || self.net.yields_while_waiting()
    }
    fn capabilities(&self, target: Rank) -> Capabilities {
        match self.on_node(target) {
            Some(i) => self.node.capabilities(i),
            None => across_nodes(self.net.capabilities(target)),
        }
    }
    fn window_capabilities(&self, win: u32, target: Rank) -> Capabilities {
        match self.on_node(target) {
            Some(i) => self.node.window_capabilities(win, i),
            None => across_nodes(self.net.window_capabilities(win, target)),
        }
    }

    fn allocate(
        &self,
        len: usize,
        shared: Option<&SharedAmong<'_>>,
    ) -> Result<Arc<dyn Segment>, TransportError> {
        if shared.is_some_and(|s| s.members.iter().any(|&r| self.on_node(r).is_none())) {
            // Every member sees a member off its node when any is: all fail here, before
            // any collective.
            return Err(TransportError::Unsupported(
                "allocate_shared needs every rank of the window on one node",
            ));
        }
        let node = self.node.allocate(len, shared)?;
        let net = self.net.register_node_segment(&node)?;
        Ok(Arc::new(HybridSegment::new(node, net)))
    }
    fn copies_user_memory(&self) -> bool {
        // The node's ranks reach allocated memory by load/store; user memory only by
        // cross-memory attach. The registration covers either.
        true
    }
    fn expose(&self, memory: Box<dyn UserMemory>) -> Result<Arc<dyn Segment>, TransportError> {
        // Regions of dynamic windows: reached by active messages from everyone.
        self.node.expose(memory)
    }
    fn window_ready(
        &self,
        win: u32,
        local: Option<&Arc<dyn Segment>>,
        remote: &[RemoteSegment],
    ) -> Result<(), TransportError> {
        let node_local = match local {
            Some(seg) => {
                let any: &dyn std::any::Any = seg.as_ref();
                Some(match any.downcast_ref::<HybridSegment>() {
                    Some(h) => h.memory().clone(),
                    None => seg.clone(),
                })
            }
            None => None,
        };
        let (mut node_part, mut net_part) = (Vec::new(), Vec::with_capacity(remote.len()));
        for (r, seg) in remote.iter().enumerate() {
            let (node_key, net_key) = if local.is_none() || seg.key.is_empty() {
                // A dynamic window's, or no descriptor at all: a rank outside the
                // window's communicator (both backends then take it as no member).
                (&seg.key[..], &[][..])
            } else {
                split_descriptor(&seg.key).ok_or_else(|| {
                    TransportError::Failed(format!("bad hybrid window descriptor from rank {r}"))
                })?
            };
            if self.on_node(r as Rank).is_some() {
                node_part.push(RemoteSegment {
                    key: node_key.to_vec(),
                    ..seg.clone()
                });
            }
            net_part.push(RemoteSegment {
                key: net_key.to_vec(),
                ..seg.clone()
            });
        }
        self.node
            .window_ready(win, node_local.as_ref(), &node_part)?;
        self.net.window_ready(win, node_local.as_ref(), &net_part)
    }
    fn window_established(&self, win: u32, local: Option<&Arc<dyn Segment>>) {
        let node_local = local.map(|seg| {
            let any: &dyn std::any::Any = seg.as_ref();
            match any.downcast_ref::<HybridSegment>() {
                Some(h) => h.memory().clone(),
                None => seg.clone(),
            }
        });
        self.node.window_established(win, node_local.as_ref());
        self.net.window_established(win, node_local.as_ref());
    }
    fn peer_gone(&self, rank: Rank) {
        self.node.peer_gone(rank);
        self.net.peer_gone(rank);
    }
    fn check_peers(&self, events: &mut Vec<Event>) {
        self.node.check_peers(events);
        self.net.check_peers(events);
    }
    fn window_freed(&self, win: u32) {
        self.node.window_freed(win);
        self.net.window_freed(win);
    }
    fn recycle(&self, packet: Vec<u8>) {
        // Either backend's buffer is a buffer: the node's polls are the busy ones.
        self.node.recycle(packet);
    }
    fn node_window_ops(&self, win: u32) -> Option<Arc<dyn WindowOps>> {
        let ops = self.node.window_ops(win)?;
        Some(Arc::new(NodeWindowOps {
            ops,
            node_index: self.node_index.clone(),
        }))
    }

    fn allgather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>, TransportError> {
        self.job.allgather(mine)
    }
    fn barrier(&self) -> Result<(), TransportError> {
        self.job.barrier()
    }

    fn send(&self, target: Rank, packet: &[u8]) -> Result<(), TransportError> {
        match self.on_node(target) {
            Some(i) => self.node.send(i, packet)?,
            None => self.net.send(target, packet)?,
        }
        if let Some(t) = self.traffic.get(target as usize) {
            t.messages.fetch_add(1, Relaxed);
        }
        Ok(())
    }
    fn put(
        &self,
        win: u32,
        target: Rank,
        offset: u64,
        data: &[u8],
        token: u64,
    ) -> Result<Issued, TransportError> {
        self.routed_put(win, target, offset, data, token, true)
    }
    fn put_unacknowledged(
        &self,
        win: u32,
        target: Rank,
        offset: u64,
        data: &[u8],
        token: u64,
    ) -> Result<Issued, TransportError> {
        self.routed_put(win, target, offset, data, token, false)
    }
    fn put_notified(
        &self,
        win: u32,
        target: Rank,
        offset: u64,
        data: &[u8],
        index: u32,
        token: u64,
    ) -> Result<Issued, TransportError> {
        // Only the network's capabilities may say so (shared memory counts natively).
        if self.on_node(target).is_some() {
            return Err(TransportError::Unsupported("notified puts on a node"));
        }
        let issued = self
            .net
            .put_notified(win, target, offset, data, index, token)?;
        self.count_op(target);
        Ok(issued)
    }
    fn ordered_puts_delivered(&self, target: Rank) -> bool {
        match self.on_node(target) {
            Some(i) => self.node.ordered_puts_delivered(i),
            None => self.net.ordered_puts_delivered(target),
        }
    }
    fn get(
        &self,
        win: u32,
        target: Rank,
        offset: u64,
        len: usize,
        token: u64,
    ) -> Result<Issued, TransportError> {
        let issued = match self.on_node(target) {
            Some(i) => self.node.get(win, i, offset, len, token)?,
            None => self.net.get(win, target, offset, len, token)?,
        };
        self.count_op(target);
        Ok(issued)
    }
    fn put_lent(
        &self,
        win: u32,
        target: Rank,
        offset: u64,
        loan: &mut Option<LentBuf>,
        token: u64,
    ) -> Result<Issued, TransportError> {
        let issued = match self.on_node(target) {
            Some(i) => self.node.put_lent(win, i, offset, loan, token)?,
            None => self.net.put_lent(win, target, offset, loan, token)?,
        };
        self.count_op(target);
        Ok(issued)
    }
    fn get_lent(
        &self,
        win: u32,
        target: Rank,
        offset: u64,
        loan: &mut Option<LentBuf>,
        token: u64,
    ) -> Result<Issued, TransportError> {
        let issued = match self.on_node(target) {
            Some(i) => self.node.get_lent(win, i, offset, loan, token)?,
            None => self.net.get_lent(win, target, offset, loan, token)?,
        };
        self.count_op(target);
        Ok(issued)
    }
    fn get_into(
        &self,
        win: u32,
        target: Rank,
        offset: u64,
        dst: &mut [u8],
    ) -> Result<bool, TransportError> {
        let done = match self.on_node(target) {
            Some(i) => self.node.get_into(win, i, offset, dst)?,
            None => self.net.get_into(win, target, offset, dst)?,
        };
        if done {
            self.count_op(target);
        }
        Ok(done)
    }
    fn atomic(
        &self,
        win: u32,
        target: Rank,
        offset: u64,
        atomic: NativeAtomic<'_>,
        token: u64,
    ) -> Result<Issued, TransportError> {
        // Only the node's ranks are offered native atomics (see the module docs).
        let i = self.on_node(target).ok_or(TransportError::Unsupported(
            "network atomics in a hybrid world",
        ))?;
        let issued = self.node.atomic(win, i, offset, atomic, token)?;
        self.count_op(target);
        Ok(issued)
    }

    fn try_lock(&self, win: u32, target: Rank, exclusive: bool) -> Result<bool, TransportError> {
        let i = self
            .on_node(target)
            .ok_or(TransportError::Unsupported("native locks across nodes"))?;
        self.node.try_lock(win, i, exclusive)
    }
    fn unlock(&self, win: u32, target: Rank, exclusive: bool) -> Result<(), TransportError> {
        let i = self
            .on_node(target)
            .ok_or(TransportError::Unsupported("native locks across nodes"))?;
        self.node.unlock(win, i, exclusive)
    }

    fn notify(&self, win: u32, rank: Rank, notice: Notice) -> Result<bool, TransportError> {
        // The node's ranks natively; other nodes' by message.
        match self.on_node(rank) {
            Some(i) => self.node.notify(win, i, notice),
            None => Ok(false),
        }
    }
    fn take_notices(&self, win: u32, from: Rank, notice: Notice) -> u64 {
        self.on_node(from)
            .map_or(0, |i| self.node.take_notices(win, i, notice))
    }

    fn poll(&self, events: &mut Vec<Event>) -> Result<usize, TransportError> {
        let start = events.len();
        self.node.poll(events)?;
        // The node transport numbers its ranks 0..n: back to job ranks.
        for e in &mut events[start..] {
            match e {
                Event::Received { from, .. } | Event::Notified { from, .. } => {
                    *from = self.job_rank(*from)
                }
                Event::PeerFailed { rank } => {
                    *rank = self.job_rank(*rank);
                    // The other nodes cannot see this node's processes: tell them.
                    self.net.announce_failure(*rank);
                }
                Event::Completed { .. } | Event::Failed { .. } => {}
            }
        }
        self.net.poll(events)?;
        Ok(events.len() - start)
    }

    fn needs_target_progress(&self) -> bool {
        // Other nodes' lock requests and active messages wait for this process.
        true
    }

    fn wait_for_traffic(&self, timeout: Duration) -> Result<Wake, TransportError> {
        // The network's wait object, woken at least every NODE_TRAFFIC_EVERY for this
        // node's rings (active messages of dynamic windows), which have none.
        match self.net.wait_for_traffic(timeout.min(NODE_TRAFFIC_EVERY))? {
            Wake::Timeout => Ok(Wake::Traffic),
            other => Ok(other),
        }
    }

    fn shared_base(&self, win: u32, rank: Rank) -> Option<usize> {
        self.node.shared_base(win, self.on_node(rank)?)
    }
    fn memory_sync(&self) {
        self.node.memory_sync()
    }
}

/// How often the progress agent of a hybrid process looks at the node's rings while it
/// sleeps on the network's wait object.
const NODE_TRAFFIC_EVERY: Duration = Duration::from_millis(10);

/// Network capabilities toward another node: atomics and locks go as active messages, so
/// that they meet the node's CPU atomics and shared-memory lock words at the target.
fn across_nodes(c: Capabilities) -> Capabilities {
    Capabilities {
        atomics: 0,
        compare_and_swap: 0,
        locked_atomics: false,
        native_locks: false,
        ..c
    }
}

/// The shared-memory ops of one window, toward the ranks of this node, addressed by job
/// rank (the node's backend numbers its ranks from 0): for the engine's collectives in a
/// node's shared memory. A rank off the node is refused.
struct NodeWindowOps {
    ops: Arc<dyn WindowOps>,
    node_index: Vec<u32>,
}

impl NodeWindowOps {
    fn on_node(&self, target: Rank) -> Result<Rank, TransportError> {
        match self.node_index.get(target as usize) {
            Some(&i) if i != OFF_NODE => Ok(i),
            _ => Err(TransportError::Unsupported(
                "a node's shared-memory ops toward a rank off the node",
            )),
        }
    }
}

impl WindowOps for NodeWindowOps {
    fn put(&self, target: Rank, offset: u64, data: &[u8]) -> Result<Issued, TransportError> {
        self.ops.put(self.on_node(target)?, offset, data)
    }
    fn get_into(&self, target: Rank, offset: u64, dst: &mut [u8]) -> Result<bool, TransportError> {
        self.ops.get_into(self.on_node(target)?, offset, dst)
    }
    fn atomic(
        &self,
        target: Rank,
        offset: u64,
        atomic: NativeAtomic<'_>,
    ) -> Result<Issued, TransportError> {
        self.ops.atomic(self.on_node(target)?, offset, atomic)
    }
    fn atomic_into(
        &self,
        target: Rank,
        offset: u64,
        atomic: NativeAtomic<'_>,
        old: &mut [u8],
    ) -> Result<bool, TransportError> {
        self.ops
            .atomic_into(self.on_node(target)?, offset, atomic, old)
    }
    fn atomic_in_call(
        &self,
        target: Rank,
        offset: u64,
        atomic: NativeAtomic<'_>,
        old: &mut [u8],
    ) -> bool {
        self.on_node(target)
            .is_ok_and(|i| self.ops.atomic_in_call(i, offset, atomic, old))
    }
    fn put_in_call(&self, target: Rank, offset: u64, data: &[u8]) -> bool {
        self.on_node(target)
            .is_ok_and(|i| self.ops.put_in_call(i, offset, data))
    }
    fn get_in_call(&self, target: Rank, offset: u64, dst: &mut [u8]) -> bool {
        self.on_node(target)
            .is_ok_and(|i| self.ops.get_in_call(i, offset, dst))
    }
    fn lock_in_call(&self, target: Rank, exclusive: bool) -> bool {
        self.on_node(target)
            .is_ok_and(|i| self.ops.lock_in_call(i, exclusive))
    }
    fn unlock_in_call(&self, target: Rank, exclusive: bool) -> bool {
        self.on_node(target)
            .is_ok_and(|i| self.ops.unlock_in_call(i, exclusive))
    }
    fn try_lock(&self, target: Rank, exclusive: bool) -> Result<bool, TransportError> {
        self.ops.try_lock(self.on_node(target)?, exclusive)
    }
    fn unlock(&self, target: Rank, exclusive: bool) -> Result<(), TransportError> {
        self.ops.unlock(self.on_node(target)?, exclusive)
    }
    fn notify(&self, rank: Rank, notice: Notice) -> Result<bool, TransportError> {
        self.ops.notify(self.on_node(rank)?, notice)
    }
    fn take_notices(&self, from: Rank, notice: Notice) -> u64 {
        self.on_node(from)
            .map_or(0, |i| self.ops.take_notices(i, notice))
    }
    fn barrier_arrive(&self) -> Result<Option<u64>, TransportError> {
        self.ops.barrier_arrive()
    }
    fn barrier_done(&self, ticket: u64) -> Result<bool, TransportError> {
        self.ops.barrier_done(ticket)
    }
    fn completes_in_call(&self) -> bool {
        self.ops.completes_in_call()
    }
}
