//! The README's quickstart as data (issue #28 items 4 and 5): the command block the tests check
//! (server-side dry run, `tests/tests/deploy/quickstart.rs`) and run verbatim on real nodes
//! (`tests/tests/real_nodes.rs`, [`crate::lab::real_nodes::quickstart`]).

use anyhow::Context;

/// The HTML comment above the README's command block under test.
pub const MARKER: &str = "<!-- quickstart:";

/// The README's quickstart command block: the body of the first ```` ```sh ```` block after
/// [`MARKER`], without its fences.
///
/// # Errors
/// No marker, no `sh` block after it, or an unterminated block.
pub fn quickstart_block(readme: &str) -> anyhow::Result<&str> {
    let from = &readme[readme
        .find(MARKER)
        .context("no quickstart marker in README.md")?..];
    let start = from
        .find("```sh\n")
        .context("no ```sh block after the quickstart marker")?
        + "```sh\n".len();
    let body = &from[start..];
    Ok(&body[..body
        .find("\n```")
        .context("the quickstart block has no end")?])
}

/// The heredocs of `block` (a line containing `<<EOF` up to a line `EOF`), in order, without
/// those two lines.
///
/// # Errors
/// A heredoc without its `EOF` line.
pub fn heredocs(block: &str) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in block.lines() {
        match current.as_mut() {
            None if line.contains("<<EOF") => current = Some(Vec::new()),
            None => {}
            Some(lines) if line == "EOF" => {
                out.push(lines.join("\n"));
                current = None;
            }
            Some(lines) => lines.push(line),
        }
    }
    anyhow::ensure!(current.is_none(), "an unterminated heredoc in:\n{block}");
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn heredocs_are_cut_at_their_eof() {
        let b = "a <<EOF\nx: 1\nEOF\nb\nc <<EOF # note\ny: 2\nz: 3\nEOF\n";
        assert_eq!(heredocs(b).unwrap(), ["x: 1", "y: 2\nz: 3"]);
        assert!(heredocs("a <<EOF\nx: 1\n").is_err());
    }

    #[test]
    fn the_block_is_the_first_sh_block_after_the_marker() {
        let readme = "```sh\nnot this\n```\n<!-- quickstart: x -->\n```sh\nkubectl get svc\n```\n";
        assert_eq!(quickstart_block(readme).unwrap(), "kubectl get svc");
        assert!(quickstart_block("```sh\nx\n```\n").is_err());
    }
}
