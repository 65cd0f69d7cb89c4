//! Steps queued back to back: the rule by which a step's finalize halts the steps queued after
//! it, so that a run of Lloyd steps goes on the device without the host reading each summary.
//!
//! The host queues several steps at once, each a small step and its finalize sharing one `halt`
//! word (zero when the run is queued). A finalize whose step meets the [`HaltRule`] sets it, and
//! every kernel of the later steps returns at once on seeing it set, so the buffers are left as
//! that step left them. The rule only has to hold wherever the host's loop would stop or act
//! (it may hold more often: the host then looks at that step as it looks at every step).

/// When a finalize halts the steps queued after its own (see the module comment): after a step
/// that changed no label (with `unchanged`), left a cluster without weight (with `empty`), or
/// moved the centroids by a squared shift of at most `shift`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HaltRule {
    pub shift: f64,
    pub unchanged: bool,
    pub empty: bool,
}

impl HaltRule {
    /// A rule that never halts (a step queued on its own).
    pub const NEVER: HaltRule = HaltRule {
        shift: f64::NEG_INFINITY,
        unchanged: false,
        empty: false,
    };

    /// Whether a step with `changed` labels changed, `empty` clusters without weight and a
    /// squared shift `shift` halts the steps after it.
    #[inline(always)]
    pub fn halts(self, changed: u32, empty: u32, shift: f64) -> bool {
        (self.unchanged && changed == 0) || (self.empty && empty > 0) || shift <= self.shift
    }
}

/// Whether the steps are halted: `halt` is null (a step on its own) or holds zero while they run.
///
/// # Safety
/// `halt` is null or valid for one read.
#[inline(always)]
pub unsafe fn halted(halt: *const u32) -> bool {
    !halt.is_null() && unsafe { halt.read_volatile() } != 0
}

#[cfg(test)]
mod tests {
    use super::HaltRule;

    #[test]
    fn each_condition_halts_only_when_asked_for() {
        let rule = HaltRule {
            shift: 0.5,
            unchanged: true,
            empty: true,
        };
        assert!(rule.halts(0, 0, 9.0));
        assert!(rule.halts(3, 1, 9.0));
        assert!(rule.halts(3, 0, 0.5));
        assert!(!rule.halts(3, 0, 0.6));
        assert!(!rule.halts(3, 0, f64::NAN));
        let quiet = HaltRule {
            unchanged: false,
            empty: false,
            ..rule
        };
        assert!(!quiet.halts(0, 2, 9.0));
        for (changed, empty, shift) in [(0, 0, 0.0), (0, 5, -1.0), (7, 7, f64::NAN)] {
            assert!(!HaltRule::NEVER.halts(changed, empty, shift));
        }
    }
}
