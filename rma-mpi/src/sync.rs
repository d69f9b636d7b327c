//! The synchronization calls, on rma's epochs; each finishes the completions its
//! epoch or flush completed (results land in the application's buffers).

use std::os::raw::c_int;

use rma::{Assert, LockType, Rank};

use crate::error::{MpiError, MpiResult};
use crate::sys::{self, int, MPI_Group};
use crate::window::Win;

/// rma's assertion of MPI_MODE_* bits; MPI_ERR_ASSERT for others.
pub fn assert_of(bits: c_int) -> MpiResult<Assert> {
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

impl Win {
    /// The ranks of `group` in the window's group, in `group`'s order.
    pub fn ranks_of(&self, group: MPI_Group) -> MpiResult<Vec<Rank>> {
        let mut n: c_int = 0;
        // SAFETY: valid out pointer; MPI checks the handle.
        if unsafe { sys::PMPI_Group_size(group, &mut n) } != 0 {
            return Err(MpiError::new(int!(MPI_ERR_GROUP), "invalid group"));
        }
        let ranks: Vec<c_int> = (0..n).collect();
        let mut out = vec![0 as c_int; n as usize];
        // SAFETY: arrays of `n`; both groups valid.
        unsafe {
            sys::PMPI_Group_translate_ranks(
                group,
                n,
                ranks.as_ptr(),
                self.group.0,
                out.as_mut_ptr(),
            )
        };
        if out.iter().any(|&r| r < 0) {
            return Err(MpiError::new(
                int!(MPI_ERR_GROUP),
                "a member of the group is not in the window's group",
            ));
        }
        Ok(out.into_iter().map(|r| r as Rank).collect())
    }

    pub fn fence(&self, assert: c_int) -> MpiResult<()> {
        self.rma.fence(assert_of(assert)?)?;
        self.finish_due(None)
    }

    pub fn start(&self, group: MPI_Group, assert: c_int) -> MpiResult<()> {
        let ranks = self.ranks_of(group)?;
        self.rma.start(&ranks, assert_of(assert)?)?;
        Ok(())
    }

    pub fn complete(&self) -> MpiResult<()> {
        self.rma.complete()?;
        self.finish_due(None)
    }

    pub fn post(&self, group: MPI_Group, assert: c_int) -> MpiResult<()> {
        let ranks = self.ranks_of(group)?;
        self.rma.post(&ranks, assert_of(assert)?)?;
        Ok(())
    }

    pub fn wait(&self) -> MpiResult<()> {
        self.rma.wait().map_err(Into::into)
    }

    pub fn test(&self) -> MpiResult<bool> {
        self.rma.test().map_err(Into::into)
    }

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

    pub fn unlock(&self, rank: Rank) -> MpiResult<()> {
        self.rma.unlock(rank)?;
        self.finish_due(Some(rank))
    }

    pub fn lock_all(&self, assert: c_int) -> MpiResult<()> {
        self.rma.lock_all(assert_of(assert)?)?;
        Ok(())
    }

    pub fn unlock_all(&self) -> MpiResult<()> {
        self.rma.unlock_all()?;
        self.finish_due(None)
    }

    #[inline]
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
