//! A hostile or broken peer (issue #15): one rank's transport corrupts every packet it
//! sends after window creation (responses cut to nothing, lengthened, their status
//! flipped; other packets with random bytes changed, truncated or extended), while the
//! honest rank runs every op kind against it. The honest rank never panics and never
//! writes outside its window; what it gets back is a value or a typed error (malformed,
//! refused, timeout). A proptest over seeds: the fuzz harness of the decoder and the
//! reply paths, bounded (a fixed number of cases) so that it runs in every `cargo test`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use rma_core::sim::{Network, Profile, SimTransport};
use rma_core::transport::{
    Capabilities, Event, Issued, NativeAtomic, RemoteSegment, Segment, Transport, UserMemory,
};
use rma_core::wire::{self, Kind};
use rma_core::{
    AccOp, Assert, Config, Error, ErrorKind, LockType, PeerError, Rank, TransportError,
};

/// A transport that corrupts what it sends once `armed`, as a seeded generator says.
struct Corrupting {
    inner: SimTransport,
    armed: AtomicBool,
    state: AtomicU64,
    /// Instead of corrupting: every notified op names counter 1000 of its target.
    lie_notify: AtomicBool,
}

impl Corrupting {
    fn next(&self) -> u64 {
        let mut x = self.state.load(Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.state.store(x, Ordering::Relaxed);
        x
    }

    /// The packet as a hostile peer would send it.
    fn corrupt(&self, packet: &[u8]) -> Vec<u8> {
        let mut p = packet.to_vec();
        let r = self.next();
        let is_response = wire::decode(packet).is_ok_and(|d| d.kind == Kind::Response);
        if is_response {
            // Header (12) + token (8) + status (1), then the data.
            let data_at = wire::HEADER_LEN + 9;
            match r % 4 {
                0 => p.truncate(data_at),                   // "ok" with nothing
                1 => p.extend_from_slice(&[0xab; 13]),      // more than asked
                2 => p[data_at - 1] ^= 1,                   // ok <-> refused
                _ => p.truncate(p.len().saturating_sub(1)), // one byte short
            }
            return p;
        }
        match r % 3 {
            0 => {
                let i = (self.next() as usize) % p.len().max(1);
                if let Some(b) = p.get_mut(i) {
                    *b ^= (self.next() as u8) | 1;
                }
            }
            1 => p.truncate((self.next() as usize) % p.len().max(1)),
            _ => p.extend(std::iter::repeat_n(self.next() as u8, (r % 40) as usize)),
        }
        p
    }
}

impl Transport for Corrupting {
    fn rank(&self) -> Rank {
        self.inner.rank()
    }
    fn size(&self) -> usize {
        self.inner.size()
    }
    fn capabilities(&self, target: Rank) -> Capabilities {
        self.inner.capabilities(target)
    }
    fn allocate(
        &self,
        len: usize,
        shared: Option<&rma_core::SharedAmong<'_>>,
    ) -> Result<Arc<dyn Segment>, TransportError> {
        self.inner.allocate(len, shared)
    }
    fn expose(&self, memory: Box<dyn UserMemory>) -> Result<Arc<dyn Segment>, TransportError> {
        self.inner.expose(memory)
    }
    fn window_ready(
        &self,
        win: u32,
        local: Option<&Arc<dyn Segment>>,
        remote: &[RemoteSegment],
    ) -> Result<(), TransportError> {
        self.inner.window_ready(win, local, remote)
    }
    fn window_freed(&self, win: u32) {
        self.inner.window_freed(win)
    }
    fn allgather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>, TransportError> {
        self.inner.allgather(mine)
    }
    fn barrier(&self) -> Result<(), TransportError> {
        self.inner.barrier()
    }
    fn send(&self, target: Rank, packet: &[u8]) -> Result<(), TransportError> {
        let notified = wire::decode(packet).is_ok_and(|p| p.notify.is_some());
        if notified && self.lie_notify.load(Ordering::Relaxed) {
            // The counter index follows the header.
            let mut p = packet.to_vec();
            p[wire::HEADER_LEN..wire::HEADER_LEN + 4].copy_from_slice(&1000u32.to_le_bytes());
            return self.inner.send(target, &p);
        }
        if self.armed.load(Ordering::Relaxed) {
            self.inner.send(target, &self.corrupt(packet))
        } else {
            self.inner.send(target, packet)
        }
    }
    fn put(
        &self,
        win: u32,
        target: Rank,
        offset: u64,
        data: &[u8],
        token: u64,
    ) -> Result<Issued, TransportError> {
        self.inner.put(win, target, offset, data, token)
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
        let index = if self.lie_notify.load(Ordering::Relaxed) {
            1000
        } else {
            index
        };
        self.inner
            .put_notified(win, target, offset, data, index, token)
    }
    fn get(
        &self,
        win: u32,
        target: Rank,
        offset: u64,
        len: usize,
        token: u64,
    ) -> Result<Issued, TransportError> {
        self.inner.get(win, target, offset, len, token)
    }
    fn atomic(
        &self,
        win: u32,
        target: Rank,
        offset: u64,
        atomic: NativeAtomic<'_>,
        token: u64,
    ) -> Result<Issued, TransportError> {
        self.inner.atomic(win, target, offset, atomic, token)
    }
    fn barrier_arrive(&self, win: u32) -> Result<Option<u64>, TransportError> {
        self.inner.barrier_arrive(win)
    }
    fn barrier_done(&self, win: u32, ticket: u64) -> Result<bool, TransportError> {
        self.inner.barrier_done(win, ticket)
    }
    fn try_lock(&self, win: u32, target: Rank, exclusive: bool) -> Result<bool, TransportError> {
        self.inner.try_lock(win, target, exclusive)
    }
    fn unlock(&self, win: u32, target: Rank, exclusive: bool) -> Result<(), TransportError> {
        self.inner.unlock(win, target, exclusive)
    }
    fn poll(&self, events: &mut Vec<Event>) -> Result<usize, TransportError> {
        self.inner.poll(events)
    }
}

/// What a call against the hostile rank may come to.
fn acceptable<T: std::fmt::Debug>(r: &rma_core::Result<T>) -> bool {
    matches!(
        r.as_ref().map_err(Error::kind),
        Ok(_)
            | Err(ErrorKind::Peer(
                PeerError::Malformed { .. }
                    | PeerError::Refused { .. }
                    | PeerError::OutOfBounds { .. }
                    | PeerError::Timeout { .. }
            ))
    )
}

/// Rank 0 honest, rank 1 hostile once both made their window. Rank 0's window is
/// surrounded by guard windows that nothing may touch.
fn hostile_run(seed: u64) {
    let net: Arc<Network> = Network::new(2, Profile::ActiveMessages, seed);
    let honest = rma_core::Engine::new(
        Arc::new(net.endpoint(0)),
        Config {
            timeout: Some(Duration::from_millis(400)),
            ..Config::default()
        },
    );
    let hostile_transport = Arc::new(Corrupting {
        inner: net.endpoint(1),
        armed: AtomicBool::new(false),
        state: AtomicU64::new(seed | 1),
        lie_notify: AtomicBool::new(false),
    });
    let hostile = rma_core::Engine::new(
        hostile_transport.clone(),
        Config {
            timeout: Some(Duration::from_millis(400)),
            ..Config::default()
        },
    );
    let liar = std::thread::spawn(move || {
        let before = hostile.allocate::<u64>(8)?;
        let win = hostile.allocate::<u64>(8)?;
        let after = hostile.allocate::<u64>(8)?;
        hostile_transport.armed.store(true, Ordering::Relaxed);
        // Its own traffic: puts, accumulates, gets and locks toward the honest rank.
        let _ = win.lock(LockType::Exclusive, 0, Assert::NONE);
        let _ = win.put(&[9; 8], 0, 0);
        let _ = win.accumulate(&[1; 8], AccOp::Sum, 0, 0);
        let _ = win.get(0, 0, 8);
        let _ = win.unlock(0);
        // And it answers the honest rank's ops (corrupted) while it keeps polling.
        let start = std::time::Instant::now();
        while start.elapsed() < Duration::from_millis(700) {
            let _ = hostile.progress();
            std::thread::yield_now();
        }
        drop((before, win, after));
        Ok::<_, Error>(())
    });
    let before = honest.allocate::<u64>(8).unwrap();
    let win = honest.allocate::<u64>(8).unwrap();
    let after = honest.allocate::<u64>(8).unwrap();
    win.lock_all(Assert::NONE).unwrap();
    let fop = win.fetch_and_op(5, AccOp::Sum, 1, 2);
    let cas = win.compare_and_swap(0, 1, 1, 3);
    let get = win.get(1, 0, 4);
    let gacc = win.get_accumulate(&[1, 2], AccOp::Sum, 1, 4);
    let flushed = win.flush(1);
    assert!(acceptable(&flushed), "flush: {flushed:?}");
    for r in [
        fop.map(|r| r.wait().map(drop)),
        cas.map(|r| r.wait().map(drop)),
    ] {
        let r = r.and_then(|x| x);
        assert!(acceptable(&r), "{r:?}");
    }
    for r in [
        get.map(|r| r.wait().map(drop)),
        gacc.map(|r| r.wait().map(drop)),
    ] {
        let r = r.and_then(|x| x);
        assert!(acceptable(&r), "{r:?}");
    }
    let _ = win.unlock_all();
    // Keep serving the hostile rank's packets for a while: nothing lands outside `win`.
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_millis(300) {
        let _ = honest.progress();
    }
    assert_eq!(before.local_to_vec(), vec![0; 8], "guard before the window");
    assert_eq!(after.local_to_vec(), vec![0; 8], "guard after the window");
    liar.join().expect("the hostile rank's thread").ok();
    drop((before, win, after));
}

#[test]
fn a_response_of_nothing_is_malformed_not_a_panic() {
    // Seeds whose first response is cut to nothing, lengthened, flipped, shortened.
    for seed in 1..=4 {
        hostile_run(seed);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 8, ..ProptestConfig::default() })]

    /// Random corruptions: never a panic, never a write outside the window.
    #[test]
    fn a_corrupting_peer_never_crashes_the_honest_rank(seed in 1u64..u64::MAX) {
        hostile_run(seed);
    }

    /// The decoder on random bytes, and on valid packets with bytes changed: never a
    /// panic; what it accepts re-encodes within the length it was given.
    #[test]
    fn the_decoder_takes_any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..96)) {
        if let Ok(p) = wire::decode(&bytes) {
            prop_assert_eq!(p.win, u32::from_le_bytes(bytes[4..8].try_into().unwrap()));
        }
        let mut valid = wire::Encoder::default();
        valid.start(Kind::Response, 0, 3, 0).u64(7).u8(1).bytes(&bytes);
        let mut mutated = valid.finish().to_vec();
        if !mutated.is_empty() {
            let i = bytes.len() % mutated.len();
            mutated[i] ^= 0x5a;
        }
        let _ = wire::decode(&mutated);
    }
}

/// Two engines on a simulated network of `profile`: rank 0 honest, rank 1 a liar whose
/// notified ops name counter 1000 of their target, whatever it asked.
fn honest_and_notify_liar(profile: Profile, seed: u64) -> (rma_core::Engine, rma_core::Engine) {
    let net: Arc<Network> = Network::new(2, profile, seed);
    let config = || Config {
        timeout: Some(Duration::from_secs(10)),
        ..Config::default()
    };
    let honest = rma_core::Engine::new(Arc::new(net.endpoint(0)), config());
    let liar_transport = Arc::new(Corrupting {
        inner: net.endpoint(1),
        armed: AtomicBool::new(false),
        state: AtomicU64::new(1),
        lie_notify: AtomicBool::new(true),
    });
    (honest, rma_core::Engine::new(liar_transport, config()))
}

/// Issue #28: the target checks a notified op's counter against its own, whatever the
/// origin checked: an op naming a counter past them is refused whole (nothing written,
/// nothing counted) and its origin's epoch ends with the refusal.
#[test]
fn a_notified_op_past_the_target_counters_is_refused_whole() {
    let (honest, liar) = honest_and_notify_liar(Profile::ActiveMessages, 3);
    let lying = std::thread::spawn(move || {
        let win = liar.allocate::<u64>(4)?;
        win.set_notify_count(2)?;
        win.lock(LockType::Shared, 0, Assert::NONE)?;
        // Counter 1 here, 1000 on the wire.
        win.put_notify(&[9; 4], 0, 0, 1)?;
        let unlocked = win.unlock(0).map_err(Error::into_kind);
        liar.barrier()?;
        win.free().map_err(|e| e.error)?;
        Ok::<_, Error>(unlocked)
    });
    let win = honest.allocate::<u64>(4).unwrap();
    win.set_notify_count(2).unwrap();
    honest.barrier().unwrap();
    assert_eq!(win.local_to_vec(), vec![0; 4], "nothing of the op written");
    assert_eq!(
        (win.notify_value(0).unwrap(), win.notify_value(1).unwrap()),
        (0, 0),
        "nothing counted"
    );
    win.free().unwrap();
    let unlocked = lying.join().expect("the lying rank's thread").unwrap();
    assert!(
        matches!(
            unlocked,
            Err(ErrorKind::Peer(PeerError::Refused { rank: 0 }))
        ),
        "{unlocked:?}"
    );
}

/// Issue #28, a notified put the transport carries (RDMA WRITE with immediate data): the
/// data is placed by the NIC before anyone can look at the notice, but the count is the
/// target's to check: a notice naming a counter past its own is refused (counted as
/// refused, nothing counted), and its counters stay exact.
#[test]
fn a_carried_notice_past_the_target_counters_counts_nothing() {
    let (honest, liar) = honest_and_notify_liar(Profile::RdmaNotified, 5);
    let lying = std::thread::spawn(move || {
        let win = liar.allocate::<u64>(4)?;
        win.set_notify_count(2)?;
        win.lock(LockType::Shared, 0, Assert::NONE)?;
        // Counter 1 here, 1000 in the notice.
        win.put_notify(&[9; 4], 0, 0, 1)?;
        win.unlock(0)?;
        liar.barrier()?;
        liar.barrier()?;
        win.free().map_err(|e| e.error)?;
        Ok::<_, Error>(())
    });
    let win = honest.allocate::<u64>(4).unwrap();
    win.set_notify_count(2).unwrap();
    let refused = win.stats().refused;
    honest.barrier().unwrap();
    assert_eq!(
        (win.notify_value(0).unwrap(), win.notify_value(1).unwrap()),
        (0, 0),
        "nothing counted"
    );
    assert_eq!(win.local_to_vec(), vec![9; 4], "the NIC placed the data");
    assert_eq!(win.stats().refused, refused + 1, "the notice refused");
    honest.barrier().unwrap();
    win.free().unwrap();
    lying.join().expect("the lying rank's thread").unwrap();
}
