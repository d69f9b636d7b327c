//! Window segments of this process as the network backends make them: memory (ours, the
//! user's, or another backend's segment) and a network device's registration of it,
//! closed before the memory goes.

use std::any::Any;
use std::sync::Arc;

use rma_core::transport::{Segment, UserMemory};

use crate::LocalMemory;

/// The bytes behind a [`WindowSegment`]: [`LocalMemory`] (a network backend's window),
/// or another backend's segment (the shared-memory segment of a hybrid world, which the
/// network registers as well). The byte access is [`Segment`]'s, which the window
/// segment hands on.
pub trait Memory: Send + Sync + 'static {
    /// [`Segment::len`].
    fn len(&self) -> usize;
    /// [`Segment::is_empty`].
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// [`Segment::read`].
    fn read(&self, offset: usize, dst: &mut [u8]);
    /// [`Segment::write`].
    fn write(&self, offset: usize, src: &[u8]);
    /// [`Segment::update`].
    fn update(&self, offset: usize, len: usize, f: &mut dyn FnMut(&mut [u8]));
    /// [`Segment::update_locked`]: the shared-memory segment of a hybrid world takes its
    /// window's accumulate lock, as the node's ranks do for their native updates.
    fn update_locked(&self, offset: usize, len: usize, f: &mut dyn FnMut(&mut [u8])) {
        self.update(offset, len, f)
    }
    /// [`Segment::local_base`].
    fn local_base(&self) -> Option<usize>;
    /// [`Segment::shared_base`].
    fn shared_base(&self) -> Option<usize>;
    /// The owner's own part of the window descriptor: `None` for memory that only the
    /// network reaches (then the descriptor is the registration's alone).
    fn own_descriptor(&self) -> Option<Vec<u8>>;
    /// The user's memory back, if the window was made over it
    /// ([`Segment::into_user_memory`]).
    fn into_user(self) -> Option<Box<dyn UserMemory>>;
}

impl Memory for LocalMemory {
    fn len(&self) -> usize {
        LocalMemory::len(self)
    }
    fn read(&self, offset: usize, dst: &mut [u8]) {
        LocalMemory::read(self, offset, dst)
    }
    fn write(&self, offset: usize, src: &[u8]) {
        LocalMemory::write(self, offset, src)
    }
    fn update(&self, offset: usize, len: usize, f: &mut dyn FnMut(&mut [u8])) {
        LocalMemory::update(self, offset, len, f)
    }
    fn local_base(&self) -> Option<usize> {
        Some(self.base() as usize)
    }
    fn shared_base(&self) -> Option<usize> {
        None
    }
    fn own_descriptor(&self) -> Option<Vec<u8>> {
        None
    }
    fn into_user(self) -> Option<Box<dyn UserMemory>> {
        LocalMemory::into_user(self)
    }
}

impl Memory for Arc<dyn Segment> {
    fn len(&self) -> usize {
        Segment::len(&**self)
    }
    fn read(&self, offset: usize, dst: &mut [u8]) {
        Segment::read(&**self, offset, dst)
    }
    fn write(&self, offset: usize, src: &[u8]) {
        Segment::write(&**self, offset, src)
    }
    fn update(&self, offset: usize, len: usize, f: &mut dyn FnMut(&mut [u8])) {
        Segment::update(&**self, offset, len, f)
    }
    fn update_locked(&self, offset: usize, len: usize, f: &mut dyn FnMut(&mut [u8])) {
        Segment::update_locked(&**self, offset, len, f)
    }
    fn local_base(&self) -> Option<usize> {
        Segment::local_base(&**self)
    }
    fn shared_base(&self) -> Option<usize> {
        Segment::shared_base(&**self)
    }
    fn own_descriptor(&self) -> Option<Vec<u8>> {
        Some(Segment::descriptor(&**self))
    }
    fn into_user(self) -> Option<Box<dyn UserMemory>> {
        self.into_user_memory()
    }
}

/// A network device's registration of window memory: what peers reach the memory
/// through. Dropping it closes the registration.
pub trait Registration: Send + Sync + 'static {
    /// The backend's part of the window descriptor (address, key...) for the memory it
    /// registered, which starts at `base` in this process.
    fn descriptor(&self, base: usize) -> Vec<u8>;
}

/// A window segment of this process: memory, and a network's registration of it if the
/// network does anything natively. The registration is closed before the memory is
/// freed or given back to the user (field order, and
/// [`into_user_memory`](Segment::into_user_memory)), which is what a backend that
/// registered `memory` must promise its device.
///
/// The descriptor is the registration's; where the memory has a descriptor of its own
/// (another backend's segment), that comes first, its length before it (see
/// [`split_descriptor`]).
pub struct WindowSegment<M, R> {
    registration: Option<R>,
    memory: M,
}

impl<M: Memory, R: Registration> WindowSegment<M, R> {
    /// `memory`, reached through `registration` (closed first).
    pub fn new(memory: M, registration: Option<R>) -> Self {
        WindowSegment {
            registration,
            memory,
        }
    }

    /// The memory.
    pub fn memory(&self) -> &M {
        &self.memory
    }
}

impl<M: Memory, R: Registration> Segment for WindowSegment<M, R> {
    fn len(&self) -> usize {
        self.memory.len()
    }
    fn read(&self, offset: usize, dst: &mut [u8]) {
        self.memory.read(offset, dst)
    }
    fn write(&self, offset: usize, src: &[u8]) {
        self.memory.write(offset, src)
    }
    fn update(&self, offset: usize, len: usize, f: &mut dyn FnMut(&mut [u8])) {
        self.memory.update(offset, len, f)
    }
    fn update_locked(&self, offset: usize, len: usize, f: &mut dyn FnMut(&mut [u8])) {
        // Handed on: a hybrid world's window is the node's shared-memory segment, whose
        // pair and long double updates must take the lock its node's ranks take.
        self.memory.update_locked(offset, len, f)
    }
    fn descriptor(&self) -> Vec<u8> {
        let base = self.memory.local_base().unwrap_or(0);
        let net = self.registration.as_ref().map(|r| r.descriptor(base));
        match self.memory.own_descriptor() {
            None => net.unwrap_or_default(),
            Some(own) => {
                let mut d = (own.len() as u32).to_le_bytes().to_vec();
                d.extend_from_slice(&own);
                d.extend_from_slice(&net.unwrap_or_default());
                d
            }
        }
    }
    fn shared_base(&self) -> Option<usize> {
        self.memory.shared_base()
    }
    fn local_base(&self) -> Option<usize> {
        self.memory.local_base()
    }
    fn into_user_memory(self: Arc<Self>) -> Option<Box<dyn UserMemory>> {
        let WindowSegment {
            registration,
            memory,
        } = Arc::into_inner(self)?;
        // Closed before the memory goes back to the user.
        drop(registration);
        memory.into_user()
    }
}

/// Splits the descriptor of a [`WindowSegment`] over memory with a descriptor of its own
/// into (the memory's part, the registration's part), without trusting it: `None` when
/// it is too short for the length it claims.
pub fn split_descriptor(d: &[u8]) -> Option<(&[u8], &[u8])> {
    let len = u32::from_le_bytes(d.get(..4)?.try_into().ok()?) as usize;
    let own = d.get(4..4usize.checked_add(len)?)?;
    Some((own, &d[4 + len..]))
}

/// Another backend's window segment registered with a network device (the
/// shared-memory segment of a hybrid world, which other nodes' ranks reach through the
/// network): holds the segment, so that its memory stays mapped until the registration
/// is closed (dropped first).
pub struct SegmentRegistration {
    descriptor: Vec<u8>,
    _registration: Box<dyn Any + Send + Sync>,
    _segment: Arc<dyn Segment>,
}

impl std::fmt::Debug for SegmentRegistration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SegmentRegistration")
            .field("descriptor", &self.descriptor)
            .finish()
    }
}

impl SegmentRegistration {
    /// `registration` of `segment`'s memory, which starts at `base`.
    pub fn new<R: Registration>(registration: R, segment: &Arc<dyn Segment>, base: usize) -> Self {
        SegmentRegistration {
            descriptor: registration.descriptor(base),
            _registration: Box::new(registration),
            _segment: segment.clone(),
        }
    }

    /// What a peer needs to reach the memory: the network's window descriptor.
    pub fn descriptor(&self) -> &[u8] {
        &self.descriptor
    }
}

impl Registration for SegmentRegistration {
    fn descriptor(&self, _base: usize) -> Vec<u8> {
        self.descriptor.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Key(u8);
    impl Registration for Key {
        fn descriptor(&self, base: usize) -> Vec<u8> {
            vec![self.0, (base != 0) as u8]
        }
    }

    /// A segment that says which kind of update reached it.
    struct Updates(std::sync::Mutex<Vec<&'static str>>);
    impl Segment for Updates {
        fn len(&self) -> usize {
            16
        }
        fn read(&self, _: usize, _: &mut [u8]) {}
        fn write(&self, _: usize, _: &[u8]) {}
        fn update(&self, _: usize, _: usize, _: &mut dyn FnMut(&mut [u8])) {
            self.0.lock().unwrap().push("update");
        }
        fn update_locked(&self, _: usize, _: usize, _: &mut dyn FnMut(&mut [u8])) {
            self.0.lock().unwrap().push("update_locked");
        }
        fn descriptor(&self) -> Vec<u8> {
            Vec::new()
        }
        fn into_user_memory(self: Arc<Self>) -> Option<Box<dyn UserMemory>> {
            None
        }
    }

    // A hybrid world's window is a WindowSegment over the node's shared-memory segment:
    // a pair or long double update arriving by message must reach that segment's
    // locked update (the lock the node's ranks take), not its plain one. (Without the
    // forwarding, hybrid MINLOC swaps lost a pair now and then under load.)
    #[test]
    fn locked_updates_reach_the_segment_underneath() {
        let inner = Arc::new(Updates(Default::default()));
        let node: Arc<dyn Segment> = inner.clone();
        let window = WindowSegment::new(node, Some(Key(1)));
        Segment::update_locked(&window, 0, 16, &mut |_| {});
        Segment::update(&window, 0, 8, &mut |_| {});
        assert_eq!(*inner.0.lock().unwrap(), ["update_locked", "update"]);
    }

    #[test]
    fn descriptors_split_without_trusting_the_length() {
        let mut d = 3u32.to_le_bytes().to_vec();
        d.extend_from_slice(b"abcxyz");
        assert_eq!(split_descriptor(&d), Some((&b"abc"[..], &b"xyz"[..])));
        let mut bad = 100u32.to_le_bytes().to_vec();
        bad.extend_from_slice(b"abc");
        assert_eq!(split_descriptor(&bad), None);
        assert_eq!(split_descriptor(&[1, 2]), None);
        assert_eq!(split_descriptor(&u32::MAX.to_le_bytes()), None);
    }

    #[test]
    fn a_segment_over_another_carries_both_descriptors() {
        let inner: Arc<dyn Segment> = Arc::new(WindowSegment::new(
            LocalMemory::allocate(16).unwrap(),
            Some(Key(7)),
        ));
        assert_eq!(inner.descriptor(), vec![7, 1]);
        let reg = SegmentRegistration::new(Key(9), &inner, 0);
        assert_eq!(reg.descriptor(), &[9, 0]);
        let outer = WindowSegment::new(inner.clone(), Some(reg));
        let d = outer.descriptor();
        assert_eq!(split_descriptor(&d), Some((&[7, 1][..], &[9, 0][..])));
        outer.write(8, &[5; 8]);
        let mut back = [0; 8];
        inner.read(8, &mut back);
        assert_eq!(back, [5; 8]);
        let bare: WindowSegment<LocalMemory, Key> =
            WindowSegment::new(LocalMemory::allocate(8).unwrap(), None);
        assert!(bare.descriptor().is_empty());
    }

    #[test]
    fn user_memory_comes_back_after_the_registration() {
        let seg = Arc::new(WindowSegment::new(
            LocalMemory::from_user(Box::new(vec![1u8, 2, 3])),
            Some(Key(1)),
        ));
        let mut b = [0; 3];
        seg.read(0, &mut b);
        assert_eq!(b, [1, 2, 3]);
        let user = seg.into_user_memory().unwrap();
        let v = user.into_any().downcast::<Vec<u8>>().unwrap();
        assert_eq!(*v, vec![1, 2, 3]);
    }
}
