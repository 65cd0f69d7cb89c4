//! A value computed on a rayon thread while the caller goes on with other work (a k-means fit's
//! `tol`, from a pass over every row, while the GPU is set up and seeded), or by the caller
//! itself when it needs the value before any thread has taken the computation up.
//!
//! The caller never waits for a computation that no thread runs: a caller that is itself a
//! rayon thread (a fit inside `with_threads`) may have the only thread of its pool, and the
//! task would then start only once the caller returned.

use std::panic::{self, AssertUnwindSafe};
use std::sync::{Condvar, Mutex, MutexGuard};

enum State<T, F> {
    /// Not taken up yet.
    Waiting(F),
    Running,
    Done(T),
    /// The computation panicked (on another thread: the caller panics too when it asks).
    Failed,
}

/// `f()`, computed beside the work of [`Beside::during`]; [`Beside::get`] gives it.
pub(crate) struct Beside<T, F> {
    state: Mutex<State<T, F>>,
    done: Condvar,
}

impl<T: Copy + Send, F: FnOnce() -> T + Send> Beside<T, F> {
    pub(crate) fn new(f: F) -> Self {
        Beside {
            state: Mutex::new(State::Waiting(f)),
            done: Condvar::new(),
        }
    }

    /// `work()`, with the value computed on a rayon task meanwhile; returns once both are done.
    pub(crate) fn during<R>(&self, work: impl FnOnce() -> R) -> R {
        rayon::in_place_scope(|s| {
            s.spawn(|_| self.run());
            work()
        })
    }

    /// The value: computed here if no thread has taken it up, else waited for.
    pub(crate) fn get(&self) -> T {
        loop {
            let state = self.lock();
            match &*state {
                State::Done(v) => return *v,
                State::Failed => panic!("a computation beside the caller's work panicked"),
                State::Running => drop(self.done.wait(state)),
                State::Waiting(_) => {
                    drop(state);
                    self.run();
                }
            }
        }
    }

    /// Computes the value unless another thread has taken it up.
    fn run(&self) {
        let f = {
            let mut state = self.lock();
            if !matches!(*state, State::Waiting(_)) {
                return;
            }
            match std::mem::replace(&mut *state, State::Running) {
                State::Waiting(f) => f,
                _ => unreachable!("checked above"),
            }
        };
        let outcome = panic::catch_unwind(AssertUnwindSafe(f));
        *self.lock() = match &outcome {
            Ok(v) => State::Done(*v),
            Err(_) => State::Failed,
        };
        self.done.notify_all();
        if let Err(payload) = outcome {
            panic::resume_unwind(payload);
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<T, F>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

    #[test]
    fn the_value_is_computed_once_beside_the_work_or_by_the_caller() {
        let calls = AtomicUsize::new(0);
        let value = Beside::new(|| {
            calls.fetch_add(1, Relaxed);
            (0..1000u64).sum::<u64>()
        });
        let got = value.during(|| value.get());
        assert_eq!((got, value.get()), (499_500, 499_500));
        assert_eq!(calls.load(Relaxed), 1);
    }

    #[test]
    fn a_caller_on_the_only_thread_of_its_pool_computes_it_itself() {
        // The task cannot start while the pool's one thread runs the work and asks for the value.
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let value = Beside::new(|| 7);
        assert_eq!(pool.install(|| value.during(|| value.get() * 6)), 42);
    }

    #[test]
    fn a_panic_beside_is_the_callers() {
        let value: Beside<u32, _> = Beside::new(|| panic!("no value"));
        let outcome = panic::catch_unwind(AssertUnwindSafe(|| value.during(|| value.get())));
        assert!(outcome.is_err());
    }
}
