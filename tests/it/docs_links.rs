//! The README and the docs/ pages hold together: every relative link names a file that
//! exists, every `#anchor` names a heading of its target under GitHub's slug rules, every
//! docs/*.md page is reachable from the README, and the README stays a front page.
//!
//! Links are found as GitHub renders them: not inside fenced code blocks, code spans or
//! HTML comments; `http(s)://` and `mailto:` targets are not followed.

use std::collections::{BTreeSet, HashMap};
use std::path::{Component, Path, PathBuf};

/// The README is the front page; the manual lives in docs/. Room above the ~300 lines it
/// is meant to have, so a new example does not fail CI, but not for a manual's section.
const README_MAX_LINES: usize = 320;

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and docs/*.md, as paths relative to the repository root, sorted.
fn pages(root: &Path) -> Vec<PathBuf> {
    let mut pages = vec![PathBuf::from("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ exists")
        .map(|e| e.expect("readable docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .map(|p| p.strip_prefix(root).expect("under the root").to_path_buf())
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// A fence opener or closer: its character and length.
fn fence(line: &str) -> Option<(char, usize)> {
    let t = line.trim_start_matches(' ');
    if line.len() - t.len() > 3 {
        return None;
    }
    let c = t.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let n = t.chars().take_while(|x| *x == c).count();
    (n >= 3).then_some((c, n))
}

/// The page with fenced code blocks blanked (lines kept, so line numbers stay right), and
/// inside the rest, code spans and HTML comments blanked. Code spans may run over the
/// lines of one paragraph but not across a blank line or a table row.
fn prose(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut open: Option<(char, usize)> = None;
    let mut para: Vec<String> = Vec::new();
    let flush = |para: &mut Vec<String>, out: &mut Vec<String>| {
        if !para.is_empty() {
            out.extend(blank_spans(&para.join("\n")).split('\n').map(str::to_owned));
            para.clear();
        }
    };
    for line in text.lines() {
        if let Some((c, n)) = open {
            if fence(line).is_some_and(|(c2, n2)| c2 == c && n2 >= n) {
                open = None;
            }
            out.push(String::new());
            continue;
        }
        if let Some(f) = fence(line) {
            flush(&mut para, &mut out);
            open = Some(f);
            out.push(String::new());
        } else if line.trim().is_empty() {
            flush(&mut para, &mut out);
            out.push(String::new());
        } else if line.trim_start().starts_with('|') {
            flush(&mut para, &mut out);
            out.push(blank_spans(line));
        } else {
            para.push(line.to_owned());
        }
    }
    flush(&mut para, &mut out);
    out
}

/// Code spans (a run of n backticks up to the next run of exactly n) and `<!-- … -->`
/// replaced by spaces, newlines kept. An unmatched run is literal text.
fn blank_spans(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = chars.clone();
    let blank = |from: usize, to: usize, out: &mut Vec<char>| {
        for c in &mut out[from..to] {
            if *c != '\n' {
                *c = ' ';
            }
        }
    };
    let run_at = |i: usize| chars[i..].iter().take_while(|c| **c == '`').count();
    let mut i = 0;
    while i < chars.len() {
        if chars[i..].starts_with(&['<', '!', '-', '-']) {
            let end = (i + 4..chars.len())
                .find(|&j| chars[j..].starts_with(&['-', '-', '>']))
                .map_or(chars.len(), |j| j + 3);
            blank(i, end, &mut out);
            i = end;
        } else if chars[i] == '`' {
            let n = run_at(i);
            let mut j = i + n;
            let mut close = None;
            while j < chars.len() {
                if chars[j] == '`' {
                    let m = run_at(j);
                    if m == n {
                        close = Some(j + m);
                        break;
                    }
                    j += m;
                } else {
                    j += 1;
                }
            }
            match close {
                Some(end) => {
                    blank(i, end, &mut out);
                    i = end;
                }
                None => i += n,
            }
        } else {
            i += 1;
        }
    }
    out.into_iter().collect()
}

/// `(line number, target)` of every inline link and image: `[text](target "title")`.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (n, line) in prose(text).iter().enumerate() {
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            // The target ends at the `)` that closes the `(`: parentheses may nest.
            let mut depth = 0usize;
            let mut end = after.len();
            for (k, c) in after.char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' if depth == 0 => {
                        end = k;
                        break;
                    }
                    ')' => depth -= 1,
                    _ => {}
                }
            }
            let inner = after[..end].trim();
            // `<…>` may hold spaces; otherwise a space starts the title.
            let target = match inner.strip_prefix('<') {
                Some(quoted) => quoted.split('>').next().unwrap_or(""),
                None => inner.split_whitespace().next().unwrap_or(""),
            };
            found.push((n + 1, target.to_owned()));
            rest = &after[end.min(after.len())..];
        }
    }
    found
}

/// GitHub's anchor for a heading's text: the rendered text lowercased, every character
/// that is not a letter, digit, `-`, `_` or space removed, spaces turned into `-`.
fn slug(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading;
    // Links and images render as their text.
    while let Some(open) = rest.find('[') {
        let Some(close) = rest[open..].find("](").map(|k| open + k) else {
            break;
        };
        let Some(end) = rest[close..].find(')').map(|k| close + k) else {
            break;
        };
        text.push_str(rest[..open].trim_end_matches('!'));
        text.push_str(&rest[open + 1..close]);
        rest = &rest[end + 1..];
    }
    text.push_str(rest);
    text.chars()
        .flat_map(char::to_lowercase)
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every anchor the page's headings produce, duplicates numbered `-1`, `-2`, … as GitHub does.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut open: Option<(char, usize)> = None;
    for line in text.lines() {
        if let Some((c, n)) = open {
            if fence(line).is_some_and(|(c2, n2)| c2 == c && n2 >= n) {
                open = None;
            }
            continue;
        }
        if let Some(f) = fence(line) {
            open = Some(f);
            continue;
        }
        let t = line.trim_start_matches(' ');
        if line.len() - t.len() > 3 {
            continue;
        }
        let hashes = t.chars().take_while(|c| *c == '#').count();
        let body = &t[hashes..];
        if !(1..=6).contains(&hashes) || !(body.is_empty() || body.starts_with([' ', '\t'])) {
            continue;
        }
        // An optional closing run of `#` is not part of the text.
        let body = body.trim();
        let body = match body.trim_end_matches('#') {
            b if b.len() < body.len() && (b.is_empty() || b.ends_with(' ')) => b.trim_end(),
            _ => body,
        };
        let base = slug(body);
        let mut anchor = base.clone();
        let mut k = 0;
        while seen.contains(&anchor) {
            k += 1;
            anchor = format!("{base}-{k}");
        }
        seen.insert(anchor);
    }
    seen
}

/// `a/b/../c` → `a/c`; `None` when it climbs above the root.
fn normalise(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::Normal(p) => out.push(p),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// What the pages' links point at, resolved: `(page, line, target, file)`; `file` is the
/// target's path from the root (the page itself for `#anchor`).
struct Resolved {
    page: PathBuf,
    line: usize,
    target: String,
    file: Option<PathBuf>,
    anchor: Option<String>,
}

fn resolve(root: &Path, pages: &[PathBuf]) -> Vec<Resolved> {
    let mut all = Vec::new();
    for page in pages {
        let text = std::fs::read_to_string(root.join(page)).expect("readable page");
        for (line, target) in links(&text) {
            if target.starts_with("http://")
                || target.starts_with("https://")
                || target.starts_with("mailto:")
            {
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a.to_owned())),
                None => (target.as_str(), None),
            };
            let file = if path.is_empty() {
                Some(page.clone())
            } else {
                normalise(&page.parent().unwrap_or(Path::new("")).join(path))
            };
            all.push(Resolved {
                page: page.clone(),
                line,
                target,
                file,
                anchor,
            });
        }
    }
    all
}

/// One line per broken link: `page:line: (target): why`.
fn broken_links(root: &Path, pages: &[PathBuf]) -> Vec<String> {
    let mut cache: HashMap<PathBuf, BTreeSet<String>> = HashMap::new();
    let mut broken = Vec::new();
    for r in resolve(root, pages) {
        let at = format!("{}:{}: ({})", r.page.display(), r.line, r.target);
        if r.target.is_empty() {
            broken.push(format!("{at}: empty target"));
            continue;
        }
        let Some(file) = r.file else {
            broken.push(format!("{at}: leaves the repository"));
            continue;
        };
        if !root.join(&file).exists() {
            broken.push(format!("{at}: {} does not exist", file.display()));
            continue;
        }
        let Some(anchor) = r.anchor else { continue };
        if file.extension().is_none_or(|e| e != "md") {
            broken.push(format!(
                "{at}: an anchor into {}, not Markdown",
                file.display()
            ));
            continue;
        }
        let known = cache.entry(file.clone()).or_insert_with(|| {
            anchors(&std::fs::read_to_string(root.join(&file)).unwrap_or_default())
        });
        if !known.contains(&anchor) {
            broken.push(format!(
                "{at}: no heading of {} makes #{anchor}",
                file.display()
            ));
        }
    }
    broken
}

#[test]
fn every_relative_link_and_anchor_of_the_readme_and_docs_resolves() {
    let root = repo_root();
    let pages = pages(&root);
    assert!(pages.len() > 1, "docs/*.md pages are found: {pages:?}");
    let broken = broken_links(&root, &pages);
    assert!(
        broken.is_empty(),
        "{} broken link(s):\n{}",
        broken.len(),
        broken.join("\n")
    );
}

#[test]
fn every_docs_page_is_linked_from_the_readme() {
    let root = repo_root();
    let pages = pages(&root);
    let readme = [PathBuf::from("README.md")];
    let linked: BTreeSet<PathBuf> = resolve(&root, &readme)
        .into_iter()
        .filter_map(|r| r.file)
        .collect();
    let unlinked: Vec<String> = pages[1..]
        .iter()
        .filter(|p| !linked.contains(*p))
        .map(|p| p.display().to_string())
        .collect();
    assert!(
        unlinked.is_empty(),
        "docs pages the README does not link (add them to \"Where to go next\"):\n{}",
        unlinked.join("\n")
    );
}

#[test]
fn the_readme_stays_a_front_page() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines, more than {README_MAX_LINES}: move the detail to a docs/ page"
    );
}

#[test]
fn anchors_follow_githubs_slug_rules() {
    let page = "# massgen\n\
                ## Choosing a panel per request (`model`)\n\
                ### Metrics (`GET /metrics`)\n\
                ## Deliberation in `content` (think tags)\n\
                ## The Responses API door (`/v1/responses`): Codex CLI, the Agents SDK\n\
                ## See [the protocol](docs/protocol.md) \n\
                ## Notes\n## Notes\n## Notes ##\n\
                ```bash\n# not a heading\n```\n\
                #not-a-heading\n\
                \x20   # indented code, not a heading\n";
    let got = anchors(page);
    let want: BTreeSet<String> = [
        "massgen",
        "choosing-a-panel-per-request-model",
        "metrics-get-metrics",
        "deliberation-in-content-think-tags",
        "the-responses-api-door-v1responses-codex-cli-the-agents-sdk",
        "see-the-protocol",
        "notes",
        "notes-1",
        "notes-2",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(got, want);
    assert_eq!(
        slug("max_tokens and `snake_case` — ok?"),
        "max_tokens-and-snake_case--ok"
    );
}

#[test]
fn links_in_code_are_not_links_and_targets_may_nest_parentheses() {
    let page = "See [a](a.md) and `[b](b.md)` and ``[c](c.md) ` `` here.\n\
                A span over `two\n\
                [d](d.md) lines` ends.\n\
                <!-- [e](e.md) -->\n\
                ```\n[f](f.md)\n```\n\
                | [g](g.md#x \"title\") | ![h](img/h.png) | `|` |\n\
                [i](<spaced name.md>) [j](wiki/A_(b)) unmatched ` [k](k.md)\n";
    let got: Vec<String> = links(page).into_iter().map(|(_, t)| t).collect();
    assert_eq!(
        got,
        [
            "a.md",
            "g.md#x",
            "img/h.png",
            "spaced name.md",
            "wiki/A_(b)",
            "k.md"
        ]
    );
}

#[test]
fn broken_files_anchors_and_escapes_are_each_reported() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir(root.join("docs")).unwrap();
    std::fs::write(
        root.join("README.md"),
        "# Top\n[ok](docs/a.md#a-section) [self](#top) [gone](docs/missing.md)\n\
         [bad anchor](docs/a.md#nope) [out](../../etc/passwd) [web](https://example.com/x#y)\n",
    )
    .unwrap();
    std::fs::write(
        root.join("docs/a.md"),
        "# A section\n[up](../README.md#top) [lost](#elsewhere) [code](x.rs#L1)\n",
    )
    .unwrap();
    std::fs::write(root.join("docs/x.rs"), "fn main() {}\n").unwrap();
    std::fs::write(root.join("docs/b.md"), "# B\n").unwrap();
    let pages = pages(root);
    let broken = broken_links(root, &pages);
    assert_eq!(
        broken,
        [
            "README.md:2: (docs/missing.md): docs/missing.md does not exist",
            "README.md:3: (docs/a.md#nope): no heading of docs/a.md makes #nope",
            "README.md:3: (../../etc/passwd): leaves the repository",
            "docs/a.md:2: (#elsewhere): no heading of docs/a.md makes #elsewhere",
            "docs/a.md:2: (x.rs#L1): an anchor into docs/x.rs, not Markdown",
        ],
        "{broken:#?}"
    );
    // docs/b.md is not linked from the README: the check that every page is linked sees it.
    let linked: BTreeSet<PathBuf> = resolve(root, &pages[..1])
        .into_iter()
        .filter_map(|r| r.file)
        .collect();
    assert!(!linked.contains(Path::new("docs/b.md")));
    assert!(linked.contains(Path::new("docs/a.md")));
}
