//! Where the ranks of this node run and where their memory and devices are: the machine's
//! cores, NUMA nodes and network devices (from hwloc), and the placement decisions made
//! over them: which CPUs local rank `i` of `n` is bound to (`rma-run --bind-to
//! core|numa|none`), which free core the progress agent of a rank runs on, which RDMA
//! device is nearest to a rank.
//!
//! The decisions are pure functions over [`Machine`], a small description of the
//! machine. Where it comes from:
//!
//! - **Linux's sysfs**, by default ([`Machine::from_sysfs`]; [`Machine::detect`] without
//!   the `hwloc` feature): the cgroup's allowed CPUs, cores with their packages, NUMA
//!   nodes and the locality of RDMA and network devices, which is everything placement
//!   asks. No system library: `cargo add rma` and the README's first command build on a
//!   machine with nothing but a Rust toolchain (a default feature that needed
//!   libhwloc-dev, libudev-dev and pkg-config broke both). rma runs on Linux only (its
//!   shared memory uses `process_vm_readv`), so sysfs is always there.
//! - **hwloc**, with the opt-in feature `hwloc` ([`Machine::detect`] then asks hwloc;
//!   needs Debian's `libhwloc-dev`, `libudev-dev`, `pkg-config`): the same facts from
//!   the library every MPI uses, and topologies loaded from hwloc XML files
//!   (`Machine::from_xml_file`), on which the NUMA paths are tested
//!   (`rma/tests/topology/*.xml`: 2 packages x 2 NUMA nodes x 8 cores, with and without
//!   RDMA devices) on any CI host. The tests check that both sources describe this
//!   machine alike; sysfs is also tested on made-up trees of the same shape.
//!
//! The binding itself is the same either way: one `sched_setaffinity`.
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
//! type (`parse::<usize>()`). Those costs, and the system library, are why it is an
//! opt-in feature.
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
    /// This machine, as Linux's sysfs describes it ([`Machine::from_sysfs`]): the
    /// default build's topology, with no system library.
    pub fn detect() -> Result<Machine, String> {
        Machine::from_sysfs(std::path::Path::new("/"))
    }
}

mod from_sysfs {
    //! [`Machine`] from Linux's sysfs and procfs, read under a root directory (`/` for
    //! this machine, a made-up tree in tests).
    //!
    //! What placement needs of hwloc is four facts, all of which the kernel publishes:
    //! the allowed CPUs (the cgroup's cpuset: `cpuset.cpus.effective` under cgroup v2,
    //! `cpuset.effective_cpus` under v1, else every online CPU), the cores
    //! (`cpuN/topology/core_cpus_list`, or `thread_siblings_list` before Linux 5.7,
    //! with `physical_package_id`), the NUMA nodes (`node/nodeN/cpulist`; one node of
    //! every CPU on a kernel without NUMA) and the devices (`class/infiniband/*`,
    //! `class/net/*` with a physical device: the PCI function's `numa_node` and
    //! `local_cpulist`). Cores come in hwloc's logical order for the machines we bind
    //! on: by package, then NUMA node, then first CPU.

    use std::path::{Path, PathBuf};

    use super::{Core, CpuSet, Device, DeviceKind, Machine};

    fn read(path: &Path) -> Option<String> {
        std::fs::read_to_string(path)
            .ok()
            .map(|s| s.trim().to_string())
    }

    fn cpu_list(path: &Path) -> Option<CpuSet> {
        CpuSet::parse_list(&read(path)?)
    }

    /// The entries `prefix`N of `dir`, by N.
    fn numbered(dir: &Path, prefix: &str) -> Vec<usize> {
        let mut found: Vec<usize> = std::fs::read_dir(dir)
            .map(|d| {
                d.flatten()
                    .filter_map(|e| e.file_name().to_str()?.strip_prefix(prefix)?.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        found.sort_unstable();
        found
    }

    /// The CPUs the cgroup of this process may use, where its cpuset says.
    fn cgroup_cpus(root: &Path) -> Option<CpuSet> {
        let cgroups = read(&root.join("proc/self/cgroup"))?;
        let fs = root.join("sys/fs/cgroup");
        for line in cgroups.lines() {
            let mut parts = line.splitn(3, ':');
            let (id, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            let rel = path.trim_start_matches('/');
            let file = if id == "0" && controllers.is_empty() {
                fs.join(rel).join("cpuset.cpus.effective")
            } else if controllers.split(',').any(|c| c == "cpuset") {
                fs.join("cpuset").join(rel).join("cpuset.effective_cpus")
            } else {
                continue;
            };
            if let Some(set) = cpu_list(&file).filter(|s| !s.is_empty()) {
                return Some(set);
            }
        }
        None
    }

    /// The nearest directory at or above `dev` (a device's sysfs directory, links
    /// resolved) that says which CPUs are local to it: the PCI function.
    fn pci_function(dev: &Path) -> Option<PathBuf> {
        let mut at = std::fs::canonicalize(dev).ok()?;
        loop {
            if at.join("local_cpulist").exists() {
                return Some(at);
            }
            if !at.pop() || at.as_os_str().len() <= 1 {
                return None;
            }
        }
    }

    impl Machine {
        /// The machine whose sysfs and procfs are under `root` (`/`: this one).
        pub fn from_sysfs(root: &Path) -> Result<Machine, String> {
            let cpu_dir = root.join("sys/devices/system/cpu");
            let online = cpu_list(&cpu_dir.join("online"))
                .filter(|s| !s.is_empty())
                .ok_or_else(|| format!("no online CPUs in {}", cpu_dir.display()))?;
            let allowed = cgroup_cpus(root)
                .map(|c| c.intersection(&online))
                .filter(|c| !c.is_empty())
                .unwrap_or_else(|| online.clone());
            let node_dir = root.join("sys/devices/system/node");
            let numa_ids = numbered(&node_dir, "node");
            let mut numa_nodes: Vec<CpuSet> = numa_ids
                .iter()
                .map(|n| cpu_list(&node_dir.join(format!("node{n}/cpulist"))).unwrap_or_default())
                .collect();
            if numa_nodes.is_empty() {
                numa_nodes.push(online.clone());
            }
            let mut machine = Machine {
                cores: Vec::new(),
                numa_nodes,
                devices: Vec::new(),
                allowed: allowed.clone(),
            };
            // (package, NUMA node, first CPU) of each core with an allowed CPU.
            let mut cores: Vec<(i64, usize, CpuSet)> = Vec::new();
            for cpu in online.iter() {
                let topo = cpu_dir.join(format!("cpu{cpu}/topology"));
                let siblings = cpu_list(&topo.join("core_cpus_list"))
                    .or_else(|| cpu_list(&topo.join("thread_siblings_list")))
                    .unwrap_or_else(|| [cpu].into_iter().collect());
                let set = siblings.intersection(&allowed);
                if set.iter().next() != Some(cpu) {
                    continue; // not allowed, or its core was taken at a lower CPU
                }
                let package = read(&topo.join("physical_package_id"))
                    .and_then(|p| p.parse().ok())
                    .unwrap_or(0);
                let numa = machine.numa_of(&set).unwrap_or(0);
                cores.push((package, numa, set));
            }
            cores.sort_by_key(|(package, numa, set)| (*package, *numa, set.iter().next()));
            machine.cores = cores
                .into_iter()
                .map(|(_, numa, cpus)| Core { cpus, numa })
                .collect();
            let packages = Self::package_cpus(&cpu_dir, &online);
            for (class, kind) in [
                ("infiniband", DeviceKind::OpenFabrics),
                ("net", DeviceKind::Network),
            ] {
                let class_dir = root.join("sys/class").join(class);
                let Ok(entries) = std::fs::read_dir(&class_dir) else {
                    continue;
                };
                let mut names: Vec<String> = entries
                    .flatten()
                    .filter_map(|e| e.file_name().into_string().ok())
                    .collect();
                names.sort();
                for name in names {
                    // Only devices on a bus (hwloc's I/O objects): not lo, bridges,
                    // soft-RoCE.
                    let Some(pci) = pci_function(&class_dir.join(&name).join("device")) else {
                        continue;
                    };
                    let local = cpu_list(&pci.join("local_cpulist")).unwrap_or_default();
                    let node: Option<usize> =
                        read(&pci.join("numa_node")).and_then(|n| n.parse().ok());
                    let mut near = Vec::new();
                    if let Some(i) = node.and_then(|n| numa_ids.iter().position(|&id| id == n)) {
                        near.push(machine.numa_nodes[i].clone());
                    } else if !local.is_empty() && local != online {
                        near.push(local.clone());
                    }
                    let anchor = near.first().unwrap_or(&local).clone();
                    if let Some(p) = packages.iter().find(|p| p.intersects(&anchor)) {
                        near.push(p.clone());
                    }
                    near.push(online.clone());
                    near.dedup();
                    machine.devices.push(Device { name, kind, near });
                }
            }
            Ok(machine)
        }

        /// The CPUs of each package.
        fn package_cpus(cpu_dir: &Path, online: &CpuSet) -> Vec<CpuSet> {
            let mut by_id: std::collections::BTreeMap<i64, Vec<usize>> = Default::default();
            for cpu in online.iter() {
                let id = read(&cpu_dir.join(format!("cpu{cpu}/topology/physical_package_id")))
                    .and_then(|p| p.parse().ok())
                    .unwrap_or(0);
                by_id.entry(id).or_default().push(cpu);
            }
            by_id
                .into_values()
                .map(|c| c.into_iter().collect())
                .collect()
        }
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

    /// A made-up sysfs of 2 packages x 2 NUMA nodes x 4 cores x 2 hardware threads
    /// (CPUs 0-15 the first threads, 16-31 their siblings, as Linux numbers them), a
    /// cgroup v2 cpuset without package 1's last node, an RDMA device on node 3 and a
    /// NIC on node 0 (both on PCI functions), `lo` and a soft-RoCE device on no bus.
    fn made_up_sysfs(root: &std::path::Path) {
        use std::fs::{create_dir_all, write};
        let w = |rel: &str, text: &str| {
            let path = root.join(rel);
            create_dir_all(path.parent().unwrap()).unwrap();
            write(path, text).unwrap();
        };
        w("sys/devices/system/cpu/online", "0-31\n");
        for cpu in 0..32 {
            let core = cpu % 16;
            let t = format!("sys/devices/system/cpu/cpu{cpu}/topology");
            w(
                &format!("{t}/core_cpus_list"),
                &format!("{core},{}\n", core + 16),
            );
            w(
                &format!("{t}/physical_package_id"),
                &format!("{}\n", core / 8),
            );
        }
        for node in 0..4 {
            let (a, b) = (4 * node, 4 * node + 3);
            let list = format!("{a}-{b},{}-{}\n", a + 16, b + 16);
            w(
                &format!("sys/devices/system/node/node{node}/cpulist"),
                &list,
            );
        }
        w("proc/self/cgroup", "0::/job\n");
        w("sys/fs/cgroup/job/cpuset.cpus.effective", "0-11,16-27\n");
        let pci = |f: &str, node: usize| {
            let dir = format!("sys/devices/pci0000:00/{f}");
            w(&format!("{dir}/numa_node"), &format!("{node}\n"));
            w(&format!("{dir}/local_cpulist"), "0-31\n");
            root.join(dir)
        };
        let link = |target: &std::path::Path, class: &str, name: &str, sub: &str| {
            let dev = root.join(format!("sys/class/{class}/{name}"));
            create_dir_all(&dev).unwrap();
            let to = target.join(sub);
            create_dir_all(&to).unwrap();
            std::os::unix::fs::symlink(to, dev.join("device")).unwrap();
        };
        link(&pci("0000:00:04.0", 3), "infiniband", "mlx5_0", "");
        link(&pci("0000:00:03.0", 0), "net", "eth0", "virtio2");
        create_dir_all(root.join("sys/class/net/lo")).unwrap();
        create_dir_all(root.join("sys/class/infiniband/rxe0")).unwrap();
    }

    #[test]
    fn sysfs_gives_cores_numa_nodes_the_cgroup_and_device_locality() {
        let root = std::env::temp_dir().join(format!("rma-sysfs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        made_up_sysfs(&root);
        let m = Machine::from_sysfs(&root).unwrap();
        std::fs::remove_dir_all(&root).unwrap();
        let set = |l: &str| CpuSet::parse_list(l).unwrap();
        assert_eq!(m.allowed, set("0-11,16-27"));
        assert_eq!(m.numa_nodes.len(), 4);
        assert_eq!(m.numa_nodes[3], set("12-15,28-31"));
        // Node 3's cores are outside the cgroup: 12 cores, in package, node, CPU order,
        // each with both its threads.
        assert_eq!(m.cores.len(), 12);
        for (i, core) in m.cores.iter().enumerate() {
            assert_eq!(core.cpus, [i, i + 16].into_iter().collect::<CpuSet>());
            assert_eq!(core.numa, i / 4);
        }
        let names: Vec<(&str, DeviceKind)> = m
            .devices
            .iter()
            .map(|d| (d.name.as_str(), d.kind))
            .collect();
        assert_eq!(
            names,
            [
                ("mlx5_0", DeviceKind::OpenFabrics),
                ("eth0", DeviceKind::Network)
            ]
        );
        // Nearest first: the NUMA node, the package, the machine.
        let hca = &m.devices[0];
        assert_eq!(
            hca.near,
            [m.numa_nodes[3].clone(), set("8-15,24-31"), set("0-31")]
        );
        // Placement over it: ranks fill node 0 first; the agent gets a free core there.
        let plan = m.plan(BindTo::Core, 2, &m.allowed);
        assert_eq!(plan[0].cpus, Some(set("0,16")));
        assert_eq!(plan[1].cpus, Some(set("1,17")));
        assert_eq!(plan[0].agent, Some(set("2,18")));
    }

    #[test]
    fn sysfs_describes_this_machine() {
        let m = Machine::from_sysfs(std::path::Path::new("/")).unwrap();
        assert!(!m.cores.is_empty() && !m.numa_nodes.is_empty());
        let core_cpus: CpuSet = m.cores.iter().flat_map(|c| c.cpus.iter()).collect();
        assert!(core_cpus.is_subset(&m.allowed), "{m:?}");
        // This process runs inside the allowed CPUs.
        assert!(current_affinity().unwrap().intersects(&m.allowed));
    }

    /// Both sources describe this machine alike: the facts placement uses.
    #[cfg(feature = "hwloc")]
    #[test]
    fn sysfs_and_hwloc_agree_on_this_machine() {
        let sysfs = Machine::from_sysfs(std::path::Path::new("/")).unwrap();
        let hwloc = Machine::detect().unwrap();
        assert_eq!(sysfs.allowed, hwloc.allowed);
        assert_eq!(sysfs.cores, hwloc.cores);
        assert_eq!(sysfs.numa_nodes, hwloc.numa_nodes);
        let rdma = |m: &Machine| -> Vec<String> {
            (m.devices.iter())
                .filter(|d| d.kind == DeviceKind::OpenFabrics)
                .map(|d| d.name.clone())
                .collect()
        };
        assert_eq!(rdma(&sysfs), rdma(&hwloc));
    }

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
