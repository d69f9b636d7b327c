//! Values per rank of a job, kept as runs of equal values: what a window knows of every
//! target (its length and displacement unit, the backend's class of route to it) in
//! memory that does not grow with the job where the values repeat.
//!
//! A window of `allocate` with one size everywhere is one run; a hybrid job's routes
//! (shared memory to the node's ranks, the network to the rest) are three runs where a
//! node's ranks are consecutive, as launchers number them. Where the values change too
//! often for runs to pay (each run costs a rank beside its value), the table is one value
//! per rank, as a plain array would be: never more memory than that.

use crate::Rank;

/// One `T` per rank of `0..len` (see the module's docs).
#[derive(Debug, Clone)]
pub(crate) struct PerRank<T> {
    /// The ranks `0..ranks` the table has a value for.
    ranks: Rank,
    /// Where each run after the first starts (ascending); empty when `values` has one
    /// value per rank.
    starts: Box<[Rank]>,
    /// One value per run, or one per rank (`starts` empty, more than one value).
    values: Box<[T]>,
}

impl<T: Copy + PartialEq> PerRank<T> {
    /// The table of `values`, one per rank in rank order.
    pub(crate) fn new(values: &[T]) -> Self {
        let Some(&first) = values.first() else {
            return PerRank {
                ranks: 0,
                starts: Box::new([]),
                values: Box::new([]),
            };
        };
        let mut starts = Vec::new();
        let mut runs = vec![first];
        for (rank, v) in values.iter().enumerate().skip(1) {
            if *v != runs[runs.len() - 1] {
                starts.push(rank as Rank);
                runs.push(*v);
            }
        }
        let run_bytes = runs.len() * (size_of::<T>() + size_of::<Rank>());
        if runs.len() > 1 && run_bytes >= size_of_val(values) {
            return PerRank {
                ranks: values.len() as Rank,
                starts: Box::new([]),
                values: values.into(),
            };
        }
        PerRank {
            ranks: values.len() as Rank,
            starts: starts.into(),
            values: runs.into(),
        }
    }

    /// `rank`'s value; `rank` is one of the table's ranks (a World rank the caller
    /// checked): past them, the last run's value (runs) or a panic (one per rank).
    #[inline(always)]
    pub(crate) fn get(&self, rank: Rank) -> &T {
        // One value for every rank: the common window (same size everywhere, one backend).
        if self.values.len() == 1 {
            return &self.values[0];
        }
        self.get_varied(rank)
    }

    /// `rank`'s value, or `None` past the table's ranks.
    pub(crate) fn get_checked(&self, rank: Rank) -> Option<&T> {
        (rank < self.ranks).then(|| self.get(rank))
    }

    fn get_varied(&self, rank: Rank) -> &T {
        if self.starts.is_empty() {
            return &self.values[rank as usize];
        }
        // The runs starting at or before `rank`, the first one's start (0) not listed.
        &self.values[self.starts.partition_point(|&s| s <= rank)]
    }

    /// Bytes the table holds on the heap.
    #[cfg(test)]
    pub(crate) fn heap_bytes(&self) -> usize {
        self.starts.len() * size_of::<Rank>() + self.values.len() * size_of::<T>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(values: &[u64]) -> PerRank<u64> {
        let t = PerRank::new(values);
        for (rank, v) in values.iter().enumerate() {
            assert_eq!(t.get(rank as Rank), v, "rank {rank} of {values:?}");
            assert_eq!(t.get_checked(rank as Rank), Some(v));
        }
        assert_eq!(t.get_checked(values.len() as Rank), None);
        assert!(
            t.heap_bytes() <= values.len() * 8,
            "never more than an array"
        );
        t
    }

    #[test]
    fn one_value_everywhere_is_one_run() {
        let t = check(&vec![42; 65_536]);
        assert_eq!(t.heap_bytes(), 8);
        check(&[5]);
        assert_eq!(PerRank::<u64>::new(&[]).get_checked(0), None);
    }

    #[test]
    fn a_node_of_ranks_inside_the_job_is_three_runs() {
        let mut routes = vec![1u64; 10_000];
        routes[4096..4104].fill(0);
        let t = check(&routes);
        assert_eq!(t.heap_bytes(), 3 * 8 + 2 * 4);
        // A different first and last rank.
        let mut v = vec![3u64; 100];
        v[0] = 9;
        v[99] = 8;
        let t = check(&v);
        assert_eq!(t.heap_bytes(), 3 * 8 + 2 * 4);
    }

    #[test]
    fn values_that_change_at_every_rank_are_one_per_rank() {
        let v: Vec<u64> = (0..1000).map(|i| i % 7).collect();
        let t = check(&v);
        assert_eq!(t.heap_bytes(), 1000 * 8);
        // Alternating: runs would cost more than the array.
        let v: Vec<u64> = (0..1001).map(|i| i % 2).collect();
        assert_eq!(check(&v).heap_bytes(), 1001 * 8);
    }
}
