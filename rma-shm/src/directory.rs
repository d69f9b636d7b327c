//! A dynamic window's directory: the regions one rank has attached, listed in its inbox
//! (one directory per lock slot) for peers that reach them by cross-memory attach.
//!
//! The owner rewrites the list under a sequence number (a seqlock): odd while it writes,
//! even and one step further once done. A reader takes the list only between two equal
//! even readings, so it never acts on a half-written one. Only the owner writes (its
//! attach and detach calls, serialized by the window), so the owner needs no atomic
//! read-modify-write.
//!
//! A region the directory does not list (past [`DIRECTORY_REGIONS`] of them, or not yet
//! published) is still reached by active messages, which its owner checks against its
//! own record: the directory only decides which ops may skip the owner.

use std::sync::atomic::{fence, Ordering};

use rma_backend::Region;

/// Bytes of one directory.
pub(crate) const DIRECTORY_BYTES: usize = 4096;
/// Regions one directory lists: a sequence number and a count, then (address, length)
/// pairs.
pub(crate) const DIRECTORY_REGIONS: usize = (DIRECTORY_BYTES - 16) / 16;
/// Readings of a directory being rewritten before a reader gives up (the op then goes
/// as an active message): an owner that died while writing leaves it odd for good.
const PATIENCE: u32 = 1 << 16;

/// One rank's directory of regions of one dynamic window.
#[derive(Debug)]
pub(crate) struct Directory {
    words: Region,
}

impl Directory {
    /// The directory in `words` ([`DIRECTORY_BYTES`] of an inbox, 8-byte aligned).
    pub(crate) fn new(words: Region) -> Directory {
        assert!(words.len() >= DIRECTORY_BYTES && (words.base() as usize).is_multiple_of(8));
        Directory { words }
    }

    /// The owner lists `regions` ((address, length) pairs; the first
    /// [`DIRECTORY_REGIONS`] of them), replacing what was listed.
    pub(crate) fn publish(&self, regions: &[(u64, u64)]) {
        let seq = self.words.atomic_u64(0);
        let s = seq.load(Ordering::Relaxed);
        seq.store(s | 1, Ordering::Relaxed);
        // The odd number is visible before any entry changes.
        fence(Ordering::Release);
        let listed = &regions[..regions.len().min(DIRECTORY_REGIONS)];
        self.words
            .atomic_u64(8)
            .store(listed.len() as u64, Ordering::Relaxed);
        for (i, &(address, len)) in listed.iter().enumerate() {
            self.words
                .atomic_u64(16 + 16 * i)
                .store(address, Ordering::Relaxed);
            self.words
                .atomic_u64(24 + 16 * i)
                .store(len, Ordering::Relaxed);
        }
        // The entries are visible before the even number.
        seq.store((s | 1) + 1, Ordering::Release);
    }

    /// Whether `len` bytes at `address` lie inside one listed region (`false` also when
    /// the owner kept the list locked past the reader's patience).
    pub(crate) fn lists(&self, address: u64, len: u64) -> bool {
        let seq = self.words.atomic_u64(0);
        for _ in 0..PATIENCE {
            let before = seq.load(Ordering::Acquire);
            if before & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let n =
                (self.words.atomic_u64(8).load(Ordering::Relaxed) as usize).min(DIRECTORY_REGIONS);
            let found = (0..n).any(|i| {
                let base = self.words.atomic_u64(16 + 16 * i).load(Ordering::Relaxed);
                let size = self.words.atomic_u64(24 + 16 * i).load(Ordering::Relaxed);
                address
                    .checked_sub(base)
                    .is_some_and(|at| at <= size && len <= size - at)
            });
            // The entries were read before the second reading of the number.
            fence(Ordering::Acquire);
            if seq.load(Ordering::Relaxed) == before {
                return found;
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn directory(words: &mut [u64]) -> Directory {
        // SAFETY: the slice outlives the directory in each test.
        Directory::new(unsafe { Region::new(words.as_mut_ptr().cast(), words.len() * 8) })
    }

    #[test]
    fn lists_exactly_the_published_regions() {
        let mut words = vec![0u64; DIRECTORY_BYTES / 8];
        let d = directory(&mut words);
        assert!(!d.lists(0x1000, 1));
        d.publish(&[(0x1000, 64), (0x4000, 8)]);
        assert!(d.lists(0x1000, 64) && d.lists(0x1038, 8) && d.lists(0x4000, 8));
        assert!(d.lists(0x1040, 0), "an empty span at the end is inside");
        assert!(!d.lists(0x1038, 9) && !d.lists(0xfff, 2) && !d.lists(0x4008, 1));
        assert!(
            !d.lists(u64::MAX, 2),
            "no overflow near the top of the address space"
        );
        d.publish(&[(0x4000, 8)]);
        assert!(!d.lists(0x1000, 8) && d.lists(0x4000, 8));
        assert_eq!(words[0] % 2, 0, "even once published");
    }

    #[test]
    fn lists_the_first_regions_that_fit() {
        let mut words = vec![0u64; DIRECTORY_BYTES / 8];
        let d = directory(&mut words);
        let many: Vec<(u64, u64)> = (0..DIRECTORY_REGIONS as u64 + 5)
            .map(|i| (0x10000 + i * 0x100, 16))
            .collect();
        d.publish(&many);
        assert!(d.lists(many[DIRECTORY_REGIONS - 1].0, 16));
        assert!(
            !d.lists(many[DIRECTORY_REGIONS].0, 16),
            "past the directory: by message"
        );
    }

    #[test]
    fn a_directory_left_mid_write_is_given_up() {
        let mut words = vec![0u64; DIRECTORY_BYTES / 8];
        let d = directory(&mut words);
        d.publish(&[(0x1000, 64)]);
        d.words.atomic_u64(0).fetch_add(1, Ordering::Relaxed);
        assert!(!d.lists(0x1000, 8));
    }
}
