//! How host work after the kernels (the split of an answer into indices and distances, the
//! first touch of output arrays, merges of parts) is cut into rayon tasks: a few large ones,
//! bounded by bytes, never one per small piece over every core. Waking 64 threads for 128 KiB
//! pieces cost a search more than the work (issue 33: S512 ran 2–4× slower at 64 rayon threads
//! than at 16 on the same GPU).

/// Answers (indices and distances) of this many bytes or more are made (their pages first
/// touched, [`zeroed`]) on other threads while the GPUs search.
pub(crate) const BESIDE_BYTES: usize = 1 << 20;

/// Bytes a task takes at least.
pub(crate) const TASK_BYTES: usize = 1 << 20;

/// Items per task for `len` items of `item_bytes` each, a multiple of `multiple` (≥ 1): at most
/// one task per `TASK_BYTES` and at most one per thread of the current rayon pool; `len` (one
/// task: no other thread is woken) when the work is under two tasks' worth.
pub(crate) fn items_per_task(len: usize, item_bytes: usize, multiple: usize) -> usize {
    tasks_of(len, item_bytes, multiple, rayon::current_num_threads())
}

/// `len` zeros, written (their pages first touched) on the rayon threads in a few large tasks.
pub(crate) fn zeroed<T: Copy + Default + Send + Sync>(len: usize) -> Vec<T> {
    use rayon::prelude::*;
    let per_task = items_per_task(len, size_of::<T>(), 1);
    let mut v = Vec::with_capacity(len);
    v.par_extend(rayon::iter::repeat_n(T::default(), len).with_min_len(per_task));
    v
}

/// `f` of every item of `items`, written on the rayon threads in a few large tasks.
pub(crate) fn mapped<T: Sync, U: Send>(items: &[T], f: impl Fn(&T) -> U + Sync + Send) -> Vec<U> {
    use rayon::prelude::*;
    let per_task = items_per_task(items.len(), size_of::<T>() + size_of::<U>(), 1);
    let mut v = Vec::with_capacity(items.len());
    v.par_extend(items.par_iter().with_min_len(per_task).map(f));
    v
}

fn tasks_of(len: usize, item_bytes: usize, multiple: usize, threads: usize) -> usize {
    let multiple = multiple.max(1);
    let tasks = (len.saturating_mul(item_bytes) / TASK_BYTES).clamp(1, threads.max(1));
    len.div_ceil(tasks).div_ceil(multiple).max(1) * multiple
}

#[cfg(test)]
mod tests {
    use super::tasks_of;

    #[test]
    fn mapped_keeps_every_item_in_order() {
        // 3 MiB of input and output: three tasks where there are threads for them.
        let items: Vec<u32> = (0..262_144u32)
            .map(|i| i.wrapping_mul(2_654_435_761))
            .collect();
        let widened = super::mapped(&items, |&i| i64::from(i) - 7);
        assert_eq!(widened.len(), items.len());
        assert!(
            widened
                .iter()
                .zip(&items)
                .all(|(&w, &i)| w == i64::from(i) - 7)
        );
        assert!(super::mapped(&[] as &[u32], |&i| i).is_empty());
    }

    #[test]
    fn tasks_are_bounded_by_bytes_and_threads() {
        // 19.7 MB of keys and their split (S2048: 1200 × 2048 × 8 bytes): 18 tasks' worth of
        // bytes, so 16 tasks at 16 threads and still 18 at 64.
        let len: usize = 1200 * 2048;
        assert_eq!(len.div_ceil(tasks_of(len, 8, 1, 16)), 16);
        assert_eq!(len.div_ceil(tasks_of(len, 8, 1, 64)), 18);
        // Under 2 MiB: one task, whatever the threads.
        assert_eq!(tasks_of(1200 * 25, 8, 1, 64), 1200 * 25);
        assert_eq!(tasks_of(1, 8, 1, 64), 1);
        assert_eq!(tasks_of(0, 8, 64, 64), 64);
        // Whole multiples (whole queries of k keys).
        let per = tasks_of(10_000 * 100, 8, 100, 64);
        assert_eq!(per % 100, 0);
        assert!(per * 8 >= super::TASK_BYTES);
    }
}
