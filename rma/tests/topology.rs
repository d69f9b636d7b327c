//! Placement on synthetic machines that hwloc loads from XML (`tests/topology/`:
//! `2x2x8.xml` written by `lstopo-no-graphics --input "pack:2 numa:2 core:8 pu:1" --of
//! xml`; `2x2x8-two-hcas.xml` the same with a Bridge > PCIDev > OSDev (`osdev_type="3"`,
//! OpenFabrics: `mlx5_0`, `mlx5_1`) added by hand in the groups of NUMA nodes 0 and 3),
//! so that the NUMA paths run on any CI host; and rma-run's binding of real processes
//! on this machine.
#![cfg(feature = "hwloc")]

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use rma::topology::{BindTo, CpuSet, DeviceKind, Machine};

fn machine(file: &str) -> Machine {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/topology")
        .join(file);
    Machine::from_xml_file(&path).expect("hwloc reads the synthetic topology")
}

/// 2 packages x 2 NUMA nodes x 8 cores of one CPU: CPUs 0-31, node k holds 8k..8k+7.
fn two_by_two_by_eight() -> Machine {
    let m = machine("2x2x8.xml");
    assert_eq!(m.cores.len(), 32);
    assert_eq!(m.numa_nodes.len(), 4);
    m
}

fn node(k: usize) -> CpuSet {
    (8 * k..8 * k + 8).collect()
}

fn bound(cpus: &[Option<CpuSet>]) -> Vec<CpuSet> {
    cpus.iter().map(|c| c.clone().expect("bound")).collect()
}

#[test]
fn core_binding_gives_each_rank_a_core_of_its_own_filled_in_order() {
    let m = two_by_two_by_eight();
    let all = m.allowed.clone();
    for ranks in [1, 2, 16, 32] {
        let cpus = bound(&m.rank_cpus(BindTo::Core, ranks, &all));
        assert_eq!(cpus.len(), ranks);
        assert!(cpus.iter().all(|c| c.len() == 1), "one CPU each: {cpus:?}");
        let distinct: BTreeSet<usize> = cpus.iter().flat_map(|c| c.iter()).collect();
        assert_eq!(distinct.len(), ranks, "distinct cores: {cpus:?}");
    }
    // Neighbouring ranks share a NUMA node (hwloc's logical order).
    let eight = bound(&m.rank_cpus(BindTo::Core, 8, &all));
    assert!(eight.iter().all(|c| c.is_subset(&node(0))), "{eight:?}");
}

#[test]
fn more_ranks_than_cores_are_left_to_the_scheduler() {
    let m = two_by_two_by_eight();
    let cpus = m.rank_cpus(BindTo::Core, 33, &m.allowed);
    assert!(cpus.iter().all(Option::is_none));
    let cpus = m.rank_cpus(BindTo::Numa, 33, &m.allowed);
    assert!(cpus.iter().all(Option::is_none));
}

#[test]
fn numa_binding_spreads_ranks_over_the_nodes_in_turn() {
    let m = two_by_two_by_eight();
    let cpus = bound(&m.rank_cpus(BindTo::Numa, 8, &m.allowed));
    for (rank, set) in cpus.iter().enumerate() {
        assert_eq!(*set, node(rank % 4), "rank {rank}");
    }
}

#[test]
fn bind_to_none_binds_nobody() {
    let m = two_by_two_by_eight();
    assert!(m
        .rank_cpus(BindTo::None, 4, &m.allowed)
        .iter()
        .all(Option::is_none));
    let plan = m.plan(BindTo::None, 4, &m.allowed);
    assert!(plan
        .iter()
        .all(|p| p.cpus.is_none() && p.agent.is_none() && p.device.is_none()));
}

#[test]
fn an_existing_binding_is_kept() {
    let m = two_by_two_by_eight();
    // rma-run itself bound to a NUMA node (srun --cpu-bind, mpirun, a parent rma-run):
    // its ranks stay on that.
    for bind in [BindTo::Core, BindTo::Numa] {
        assert!(m.rank_cpus(bind, 4, &node(1)).iter().all(Option::is_none));
    }
    // Bound to a superset of what the machine allows is not bound.
    let wider: CpuSet = (0..64).collect();
    assert!(m
        .rank_cpus(BindTo::Core, 4, &wider)
        .iter()
        .all(Option::is_some));
}

#[test]
fn the_agent_gets_a_free_core_on_its_ranks_node_when_there_is_one() {
    let m = two_by_two_by_eight();
    let ranks = m.rank_cpus(BindTo::Core, 4, &m.allowed);
    let taken: BTreeSet<usize> = bound(&ranks).iter().flat_map(|c| c.iter()).collect();
    let agents: Vec<CpuSet> = (0..4)
        .map(|r| m.agent_cpus(&ranks, r).expect("a free core"))
        .collect();
    for (rank, agent) in agents.iter().enumerate() {
        assert_eq!(agent.len(), 1);
        assert!(
            agent.iter().all(|c| !taken.contains(&c)),
            "rank {rank}'s agent on a rank's core"
        );
        assert!(
            agent.is_subset(&node(0)),
            "rank {rank}'s agent off its node: {agent:?}"
        );
    }
    let distinct: std::collections::HashSet<&CpuSet> = agents.iter().collect();
    assert_eq!(
        distinct.len(),
        4,
        "four free cores on node 0, one agent each"
    );
}

#[test]
fn the_agent_goes_to_another_node_when_its_own_is_full_and_floats_when_all_are() {
    let m = two_by_two_by_eight();
    let ranks = m.rank_cpus(BindTo::Core, 30, &m.allowed);
    let agent = m.agent_cpus(&ranks, 0).expect("cores 30 and 31 are free");
    assert!(
        agent == CpuSet::from_iter([30]) || agent == CpuSet::from_iter([31]),
        "{agent:?}"
    );
    let full = m.rank_cpus(BindTo::Core, 32, &m.allowed);
    assert_eq!(m.agent_cpus(&full, 0), None);
    let unbound = m.rank_cpus(BindTo::None, 2, &m.allowed);
    assert_eq!(m.agent_cpus(&unbound, 0), None);
}

#[test]
fn the_nearest_rdma_device_is_the_one_on_the_ranks_node_then_package() {
    let m = machine("2x2x8-two-hcas.xml");
    let names: Vec<&str> = m
        .devices
        .iter()
        .filter(|d| d.kind == DeviceKind::OpenFabrics)
        .map(|d| d.name.as_str())
        .collect();
    assert_eq!(names, ["mlx5_0", "mlx5_1"]);
    let nearest = |cpus: CpuSet| {
        m.nearest_device(DeviceKind::OpenFabrics, &cpus)
            .map(|d| d.name.clone())
    };
    assert_eq!(nearest(node(0)).as_deref(), Some("mlx5_0"));
    assert_eq!(nearest(node(3)).as_deref(), Some("mlx5_1"));
    // Node 1 has no device: the one in its package; node 2: its package's.
    assert_eq!(nearest(node(1)).as_deref(), Some("mlx5_0"));
    assert_eq!(nearest(node(2)).as_deref(), Some("mlx5_1"));
    // Through the plan: ranks bound per NUMA node get their node's device.
    let plan = m.plan(BindTo::Numa, 4, &m.allowed);
    let devices: Vec<_> = plan.iter().map(|p| p.device.as_deref()).collect();
    assert_eq!(
        devices,
        [
            Some("mlx5_0"),
            Some("mlx5_0"),
            Some("mlx5_1"),
            Some("mlx5_1")
        ]
    );
    // One device (or none) leaves the choice to the backend.
    assert_eq!(
        two_by_two_by_eight().nearest_device(DeviceKind::OpenFabrics, &node(0)),
        None
    );
}

#[test]
fn cpu_lists_round_trip_in_the_kernels_format() {
    let set = CpuSet::parse_list("0-3,8,10-11").expect("parses");
    assert_eq!(set.iter().collect::<Vec<_>>(), [0, 1, 2, 3, 8, 10, 11]);
    assert_eq!(set.to_string(), "0-3,8,10-11");
    assert_eq!(CpuSet::parse_list("3-1"), None);
    assert_eq!(CpuSet::parse_list("x"), None);
}

#[test]
fn this_machine_as_hwloc_sees_it() {
    let m = Machine::detect().expect("hwloc reads this machine");
    assert!(!m.cores.is_empty() && !m.numa_nodes.is_empty());
    assert!(m
        .cores
        .iter()
        .all(|c| c.cpus.is_subset(&m.allowed) && c.numa < m.numa_nodes.len()));
}

/// Where a rank started by [`run_ranks`] writes what it runs on.
const OUT_DIR: &str = "RMA_TOPOLOGY_TEST_OUT";

/// The CPUs each thread named `name` of this process may run on.
fn thread_affinities(name: &str) -> Vec<CpuSet> {
    let tasks = std::fs::read_dir("/proc/self/task").expect("/proc");
    tasks
        .flatten()
        .filter(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == name))
        .filter_map(|t| {
            let status = std::fs::read_to_string(t.path().join("status")).ok()?;
            let list = status
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
            CpuSet::parse_list(list)
        })
        .collect()
}

/// A rank of [`run_ranks`]'s jobs (this test binary, started again by rma-run): joins
/// the World with a progress agent, then writes its own CPUs (sched_getaffinity) and
/// its agent's, once the agent has pinned itself where rma-run said.
#[test]
#[ignore = "a rank of the rma-run tests below, started by them"]
fn rank_reports_its_cpus() {
    let Some(dir) = std::env::var_os(OUT_DIR) else {
        return;
    };
    let world = rma::World::init().expect("init");
    let mine = rma::topology::current_affinity().expect("sched_getaffinity");
    let wanted = std::env::var(rma::topology::AGENT_CPUS)
        .ok()
        .and_then(|l| CpuSet::parse_list(&l));
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let agent = loop {
        let agents = thread_affinities("rma-progress");
        let settled = agents.len() == 1 && wanted.as_ref().is_none_or(|w| agents[0] == *w);
        if settled || std::time::Instant::now() > deadline {
            break agents.first().cloned().unwrap_or_default();
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let line = format!("{mine} {agent}\n");
    std::fs::write(PathBuf::from(dir).join(world.rank().to_string()), line).expect("write");
    world.barrier().expect("barrier");
}

/// Runs `rma-run -n <ranks> --bind-to <bind>` over [`rank_reports_its_cpus`]: each
/// rank's CPUs and its progress agent's, by rank.
fn run_ranks(ranks: usize, bind: &str) -> Vec<(CpuSet, CpuSet)> {
    let dir = std::env::temp_dir().join(format!(
        "rma-topology-{}-{ranks}-{bind}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("mkdir");
    let me = std::env::current_exe().expect("this test binary");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_rma-run"))
        .args([
            "-n",
            &ranks.to_string(),
            "--bind-to",
            bind,
            "--timeout",
            "60",
            "--",
        ])
        .arg(me)
        .args([
            "--ignored",
            "--exact",
            "rank_reports_its_cpus",
            "--test-threads=1",
        ])
        .env(OUT_DIR, &dir)
        .env("RMA_ASYNC_PROGRESS", "1")
        .env("RMA_TIMEOUT_MS", "30000")
        .status()
        .expect("rma-run starts");
    assert!(
        status.success(),
        "rma-run -n {ranks} --bind-to {bind}: {status}"
    );
    let got = (0..ranks)
        .map(|r| {
            let line = std::fs::read_to_string(dir.join(r.to_string())).expect("the rank wrote");
            let (mine, agent) = line.trim().split_once(' ').expect("two lists");
            (
                CpuSet::parse_list(mine).expect("list"),
                CpuSet::parse_list(agent).expect("list"),
            )
        })
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    got
}

/// Whether rma-run, started from here, binds at all: not when this test is bound
/// already (rma-run then keeps that binding), nor with fewer than 2 cores.
fn binds_here() -> Option<(Machine, CpuSet)> {
    let m = Machine::detect().expect("hwloc");
    let here = rma::topology::current_affinity().expect("sched_getaffinity");
    let all_cores: CpuSet = m.cores.iter().flat_map(|c| c.cpus.iter()).collect();
    (m.cores.len() >= 2 && all_cores.is_subset(&here)).then_some((m, here))
}

#[test]
fn rma_run_bind_to_core_gives_two_ranks_a_core_each() {
    let got = run_ranks(2, "core");
    let Some(_) = binds_here() else {
        // Kept as inherited: every rank on this test's own CPUs.
        let here = rma::topology::current_affinity().unwrap();
        assert!(got.iter().all(|(mine, _)| *mine == here), "{got:?}");
        return;
    };
    assert_eq!(got[0].0.len(), 1, "{got:?}");
    assert_eq!(got[1].0.len(), 1, "{got:?}");
    assert_ne!(got[0].0, got[1].0, "distinct cores: {got:?}");
}

#[test]
fn rma_run_bind_to_none_leaves_every_cpu() {
    let here = rma::topology::current_affinity().unwrap();
    let got = run_ranks(2, "none");
    for (rank, (mine, agent)) in got.iter().enumerate() {
        assert_eq!(*mine, here, "rank {rank}");
        assert_eq!(*agent, here, "rank {rank}'s agent");
    }
}

#[test]
fn a_lone_bound_rank_has_its_agent_on_another_core() {
    let got = run_ranks(1, "core");
    let Some((m, _)) = binds_here() else { return };
    let (mine, agent) = &got[0];
    assert_eq!(*mine, m.cores[0].cpus);
    assert!(
        !agent.is_empty() && !agent.intersects(mine),
        "agent {agent} beside rank {mine}"
    );
}
