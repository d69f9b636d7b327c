//! The active-message plumbing both network backends (libfabric, verbs) build the same
//! way around their device: sending a message, and leaving the job (goodbyes, then
//! lingering). The device's part is a [`Link`], the state behind the backend's mutex.

use std::collections::VecDeque;
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

use rma_core::transport::Event;
use rma_core::{Bootstrap, Rank, TransportError};

use crate::PeerWatch;

/// What a network backend's state (behind its one mutex) does for the shared plumbing.
pub trait Link {
    /// Events found while driving the device, handed out by the next poll.
    fn pending(&mut self) -> &mut VecDeque<Event>;
    /// Whether `peer` is known dead (a failed send, a death notice).
    fn dead(&self, peer: Rank) -> bool;
    /// Whether `peer`'s goodbye arrived (it is leaving: nothing more comes from it).
    fn said_bye(&self, peer: Rank) -> bool;
    /// Whether we are done with `peer` when leaving: its goodbye came (and, where the
    /// device says so, what we sent it completed).
    fn finished(&self, peer: Rank) -> bool {
        self.said_bye(peer)
    }
    /// Whether every send of ours completed (`true` where the device does not tell).
    fn settled(&self) -> bool {
        true
    }
    /// One attempt at sending `packet` (or, with `bye`, the goodbye) to `peer`:
    /// `Ok(false)` when the device has no room now.
    fn try_send(&mut self, peer: Rank, packet: &[u8], bye: bool) -> Result<bool, TransportError>;
    /// Reads every completion there is (turning them into pending events).
    fn drive(&mut self) -> Result<(), TransportError>;
}

/// Refuses an active message larger than `max` bytes, naming the variable that sets it.
pub fn check_message(len: usize, max: usize, variable: &str) -> Result<(), TransportError> {
    if len > max {
        return Err(TransportError::Failed(format!(
            "active message of {len} bytes exceeds {max} ({variable})"
        )));
    }
    Ok(())
}

/// Sends an active message from `me` to `target` of a `size`-rank job: to ourselves it
/// never touches the device (queued in order with everything else pending); to a dead
/// peer it is [`TransportError::PeerUnreachable`]; when the device has no room, the
/// completion queue is driven (connection setup, send buffers coming back) and the send
/// tried once more, then [`TransportError::Busy`].
pub fn send<L: Link + ?Sized>(
    link: &mut L,
    me: Rank,
    size: usize,
    target: Rank,
    packet: &[u8],
) -> Result<(), TransportError> {
    if target == me {
        link.pending().push_back(Event::Received {
            from: target,
            data: packet.to_vec(),
        });
        return Ok(());
    }
    if target as usize >= size {
        return Err(TransportError::Failed(format!("no rank {target}")));
    }
    if link.dead(target) {
        return Err(TransportError::PeerUnreachable(target));
    }
    if link.try_send(target, packet, false)? {
        return Ok(());
    }
    link.drive()?;
    if link.try_send(target, packet, false)? {
        Ok(())
    } else {
        Err(TransportError::Busy)
    }
}

/// Leaves the job: says goodbye to every peer, then lingers, driving the device, until
/// every peer has said goodbye (or is gone, or `linger` passed) and our sends completed:
/// a peer may still be waiting for messages of ours that have no completion (injected,
/// inline) or, on manual-progress devices, for native operations on our memory that
/// only our driving moves; and a peer that sees us exit without our goodbye takes us for
/// dead. Gone peers are the dead ones, those the launcher knows are gone (`boot.gone()`,
/// asked again every 200 ms: they send no goodbye), and watched processes that ended.
/// `lock` takes the backend's mutex, which is let go now and then (to ask the launcher,
/// and to leave the core to the peers we wait for). The ranks in `elsewhere` leave by
/// another way (a hybrid world's node ranks: shared memory): none of our traffic went to
/// them through this device, so they get no goodbye here and none is awaited from them
/// (sorted).
pub fn depart<'a, L: Link + 'a>(
    boot: &dyn Bootstrap,
    me: Rank,
    size: usize,
    watch: &PeerWatch,
    linger: Duration,
    elsewhere: &[Rank],
    lock: impl Fn() -> MutexGuard<'a, L>,
) {
    let start = Instant::now();
    let mut left = boot.gone();
    let mut asked = Instant::now();
    let mut link = lock();
    let gone = |link: &L, left: &[Rank], r: Rank| {
        link.dead(r) || left.contains(&r) || watch.process_gone(r as usize)
    };
    let peer = |r: &Rank| *r != me && elsewhere.binary_search(r).is_err();
    for t in (0..size as Rank).filter(peer) {
        while !gone(&link, &left, t) && start.elapsed() < linger {
            match link.try_send(t, &[], true) {
                Ok(true) | Err(_) => break,
                Ok(false) => {
                    if link.drive().is_err() {
                        break;
                    }
                }
            }
        }
    }
    let mut polls = 0u32;
    while start.elapsed() < linger {
        let all = (0..size as Rank)
            .filter(peer)
            .all(|r| gone(&link, &left, r) || link.finished(r));
        // Sends toward a gone peer may never complete: only a live world's count.
        if all && (link.settled() || !left.is_empty()) {
            break;
        }
        if asked.elapsed() > Duration::from_millis(200) {
            drop(link);
            left = boot.gone();
            asked = Instant::now();
            link = lock();
        }
        if link.drive().is_err() {
            break;
        }
        link.pending().clear();
        polls += 1;
        if polls.is_multiple_of(8) {
            // Let the peers we wait for have the core.
            drop(link);
            std::thread::yield_now();
            link = lock();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A device whose sends succeed every other attempt, whose peers say goodbye when
    /// driven.
    #[derive(Default)]
    struct Fake {
        pending: VecDeque<Event>,
        dead: Vec<bool>,
        bye: Vec<bool>,
        sent: Vec<(Rank, Vec<u8>, bool)>,
        attempts: u32,
        drives: u32,
        /// Peers that never say goodbye here.
        mute: Vec<Rank>,
    }

    impl Link for Fake {
        fn pending(&mut self) -> &mut VecDeque<Event> {
            &mut self.pending
        }
        fn dead(&self, peer: Rank) -> bool {
            self.dead[peer as usize]
        }
        fn said_bye(&self, peer: Rank) -> bool {
            self.bye[peer as usize]
        }
        fn try_send(&mut self, peer: Rank, p: &[u8], bye: bool) -> Result<bool, TransportError> {
            self.attempts += 1;
            if self.attempts % 2 == 1 {
                return Ok(false);
            }
            self.sent.push((peer, p.to_vec(), bye));
            Ok(true)
        }
        fn drive(&mut self) -> Result<(), TransportError> {
            self.drives += 1;
            for (r, b) in self.bye.iter_mut().enumerate() {
                *b |= !self.mute.contains(&(r as Rank));
            }
            Ok(())
        }
    }

    struct NoLauncher;
    impl Bootstrap for NoLauncher {
        fn rank(&self) -> Rank {
            0
        }
        fn size(&self) -> usize {
            3
        }
        fn job_id(&self) -> &str {
            "test"
        }
        fn node_id(&self) -> &str {
            "node"
        }
        fn put(&self, _: &str, _: &[u8]) -> Result<(), TransportError> {
            Ok(())
        }
        fn get(&self, _: &str) -> Result<Vec<u8>, TransportError> {
            Ok(Vec::new())
        }
        fn barrier(&self) -> Result<(), TransportError> {
            Ok(())
        }
    }

    fn fake(size: usize) -> Fake {
        Fake {
            dead: vec![false; size],
            bye: vec![false; size],
            ..Fake::default()
        }
    }

    #[test]
    fn sends_go_to_self_directly_retry_once_and_refuse_the_dead() {
        let mut f = fake(3);
        send(&mut f, 0, 3, 0, b"me").unwrap();
        assert!(matches!(&f.pending[0], Event::Received { from: 0, data } if data == b"me"));
        send(&mut f, 0, 3, 1, b"x").unwrap();
        assert_eq!((f.attempts, f.drives), (2, 1));
        f.dead[2] = true;
        assert!(matches!(
            send(&mut f, 0, 3, 2, b"x"),
            Err(TransportError::PeerUnreachable(2))
        ));
        assert!(matches!(
            send(&mut f, 0, 3, 7, b"x"),
            Err(TransportError::Failed(_))
        ));
        assert!(check_message(10, 9, "VAR").is_err() && check_message(9, 9, "VAR").is_ok());
    }

    #[test]
    fn departing_says_goodbye_to_the_living_and_waits_for_theirs() {
        let mut f = fake(3);
        f.dead[2] = true;
        let m = Mutex::new(f);
        let watch = PeerWatch::new(0, 3, None);
        let t = Instant::now();
        depart(
            &NoLauncher,
            0,
            3,
            &watch,
            Duration::from_secs(5),
            &[],
            || m.lock().unwrap(),
        );
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "no linger once all said goodbye"
        );
        let f = m.into_inner().unwrap();
        assert_eq!(f.sent, vec![(1, Vec::new(), true)]);
    }

    #[test]
    fn departing_leaves_the_ranks_reached_elsewhere_alone() {
        // Rank 1 shares our node (its goodbye goes by shared memory) and never says one
        // here: no goodbye to it, no linger for it.
        let mut f = fake(4);
        f.mute = vec![1];
        let m = Mutex::new(f);
        let watch = PeerWatch::new(0, 4, None);
        let t = Instant::now();
        depart(
            &NoLauncher,
            0,
            4,
            &watch,
            Duration::from_secs(5),
            &[1],
            || m.lock().unwrap(),
        );
        assert!(t.elapsed() < Duration::from_secs(1), "lingered for rank 1");
        let f = m.into_inner().unwrap();
        let to: Vec<Rank> = f.sent.iter().map(|s| s.0).collect();
        assert_eq!(to, vec![2, 3]);
    }
}
