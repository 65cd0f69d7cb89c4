//! Lloyd steps queued back to back on the small path, so that a run of them costs the host one
//! wait instead of one per step: each step's finalize writes its summary to a slot of its own
//! and, when the step meets the run's halt rule, sets the halt word that makes every later
//! kernel of the run return at once (`kernels_gpu::small::halt`). The labels, centroids and
//! iteration count are those of steps taken one at a time, as the kernels are the same.

use super::CudaLloyd;
use crate::backend::{Lloyd, StepRun, StepStats};
use crate::error::{Error, Result};
use kernels_gpu::small::{MODE_ACCUMULATE, MODE_ASSIGN};

/// Most steps queued at once (summary slots).
pub(super) const MAX_STEPS: usize = 64;
/// Steps queued by a fit's first run; each run that ends without halting doubles it, one that
/// halts starts again from here (few steps are wasted after a halt: each later kernel returns at
/// once, but is launched).
pub(super) const FIRST_STEPS: usize = 8;

impl CudaLloyd<'_> {
    /// [`crate::backend::Lloyd::steps`] on the small path with the rows on the device: queues
    /// up to `run.max` steps, alternating the centroid buffers as commits would, then reads
    /// every summary at once.
    pub(super) fn queue_steps(&mut self, kernel: usize, run: &StepRun) -> Result<Vec<StepStats>> {
        let queued = run.max.min(self.queued_steps).clamp(1, MAX_STEPS);
        // A slot still NaN after the wait belongs to a step that the halt skipped.
        self.summary.fill(4 * queued, f64::NAN)?;
        self.gpu.clear(self.halt.dev_mut()?, "the halt word")?;
        for step in 0..queued {
            self.queue_small(kernel, MODE_ASSIGN | MODE_ACCUMULATE, true)?;
            debug_assert!(!self.changes_on_host, "the labels stay on the device");
            self.queue_finalize_small(step, Some(run.halt(step)))?;
            if step + 1 < queued {
                self.commit();
            }
        }
        let slots = self.gpu.read_mapped(&self.summary, "the step summaries")?;
        let ran = (slots.chunks_exact(4).take(queued))
            .take_while(|s| !s[0].is_nan())
            .count();
        if ran == 0 {
            return Err(Error::Cuda {
                context: "running queued k-means steps".into(),
                message: "the first step wrote no summary".into(),
            });
        }
        // The commits made for the steps that did not run are undone (each swaps).
        if (queued - ran) % 2 == 1 {
            self.commit();
        }
        self.queued_steps = match ran == queued {
            true => (2 * queued).min(MAX_STEPS),
            false => FIRST_STEPS,
        };
        Ok((slots.chunks_exact(4).take(ran))
            .map(|s| self.summary_of(s).step_stats())
            .collect())
    }
}
