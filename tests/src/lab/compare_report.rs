//! The one table of `ferrolb-bench-lab compare` (issue #11): the failover rows
//! ([`super::compare::Row`], percentiles of many trials) and the single-value rows of the
//! controller, at-rest and CPU runs ([`ValueRow`]) in one markdown table with both
//! implementations and their ratio, the per-trial figures behind the failover rows, and the
//! splice of a report into `docs/comparison.md` between two marker lines. Pure: no I/O.

use super::compare::Row;
use super::compare_controller::{ValueRow, value_table};

/// The line before the generated report in `docs/comparison.md`.
pub const BEGIN: &str = "<!-- compare:begin (written by ferrolb-bench-lab compare --write) -->";
/// The line after it.
pub const END: &str = "<!-- compare:end -->";

/// The table header of [`table`].
const HEADER: &str =
    "| measurement | ferrolb | MetalLB | ratio (MetalLB ÷ ferrolb) |\n|---|---|---|---|\n";

/// One markdown table: every failover row (its measurement suffixed with the cells' unit, each
/// cell `p50 / p90 / p99 / max (n ok, f failed)`, the ratio of the medians) followed by every
/// value row (both values, the ratio of the values), `-` where a figure is missing.
pub fn table(failover: &[Row], values: &[ValueRow]) -> String {
    let mut out = String::from(HEADER);
    let failover_table = super::compare::table(failover);
    for (row, line) in failover.iter().zip(failover_table.lines().skip(2)) {
        // The failover table's cells after its measurement: reuse them as they are.
        let cells = line
            .strip_prefix(&format!("| {} |", row.what))
            .unwrap_or(line);
        out.push_str(&format!(
            "| {}, p50 / p90 / p99 / max ms |{cells}\n",
            row.what
        ));
    }
    for line in value_table(values).lines().skip(2) {
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The per-trial figures behind the failover rows: one line per row and implementation, the
/// successful trials' times in ms (one decimal, in the order they ran) and the failures.
pub fn per_trial(failover: &[Row]) -> String {
    let mut out = String::new();
    for row in failover {
        for (name, column) in [("ferrolb", &row.ferrolb), ("MetalLB", &row.metallb)] {
            let ms: Vec<String> = column
                .micros
                .iter()
                .map(|us| format!("{:.1}", *us as f64 / 1000.0))
                .collect();
            out.push_str(&format!(
                "- {}, {name}: {} ms{}\n",
                row.what,
                if ms.is_empty() {
                    "none".into()
                } else {
                    ms.join(", ")
                },
                if column.failures == 0 {
                    String::new()
                } else {
                    format!("; {} failed", column.failures)
                }
            ));
        }
    }
    out
}

/// `doc` with the text between the [`BEGIN`] and [`END`] lines replaced by `report`; appended
/// (with both markers) when `doc` has no markers.
///
/// # Errors
/// Only one of the markers is present, or they are out of order.
pub fn splice(doc: &str, report: &str) -> Result<String, String> {
    let block = format!("{BEGIN}\n{}\n{END}", report.trim_end());
    match (doc.find(BEGIN), doc.find(END)) {
        (Some(b), Some(e)) if b < e => Ok(format!("{}{block}{}", &doc[..b], &doc[e + END.len()..])),
        (None, None) => Ok(format!("{}\n\n{block}\n", doc.trim_end())),
        _ => Err(format!(
            "the markers {BEGIN:?} and {END:?} must both be present, in that order, or neither"
        )),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::time::Duration;

    fn row() -> Row {
        let mut r = Row::new("crash failover (SIGKILL) → first gratuitous ARP, 3 nodes".into());
        r.ferrolb.record(Some(Duration::from_micros(372_400)));
        r.ferrolb.record(None);
        r.metallb.record(Some(Duration::from_micros(5_571_000)));
        r
    }

    #[test]
    fn one_table_holds_both_kinds_of_rows() {
        let values = [ValueRow {
            what: "speaker resident memory with 1000 Services, MiB".into(),
            ferrolb: Some(20.0),
            metallb: Some(50.0),
        }];
        let t = table(&[row()], &values);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4, "{t}");
        assert_eq!(lines[0], HEADER.lines().next().unwrap());
        assert_eq!(
            lines[2],
            "| crash failover (SIGKILL) → first gratuitous ARP, 3 nodes, p50 / p90 / p99 / max ms | 372 / 372 / 372 / 372 (1 ok, 1 failed) | 5571 / 5571 / 5571 / 5571 (1 ok, 0 failed) | 15.0× |"
        );
        assert_eq!(
            lines[3],
            "| speaker resident memory with 1000 Services, MiB | 20 | 50 | 2.5× |"
        );
    }

    #[test]
    fn the_per_trial_figures_keep_every_trial_and_the_failures() {
        assert_eq!(
            per_trial(&[row()]),
            "- crash failover (SIGKILL) → first gratuitous ARP, 3 nodes, ferrolb: 372.4 ms; 1 failed\n\
             - crash failover (SIGKILL) → first gratuitous ARP, 3 nodes, MetalLB: 5571.0 ms\n"
        );
    }

    #[test]
    fn the_report_replaces_what_is_between_the_markers_only() {
        let doc = format!("# title\n\nintro\n\n{BEGIN}\nold table\n{END}\n\n## after\n");
        let out = splice(&doc, "new table\n").unwrap();
        assert_eq!(
            out,
            format!("# title\n\nintro\n\n{BEGIN}\nnew table\n{END}\n\n## after\n")
        );
        assert_eq!(splice(&out, "new table").unwrap(), out, "idempotent");
        let appended = splice("# title\n", "t").unwrap();
        assert_eq!(appended, format!("# title\n\n{BEGIN}\nt\n{END}\n"));
        assert!(splice(&format!("{END}\n{BEGIN}\n"), "t").is_err());
        assert!(splice(&format!("x\n{BEGIN}\n"), "t").is_err());
    }
}
