//! Groups: an ordered set of the job's processes, named by their World ranks. A
//! communicator's group gives its rank numbering (a process's rank in the communicator is
//! its index in the group), which windows over the communicator use for every target.

use std::sync::Arc;

use crate::error::{Result, UsageError};
use crate::Rank;

/// An ordered set of distinct World ranks: member `i` has rank `i` in the group.
///
/// ```
/// use rma_core::Group;
/// let g = Group::new(&[4, 1, 6], 8).unwrap();
/// assert_eq!(g.size(), 3);
/// assert_eq!(g.world_rank(1), Some(1));
/// assert_eq!(g.rank_of(6), Some(2));
/// assert_eq!(g.rank_of(0), None);
/// assert!(Group::new(&[1, 1], 8).is_err()); // a rank twice
/// assert!(Group::new(&[8], 8).is_err());    // past the World
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Group {
    members: Arc<[Rank]>,
    /// World rank -> group rank + 1 (0: not a member), World-sized: a lookup per
    /// incoming message or translated rank, no search.
    index: Arc<[u32]>,
}

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Group").field(&&self.members[..]).finish()
    }
}

impl Group {
    /// The group of these World ranks, in this order, in a World of `world_size`.
    /// A rank past the World or given twice is an error.
    pub fn new(world_ranks: &[Rank], world_size: Rank) -> Result<Group> {
        let mut index = vec![0u32; world_size as usize];
        for (i, &r) in world_ranks.iter().enumerate() {
            match index.get_mut(r as usize) {
                None => {
                    return Err(UsageError::RankOutOfRange {
                        rank: r,
                        size: world_size,
                    }
                    .into())
                }
                Some(slot) if *slot != 0 => {
                    return Err(UsageError::BadGroup {
                        why: "a rank is named twice",
                    }
                    .into())
                }
                Some(slot) => *slot = i as u32 + 1,
            }
        }
        Ok(Group {
            members: world_ranks.into(),
            index: index.into(),
        })
    }

    /// Every rank of a World of `size`, in order.
    pub fn world(size: Rank) -> Group {
        let all: Vec<Rank> = (0..size).collect();
        Group::new(&all, size).expect("distinct ranks in range")
    }

    /// Number of members.
    pub fn size(&self) -> Rank {
        self.members.len() as Rank
    }

    /// The members' World ranks, in group order.
    pub fn members(&self) -> &[Rank] {
        &self.members
    }

    /// The World rank of group rank `rank`.
    #[inline]
    pub fn world_rank(&self, rank: Rank) -> Option<Rank> {
        self.members.get(rank as usize).copied()
    }

    /// The group rank of World rank `world`, if it is a member.
    #[inline]
    pub fn rank_of(&self, world: Rank) -> Option<Rank> {
        match self.index.get(world as usize) {
            Some(&i) if i != 0 => Some(i - 1),
            _ => None,
        }
    }

    /// Whether World rank `world` is a member.
    pub fn contains(&self, world: Rank) -> bool {
        self.rank_of(world).is_some()
    }

    /// The ranks in `other` of this group's ranks `ranks` (MPI_Group_translate_ranks):
    /// `None` for a member of this group that is not in `other`.
    pub fn translate(&self, ranks: &[Rank], other: &Group) -> Result<Vec<Option<Rank>>> {
        ranks
            .iter()
            .map(|&r| {
                let w = self.world_rank(r).ok_or(UsageError::RankOutOfRange {
                    rank: r,
                    size: self.size(),
                })?;
                Ok(other.rank_of(w))
            })
            .collect()
    }

    /// The World ranks of group ranks `ranks`, each checked.
    pub(crate) fn world_ranks(&self, ranks: &[Rank]) -> Result<Vec<Rank>> {
        ranks
            .iter()
            .map(|&r| {
                self.world_rank(r).ok_or_else(|| {
                    UsageError::RankOutOfRange {
                        rank: r,
                        size: self.size(),
                    }
                    .into()
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn translation_both_ways_and_between_groups() {
        let world = Group::world(6);
        let evens = Group::new(&[0, 2, 4], 6).unwrap();
        let odd_first = Group::new(&[5, 2, 3], 6).unwrap();
        assert_eq!(world.size(), 6);
        assert_eq!(evens.rank_of(4), Some(2));
        assert_eq!(evens.rank_of(3), None);
        assert_eq!(
            evens.translate(&[0, 1, 2], &odd_first).unwrap(),
            vec![None, Some(1), None]
        );
        assert_eq!(
            odd_first.translate(&[0, 1, 2], &world).unwrap(),
            vec![Some(5), Some(2), Some(3)]
        );
        assert!(evens.translate(&[3], &world).is_err());
        assert_eq!(evens.world_ranks(&[2, 0]).unwrap(), vec![4, 0]);
        assert!(evens.world_ranks(&[3]).is_err());
    }
}
