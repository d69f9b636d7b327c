//! Safe access in place to this process's own window memory ([`LocalAccess`]).

use std::ops::{Deref, DerefMut};

use rma_core::{Element, Result, UsageError, Window};

/// Safe access in place to this process's own window memory: a guard that borrows it
/// as a slice inside an epoch that allows local access, instead of copies through
/// [`Window::read_local`] and [`Window::write_local`].
///
/// [`LocalAccess::local_guard`] takes the exclusive lock of this process's own window
/// (MPI_Win_lock(MPI_LOCK_EXCLUSIVE, me): peers that synchronize as MPI asks cannot
/// access it meanwhile) and borrows the window mutably for the guard's life, so the
/// compiler refuses any other call on it; a view of it ([`Window::elements`]) is refused
/// at run time ([`UsageError::LocalAccess`]). Nothing of this process touches the memory
/// the guard lends. Dropping the guard (or [`LocalGuard::release`]) unlocks.
///
/// ```no_run
/// use rma::{Assert, LocalAccess, LockType, World};
/// # fn main() -> Result<(), rma::Error> {
/// let world = World::init()?;
/// let mut win = world.allocate::<f64>(1024)?;
/// {
///     let mut mine = win.local_guard()?; // a &mut [f64] over this rank's window
///     for (i, x) in mine.iter_mut().enumerate() {
///         *x = i as f64 * 0.5;
///     }
/// } // unlocked: peers may read it now
/// world.barrier()?;
/// let peer = (world.rank() + 1) % world.size();
/// win.lock(LockType::Shared, peer, Assert::NONE)?;
/// let theirs = win.get(peer, 0, 4)?;
/// win.unlock(peer)?;
/// assert_eq!(theirs.wait()?, vec![0.0, 0.5, 1.0, 1.5]);
/// # win.free()?; Ok(()) }
/// ```
///
/// What the guard cannot exclude is a peer that breaks MPI's rules (a put with
/// `Assert::NOCHECK` under a lock it does not hold, or in a fence epoch while this process
/// is in a lock epoch): as with the addresses of [`Window::shared_query`], the memory is
/// then written from two processes at once.
pub trait LocalAccess<T: Element> {
    /// Takes the exclusive lock of this process's own window and lends its memory as a
    /// slice until the guard goes. Waits for the lock as `lock` does; an error if an
    /// epoch is open on the window that a lock cannot join (fence, PSCW, lock_all), or
    /// where the memory is not mapped in this process (dynamic windows, simulations).
    fn local_guard(&mut self) -> Result<LocalGuard<'_, T>>;
}

/// This process's window memory, borrowed in place: a `[T]` for as long as the guard
/// lives, with the window's own lock held and the window borrowed.
pub struct LocalGuard<'w, T: Element> {
    window: &'w Window<T>,
    memory: &'w mut [T],
    released: bool,
}

impl<T: Element> LocalAccess<T> for Window<T> {
    fn local_guard(&mut self) -> Result<LocalGuard<'_, T>> {
        let this: &Self = self;
        let (base, len) = this.begin_local_access()?;
        let size = std::mem::size_of::<T>();
        if base % std::mem::align_of::<T>() != 0 || len % size != 0 {
            // Window memory is page aligned and a whole number of elements; a window
            // over a `Vec<T>` is aligned for `T`. Refused rather than assumed.
            this.end_local_access()?;
            return Err(UsageError::Unsupported {
                what: "local access in place to window memory not aligned for its elements",
            }
            .into());
        }
        // SAFETY: `base..base + len` is this process's mapping of its own window memory
        // (`begin_local_access`), aligned for `T` and a whole number of `T`s (checked
        // above), and every `T` is `Pod`, so any bytes there are valid `T`s. It stays
        // mapped while the window lives, and the slice's lifetime is the borrow of the
        // window, mutable, so no other call on this handle can run while the slice lives
        // (and `free` and drop need it by value). Nothing else of this process touches
        // the memory until `end_local_access`: views of the window are refused at run
        // time meanwhile, and incoming operations come only from a peer holding a lock
        // of this window, which the exclusive lock taken here excludes.
        let memory = unsafe { std::slice::from_raw_parts_mut(base as *mut T, len / size) };
        Ok(LocalGuard {
            window: this,
            memory,
            released: false,
        })
    }
}

impl<T: Element> LocalGuard<'_, T> {
    /// Ends the access and unlocks this process's window, with the unlock's error if it
    /// fails (dropping the guard does the same and only logs the error).
    pub fn release(mut self) -> Result<()> {
        self.released = true;
        self.window.end_local_access()
    }
}

impl<T: Element> Deref for LocalGuard<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        self.memory
    }
}

impl<T: Element> DerefMut for LocalGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut [T] {
        self.memory
    }
}

impl<T: Element> Drop for LocalGuard<'_, T> {
    fn drop(&mut self) {
        if !self.released {
            if let Err(e) = self.window.end_local_access() {
                tracing::warn!(error = %e, "the local guard's unlock failed");
            }
        }
    }
}

impl<T: Element> std::fmt::Debug for LocalGuard<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalGuard")
            .field("elements", &self.memory.len())
            .finish()
    }
}
