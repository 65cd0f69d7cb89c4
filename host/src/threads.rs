//! How many CPU threads the library's work runs on: rayon's global pool (every core, or
//! `RAYON_NUM_THREADS`) unless the caller says otherwise, for the whole process
//! ([`set_global_threads`], the CLI's `--threads`) or for one call ([`with_threads`], which the
//! Python layer uses for scikit-learn's `n_jobs`). Results are the same bits at every thread
//! count: work is cut into pieces that do not depend on it.

use crate::error::{Error, Result};
use rayon::{ThreadPool, ThreadPoolBuilder};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// Most threads a caller may ask for (far above any machine's cores; a typo's guard).
pub const MAX_THREADS: usize = 4096;

/// Checks a thread count: 0 (every core) up to [`MAX_THREADS`].
fn check(threads: usize) -> Result<()> {
    if threads > MAX_THREADS {
        return Err(Error::invalid(
            "threads",
            format!("{threads} threads; at most {MAX_THREADS} (0 = every core)"),
        ));
    }
    Ok(())
}

/// Sizes rayon's global pool to `threads` (0: every core, or `RAYON_NUM_THREADS`), before any
/// work has made it; an error once the pool exists with another size.
pub fn set_global_threads(threads: usize) -> Result<()> {
    check(threads)?;
    let built = ThreadPoolBuilder::new().num_threads(threads).build_global();
    match built {
        Ok(()) => Ok(()),
        Err(_) if threads != 0 && rayon::current_num_threads() == threads => Ok(()),
        Err(e) => Err(Error::invalid(
            "threads",
            format!("the thread pool already exists ({e})"),
        )),
    }
}

/// Runs `work` with the library's CPU work on `threads` threads (0: rayon's global pool, every
/// core or `RAYON_NUM_THREADS`). The pool of each count is made once and kept for the process.
/// `work` runs on a thread of that pool.
pub fn with_threads<T: Send>(threads: usize, work: impl FnOnce() -> T + Send) -> Result<T> {
    check(threads)?;
    if threads == 0 {
        return Ok(work());
    }
    static POOLS: OnceLock<Mutex<HashMap<usize, Arc<ThreadPool>>>> = OnceLock::new();
    let pool = {
        let mut pools = POOLS.get_or_init(Default::default).lock().unwrap();
        match pools.get(&threads) {
            Some(pool) => pool.clone(),
            None => {
                let pool = ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .thread_name(|i| format!("kmeans-knn-{i}"))
                    .build()
                    .map_err(|e| Error::invalid("threads", format!("no thread pool: {e}")))?;
                let pool = Arc::new(pool);
                pools.insert(threads, pool.clone());
                pool
            }
        }
    };
    Ok(pool.install(work))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_runs_on_the_threads_asked_for() {
        for n in [1, 2, 3] {
            assert_eq!(with_threads(n, rayon::current_num_threads).unwrap(), n);
        }
        assert!(with_threads(MAX_THREADS + 1, || ()).is_err());
    }
}
