//! Staging buffers that a GPU's callers borrow one at a time.
//!
//! A caller fills or empties its buffer on the rayon threads. Were the buffer kept behind a lock
//! for that long, a rayon thread waiting on its part could take up another call on the same GPU
//! (another search from the same pool) that waits for the lock the first call holds: a
//! deadlock. So a call takes a buffer off the shelf, works on it without any lock, and puts it
//! back; a call that finds the shelf empty makes another. The shelf holds as many buffers as
//! calls ever overlapped on the GPU.

use crate::error::Result;
use std::ops::{Deref, DerefMut};
use std::sync::Mutex;

/// Buffers not lent out at the moment.
pub(super) struct Shelf<T>(Mutex<Vec<T>>);

impl<T> Default for Shelf<T> {
    fn default() -> Self {
        Shelf(Mutex::new(Vec::new()))
    }
}

impl<T> Shelf<T> {
    /// A buffer off the shelf, made fit for use by `ready` (given the buffer, or None when the
    /// shelf is empty: it returns one to use, e.g. grown or new); back on the shelf when the
    /// loan is dropped. An error from `ready` leaves the shelf without the buffer it was given.
    pub(super) fn lend(&self, ready: impl FnOnce(Option<T>) -> Result<T>) -> Result<Lent<'_, T>> {
        let taken = self.0.lock().unwrap_or_else(|e| e.into_inner()).pop();
        Ok(Lent {
            shelf: self,
            item: Some(ready(taken)?),
        })
    }
}

/// A buffer borrowed from a [`Shelf`].
pub(super) struct Lent<'a, T> {
    shelf: &'a Shelf<T>,
    /// Some until dropped.
    item: Option<T>,
}

impl<T> Deref for Lent<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.item.as_ref().expect("lent until dropped")
    }
}

impl<T> DerefMut for Lent<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        self.item.as_mut().expect("lent until dropped")
    }
}

impl<T> Drop for Lent<'_, T> {
    fn drop(&mut self) {
        if let Some(item) = self.item.take() {
            let mut shelf = self.shelf.0.lock().unwrap_or_else(|e| e.into_inner());
            shelf.push(item);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

    #[test]
    fn overlapping_loans_get_their_own_buffers_and_all_come_back() {
        let shelf = Shelf::default();
        let made = AtomicUsize::new(0);
        let ready = |old: Option<usize>| Ok(old.unwrap_or_else(|| made.fetch_add(1, Relaxed)));
        {
            let a = shelf.lend(ready).unwrap();
            let b = shelf.lend(ready).unwrap();
            assert_ne!(*a, *b);
        }
        // Both back: two more loans at once reuse them, and nothing new is made.
        let (a, b) = (shelf.lend(ready).unwrap(), shelf.lend(ready).unwrap());
        assert_eq!([(*a).min(*b), (*a).max(*b)], [0, 1]);
        assert_eq!(made.load(Relaxed), 2);
        drop((a, b));
        // A failed readying loses the buffer it was given; the shelf still lends.
        let failed = shelf.lend(|_| Err(crate::Error::Shard("no".into())));
        assert!(failed.is_err());
        assert!(*shelf.lend(ready).unwrap() < 2);
        assert_eq!(made.load(Relaxed), 2);
    }

    #[test]
    fn a_lending_call_inside_a_loan_on_the_same_thread_does_not_block() {
        let shelf = Shelf::default();
        let outer = shelf.lend(|old| Ok(old.unwrap_or(1))).unwrap();
        let inner = shelf.lend(|old| Ok(old.unwrap_or(2))).unwrap();
        assert_eq!((*outer, *inner), (1, 2));
    }
}
