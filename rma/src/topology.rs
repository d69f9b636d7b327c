//! Where the ranks of this node run and where their memory and devices are: the machine's
//! cores, NUMA nodes and network devices (from hwloc), and the placement decisions made
//! over them: which CPUs local rank `i` of `n` is bound to (`rma-run --bind-to
//! core|numa|none`), which free core the progress agent of a rank runs on, which RDMA
//! device is nearest to a rank.
//!
//! The decisions are pure functions over [`Machine`], a small description built from
//! hwloc ([`Machine::detect`]) or from an hwloc XML file ([`Machine::from_xml_file`]):
//! the NUMA paths are tested on synthetic machines (`rma/tests/topology/*.xml`: 2
//! packages x 2 NUMA nodes x 8 cores, with and without RDMA devices) on any CI host.
//!
//! # hwlocality, not hwloc2
//! Both build against Debian 12's hwloc 2.9. hwloc2 2.2.0 binds threads but asking it
//! for NUMA nodes panics (it passes hwloc 2's negative NUMA depth as an unsigned depth,
//! "depth 4294967292 is out of bounds"), it cannot load an XML topology nor turn on I/O
//! discovery (its FFI module is private), and its last release is years old.
//! hwlocality (1.0.0-alpha.13, maintained) has safe topology, object and bitmap types,
//! `TopologyBuilder::from_xml_file`, I/O type filters and typed OS-device attributes; it
//! costs 8 s of clean build against hwloc2's 4 s and a dozen small crates (derive_more,
//! strum, thiserror, arrayvec). Its build script asks pkg-config for hwloc's static link
//! line, which names libudev: Debian needs `libudev-dev` beside `libhwloc-dev`
//! (`ci/install-deps.sh`). It needs Rust 1.85, and its `PartialEq<Depth> for usize` makes
//! `count == text.parse().unwrap()` ambiguous in every crate that links it: name the
//! type (`parse::<usize>()`). Both costs are why it is a feature (`hwloc`, on by
//! default): without it nothing is bound.
//!
//! # Binding goes through sched_setaffinity
//! hwloc describes; the kernel binds. rma-run binds a rank in the child between fork and
//! exec (nothing that allocates may run there, hwloc's binding calls included), so that
//! every thread the rank starts inherits its CPUs; the progress agent pins its own
//! thread. Both are one `sched_setaffinity` call on a set computed here beforehand.
//!
//! # Ranks that other launchers start
//! are theirs to bind (`srun --cpu-bind=cores`, `mpiexec.hydra -bind-to core`, `mpirun
//! --bind-to core`): there is no `RMA_BIND_TO` for a World to bind itself at init. By
//! then the program may have started threads of its own (which would keep the old
//! mask), and the launcher knows what else runs on the node; rma would only know its
//! local rank from launcher-specific variables. Their ranks' agents float with their
//! rank unless `RMA_AGENT_CPUS` is set (by hand, then the same for every rank).

use std::collections::BTreeSet;
use std::fmt;

/// A set of logical CPUs (the kernel's CPU numbers, hwloc's PU os indexes).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct CpuSet(BTreeSet<usize>);

impl CpuSet {
    /// The empty set.
    pub fn new() -> CpuSet {
        CpuSet::default()
    }
    /// Whether it holds CPU `cpu`.
    pub fn contains(&self, cpu: usize) -> bool {
        self.0.contains(&cpu)
    }
    /// Number of CPUs.
    pub fn len(&self) -> usize {
        self.0.len()
    }
    /// Whether it holds no CPU.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// The CPUs, ascending.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().copied()
    }
    /// Whether every CPU of `self` is in `other`.
    pub fn is_subset(&self, other: &CpuSet) -> bool {
        self.0.is_subset(&other.0)
    }
    /// Whether the two share a CPU.
    pub fn intersects(&self, other: &CpuSet) -> bool {
        !self.0.is_disjoint(&other.0)
    }
    /// The CPUs in both.
    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        CpuSet(self.0.intersection(&other.0).copied().collect())
    }
    /// Parses the kernel's list format (`0-3,8,10-11`), as in `Cpus_allowed_list`.
    pub fn parse_list(list: &str) -> Option<CpuSet> {
        let mut set = BTreeSet::new();
        for part in list.trim().split(',').filter(|p| !p.is_empty()) {
            let (lo, hi): (usize, usize) = match part.split_once('-') {
                Some((lo, hi)) => (lo.trim().parse().ok()?, hi.trim().parse().ok()?),
                None => {
                    let cpu = part.trim().parse().ok()?;
                    (cpu, cpu)
                }
            };
            if lo > hi {
                return None;
            }
            set.extend(lo..=hi);
        }
        Some(CpuSet(set))
    }
}

impl FromIterator<usize> for CpuSet {
    fn from_iter<I: IntoIterator<Item = usize>>(iter: I) -> CpuSet {
        CpuSet(iter.into_iter().collect())
    }
}

impl fmt::Display for CpuSet {
    /// The kernel's list format, which [`CpuSet::parse_list`] reads back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut cpus = self.iter().peekable();
        let mut first = true;
        while let Some(lo) = cpus.next() {
            let mut hi = lo;
            while cpus.peek() == Some(&(hi + 1)) {
                hi = cpus.next().unwrap_or(hi);
            }
            let sep = if first { "" } else { "," };
            first = false;
            if hi == lo {
                write!(f, "{sep}{lo}")?;
            } else {
                write!(f, "{sep}{lo}-{hi}")?;
            }
        }
        Ok(())
    }
}

/// One core: its hardware threads and the NUMA node its memory is local to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Core {
    /// Its CPUs (one per hardware thread).
    pub cpus: CpuSet,
    /// Index in [`Machine::numa_nodes`] of the node whose CPUs include it.
    pub numa: usize,
}

/// What kind of device an I/O object is (hwloc's OS device types that matter here).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceKind {
    /// An RDMA device (`mlx5_0`, `rxe0`): what `RMA_VERBS_DEVICE` names.
    OpenFabrics,
    /// A network interface (`eth0`, `ib0`).
    Network,
    /// Anything else (disks, GPUs, DMA engines).
    Other,
}

/// A device and the CPUs it is close to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    /// The operating system's name for it.
    pub name: String,
    /// Its kind.
    pub kind: DeviceKind,
    /// The CPUs of its non-I/O ancestors, nearest first: the NUMA node (or group) its
    /// PCI bus hangs from, then the package, ..., the whole machine.
    pub near: Vec<CpuSet>,
}

/// The machine as placement sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    /// Cores in hwloc's logical order (neighbours share caches), the allowed ones only.
    pub cores: Vec<Core>,
    /// The CPUs of each NUMA node, in hwloc's logical order.
    pub numa_nodes: Vec<CpuSet>,
    /// I/O devices.
    pub devices: Vec<Device>,
    /// The CPUs this process may use at all (the cgroup's cpuset, not its binding).
    pub allowed: CpuSet,
}

/// How rma-run binds the ranks it starts (`--bind-to`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BindTo {
    /// Each rank on one core of its own, filled in order (the default).
    #[default]
    Core,
    /// Each rank on the CPUs of one NUMA node, the nodes taken in turn.
    Numa,
    /// No binding: ranks run wherever the scheduler puts them.
    None,
}

impl std::str::FromStr for BindTo {
    type Err = String;
    fn from_str(s: &str) -> Result<BindTo, String> {
        match s {
            "core" => Ok(BindTo::Core),
            "numa" => Ok(BindTo::Numa),
            "none" => Ok(BindTo::None),
            other => Err(format!("--bind-to {other}: expected core, numa or none")),
        }
    }
}

/// Where one local rank runs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Placement {
    /// The CPUs the rank is bound to (`None`: left as it is).
    pub cpus: Option<CpuSet>,
    /// The CPUs of a core no rank is bound to, for the rank's progress agent (`None`:
    /// the agent runs on the rank's own CPUs).
    pub agent: Option<CpuSet>,
    /// The RDMA device nearest to the rank, when there are several to choose from.
    pub device: Option<String>,
}

impl Machine {
    /// The NUMA node (index in [`numa_nodes`](Self::numa_nodes)) holding most of `cpus`,
    /// the first on a tie; `None` when `cpus` is on none.
    pub fn numa_of(&self, cpus: &CpuSet) -> Option<usize> {
        let overlap = |n: &CpuSet| n.intersection(cpus).len();
        (0..self.numa_nodes.len())
            .filter(|&i| overlap(&self.numa_nodes[i]) > 0)
            .max_by_key(|&i| (overlap(&self.numa_nodes[i]), std::cmp::Reverse(i)))
    }

    /// The CPUs of every allowed core.
    fn all_core_cpus(&self) -> CpuSet {
        self.cores.iter().flat_map(|c| c.cpus.iter()).collect()
    }

    /// The CPUs each of `ranks` local ranks is bound to under `bind`, given the binding
    /// the launcher itself `inherited` (its own affinity, which its children would
    /// keep).
    ///
    /// Nothing is bound (every entry `None`) when `bind` is [`BindTo::None`]; when the
    /// launcher was already bound to fewer CPUs than the machine allows (srun, mpirun or
    /// a parent rma-run placed it: that placement is the job's, we keep it); and when
    /// there are more ranks than cores: pinning two busy ranks to one core while
    /// another core idles would be worse than letting the scheduler balance them.
    pub fn rank_cpus(&self, bind: BindTo, ranks: usize, inherited: &CpuSet) -> Vec<Option<CpuSet>> {
        let unbound = vec![None; ranks];
        let already_bound = !self.all_core_cpus().is_subset(inherited);
        if already_bound {
            return unbound;
        }
        match bind {
            BindTo::None => unbound,
            BindTo::Core if ranks <= self.cores.len() => self
                .cores
                .iter()
                .take(ranks)
                .map(|c| Some(c.cpus.clone()))
                .collect(),
            BindTo::Numa => {
                let nodes: Vec<CpuSet> = self
                    .numa_nodes
                    .iter()
                    .map(|n| n.intersection(&self.allowed))
                    .filter(|n| !n.is_empty())
                    .collect();
                if nodes.is_empty() || ranks > self.cores.len() {
                    return unbound;
                }
                (0..ranks)
                    .map(|i| Some(nodes[i % nodes.len()].clone()))
                    .collect()
            }
            BindTo::Core => unbound,
        }
    }

    /// The CPUs of a core for the progress agent of local rank `rank`, where `ranks`
    /// are every local rank's bindings (from [`rank_cpus`](Self::rank_cpus)): a core
    /// none of them is bound to, on the rank's NUMA node if one is free there, shared
    /// round-robin among the ranks that want one on the same node. `None` when the rank
    /// is not bound (its agent floats with it) or every core is taken.
    pub fn agent_cpus(&self, ranks: &[Option<CpuSet>], rank: usize) -> Option<CpuSet> {
        let mine = ranks.get(rank)?.as_ref()?;
        let taken = |c: &Core| ranks.iter().flatten().any(|r| r.intersects(&c.cpus));
        let free: Vec<&Core> = self.cores.iter().filter(|c| !taken(c)).collect();
        if free.is_empty() {
            return None;
        }
        let home = self.numa_of(mine);
        let near: Vec<&Core> = free
            .iter()
            .copied()
            .filter(|c| Some(c.numa) == home)
            .collect();
        let candidates = if near.is_empty() { free } else { near };
        let same_home = ranks[..rank]
            .iter()
            .flatten()
            .filter(|r| self.numa_of(r) == home)
            .count();
        Some(candidates[same_home % candidates.len()].cpus.clone())
    }

    /// The device of `kind` nearest to `cpus`, when there are at least two to choose
    /// from (with one, the backend's default is that one): the device whose nearest
    /// ancestor reaching `cpus` is the closest (its NUMA node before its package before
    /// the machine), the first in hwloc's order on a tie.
    pub fn nearest_device(&self, kind: DeviceKind, cpus: &CpuSet) -> Option<&Device> {
        let of_kind: Vec<&Device> = self.devices.iter().filter(|d| d.kind == kind).collect();
        if of_kind.len() < 2 {
            return None;
        }
        let hops = |d: &Device| d.near.iter().position(|n| n.intersects(cpus));
        of_kind
            .into_iter()
            .min_by_key(|d| hops(d).unwrap_or(usize::MAX))
    }

    /// Every local rank's placement: [`rank_cpus`](Self::rank_cpus), then for each
    /// bound rank its agent's core and nearest RDMA device.
    pub fn plan(&self, bind: BindTo, ranks: usize, inherited: &CpuSet) -> Vec<Placement> {
        let cpus = self.rank_cpus(bind, ranks, inherited);
        (0..ranks)
            .map(|i| Placement {
                agent: self.agent_cpus(&cpus, i),
                device: cpus[i]
                    .as_ref()
                    .and_then(|c| self.nearest_device(DeviceKind::OpenFabrics, c))
                    .map(|d| d.name.clone()),
                cpus: cpus[i].clone(),
            })
            .collect()
    }
}

#[cfg(feature = "hwloc")]
mod from_hwloc {
    //! [`Machine`] from hwloc, through hwlocality's safe types.

    use super::{Core, CpuSet, Device, DeviceKind, Machine};
    use hwlocality::object::attributes::ObjectAttributes;
    use hwlocality::object::types::{OSDeviceType, ObjectType};
    use hwlocality::topology::builder::{TopologyBuilder, TypeFilter};
    use hwlocality::Topology;

    fn cpus(set: &hwlocality::cpu::cpuset::CpuSet) -> CpuSet {
        set.iter_set().map(usize::from).collect()
    }

    fn machine(topology: &Topology) -> Machine {
        let allowed = cpus(&topology.allowed_cpuset());
        let numa_nodes: Vec<CpuSet> = topology
            .objects_with_type(ObjectType::NUMANode)
            .map(|n| n.cpuset().map(|c| cpus(&c)).unwrap_or_default())
            .collect();
        let mut machine = Machine {
            cores: Vec::new(),
            numa_nodes,
            devices: Vec::new(),
            allowed: allowed.clone(),
        };
        for core in topology.objects_with_type(ObjectType::Core) {
            let set = core
                .cpuset()
                .map(|c| cpus(&c))
                .unwrap_or_default()
                .intersection(&allowed);
            if set.is_empty() {
                continue;
            }
            let numa = machine.numa_of(&set).unwrap_or(0);
            machine.cores.push(Core { cpus: set, numa });
        }
        for dev in topology.objects_with_type(ObjectType::OSDevice) {
            let kind = match dev.attributes() {
                Some(ObjectAttributes::OSDevice(a)) => match a.device_type() {
                    OSDeviceType::OpenFabrics => DeviceKind::OpenFabrics,
                    OSDeviceType::Network => DeviceKind::Network,
                    _ => DeviceKind::Other,
                },
                _ => DeviceKind::Other,
            };
            let near = dev
                .ancestors()
                .filter_map(|a| a.cpuset().map(|c| cpus(&c)))
                .collect();
            let name = dev
                .name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            machine.devices.push(Device { name, kind, near });
        }
        machine
    }

    fn build(builder: TopologyBuilder) -> Result<Machine, String> {
        let topology = builder
            .with_io_type_filter(TypeFilter::KeepImportant)
            .map_err(|e| e.to_string())?
            .build()
            .map_err(|e| e.to_string())?;
        Ok(machine(&topology))
    }

    impl Machine {
        /// This machine, as hwloc sees it (cores, NUMA nodes, network and RDMA devices).
        pub fn detect() -> Result<Machine, String> {
            build(Topology::builder())
        }

        /// The machine an hwloc XML file describes (`lstopo --of xml`, or a synthetic
        /// one: `lstopo --input "pack:2 numa:2 core:8 pu:1" --of xml`).
        pub fn from_xml_file(path: &std::path::Path) -> Result<Machine, String> {
            build(
                Topology::builder()
                    .from_xml_file(path)
                    .map_err(|e| e.to_string())?,
            )
        }
    }
}

#[cfg(not(feature = "hwloc"))]
impl Machine {
    /// Without the `hwloc` feature nothing is known of the machine: no binding.
    pub fn detect() -> Result<Machine, String> {
        Err("rma was built without the hwloc feature".into())
    }
}

/// The CPUs the calling thread may run on (`sched_getaffinity`).
pub fn current_affinity() -> std::io::Result<CpuSet> {
    sys::get_affinity()
}

/// Binds the calling thread to `cpus` (`sched_setaffinity`); threads it starts later
/// inherit them.
pub fn bind_this_thread(cpus: &CpuSet) -> std::io::Result<()> {
    sys::set_affinity(&sys::RawCpuSet::new(cpus))
}

pub(crate) use sys::{set_affinity, RawCpuSet};

/// The variable rma-run sets to the CPUs of a rank's progress agent (the kernel's list
/// format), when a core is free for it.
pub const AGENT_CPUS: &str = "RMA_AGENT_CPUS";

/// `config` with its progress agent pinned to the CPUs `RMA_AGENT_CPUS` names, unless
/// the configuration has an agent hook already or the variable is unset. A value that
/// does not parse is a usage error naming it.
pub fn with_agent_binding(config: rma_core::Config) -> rma_core::Result<rma_core::Config> {
    pin_agent(config, std::env::var(AGENT_CPUS).ok().as_deref())
}

/// [`with_agent_binding`] with the variable's value `agent_cpus`.
fn pin_agent(
    mut config: rma_core::Config,
    agent_cpus: Option<&str>,
) -> rma_core::Result<rma_core::Config> {
    let Some(value) = agent_cpus.filter(|v| !v.is_empty()) else {
        return Ok(config);
    };
    let cpus = CpuSet::parse_list(value)
        .filter(|c| !c.is_empty())
        .ok_or_else(|| rma_core::UsageError::BadEnvironment {
            variable: AGENT_CPUS,
            value: value.chars().take(64).collect(),
            expected: "a CPU list such as 2 or 2-3,6",
        })?;
    if config.agent_start.is_none() {
        let raw = RawCpuSet::new(&cpus);
        let pin = move || {
            if let Err(e) = set_affinity(&raw) {
                tracing::debug!(error = %e, "progress agent not pinned");
            }
        };
        config.agent_start = Some(rma_core::config::AgentStart(std::sync::Arc::new(pin)));
    }
    Ok(config)
}

mod sys {
    //! The kernel's affinity calls, on `cpu_set_t`.

    use super::CpuSet;

    /// A `cpu_set_t` made ahead of time, so that binding after fork allocates nothing.
    #[derive(Clone, Copy)]
    pub struct RawCpuSet(libc::cpu_set_t);

    impl RawCpuSet {
        /// The kernel's form of `cpus` (CPUs past `CPU_SETSIZE` are left out).
        pub fn new(cpus: &CpuSet) -> RawCpuSet {
            // SAFETY: cpu_set_t is a plain bit array; all zeroes is the empty set.
            let mut raw: libc::cpu_set_t = unsafe { std::mem::zeroed() };
            for cpu in cpus.iter().filter(|&c| c < libc::CPU_SETSIZE as usize) {
                // SAFETY: `cpu` is below CPU_SETSIZE (filtered), a bit of `raw`.
                unsafe { libc::CPU_SET(cpu, &mut raw) };
            }
            RawCpuSet(raw)
        }
    }

    /// Binds the calling thread; async-signal-safe (one system call), so usable between
    /// fork and exec.
    pub fn set_affinity(set: &RawCpuSet) -> std::io::Result<()> {
        // SAFETY: `set.0` is a valid cpu_set_t of the size passed; pid 0 is this thread.
        let rc =
            unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set.0) };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }

    pub fn get_affinity() -> std::io::Result<CpuSet> {
        // SAFETY: all zeroes is a valid (empty) cpu_set_t.
        let mut raw: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: `raw` is writable and of the size passed; pid 0 is this thread.
        let rc =
            unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut raw) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok((0..libc::CPU_SETSIZE as usize)
            // SAFETY: `c` is below CPU_SETSIZE, a bit of `raw`.
            .filter(|&c| unsafe { libc::CPU_ISSET(c, &raw) })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rma_core::config::AgentStart;
    use rma_core::{Config, Error, ErrorKind, UsageError};

    #[test]
    fn rma_agent_cpus_sets_the_agent_hook_and_a_bad_list_is_a_usage_error() {
        let unset = pin_agent(Config::default(), None).unwrap();
        assert!(unset.agent_start.is_none());
        let set = pin_agent(Config::default(), Some("1")).unwrap();
        assert!(set.agent_start.is_some());
        for bad in ["x", "3-1", ","] {
            match pin_agent(Config::default(), Some(bad)).map_err(Error::into_kind) {
                Err(ErrorKind::Usage(UsageError::BadEnvironment { variable, .. })) => {
                    assert_eq!(variable, AGENT_CPUS)
                }
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        // A hook the program set itself stays.
        let own = AgentStart(std::sync::Arc::new(|| ()));
        let config = Config {
            agent_start: Some(own.clone()),
            ..Config::default()
        };
        assert_eq!(pin_agent(config, Some("1")).unwrap().agent_start, Some(own));
    }
}
