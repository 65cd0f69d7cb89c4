//! Threads that drive the GPUs of a set of kNN copies, kept from search to search: a new thread
//! took 0.1–0.2 ms to start on the GPU machines, where a search of four GPUs' copies takes
//! 16.5 ms. Unlike rayon's threads they never take up other work while a copy waits, so a copy
//! that holds its GPU's staging buffer while its split waits on rayon is never asked to run
//! another copy of the same GPU (rayon's threads were, and waited for that buffer themselves).

use super::gpu_set::panicked;
use crate::error::{Error, Result};
use std::panic::{self, AssertUnwindSafe};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;

/// A group's work, sent to its driver with its borrows' lifetime erased (see [`Drivers::on_each`]).
type Job = Box<dyn FnOnce() + Send + 'static>;

/// The threads of groups `1..`: group 0 runs on the calling thread, which has nothing else to do
/// meanwhile.
pub(crate) struct Drivers {
    queues: Vec<Sender<Job>>,
}

impl Drivers {
    /// Drivers for up to `groups` groups at once; a driver that cannot start leaves its groups
    /// to the calling thread, in turn.
    pub(crate) fn new(groups: usize) -> Drivers {
        let queues = (1..groups.max(1))
            .map(|i| {
                let (queue, jobs) = channel::<Job>();
                // A thread that cannot start drops its receiver, and the sender then hands each
                // job back to the caller.
                let _ = thread::Builder::new()
                    .name(format!("kmeans-knn copy {i}"))
                    .spawn(move || jobs.into_iter().for_each(|job| job()));
                queue
            })
            .collect();
        Drivers { queues }
    }

    /// `work(i, group)` for every group at once (at most one more than the drivers): the first
    /// on the calling thread, group `i` on driver `i`; the results in order, a group's panic as
    /// its error.
    pub(crate) fn on_each<G: Send, T: Send>(
        &self,
        groups: &mut [G],
        work: impl Fn(usize, &mut G) -> Result<T> + Sync,
    ) -> Result<Vec<T>> {
        let Some((first, rest)) = groups.split_first_mut() else {
            return Ok(Vec::new());
        };
        if rest.len() > self.queues.len() {
            return Err(Error::Shard(format!(
                "{} groups for {} drivers",
                groups.len(),
                self.queues.len() + 1
            )));
        }
        let mut done: Vec<Option<thread::Result<Result<T>>>> = rest.iter().map(|_| None).collect();
        let latch = Arc::new(Latch::new(rest.len()));
        let work = &work;
        for (((i, group), slot), queue) in
            rest.iter_mut().enumerate().zip(&mut done).zip(&self.queues)
        {
            let latch = Arc::clone(&latch);
            let job: Box<dyn FnOnce() + Send + '_> = Box::new(move || {
                *slot = Some(panic::catch_unwind(AssertUnwindSafe(|| work(i + 1, group))));
                latch.count_down();
            });
            // SAFETY: the job borrows `work`, its group and its slot, which outlive it: this
            // function returns only after `latch.wait()`, which returns once every job has
            // counted down, its last use of them (a job that the driver cannot take is run here
            // at once), and nothing between here and that wait unwinds (group 0's panic is
            // caught). The latch itself is shared, so a job may still hold it after the wait.
            let job: Job = unsafe { std::mem::transmute(job) };
            if let Err(returned) = queue.send(job) {
                (returned.0)();
            }
        }
        let mine = panic::catch_unwind(AssertUnwindSafe(|| work(0, first)));
        latch.wait();
        (std::iter::once(Some(mine)).chain(done).enumerate())
            .map(|(device, done)| match done {
                Some(Ok(result)) => result,
                _ => Err(panicked(device)),
            })
            .collect()
    }
}

/// A count of jobs still running, and the wait for it to reach zero.
struct Latch {
    left: Mutex<usize>,
    zero: Condvar,
}

impl Latch {
    fn new(count: usize) -> Latch {
        Latch {
            left: Mutex::new(count),
            zero: Condvar::new(),
        }
    }

    fn count_down(&self) {
        let mut left = self.left.lock().unwrap_or_else(|e| e.into_inner());
        *left -= 1;
        if *left == 0 {
            self.zero.notify_all();
        }
    }

    fn wait(&self) {
        let mut left = self.left.lock().unwrap_or_else(|e| e.into_inner());
        while *left > 0 {
            left = self.zero.wait(left).unwrap_or_else(|e| e.into_inner());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every group's work runs at once, each after the first on its own driver, the same driver
    /// from call to call; results come back in order, and a group whose work panics (the first,
    /// on the calling thread, or another) is that group's error, not the caller's panic.
    #[test]
    fn each_group_runs_on_its_driver_and_a_panic_is_an_error() {
        let drivers = Drivers::new(4);
        let caller = thread::current().id();
        let mut seen = Vec::new();
        for _ in 0..3 {
            // Each group waits for all four: a group left waiting for another's thread would
            // never get past the barrier.
            let barrier = std::sync::Barrier::new(4);
            let mut groups: Vec<usize> = (10..14).collect();
            let found = drivers.on_each(&mut groups, |i, g| {
                barrier.wait();
                *g *= 2;
                Ok((i, *g, thread::current().id()))
            });
            let found = found.unwrap();
            let values: Vec<_> = found.iter().map(|&(i, g, _)| (i, g)).collect();
            assert_eq!(values, vec![(0, 20), (1, 22), (2, 24), (3, 26)]);
            let threads: Vec<_> = found.iter().map(|f| f.2).collect();
            assert_eq!(threads[0], caller);
            seen.push(threads);
        }
        assert!(seen.windows(2).all(|w| w[0] == w[1]), "{seen:?}");
        let mut distinct = seen[0].clone();
        distinct.dedup();
        assert_eq!(distinct.len(), 4, "{seen:?}");
        assert!(
            (drivers.on_each(&mut [] as &mut [usize], |_, _| Ok(())))
                .unwrap()
                .is_empty()
        );
        assert!(drivers.on_each(&mut [0; 5], |_, _| Ok(())).is_err());
        for bad in [0, 2] {
            let failed = drivers.on_each(&mut [0; 4], |i, _| {
                assert_ne!(i, bad, "group {i} fails");
                Ok(i)
            });
            let Err(Error::Shard(message)) = failed else {
                panic!("group {bad}'s panic became {failed:?}")
            };
            assert!(message.contains(&format!("device {bad}")), "{message}");
        }
        // The drivers outlive their panics.
        assert_eq!(
            drivers.on_each(&mut [0; 4], |i, _| Ok(i)).unwrap(),
            [0, 1, 2, 3]
        );
    }
}
