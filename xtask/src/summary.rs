//! One closing line for `cargo xtask test`: what passed, what was skipped and why, what failed,
//! over every Rust test binary and the Python suite.
//!
//! The runners' output is echoed as it comes and kept; the counts are read from it afterwards:
//! cargo's `test result:` lines, the `SKIPPED (why): test` lines that GPU and NCCL tests write
//! when the machine lacks what they need (cargo counts those tests as passed), and pytest's
//! closing line.

use anyhow::{Context, Result};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};

/// Runs `cmd`, echoing its stdout and stderr line by line, and returns its status and lines.
pub fn run_teed(cmd: &mut Command) -> Result<(ExitStatus, Vec<String>)> {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("running {:?}", cmd.get_program()))?;
    let lines = Arc::new(Mutex::new(Vec::new()));
    let echo = |from: Box<dyn Read + Send>, to_stderr: bool| {
        let lines = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(from).lines().map_while(Result::ok) {
                if to_stderr {
                    let _ = writeln!(std::io::stderr(), "{line}");
                } else {
                    let _ = writeln!(std::io::stdout(), "{line}");
                }
                lines.lock().unwrap_or_else(|e| e.into_inner()).push(line);
            }
        })
    };
    let out = echo(Box::new(child.stdout.take().expect("piped")), false);
    let err = echo(Box::new(child.stderr.take().expect("piped")), true);
    let status = child.wait()?;
    let _ = (out.join(), err.join());
    let lines = std::mem::take(&mut *lines.lock().unwrap_or_else(|e| e.into_inner()));
    Ok((status, lines))
}

/// `Rust 267 passed, 0 failed (65 skipped: no GPU; 3 skipped: no NCCL)` from cargo test's
/// output.
pub fn rust(lines: &[String]) -> String {
    let (mut passed, mut failed, mut ignored) = (0usize, 0usize, 0usize);
    for line in lines {
        let Some(rest) = line.strip_prefix("test result: ") else {
            continue;
        };
        for part in rest.split(';') {
            let mut words = part.split_whitespace().rev();
            let (Some(what), Some(count)) = (words.next(), words.next()) else {
                continue;
            };
            let count = count.parse::<usize>().unwrap_or(0);
            match what {
                "passed" => passed += count,
                "failed" => failed += count,
                "ignored" => ignored += count,
                _ => {}
            }
        }
    }
    let mut skips: Vec<(String, usize)> = Vec::new();
    for line in lines {
        let Some(why) = line
            .strip_prefix("SKIPPED (")
            .and_then(|rest| rest.split_once(')'))
            .map(|(why, _)| why.to_string())
        else {
            continue;
        };
        match skips.iter_mut().find(|(w, _)| *w == why) {
            Some((_, n)) => *n += 1,
            None => skips.push((why, 1)),
        }
    }
    let skipped: usize = skips.iter().map(|(_, n)| n).sum();
    let mut why: Vec<String> = skips
        .iter()
        .map(|(w, n)| format!("{n} skipped: {w}"))
        .collect();
    if ignored > 0 {
        why.push(format!("{ignored} ignored"));
    }
    let why = if why.is_empty() {
        String::new()
    } else {
        format!(" ({})", why.join("; "))
    };
    format!(
        "Rust {} passed, {failed} failed{why}",
        passed.saturating_sub(skipped)
    )
}

/// `Python 337 passed, 33 skipped, 4 xfailed` from pytest's closing line.
pub fn python(lines: &[String]) -> String {
    let closing = lines.iter().rev().find(|l| {
        let l = l.trim_matches(|c: char| c == '=' || c.is_whitespace());
        l.contains(" in ") && ["passed", "failed", "error"].iter().any(|w| l.contains(w))
    });
    match closing {
        Some(line) => {
            let line = line.trim_matches(|c: char| c == '=' || c.is_whitespace());
            let counts = line.rsplit_once(" in ").map_or(line, |(counts, _)| counts);
            format!("Python {counts}")
        }
        None => "Python: no closing line from pytest".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<String> {
        text.lines().map(str::to_string).collect()
    }

    #[test]
    fn counts_every_binary_and_names_the_skips() {
        let log = lines(
            "test result: ok. 10 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out\n\
             SKIPPED (no GPU): knn::a\nSKIPPED (no GPU): knn::b\nSKIPPED (no NCCL): nccl\n\
             test result: FAILED. 5 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out",
        );
        assert_eq!(
            rust(&log),
            "Rust 12 passed, 2 failed (2 skipped: no GPU; 1 skipped: no NCCL; 1 ignored)"
        );
        assert_eq!(rust(&[]), "Rust 0 passed, 0 failed");
    }

    #[test]
    fn reads_pytests_closing_line() {
        let log = lines("x\n===== 337 passed, 33 skipped, 4 xfailed in 81.20s (0:01:21) =====");
        assert_eq!(python(&log), "Python 337 passed, 33 skipped, 4 xfailed");
        assert_eq!(
            python(&lines("nothing")),
            "Python: no closing line from pytest"
        );
    }
}
