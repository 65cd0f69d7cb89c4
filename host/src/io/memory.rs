//! Refusing inputs that cannot fit in memory, before allocating for them: a clear error naming
//! the sizes instead of the kernel's out-of-memory kill.

pub use crate::error::bytes;

use super::{IoError, Result};
use std::path::Path;

/// Bytes of memory the kernel reports as available (`MemAvailable` in `/proc/meminfo`), or
/// `None` where that is unknown (not Linux).
pub fn available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Fails when `needed` bytes for `what` (e.g. "its values as 32-bit floats") exceed
/// `available` bytes; an unknown amount of memory passes.
pub fn check(path: &Path, what: &str, needed: u64, available: Option<u64>) -> Result<()> {
    match available {
        Some(free) if needed > free => Err(IoError::input(
            path,
            format!(
                "{what} need {} but only {} of memory is available",
                bytes(needed),
                bytes(free)
            ),
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_for_people() {
        assert_eq!(bytes(812), "812 bytes");
        assert_eq!(bytes(3 << 20), "3.0 MiB");
        assert_eq!(bytes(1 << 40), "1.0 TiB");
    }

    #[test]
    fn too_much_is_refused_with_both_sizes() {
        let p = Path::new("big.npy");
        let e = check(p, "its values", 2 << 30, Some(1 << 30)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "big.npy: its values need 2.0 GiB but only 1.0 GiB of memory is available"
        );
        assert!(check(p, "its values", 1 << 30, Some(1 << 30)).is_ok());
        assert!(check(p, "its values", u64::MAX, None).is_ok());
    }

    #[test]
    fn this_machine_reports_its_memory() {
        if cfg!(target_os = "linux") {
            assert!(available().is_some_and(|b| b > 0));
        }
    }
}
