//! The expectations of one field case run against either implementation (issue #11,
//! `tests/tests/metallb_cases.rs`, `metallb_controller_cases.rs`, [`crate::lab::case_c03`]):
//! every expectation is checked
//! and printed (`C-01 PASS …` / `C-01 FAIL …: detail`), and the test fails at the end if any
//! failed — so one run shows everything the implementation did, not just the first miss.

/// The checks of one case.
#[derive(Debug)]
pub struct Verdicts {
    case: &'static str,
    lines: Vec<(bool, String)>,
}

impl Verdicts {
    /// No checks yet for `case` (e.g. `"C-01"`).
    pub fn new(case: &'static str) -> Verdicts {
        Verdicts {
            case,
            lines: Vec::new(),
        }
    }

    /// Records (and prints) whether the expectation `what` held; `detail` says what was seen
    /// when it did not.
    pub fn check(&mut self, ok: bool, what: &str, detail: impl std::fmt::Display) {
        let line = if ok {
            format!("{} PASS {what}", self.case)
        } else {
            format!("{} FAIL {what}: {detail}", self.case)
        };
        println!("{line}");
        self.lines.push((ok, line));
    }

    /// Panics, listing every failed expectation, if any failed.
    pub fn finish(self) {
        let failed: Vec<&str> = self
            .lines
            .iter()
            .filter(|(ok, _)| !ok)
            .map(|(_, l)| l.as_str())
            .collect();
        assert!(
            failed.is_empty(),
            "{} failed:\n{}",
            self.case,
            failed.join("\n")
        );
    }
}
