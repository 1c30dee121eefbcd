//! Path-like tokens: which words of a text or a tool call name files, which name code
//! identifiers (`self.value`), and which only look like either (`n/a`, `s/x/y/`, `e.g`).

use super::text::listed;

/// Extensions that make a dotted name a file rather than, say, `self.value` or `java.lang`.
const FILE_EXTENSIONS: &str = "7z a asm avi bak bash bat bib bin bmp bz2 c cc cfg cjs class clj cmake cmd conf cpp crt cs \
    csproj css csv cxx dart dat db deb diff dll doc docx dockerfile egg ejs el env erb erl ex exe \
    exs fish flac gif go gql gradle graphql gz h h5 hbs hcl hh hpp hs htm html ico img in ini ipynb \
    iso j2 jar java jpeg jpg js json jsonl jsx key kt kts less lock log lua m m4v md mdx mjs mk mkv \
    ml mli mov mp3 mp4 mpeg nix npy npz o odt ogg onnx orig otf out parquet patch pcap pcapng pdf \
    pem php pickle pid pkl pl plist pm png properties proto ps1 pt pth py pyc pyi pyx r rake rb rej \
    rpm rs rst s sass scala scss sh so sol sql sqlite sqlite3 svelte svg swift swp tar tex tf tfvars \
    tgz tmp toml tpl ts tsv tsx ttf txt typed v vim vue war wasm wav webm webp whl woff woff2 xls \
    xlsx xml xz yaml yml zig zip zsh";

/// Names after the dot of well-known dotfiles; other `.name` tokens are usually method calls.
const DOTFILES: &str = "babelrc bashrc dockerignore editorconfig env eslintrc gitattributes gitignore gitmodules npmrc \
    prettierrc profile vimrc zshrc";

/// Words with a slash or a dot that are prose, not paths or identifiers.
const JUNK_WORDS: &str = "n/a w/o i/o and/or either/or s/he he/she his/her on/off yes/no true/false read/write \
    start/end input/output client/server e.g i.e etc a.k.a vs cf";

/// What a path-like token names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathKind {
    /// A file or directory: it has a `/` or a known extension.
    File,
    /// A dotted code name such as `self.value` or `java.util.List`.
    Identifier,
}

/// The path-like tokens of a text, in order, exactly as the summary lists them: files and
/// dotted identifiers, junk left out.
///
/// Tokens are split at whitespace, quotes, brackets and shell punctuation, with trailing
/// sentence punctuation removed. Public so that retention checks find paths the same way.
pub fn path_tokens(text: &str) -> impl Iterator<Item = &str> {
    split_tokens(text).filter(|t| path_kind(t).is_some())
}

/// The path-like tokens of prose (what a user or the agent wrote): as [`path_tokens`], but a
/// word with a slash and nothing else that marks a path (`inputting/reading`) counts only
/// when it is written as code (between backticks).
pub fn prose_path_tokens(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for (i, chunk) in text.split('`').enumerate() {
        let quoted = i % 2 == 1;
        out.extend(path_tokens(chunk).filter(|t| quoted || !is_bare_pair(t)));
    }
    out
}

fn split_tokens(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| c.is_whitespace() || "'\"`()[]{}<>,;|&=\\".contains(c))
        .map(|t| t.trim_end_matches(['.', ',', ':', ';', '!', '?']))
}

/// `word/word` with no extension, no leading `/`, `./` or `~/`, one slash: in prose this is
/// usually "and/or" style writing, not a path.
fn is_bare_pair(token: &str) -> bool {
    token.matches('/').count() == 1
        && !token.starts_with(['/', '.', '~'])
        && !token.ends_with('/')
        && !token.contains('.')
}

/// Whether a token names a file or a dotted identifier; `None` for other words and for junk.
pub fn path_kind(token: &str) -> Option<PathKind> {
    if token.len() < 3
        || token.starts_with('-')
        || !token.chars().any(|c| c.is_ascii_alphabetic())
        || token
            .chars()
            .any(|c| !(c.is_alphanumeric() || "_.~/@+%#:-*".contains(c)))
        || is_junk(token)
    {
        return None;
    }
    if token.contains('/') {
        return Some(PathKind::File);
    }
    // `Foo.java:12:5` is still `Foo.java`.
    let base = token.trim_end_matches(|c: char| c.is_ascii_digit() || c == ':');
    let base = if base.len() < token.len() && token[base.len()..].starts_with(':') {
        base
    } else {
        token
    };
    let (stem, ext) = base.rsplit_once('.')?;
    let ext_ok = !ext.is_empty()
        && ext.len() <= 10
        && ext.starts_with(|c: char| c.is_ascii_alphabetic())
        && ext.chars().all(|c| c.is_ascii_alphanumeric());
    if !ext_ok || stem.ends_with('.') {
        return None;
    }
    let ext = ext.to_ascii_lowercase();
    if stem.is_empty() {
        // `.gitignore` is a file; `.py` or `.format` is a fragment of a sentence or a call.
        return listed(DOTFILES, &ext).then_some(PathKind::File);
    }
    if listed(FILE_EXTENSIONS, &ext) {
        Some(PathKind::File)
    } else {
        Some(PathKind::Identifier)
    }
}

/// A path-like token that names no file an agent reads or writes: a device (`/dev/null`), a
/// URL, a glob (`*.java`), a directory written as one (`src/`), a class path
/// (`lib/*:target/classes`), or a Java class literal (`Environment.class`).
pub fn is_not_a_file(token: &str) -> bool {
    let class_literal = token
        .strip_suffix(".class")
        .is_some_and(|stem| !stem.contains(['/', '.']) && stem.starts_with(|c: char| c.is_ascii_uppercase()));
    let class_path = token
        .split_once(':')
        .is_some_and(|(_, rest)| !rest.is_empty() && !rest.starts_with(|c: char| c.is_ascii_digit()));
    token.starts_with("/dev/")
        || token.contains("://")
        || token.contains(['*', '?'])
        || token.ends_with('/')
        || class_literal
        || class_path
}

/// Tokens that look like paths or identifiers but are not: abbreviations (`e.g`, `n/a`),
/// sed and tr scripts (`s/foo/bar/g`), a line number run into a sentence (`1475.To`).
pub fn is_junk(token: &str) -> bool {
    let lower = token.to_ascii_lowercase();
    let lower = lower.trim_end_matches('.');
    if listed(JUNK_WORDS, lower) {
        return true;
    }
    if let Some(rest) = lower.strip_prefix("s/").or_else(|| lower.strip_prefix("y/"))
        && rest.matches('/').count() >= 2
        && rest
            .rsplit('/')
            .next()
            .is_some_and(|flags| flags.len() <= 3 && flags.chars().all(|c| c.is_ascii_alphabetic()))
    {
        return true;
    }
    let first = lower.split(['.', '/']).next().unwrap_or("");
    !lower.contains('/') && !first.is_empty() && first.chars().all(|c| c.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_identifiers_and_junk() {
        let cases = [
            ("src/main.rs", Some(PathKind::File)),
            ("Foo.java:12:5", Some(PathKind::File)),
            (".gitignore", Some(PathKind::File)),
            ("docs/", Some(PathKind::File)),
            ("self.value", Some(PathKind::Identifier)),
            (".py", None),
            (".format", None),
            ("n/a", None),
            ("N/A", None),
            ("e.g", None),
            ("E.g", None),
            ("s/foo/bar/g", None),
            ("s/a/b/", None),
            ("1475.To", None),
            ("12", None),
            ("--flag", None),
        ];
        for (token, kind) in cases {
            assert_eq!(path_kind(token), kind, "{token}");
        }
    }

    #[test]
    fn devices_urls_globs_directories_class_paths_and_class_literals_are_not_files() {
        for token in [
            "/dev/null",
            "https://github.com/FasterXML/jackson-module-kotlin/issues/124",
            "*.java",
            "*test*.java",
            "lib/",
            "*:target/classes:target/test-classes",
            "Environment.class",
        ] {
            assert!(is_not_a_file(token), "{token}");
        }
        for token in [
            "src/main.rs",
            "Foo.java:12:5",
            "target/classes/Foo.class",
            "run.sh",
            "./gradlew",
        ] {
            assert!(!is_not_a_file(token), "{token}");
        }
    }

    #[test]
    fn prose_keeps_bare_pairs_only_as_code() {
        assert_eq!(
            prose_path_tokens("inputting/reading of `src/marshmallow` and src/lib.rs or /tmp/x"),
            ["src/marshmallow", "src/lib.rs", "/tmp/x"]
        );
    }
}
