//! Fault injection for tests (cargo feature `fault-injection`, off in every release build): makes
//! the nth device allocation or kernel launch from now fail, libcuda look absent, or the driver
//! reject the cubin, so that tests can check that each fault becomes a typed error (or the PTX
//! fallback) and leaves the GPU usable.
//!
//! Set from code with [`inject`], or for a whole process with `KMEANS_KNN_FAULTS`, a
//! comma-separated list of `no-libcuda`, `wrong-cubin`, `alloc:N` and `launch:N` (N counts
//! from 1).
//! Without the feature every check is a constant `false`.

#[cfg(feature = "fault-injection")]
mod armed {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    /// Which fault to make.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Fault {
        /// The nth device or mapped-host allocation from now fails as out of memory.
        Alloc(u64),
        /// The nth kernel launch from now fails.
        Launch(u64),
        /// libcuda looks absent to backends made from now on.
        NoLibcuda,
        /// Backends made from now on hand the driver the cubin of another architecture, which it
        /// rejects (as it would a cubin it cannot run), so they load the PTX.
        WrongCubin,
    }

    static ALLOC_IN: AtomicU64 = AtomicU64::new(0);
    static LAUNCH_IN: AtomicU64 = AtomicU64::new(0);
    static NO_LIBCUDA: AtomicBool = AtomicBool::new(false);
    static WRONG_CUBIN: AtomicBool = AtomicBool::new(false);
    static FROM_ENV: Mutex<bool> = Mutex::new(false);

    /// Arms `fault` (replacing any armed fault of the same kind).
    pub fn inject(fault: Fault) {
        read_env();
        match fault {
            Fault::Alloc(n) => ALLOC_IN.store(n, Ordering::SeqCst),
            Fault::Launch(n) => LAUNCH_IN.store(n, Ordering::SeqCst),
            Fault::NoLibcuda => NO_LIBCUDA.store(true, Ordering::SeqCst),
            Fault::WrongCubin => WRONG_CUBIN.store(true, Ordering::SeqCst),
        }
    }

    /// Disarms every fault.
    pub fn clear() {
        read_env();
        ALLOC_IN.store(0, Ordering::SeqCst);
        LAUNCH_IN.store(0, Ordering::SeqCst);
        NO_LIBCUDA.store(false, Ordering::SeqCst);
        WRONG_CUBIN.store(false, Ordering::SeqCst);
    }

    /// Arms the faults of `KMEANS_KNN_FAULTS`, once per process.
    fn read_env() {
        let mut done = FROM_ENV.lock().unwrap_or_else(|e| e.into_inner());
        if *done {
            return;
        }
        *done = true;
        let spec = std::env::var("KMEANS_KNN_FAULTS").unwrap_or_default();
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let count = |n: &str| n.parse::<u64>().ok().filter(|&n| n > 0);
            let fault = match item.split_once(':') {
                None if item == "no-libcuda" => Some(Fault::NoLibcuda),
                None if item == "wrong-cubin" => Some(Fault::WrongCubin),
                Some(("alloc", n)) => count(n).map(Fault::Alloc),
                Some(("launch", n)) => count(n).map(Fault::Launch),
                _ => None,
            };
            match fault {
                Some(Fault::Alloc(n)) => ALLOC_IN.store(n, Ordering::SeqCst),
                Some(Fault::Launch(n)) => LAUNCH_IN.store(n, Ordering::SeqCst),
                Some(Fault::NoLibcuda) => NO_LIBCUDA.store(true, Ordering::SeqCst),
                Some(Fault::WrongCubin) => WRONG_CUBIN.store(true, Ordering::SeqCst),
                None => panic!(
                    "KMEANS_KNN_FAULTS: '{item}' is not no-libcuda, wrong-cubin, alloc:N or launch:N"
                ),
            }
        }
    }

    /// Counts one event down; true when it is the armed one.
    fn fires(counter: &AtomicU64) -> bool {
        read_env();
        counter
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok_and(|before| before == 1)
    }

    pub(crate) fn alloc_fails() -> bool {
        fires(&ALLOC_IN)
    }

    pub(crate) fn launch_fails() -> bool {
        fires(&LAUNCH_IN)
    }

    pub(crate) fn libcuda_hidden() -> bool {
        read_env();
        NO_LIBCUDA.load(Ordering::SeqCst)
    }

    pub(crate) fn wrong_cubin() -> bool {
        read_env();
        WRONG_CUBIN.load(Ordering::SeqCst)
    }
}

#[cfg(feature = "fault-injection")]
pub use armed::{Fault, clear, inject};
#[cfg(feature = "fault-injection")]
pub(crate) use armed::{alloc_fails, launch_fails, libcuda_hidden, wrong_cubin};

#[cfg(not(feature = "fault-injection"))]
pub(crate) const fn alloc_fails() -> bool {
    false
}

#[cfg(not(feature = "fault-injection"))]
pub(crate) const fn launch_fails() -> bool {
    false
}

#[cfg(not(feature = "fault-injection"))]
pub(crate) const fn libcuda_hidden() -> bool {
    false
}

#[cfg(not(feature = "fault-injection"))]
pub(crate) const fn wrong_cubin() -> bool {
    false
}
