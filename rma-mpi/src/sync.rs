//! The synchronization calls, on rma's epochs; each finishes the completions its
//! epoch or flush completed (results land in the application's buffers).

use std::os::raw::c_int;

use rma::{Assert, LockType, Rank};

use crate::error::{MpiError, MpiResult};
use crate::sys::{self, int, MPI_Group};
use crate::window::Win;

/// rma's assertion of MPI_MODE_* bits; MPI_ERR_ASSERT for others.
#[inline]
pub fn assert_of(bits: c_int) -> MpiResult<Assert> {
    if bits == 0 {
        // The common call asserts nothing: no table of the MPI's constants to build
        // (a fifth of MPI_Win_lock on shared memory).
        return Ok(Assert::NONE);
    }
    assert_of_bits(bits)
}

/// [`assert_of`] of some bits, out of line.
#[inline(never)]
fn assert_of_bits(bits: c_int) -> MpiResult<Assert> {
    let table = [
        (int!(MPI_MODE_NOCHECK), Assert::NOCHECK),
        (int!(MPI_MODE_NOSTORE), Assert::NOSTORE),
        (int!(MPI_MODE_NOPUT), Assert::NOPUT),
        (int!(MPI_MODE_NOPRECEDE), Assert::NOPRECEDE),
        (int!(MPI_MODE_NOSUCCEED), Assert::NOSUCCEED),
    ];
    let mut a = Assert::NONE;
    let mut known = 0;
    for (bit, assert) in table {
        if bits & bit != 0 {
            a = a | assert;
            known |= bit;
        }
    }
    if bits & !known != 0 {
        return Err(MpiError::new(
            int!(MPI_ERR_ASSERT),
            format!("unknown assertion bits {:#x}", bits & !known),
        ));
    }
    Ok(a)
}

/// Groups of PSCW calls up to this size are translated without allocating.
const SMALL_GROUP: usize = 32;

impl Win {
    /// Runs `f` on the ranks of `group` in the window's group, in `group`'s order.
    /// PSCW calls translate their group on every call: a group of up to [`SMALL_GROUP`]
    /// is translated on the stack (three allocations a call were a tenth of a PSCW
    /// ping-pong).
    fn with_ranks_of<R>(
        &self,
        group: MPI_Group,
        f: impl FnOnce(&[Rank]) -> MpiResult<R>,
    ) -> MpiResult<R> {
        let mut n: c_int = 0;
        // SAFETY: valid out pointer; MPI checks the handle.
        if unsafe { sys::PMPI_Group_size(group, &mut n) } != 0 {
            return Err(MpiError::new(int!(MPI_ERR_GROUP), "invalid group"));
        }
        let n = usize::try_from(n).unwrap_or(0);
        if n <= SMALL_GROUP {
            let members: [c_int; SMALL_GROUP] = std::array::from_fn(|i| i as c_int);
            let mut ranks = [0 as Rank; SMALL_GROUP];
            self.translate(group, &members[..n], &mut ranks[..n])?;
            return f(&ranks[..n]);
        }
        let members: Vec<c_int> = (0..n as c_int).collect();
        let mut ranks = vec![0 as Rank; n];
        self.translate(group, &members, &mut ranks)?;
        f(&ranks)
    }

    /// The window-group ranks of `group`'s `members`, into `ranks`.
    fn translate(&self, group: MPI_Group, members: &[c_int], ranks: &mut [Rank]) -> MpiResult<()> {
        debug_assert_eq!(members.len(), ranks.len());
        let mut out = [0 as c_int; SMALL_GROUP];
        let mut big = Vec::new();
        let out: &mut [c_int] = if members.len() <= SMALL_GROUP {
            &mut out[..members.len()]
        } else {
            big.resize(members.len(), 0);
            &mut big
        };
        // SAFETY: arrays of `members.len()` each; both groups valid (MPI checks them).
        unsafe {
            sys::PMPI_Group_translate_ranks(
                group,
                members.len() as c_int,
                members.as_ptr(),
                self.group.0,
                out.as_mut_ptr(),
            )
        };
        for (rank, &r) in ranks.iter_mut().zip(out.iter()) {
            *rank = Rank::try_from(r).map_err(|_| {
                MpiError::new(
                    int!(MPI_ERR_GROUP),
                    "a member of the group is not in the window's group",
                )
            })?;
        }
        Ok(())
    }

    pub fn fence(&self, assert: c_int) -> MpiResult<()> {
        self.rma.fence(assert_of(assert)?)?;
        self.finish_due(None)
    }

    pub fn start(&self, group: MPI_Group, assert: c_int) -> MpiResult<()> {
        self.with_ranks_of(group, |ranks| {
            Ok(self.rma.start(ranks, assert_of(assert)?)?)
        })
    }

    pub fn complete(&self) -> MpiResult<()> {
        self.rma.complete()?;
        self.finish_due(None)
    }

    pub fn post(&self, group: MPI_Group, assert: c_int) -> MpiResult<()> {
        self.with_ranks_of(group, |ranks| {
            Ok(self.rma.post(ranks, assert_of(assert)?)?)
        })
    }

    pub fn wait(&self) -> MpiResult<()> {
        self.rma.wait().map_err(Into::into)
    }

    pub fn test(&self) -> MpiResult<bool> {
        self.rma.test().map_err(Into::into)
    }

    #[inline]
    pub fn lock(&self, lock_type: c_int, rank: Rank, assert: c_int) -> MpiResult<()> {
        let t = if lock_type == int!(MPI_LOCK_EXCLUSIVE) {
            LockType::Exclusive
        } else if lock_type == int!(MPI_LOCK_SHARED) {
            LockType::Shared
        } else {
            return Err(MpiError::new(int!(MPI_ERR_LOCKTYPE), "unknown lock type"));
        };
        self.rma.lock(t, rank, assert_of(assert)?)?;
        Ok(())
    }

    #[inline]
    pub fn unlock(&self, rank: Rank) -> MpiResult<()> {
        self.rma.unlock(rank)?;
        self.finish_due(Some(rank))
    }

    #[inline]
    pub fn lock_all(&self, assert: c_int) -> MpiResult<()> {
        self.rma.lock_all(assert_of(assert)?)?;
        Ok(())
    }

    #[inline]
    pub fn unlock_all(&self) -> MpiResult<()> {
        self.rma.unlock_all()?;
        self.finish_due(None)
    }

    #[inline(always)]
    pub fn flush(&self, rank: Rank, local: bool) -> MpiResult<()> {
        if local {
            self.rma.flush_local(rank)?;
        } else {
            self.rma.flush(rank)?;
        }
        self.finish_due(Some(rank))
    }

    pub fn flush_all(&self, local: bool) -> MpiResult<()> {
        if local {
            self.rma.flush_local_all()?;
        } else {
            self.rma.flush_all()?;
        }
        self.finish_due(None)
    }
}
