//! Single-producer single-consumer byte rings in shared memory: the control plane
//! (active messages) between two local ranks.
//!
//! Layout: producer index (own cache line), consumer index (own cache line), then
//! `capacity` bytes of records `[len: u32][pad: u32][payload][pad to 8]`. A record that
//! does not fit before the end leaves a wrap marker (`len == u32::MAX`). The producer
//! publishes with a Release store of its index, the consumer reads with Acquire, and
//! frees space with a Release store of its own index.

use std::sync::atomic::Ordering;

use rma_backend::Region;

const WRAP: u32 = u32::MAX;
/// Bytes of the two indices.
pub const HEADER: usize = 128;

/// A ring inside a mapped region, from byte `start`.
#[derive(Debug, Clone, Copy)]
pub struct Ring {
    region: Region,
    start: usize,
    capacity: usize,
}

fn record_len(payload: usize) -> usize {
    8 + payload.div_ceil(8) * 8
}

impl Ring {
    /// Bytes a ring of `capacity` takes in a segment.
    pub const fn footprint(capacity: usize) -> usize {
        HEADER + capacity
    }

    /// The ring at `start` of `region`; `capacity` is a multiple of 8.
    pub fn new(region: Region, start: usize, capacity: usize) -> Ring {
        assert!(capacity.is_multiple_of(8) && region.contains(start, Self::footprint(capacity)));
        Ring {
            region,
            start,
            capacity,
        }
    }

    /// Whether the consumer has nothing to read.
    pub fn is_empty(&self) -> bool {
        self.head().load(Ordering::Relaxed) == self.tail().load(Ordering::Acquire)
    }

    /// Largest payload one record can carry.
    pub fn max_payload(&self) -> usize {
        self.capacity / 2 - 8
    }

    fn tail(&self) -> &std::sync::atomic::AtomicU64 {
        self.region.atomic_u64(self.start)
    }
    fn head(&self) -> &std::sync::atomic::AtomicU64 {
        self.region.atomic_u64(self.start + 64)
    }
    fn data(&self, pos: usize) -> usize {
        self.start + HEADER + pos
    }

    /// Appends a record; false if there is no room now. Only one producer may call this
    /// at a time (callers hold a lock per destination).
    ///
    /// `cached_head` is the producer's last view of the consumer's index: the shared
    /// index (a cache line the consumer writes) is only read when that view says the ring
    /// is too full, which saves a cross-core transfer on most sends.
    pub fn push(&self, payload: &[u8], cached_head: &mut u64) -> bool {
        assert!(
            payload.len() <= self.max_payload(),
            "record larger than the ring allows"
        );
        let need = record_len(payload.len());
        let mut tail = self.tail().load(Ordering::Relaxed);
        let cap = self.capacity as u64;
        let mut pos = (tail % cap) as usize;
        let waste = if pos + need > self.capacity {
            self.capacity - pos
        } else {
            0
        };
        if tail - *cached_head + (waste + need) as u64 > cap {
            *cached_head = self.head().load(Ordering::Acquire);
            if tail - *cached_head + (waste + need) as u64 > cap {
                return false;
            }
        }
        if waste > 0 {
            self.region.write(self.data(pos), &WRAP.to_ne_bytes());
            tail += waste as u64;
            pos = 0;
        }
        self.region
            .write(self.data(pos), &(payload.len() as u32).to_ne_bytes());
        self.region.write(self.data(pos + 8), payload);
        // Publish the record: everything written above happens before the consumer's
        // Acquire load of the tail.
        self.tail().store(tail + need as u64, Ordering::Release);
        true
    }

    /// Takes the next record into `out` (cleared first): `Ok(false)` if the ring is
    /// empty, [`Corrupt`] if its indices or a record's length say something no producer
    /// of ours writes (the peer is broken or hostile: nothing past the ring is read, and
    /// the call returns at once, whatever the indices say). Only one consumer may call
    /// this at a time.
    pub fn pop(&self, out: &mut Vec<u8>) -> Result<bool, Corrupt> {
        let cap = self.capacity as u64;
        // At most one wrap marker before a record: a ring that says more is corrupt.
        for _ in 0..2 {
            let head = self.head().load(Ordering::Relaxed);
            let tail = self.tail().load(Ordering::Acquire);
            if head == tail {
                return Ok(false);
            }
            if tail.wrapping_sub(head) > cap {
                return Err(Corrupt);
            }
            let pos = (head % cap) as usize;
            if self.capacity - pos < 8 {
                // Records are 8-byte aligned and at least 8 bytes: no room for one here.
                return Err(Corrupt);
            }
            let mut len = [0u8; 4];
            self.region.read(self.data(pos), &mut len);
            let len = u32::from_ne_bytes(len);
            if len == WRAP {
                self.head()
                    .store(head + (self.capacity - pos) as u64, Ordering::Release);
                continue;
            }
            let len = len as usize;
            let used = tail - head;
            if len > self.max_payload()
                || pos + record_len(len) > self.capacity
                || record_len(len) as u64 > used
            {
                return Err(Corrupt);
            }
            // A buffer given back by the engine is usually long enough; a new one is
            // written once, not zeroed first.
            self.region.read_to_vec(self.data(pos + 8), len, out);
            // Free the space only after the copy is done.
            self.head()
                .store(head + record_len(len) as u64, Ordering::Release);
            return Ok(true);
        }
        Err(Corrupt)
    }
}

/// A ring whose indices or records no producer of ours writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Corrupt;

#[cfg(test)]
mod tests {
    use super::*;

    /// A ring in plain memory, and that memory to corrupt.
    fn ring_in(buf: &mut [u64], cap: usize) -> Ring {
        // SAFETY: every caller keeps `buf` alive as long as the ring it returns.
        let region = unsafe { Region::new(buf.as_mut_ptr().cast(), buf.len() * 8) };
        Ring::new(region, 0, cap)
    }

    #[test]
    fn corrupt_indices_and_lengths_are_refused_at_once() {
        let cap = 256;
        let words = Ring::footprint(cap) / 8;
        // (tail, head, first length word): what a broken or hostile producer leaves.
        let cases: [(u64, u64, u32); 6] = [
            (u64::MAX, 0, WRAP), // a tail far ahead, wrap markers everywhere
            (1 << 40, 0, 8),     // more than the ring holds
            (16, 0, 10_000),     // a record longer than any payload
            (16, 0, 200),        // a record running past the ring's end
            (0, 16, 8),          // the tail behind the head
            (264, 248, 8),       // a record running past the ring's end
        ];
        for (tail, head, len) in cases {
            let mut buf = vec![0u64; words];
            let ring = ring_in(&mut buf, cap);
            ring.tail().store(tail, Ordering::Relaxed);
            ring.head().store(head, Ordering::Relaxed);
            ring.region
                .write(ring.data((head % cap as u64) as usize), &len.to_ne_bytes());
            let mut out = Vec::new();
            let start = std::time::Instant::now();
            let r = ring.pop(&mut out);
            assert!(start.elapsed() < std::time::Duration::from_millis(100));
            assert_eq!(r, Err(Corrupt), "tail {tail} head {head} len {len}");
        }
    }

    #[test]
    fn wraps_and_keeps_order_across_threads() {
        let cap = 256;
        let mut buf = vec![0u64; Ring::footprint(cap) / 8];
        // SAFETY: `buf` outlives every use of the region in this test.
        let region = unsafe { Region::new(buf.as_mut_ptr().cast(), Ring::footprint(cap)) };
        let ring = Ring::new(region, 0, cap);
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut cached = 0;
                for i in 0u32..10_000 {
                    let msg = vec![i as u8; (i % 37) as usize + 4];
                    let mut m = msg.clone();
                    m[..4].copy_from_slice(&i.to_ne_bytes());
                    while !ring.push(&m, &mut cached) {
                        std::thread::yield_now();
                    }
                }
            });
            let mut out = Vec::new();
            for i in 0u32..10_000 {
                while !ring.pop(&mut out).unwrap() {
                    std::thread::yield_now();
                }
                assert_eq!(u32::from_ne_bytes(out[..4].try_into().unwrap()), i);
                assert_eq!(out.len(), (i % 37) as usize + 4);
            }
        });
    }
}
