//! Two-level element pools (seed 004, "Operation and Target Element Pools"): a local pool
//! per window and a global pool shared by all windows.
//!
//! An element is taken from the window's local pool first, then from the global pool;
//! it is returned to the local pool unless that is full. A window can therefore never be
//! starved by others: its local elements are its own.

use crossbeam_queue::ArrayQueue;

/// The global pool: a bounded lock-free queue of ready elements.
#[derive(Debug)]
pub struct GlobalPool<T> {
    free: ArrayQueue<Box<T>>,
}

impl<T: Default> GlobalPool<T> {
    /// A pool holding `capacity` fresh elements.
    pub fn new(capacity: usize) -> Self {
        let free = ArrayQueue::new(capacity.max(1));
        for _ in 0..capacity {
            let _ = free.push(Box::default());
        }
        GlobalPool { free }
    }
    /// Elements available now.
    pub fn available(&self) -> usize {
        self.free.len()
    }
}

/// A window's local pool. Counts the elements the window has out, from either level.
#[derive(Debug)]
pub struct LocalPool<T> {
    free: Vec<Box<T>>,
    capacity: usize,
    in_use: usize,
}

impl<T: Default> LocalPool<T> {
    /// A pool holding `capacity` fresh elements.
    pub fn new(capacity: usize) -> Self {
        LocalPool {
            free: (0..capacity).map(|_| Box::default()).collect(),
            capacity,
            in_use: 0,
        }
    }

    /// An element from the local pool, else the global one; `None` when both are empty
    /// (the caller then restores resources).
    pub fn get(&mut self, global: &GlobalPool<T>) -> Option<Box<T>> {
        let e = self.free.pop().or_else(|| global.free.pop())?;
        self.in_use += 1;
        Some(e)
    }

    /// Returns an element: to the local pool unless it is full, else to the global pool.
    pub fn put(&mut self, element: Box<T>, global: &GlobalPool<T>) {
        self.in_use -= 1;
        if self.free.len() < self.capacity {
            self.free.push(element);
        } else {
            // The global pool has room for every element it handed out.
            let _ = global.free.push(element);
        }
    }

    /// Whether the local pool holds a free element (one [`get`](Self::get) takes without
    /// touching the global pool).
    pub fn has_local(&self) -> bool {
        !self.free.is_empty()
    }

    /// Elements this window has out.
    pub fn in_use(&self) -> usize {
        self.in_use
    }

    /// Gives every element back to the global pool except the local ones (at window free).
    pub fn release(&mut self, global: &GlobalPool<T>) {
        while self.free.len() > self.capacity {
            let _ = global.free.push(self.free.pop().expect("non-empty"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_first_then_global_and_back() {
        let global = GlobalPool::<u64>::new(1);
        let mut local = LocalPool::<u64>::new(2);
        let a = local.get(&global).unwrap();
        let b = local.get(&global).unwrap();
        assert_eq!(global.available(), 1);
        let c = local.get(&global).unwrap();
        assert_eq!(global.available(), 0);
        assert!(local.get(&global).is_none());
        assert_eq!(local.in_use(), 3);
        local.put(a, &global);
        local.put(b, &global);
        local.put(c, &global); // local is full again: goes global
        assert_eq!(global.available(), 1);
        assert_eq!(local.in_use(), 0);
    }
}
