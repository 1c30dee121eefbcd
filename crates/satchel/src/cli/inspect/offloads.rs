//! The offloaded tool results of a session: what each costs in full, what is really sent of it
//! now (its excerpt in its phase), and the saving, largest saving first.

use std::io::{self, Write};

use satchel_protocol::{OffloadedResult, Phase};

use super::{plural, size};

/// Rows of the table; `--json` lists every result.
pub(super) const TOP: usize = 10;

/// The offloaded results added up: full texts against what is sent of them.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Savings {
    /// Results counted (those whose sent size is known).
    pub results: usize,
    /// Their full texts.
    pub full: u64,
    /// What is sent of them.
    pub sent: u64,
}

impl Savings {
    /// The results whose sent size is known (the session was prepared since it was loaded).
    pub fn of(offloaded: &[OffloadedResult]) -> Self {
        offloaded
            .iter()
            .filter_map(|o| Some((o.total_bytes as u64, o.sent_bytes? as u64)))
            .fold(Savings::default(), |s, (full, sent)| Savings {
                results: s.results + 1,
                full: s.full + full,
                sent: s.sent + sent,
            })
    }

    pub fn saved(&self) -> u64 {
        self.full.saturating_sub(self.sent)
    }
}

fn saved(o: &OffloadedResult) -> Option<u64> {
    o.sent_bytes
        .map(|sent| (o.total_bytes as u64).saturating_sub(sent as u64))
}

/// The table of offloaded results: a total line, then the top [`TOP`] by saving, each with
/// its `offload:N` key (N its place in `context.inspect`'s list) and its stable id (`r12`,
/// what `context.pin` and `context.purge` take).
pub(super) fn write_offloads(out: &mut impl Write, offloaded: &[OffloadedResult], session: &str) -> io::Result<()> {
    let savings = Savings::of(offloaded);
    write!(out, "\noffloaded results {}", offloaded.len())?;
    if savings.results > 0 {
        write!(
            out,
            ": {} in full, {} sent, {} saved",
            size(savings.full),
            size(savings.sent),
            size(savings.saved())
        )?;
    }
    writeln!(out)?;
    if offloaded.is_empty() {
        return Ok(());
    }
    let mut order: Vec<usize> = (0..offloaded.len()).collect();
    // Largest saving first; unknown savings (not loaded) by size, after them.
    order.sort_by_key(|&n| {
        let o = &offloaded[n];
        std::cmp::Reverse((saved(o), o.total_bytes))
    });
    writeln!(
        out,
        "  {:<11} {:>7}  {:<12} {:<6} {:>9} {:>9} {:>9}  file",
        "key", "id", "tool", "phase", "full", "sent", "saved"
    )?;
    for &n in order.iter().take(TOP) {
        let o = &offloaded[n];
        // What the client asked wins over the phase: a pinned result is whole, a purged one
        // a stub.
        let phase = match (o.pinned, o.purged, o.phase) {
            (true, _, _) => "pinned",
            (_, true, _) => "purged",
            (_, _, Some(Phase::Recent)) => "recent",
            (_, _, Some(Phase::Old)) => "old",
            (_, _, None) => "-",
        };
        let known = |v: Option<u64>| v.map_or("-".to_owned(), size);
        writeln!(
            out,
            "  {:<11} {:>7}  {:<12} {:<6} {:>9} {:>9} {:>9}  {} ({})",
            format!("offload:{n}"),
            o.id,
            o.tool.as_deref().unwrap_or("-"),
            phase,
            size(o.total_bytes as u64),
            known(o.sent_bytes.map(|s| s as u64)),
            known(saved(o)),
            o.file,
            plural(o.total_lines as u64, "line")
        )?;
    }
    if offloaded.len() > TOP {
        writeln!(
            out,
            "  … and {} more (satchel inspect {session} --json lists them all)",
            offloaded.len() - TOP
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::inspect::fixture;

    fn result(index: usize, total: usize, sent: Option<usize>) -> OffloadedResult {
        OffloadedResult {
            id: format!("r{index}"),
            pinned: false,
            purged: false,
            index,
            pointer: "/content".into(),
            file: format!("tool_result/{index}.txt"),
            total_bytes: total,
            total_lines: 10,
            tool: Some("bash".into()),
            phase: sent.map(|_| Phase::Old),
            sent_bytes: sent,
        }
    }

    #[test]
    fn the_table_puts_the_largest_saving_first_and_keeps_keys() {
        let offloaded = [
            result(3, 10_000, Some(3_000)),
            result(5, 200_000, Some(3_000)),
            result(9, 4_000, Some(4_000)),
        ];
        let text = fixture::render(|out| write_offloads(out, &offloaded, "chat"));
        assert!(
            text.starts_with("\noffloaded results 3: 214 KB in full, 10 KB sent, 204 KB saved\n"),
            "{text}"
        );
        let keys: Vec<&str> = text
            .lines()
            .skip(3)
            .map(|l| l.split_whitespace().next().unwrap())
            .collect();
        assert_eq!(keys, ["offload:1", "offload:0", "offload:2"], "{text}");
        insta::assert_snapshot!("offload_table", text);
    }

    #[test]
    fn the_table_keeps_the_top_rows_and_unknown_savings_are_dashes() {
        let offloaded: Vec<OffloadedResult> = (0..TOP + 2).map(|i| result(i, 5_000 + i, None)).collect();
        let text = fixture::render(|out| write_offloads(out, &offloaded, "chat"));
        assert!(
            text.starts_with("\noffloaded results 12\n"),
            "no totals unknown: {text}"
        );
        assert_eq!(text.lines().filter(|l| l.contains("offload:")).count(), TOP, "{text}");
        assert!(text.contains("offload:11 "), "largest first: {text}");
        assert!(
            text.contains("… and 2 more (satchel inspect chat --json lists them all)"),
            "{text}"
        );
        let row = text.lines().find(|l| l.contains("offload:0 ")).unwrap_or_default();
        assert!(row.is_empty(), "the smallest is left out: {text}");
        let row = text.lines().find(|l| l.contains("offload:11 ")).unwrap();
        assert_eq!(row.split_whitespace().nth(3), Some("-"), "{row}");
    }
}
