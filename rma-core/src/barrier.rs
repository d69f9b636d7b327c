//! A non-blocking dissemination barrier over active messages: the IBARRIER of seed 004's
//! FENCE algorithm. Round `k` sends to `rank + 2^k` and waits for `rank - 2^k`; state is
//! O(log P) messages in flight and no per-process array.

use std::collections::HashMap;

use crate::Rank;

/// One barrier instance, identified by its sequence number.
#[derive(Debug, Clone)]
pub(crate) struct Dissemination {
    pub seq: u32,
    round: u8,
    sent: bool,
    rounds: u8,
}

impl Dissemination {
    pub(crate) fn new(seq: u32, size: usize) -> Self {
        let rounds = (usize::BITS - (size.max(1) - 1).leading_zeros()) as u8;
        Dissemination {
            seq,
            round: 0,
            sent: false,
            rounds,
        }
    }

    pub(crate) fn is_done(&self) -> bool {
        self.round >= self.rounds
    }

    /// The peer whose message the current round waits for (`rank - 2^round`), if any.
    pub(crate) fn awaited(&self, rank: Rank, size: usize) -> Option<Rank> {
        if self.is_done() || size < 2 {
            return None;
        }
        let step = (1usize << self.round) % size;
        Some(((rank as usize + size - step) % size) as Rank)
    }

    /// Advances as far as arrivals allow. `send(peer, seq, round)` sends one barrier
    /// message and says whether it went (false: retry later). Returns whether it is done.
    pub(crate) fn advance<E>(
        &mut self,
        rank: Rank,
        size: usize,
        arrivals: &mut HashMap<(u32, u8), u32>,
        mut send: impl FnMut(Rank, u32, u8) -> Result<bool, E>,
    ) -> Result<bool, E> {
        while !self.is_done() {
            if !self.sent {
                let peer = ((rank as usize + (1usize << self.round)) % size) as Rank;
                if !send(peer, self.seq, self.round)? {
                    return Ok(false);
                }
                self.sent = true;
            }
            match arrivals.get_mut(&(self.seq, self.round)) {
                Some(n) => {
                    *n -= 1;
                    if *n == 0 {
                        arrivals.remove(&(self.seq, self.round));
                    }
                    self.round += 1;
                    self.sent = false;
                }
                None => return Ok(false),
            }
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completes_for_every_size() {
        for size in 1..=9usize {
            let mut bars: Vec<_> = (0..size).map(|_| Dissemination::new(3, size)).collect();
            let mut arrivals: Vec<HashMap<(u32, u8), u32>> = vec![HashMap::new(); size];
            for _ in 0..64 {
                for r in 0..size {
                    let mut out = Vec::new();
                    bars[r]
                        .advance::<()>(r as Rank, size, &mut arrivals[r], |p, s, k| {
                            out.push((p, s, k));
                            Ok(true)
                        })
                        .unwrap();
                    for (p, s, k) in out {
                        *arrivals[p as usize].entry((s, k)).or_default() += 1;
                    }
                }
            }
            assert!(bars.iter().all(|b| b.is_done()), "size {size}");
            assert!(arrivals.iter().all(|a| a.is_empty()));
        }
    }
}
