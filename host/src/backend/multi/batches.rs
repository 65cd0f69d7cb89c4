//! Past a device's memory budget: the rows a device fits cut into batches that take turns on it
//! ([`plan`], [`turns`]). Each batch (a shard of a k-means fit, as a [`Turn`]) has its rows,
//! per-row state (labels, distances, norms, seeding state) and fit buffers (centroids, sums) on
//! the device for its turn only: after it the batch writes back to host memory what later
//! requests read and frees the rest
//! ([`Residency::release_rows`](crate::backend::Residency::release_rows)). So the device holds
//! one batch's state and two batches' rows (the next one's go up while one computes), and the
//! least budget depends on the row width and k, not on the number of rows. Any split gives the
//! same fit bit for bit (exact integer sums, see `kmeans::shard`), so a streamed fit equals the
//! resident one and the CPU's.

use crate::backend::{Footprint, traffic};
use crate::error::{Error, Result, bytes};
use std::ops::Range;
use std::thread;
use std::time::Instant;

/// Most batches a device's rows are cut into.
const MAX_BATCHES: usize = 1 << 16;

/// The batches of `rows` rows of `d` columns on a device with `budget` bytes, given the
/// footprint of a fit over any number of rows: one batch when they fit resident, else the fewest
/// for which one batch's state and the rows of two fit (the next batch's rows go up while one
/// computes); an error naming the least budget that would, or that even the fit's own buffers
/// (centroids and sums) do not fit. Every batch but the last has the same size and the last is
/// no larger, so each upload fits in the memory a batch before released (the stream-ordered pool
/// keeps it).
pub(crate) fn plan(
    rows: usize,
    d: usize,
    footprint: &dyn Fn(usize) -> Footprint,
    budget: usize,
) -> Result<Vec<Range<usize>>> {
    let need = |batches: usize| need(rows, batches, footprint);
    if need(1) <= budget {
        return Ok(std::iter::once(0..rows).collect());
    }
    let counts = 2..=rows.min(MAX_BATCHES);
    let Some(count) = counts.clone().find(|&b| need(b) <= budget) else {
        let one = footprint(1);
        let least = one.per_fit + one.per_row + 2 * one.rows;
        let why = if least > budget {
            format!(
                "the centroids and cluster sums alone (with a row or two) need {}",
                bytes(least as u64)
            )
        } else {
            format!(
                "one batch's rows and state, the next batch's rows and the centroids and sums \
                 need at least {}",
                bytes(counts.map(need).min().unwrap_or(need(1)) as u64)
            )
        };
        return Err(Error::invalid(
            "memory budget",
            format!(
                "{} of GPU memory cannot hold a k-means fit of {rows} rows of {d} columns, even \
                 with the rows streamed in batches: {why}; give that much (--gpu-memory, \
                 memory_budget) or fit on the CPU",
                bytes(budget as u64),
            ),
        ));
    };
    let size = rows.div_ceil(count);
    Ok((0..rows)
        .step_by(size)
        .map(|start| start..(start + size).min(rows))
        .collect())
}

/// Device bytes of a fit of `rows` rows in `batches` batches: one batch's rows and state, the
/// next batch's rows (none when resident) and the fit's own buffers.
pub(crate) fn need(rows: usize, batches: usize, footprint: &dyn Fn(usize) -> Footprint) -> usize {
    let f = footprint(rows.div_ceil(batches));
    let rows_on_device = f.rows.saturating_mul(batches.min(2));
    (f.per_row + f.per_fit).saturating_add(rows_on_device)
}

/// The least budget under which [`plan`] takes at most `batches` batches of `rows` rows (1:
/// resident), or with `None` the least under which it takes any (below it the fit is refused).
pub(crate) fn least_budget(
    rows: usize,
    batches: Option<usize>,
    footprint: &dyn Fn(usize) -> Footprint,
) -> usize {
    let most = batches
        .unwrap_or(usize::MAX)
        .clamp(1, rows.clamp(1, MAX_BATCHES));
    (1..=most)
        .map(|b| need(rows, b, footprint))
        .min()
        .expect("at least one count")
}

/// A batch that takes turns on a device, answering its caller's requests (a shard of a k-means
/// fit): its rows go up for a turn and come down after.
pub(crate) trait Turn: Send {
    type Request: Sync;
    type Reply: Send;
    /// Whether answering `request` reads the rows.
    fn reads_rows(request: &Self::Request) -> bool;
    /// The batch's reply to `request`.
    fn answer(&mut self, request: &Self::Request) -> Result<Self::Reply>;
    /// Starts uploading the rows beside the device's other work
    /// ([`Residency::prefetch_rows`](crate::backend::Residency::prefetch_rows)).
    fn prefetch_rows(&mut self) -> Result<()>;
    /// Frees the device's copy of the rows and state until a request needs them
    /// ([`Residency::release_rows`](crate::backend::Residency::release_rows)).
    fn release_rows(&mut self) -> Result<()>;
}

/// The replies of `group`'s batches (`start..` in the whole order) in turn. In a group of
/// several (a streamed device), for requests that read the rows, the next batch's rows go up on
/// the copy stream while this one computes, and each batch releases its rows and state after its
/// turn, while the next one's still go up: one batch's state and two batches' rows are on the
/// device at a time ([`plan`] leaves room for them). The last batch's turn also fetches the first
/// batch's rows, for the next request: a fit's next step reads them (a request that does not
/// read them releases them in its turn).
pub(crate) fn turns<'r, B: Turn>(
    group: &mut [B],
    start: usize,
    request_for: &(dyn Fn(usize) -> &'r B::Request + Sync),
) -> Result<Vec<B::Reply>>
where
    B::Request: 'r,
{
    let streamed = group.len() > 1;
    let mut replies = Vec::with_capacity(group.len());
    for j in 0..group.len() {
        let request = request_for(start + j);
        let reads = streamed && B::reads_rows(request);
        let (before, this_and_after) = group.split_at_mut(j);
        let (this, after) = this_and_after.split_at_mut(1);
        let batch = &mut this[0];
        let next = match after.first_mut() {
            Some(next) => {
                Some(next).filter(|_| streamed && B::reads_rows(request_for(start + j + 1)))
            }
            None => before.first_mut().filter(|_| reads),
        };
        if reads {
            batch.prefetch_rows()?;
        }
        let (reply, released, fetched) = thread::scope(|scope| {
            let fetching = next.map(|next| scope.spawn(move || next.prefetch_rows()));
            let start = Instant::now();
            let reply = batch.answer(request);
            let answered = Instant::now();
            // Released (its state read back) while the next batch still goes up: the two
            // directions of the bus at once.
            let released = match streamed {
                true => batch.release_rows(),
                false => Ok(()),
            };
            let release_done = Instant::now();
            let fetched = fetching.map_or(Ok(()), |f| {
                f.join()
                    .unwrap_or_else(|_| Err(Error::Shard("an upload's thread panicked".into())))
            });
            if streamed {
                let waited = release_done.elapsed();
                traffic::turn(answered - start, release_done - answered, waited);
            }
            (reply, released, fetched)
        });
        replies.push(reply?);
        released?;
        fetched?;
    }
    Ok(replies)
}

// A part of one batch is a list of one range of rows.
#[allow(clippy::single_range_in_vec_init)]
#[cfg(test)]
mod tests {
    use super::*;

    /// 128 columns; 28 bytes of state per row and 1 MiB per fit.
    fn footprint(n: usize) -> Footprint {
        Footprint {
            rows: n * 512,
            per_row: n * 28,
            per_fit: 1 << 20,
        }
    }

    fn need(rows: usize, batches: usize) -> usize {
        let f = footprint(rows.div_ceil(batches));
        f.per_row + f.per_fit + batches.min(2) * f.rows
    }

    #[test]
    fn resident_when_the_rows_fit() {
        let whole = 1000 * (512 + 28) + (1 << 20);
        assert_eq!(plan(1000, 128, &footprint, whole).unwrap(), [0..1000]);
    }

    #[test]
    fn the_fewest_batches_that_fit_cover_every_row_once() {
        let rows = 1_000_000;
        let budget = 200 << 20;
        let batches = plan(rows, 128, &footprint, budget).unwrap();
        let count = batches.len();
        assert!(count >= 2);
        // Contiguous and in order; all but the last of one size, the last no larger.
        assert_eq!(batches[0].start, 0);
        assert_eq!(batches[count - 1].end, rows);
        assert!(batches.windows(2).all(|w| w[0].end == w[1].start));
        let size = batches[0].len();
        assert!(batches[..count - 1].iter().all(|b| b.len() == size));
        assert!((1..=size).contains(&batches[count - 1].len()));
        // It fits, and one batch fewer would not.
        assert!(need(rows, count) <= budget && need(rows, count - 1) > budget);
    }

    /// Batches of the ceiling size never leave an empty one at the end (9 rows in 4 batches of
    /// 3 would).
    #[test]
    fn no_batch_is_empty() {
        let small = |n: usize| Footprint {
            rows: n * 512,
            per_row: n * 4,
            per_fit: 64,
        };
        let mut streamed = 0;
        for rows in 1..200 {
            for budget in [1500, 3000, 6000] {
                if let Ok(batches) = plan(rows, 128, &small, budget) {
                    assert!(batches.iter().all(|b| !b.is_empty()), "{rows}: {batches:?}");
                    assert_eq!(batches.last().unwrap().end, rows);
                    streamed += usize::from(batches.len() > 1);
                }
            }
        }
        assert!(streamed > 100, "{streamed}");
    }

    /// The least budget is one batch of a row's state and two rows beside the fit's own
    /// buffers, whatever the number of rows: per-row state streams with the rows.
    #[test]
    fn the_least_budget_does_not_grow_with_the_rows() {
        let least = footprint(1).per_fit + 2 * 512 + 28;
        for rows in [10, 1000, 65_536] {
            let batches = plan(rows, 128, &footprint, least).unwrap();
            assert_eq!(batches.len(), rows, "{rows}");
        }
        // A budget of a few rows a batch.
        let few = plan(1000, 128, &footprint, least + 6 * (512 + 28)).unwrap();
        assert!((2..=4).contains(&few[0].len()), "{:?}", few[0]);
        assert_eq!(few.last().unwrap().end, 1000);
    }

    /// The least budget for at most b batches plans at most b, and a byte less plans more (or
    /// is refused below the least of all).
    #[test]
    fn least_budgets_plan_their_batch_counts() {
        let rows = 100_000;
        for most in [Some(1), Some(2), Some(3), Some(16), None] {
            let least = least_budget(rows, most, &footprint);
            let count = plan(rows, 128, &footprint, least).unwrap().len();
            assert!(most.is_none_or(|m| count <= m), "{most:?}: {count}");
            match plan(rows, 128, &footprint, least - 1) {
                Ok(fewer) => assert!(most.is_some_and(|m| fewer.len() > m), "{most:?}"),
                Err(_) => assert!(most.is_none() || least == least_budget(rows, None, &footprint)),
            }
        }
    }

    #[test]
    fn a_budget_below_the_least_names_it() {
        // Below what the fewest batches need: the least that would do is named.
        let rows = 1_000_000;
        let least = (2..=MAX_BATCHES).map(|b| need(rows, b)).min().unwrap();
        let text = plan(rows * 100, 128, &footprint, least - 1)
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(
            text.contains("even with the rows streamed in batches"),
            "{text}"
        );
        assert!(text.contains("need at least"), "{text}");
        // Below the centroids and sums: they are named.
        let text = plan(rows, 128, &footprint, 1 << 19)
            .unwrap_err()
            .to_string();
        assert!(
            text.contains("the centroids and cluster sums alone"),
            "{text}"
        );
        assert!(text.contains(&bytes((need(2, 2)) as u64)), "{text}");
        assert!(plan(1, 1, &footprint, 10).is_err());
    }
}
