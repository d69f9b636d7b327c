//! A dynamic window's directory: the regions one rank has attached, listed in its inbox
//! (one directory per lock slot) for peers that reach them natively: a region in a
//! segment of the library's (a Rust `attach` of a `Vec`, copied in) by mapping that
//! segment, through the descriptor the entry names; the application's memory in place
//! (MPI_Win_attach) by cross-memory attach.
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
/// Bytes of one entry: address, length, the segment's descriptor number (0: the
/// application's memory in place) and a generation that no other attach of this process
/// shares.
const ENTRY_BYTES: usize = 32;
/// Regions one directory lists (after a sequence number and a count).
pub(crate) const DIRECTORY_REGIONS: usize = (DIRECTORY_BYTES - 16) / ENTRY_BYTES;
/// Readings of a directory being rewritten before a reader gives up (the op then goes
/// as an active message): an owner that died while writing leaves it odd for good.
const PATIENCE: u32 = 1 << 16;

/// One attached region as a directory lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    /// Its address in the owner's process (what peers name it by).
    pub address: u64,
    pub len: u64,
    /// The owner's descriptor of the segment holding it (peers map
    /// `/proc/<pid>/fd/<fd>`), or `None`: the application's memory, reached by
    /// cross-memory attach.
    pub fd: Option<u32>,
    /// Unique per attach in the owner's process: a peer's mapping of an entry is good
    /// for the same (address, generation) only.
    pub generation: u64,
}

impl Entry {
    /// Whether `len` bytes at `address` lie inside it: the offset in it.
    fn offset_of(&self, address: u64, len: u64) -> Option<u64> {
        address
            .checked_sub(self.address)
            .filter(|&at| at <= self.len && len <= self.len - at)
    }
}

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

    fn word(&self, entry: usize, field: usize) -> &std::sync::atomic::AtomicU64 {
        self.words.atomic_u64(16 + ENTRY_BYTES * entry + 8 * field)
    }

    /// The owner lists `regions` (the first [`DIRECTORY_REGIONS`] of them), replacing
    /// what was listed.
    pub(crate) fn publish(&self, regions: &[Entry]) {
        let seq = self.words.atomic_u64(0);
        let s = seq.load(Ordering::Relaxed);
        seq.store(s | 1, Ordering::Relaxed);
        // The odd number is visible before any entry changes.
        fence(Ordering::Release);
        let listed = &regions[..regions.len().min(DIRECTORY_REGIONS)];
        self.words
            .atomic_u64(8)
            .store(listed.len() as u64, Ordering::Relaxed);
        for (i, e) in listed.iter().enumerate() {
            self.word(i, 0).store(e.address, Ordering::Relaxed);
            self.word(i, 1).store(e.len, Ordering::Relaxed);
            self.word(i, 2)
                .store(e.fd.map_or(0, |fd| u64::from(fd) + 1), Ordering::Relaxed);
            self.word(i, 3).store(e.generation, Ordering::Relaxed);
        }
        // The entries are visible before the even number.
        seq.store((s | 1) + 1, Ordering::Release);
    }

    /// The listed region that holds `len` bytes at `address`, and their offset in it
    /// (`None` also when the owner kept the list locked past the reader's patience).
    #[inline]
    pub(crate) fn find(&self, address: u64, len: u64) -> Option<(Entry, u64)> {
        let seq = self.words.atomic_u64(0);
        for _ in 0..PATIENCE {
            let before = seq.load(Ordering::Acquire);
            if before & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let n =
                (self.words.atomic_u64(8).load(Ordering::Relaxed) as usize).min(DIRECTORY_REGIONS);
            let found = (0..n).find_map(|i| {
                let e = Entry {
                    address: self.word(i, 0).load(Ordering::Relaxed),
                    len: self.word(i, 1).load(Ordering::Relaxed),
                    fd: None,
                    generation: 0,
                };
                let at = e.offset_of(address, len)?;
                let fd = self.word(i, 2).load(Ordering::Relaxed);
                Some((
                    Entry {
                        fd: fd.checked_sub(1).and_then(|fd| u32::try_from(fd).ok()),
                        generation: self.word(i, 3).load(Ordering::Relaxed),
                        ..e
                    },
                    at,
                ))
            });
            // The entries were read before the second reading of the number.
            fence(Ordering::Acquire);
            if seq.load(Ordering::Relaxed) == before {
                return found;
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn directory(words: &mut [u64]) -> Directory {
        // SAFETY: the slice outlives the directory in each test.
        Directory::new(unsafe { Region::new(words.as_mut_ptr().cast(), words.len() * 8) })
    }

    fn entry(address: u64, len: u64, fd: Option<u32>, generation: u64) -> Entry {
        Entry {
            address,
            len,
            fd,
            generation,
        }
    }

    #[test]
    fn finds_exactly_the_published_regions() {
        let mut words = vec![0u64; DIRECTORY_BYTES / 8];
        let d = directory(&mut words);
        assert!(d.find(0x1000, 1).is_none());
        let a = entry(0x1000, 64, Some(7), 1);
        let b = entry(0x4000, 8, None, 2);
        d.publish(&[a, b]);
        assert_eq!(d.find(0x1000, 64), Some((a, 0)));
        assert_eq!(d.find(0x1038, 8), Some((a, 0x38)));
        assert_eq!(d.find(0x4000, 8), Some((b, 0)));
        assert_eq!(
            d.find(0x1040, 0),
            Some((a, 64)),
            "an empty span at the end is inside"
        );
        assert!(d.find(0x1038, 9).is_none() && d.find(0xfff, 2).is_none());
        assert!(d.find(0x4008, 1).is_none());
        assert!(d.find(u64::MAX, 2).is_none(), "no overflow near the top");
        d.publish(&[b]);
        assert!(d.find(0x1000, 8).is_none() && d.find(0x4000, 8).is_some());
        assert_eq!(words[0] % 2, 0, "even once published");
    }

    #[test]
    fn lists_the_first_regions_that_fit() {
        let mut words = vec![0u64; DIRECTORY_BYTES / 8];
        let d = directory(&mut words);
        let many: Vec<Entry> = (0..DIRECTORY_REGIONS as u64 + 5)
            .map(|i| entry(0x10000 + i * 0x100, 16, Some(i as u32), i))
            .collect();
        d.publish(&many);
        let last = many[DIRECTORY_REGIONS - 1];
        assert_eq!(d.find(last.address, 16), Some((last, 0)));
        let past = many[DIRECTORY_REGIONS].address;
        assert!(d.find(past, 16).is_none(), "past the directory: by message");
    }

    #[test]
    fn a_directory_left_mid_write_is_given_up() {
        let mut words = vec![0u64; DIRECTORY_BYTES / 8];
        let d = directory(&mut words);
        d.publish(&[entry(0x1000, 64, None, 1)]);
        d.words.atomic_u64(0).fetch_add(1, Ordering::Relaxed);
        assert!(d.find(0x1000, 8).is_none());
    }
}
