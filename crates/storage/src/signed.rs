//! A store of JSON entries in one workspace file, every entry signed with the workspace's
//! key, so that an entry edited by hand (or by anything but satchel) is never used.
//!
//! The file, [`Layout::candidates_file`] (`candidates.jsonl`), has one line per entry:
//!
//! ```text
//! {"entry":<the entry>,"sig":"<64 hex digits: HMAC-SHA256 over the entry's canonical bytes>"}
//! ```
//!
//! **Canonical bytes** of an entry are its compact JSON (`serde_json::to_vec`) with the keys
//! of every object sorted (by their UTF-8 bytes, recursively). The sort is explicit because
//! this workspace builds `serde_json` with `preserve_order`, under which objects keep their
//! insertion order; numbers are written the way `serde_json` writes them (and `float_roundtrip`
//! reads them back to the same value). Verifying recomputes the canonical bytes from the parsed
//! entry, so the signature covers the entry's content, not how its line is spelled: key order
//! and whitespace in the file do not matter, every value does.
//!
//! **The key**, [`Layout::candidates_key`] (`keys/candidates.key`): 32 random bytes, made on
//! first use, 0600 in a 0700 directory whatever the umask. It is written whole to a temp file,
//! fsync'd, then hard-linked to its name, which fails if the name exists: of two daemons that
//! race to create it, one wins and the other reads the winner's key, and a half-written key is
//! never used. The key is never logged, never in an error nor in a `Debug` output, and no
//! client call can read it (`keys/` is refused by [`crate::Workspace::resolve_existing`]).
//!
//! **Loading** skips and reports ([`Rejected`]) every line that is not JSON, has no or a
//! malformed signature, or whose signature does not match its entry (edited, or signed with
//! another workspace's key), and logs one warning naming their line numbers; the other lines
//! load. Signatures are compared in constant time. **Saving** rewrites the whole file
//! atomically ([`write_atomic`], fsync'd, 0600), and keeps the lines that were rejected: they
//! go first, verbatim and in their order, then the entries. A rewrite never deletes what it
//! could not read: a hand-edited or forged line stays as the evidence it is, and after the
//! key is lost or replaced, everything the old key signed is still there for whoever
//! restores it. Rejected lines stay reported on every load until someone removes them.

use std::fmt;
use std::fs::{self, File};
use std::io::{ErrorKind, Read};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use hmac::{Hmac, Mac};
use serde_json::{Map, Value};
use sha2::Sha256;

use crate::durable::{create_durable, write_atomic};
use crate::error::{StorageError, io};
use crate::layout::Layout;
use crate::perms::{check_own_dir, create_private_dir_all, make_private};
use crate::workspace::Workspace;

/// Bytes of a key.
const KEY_LEN: usize = 32;
/// Hex digits of a signature (HMAC-SHA256: 32 bytes).
const SIG_HEX_LEN: usize = 64;

type HmacSha256 = Hmac<Sha256>;

/// The workspace's signing key. Its `Debug` shows nothing of it.
struct Key([u8; KEY_LEN]);

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Key(<redacted>)")
    }
}

impl Key {
    fn mac(&self) -> HmacSha256 {
        <HmacSha256 as Mac>::new_from_slice(&self.0).expect("HMAC takes a key of any length")
    }

    /// The hex signature of `entry`.
    fn sign(&self, entry: &Value) -> String {
        let mut mac = self.mac();
        mac.update(&canonical_bytes(entry));
        to_hex(&mac.finalize().into_bytes())
    }

    /// Whether `sig` (raw bytes) signs `entry`, compared in constant time.
    fn verifies(&self, entry: &Value, sig: &[u8]) -> bool {
        let mut mac = self.mac();
        mac.update(&canonical_bytes(entry));
        mac.verify_slice(sig).is_ok()
    }
}

/// The signed store of a workspace (see the module documentation).
#[derive(Debug)]
pub struct SignedStore {
    file: PathBuf,
    key: Key,
}

/// What [`SignedStore::load`] found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Loaded {
    /// The entries whose signature matches, in file order.
    pub entries: Vec<Value>,
    /// The line (from 1) of each entry.
    pub entry_lines: Vec<usize>,
    /// The lines skipped, in file order.
    pub rejected: Vec<Rejected>,
}

/// A line of the store that was skipped, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    /// Its line number, from 1.
    pub line: usize,
    /// Why: not JSON, unsigned, a malformed signature, or a signature that does not match.
    /// Never quotes the key nor the signature the entry should have had.
    pub reason: String,
    /// The line as it is in the file, without its newline: [`SignedStore::save_all`] keeps it.
    pub text: Vec<u8>,
}

impl SignedStore {
    /// The store of `workspace`: reads its key, creating it (and `keys/`) on first use.
    pub fn open(workspace: &Workspace) -> Result<Self, StorageError> {
        let layout = workspace.layout();
        Ok(SignedStore {
            file: layout.candidates_file(),
            key: load_or_create_key(layout)?,
        })
    }

    /// The store's file.
    pub fn path(&self) -> &Path {
        &self.file
    }

    /// Every entry whose signature matches; the other lines are skipped and reported (and
    /// logged once). A missing file is an empty store.
    pub fn load(&self) -> Result<Loaded, StorageError> {
        let bytes = match fs::read(&self.file) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Loaded::default()),
            Err(e) => return Err(io("read", &self.file)(e)),
        };
        let mut loaded = Loaded::default();
        for (index, line) in bytes.split(|&b| b == b'\n').enumerate() {
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match self.verify_line(line) {
                Ok(entry) => {
                    loaded.entries.push(entry);
                    loaded.entry_lines.push(index + 1);
                }
                Err(reason) => loaded.rejected.push(Rejected {
                    line: index + 1,
                    reason: reason.to_owned(),
                    text: line.to_vec(),
                }),
            }
        }
        if !loaded.rejected.is_empty() {
            let lines: Vec<usize> = loaded.rejected.iter().map(|r| r.line).collect();
            tracing::warn!(
                file = %self.file.display(),
                ?lines,
                "skipped {} line(s) of the signed store whose signature is missing or does not match: \
                 they are not used",
                lines.len()
            );
        }
        Ok(loaded)
    }

    /// Replaces the whole file, atomically (0600, fsync'd): the `kept` lines first, verbatim
    /// and in order, then `entries`, each signed. Line `i` (from 1) of the new file is
    /// `kept[i - 1]`'s.
    pub fn save_all(&self, kept: &[Rejected], entries: &[Value]) -> Result<(), StorageError> {
        let mut out = Vec::new();
        for line in kept {
            out.extend_from_slice(&line.text);
            out.push(b'\n');
        }
        for entry in entries {
            out.extend_from_slice(&self.signed_line(entry));
            out.push(b'\n');
        }
        write_atomic(&self.file, &out)
    }

    /// The line that stores `entry`, signed (without its newline): what a reader that
    /// verified `entry` but could not use it keeps through a rewrite.
    pub fn signed_line(&self, entry: &Value) -> Vec<u8> {
        let mut out = b"{\"entry\":".to_vec();
        out.extend_from_slice(&canonical_bytes(entry));
        out.extend_from_slice(b",\"sig\":\"");
        out.extend_from_slice(self.key.sign(entry).as_bytes());
        out.extend_from_slice(b"\"}");
        out
    }

    /// The entry of one line if its signature matches, else why not.
    fn verify_line(&self, line: &[u8]) -> Result<Value, &'static str> {
        let Ok(Value::Object(mut fields)) = serde_json::from_slice::<Value>(line) else {
            return Err("not a JSON object");
        };
        let entry = fields.remove("entry").ok_or("no \"entry\" field")?;
        let sig = match fields.get("sig") {
            None => return Err("unsigned: no \"sig\" field"),
            Some(Value::String(sig)) => sig,
            Some(_) => return Err("malformed signature: \"sig\" is not a string"),
        };
        let sig = from_hex(sig).ok_or("malformed signature: \"sig\" is not 64 hex digits")?;
        if self.key.verifies(&entry, &sig) {
            Ok(entry)
        } else {
            Err("signature does not match the entry (edited after it was signed, or signed with another key)")
        }
    }
}

/// The canonical bytes of `value`: compact JSON, the keys of every object sorted.
pub fn canonical_bytes(value: &Value) -> Vec<u8> {
    serde_json::to_vec(&sorted(value)).expect("a JSON value always serialises")
}

/// `value` with the keys of every object in sorted order (kept by `preserve_order`).
fn sorted(value: &Value) -> Value {
    match value {
        Value::Object(fields) => {
            let mut keys: Vec<&String> = fields.keys().collect();
            keys.sort();
            let mut out = Map::with_capacity(fields.len());
            for key in keys {
                out.insert(key.clone(), sorted(&fields[key]));
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

/// Reads the key of `layout`, or creates it if there is none (see the module documentation).
fn load_or_create_key(layout: &Layout) -> Result<Key, StorageError> {
    let dir = layout.keys_dir();
    create_private_dir_all(&dir)?;
    check_own_dir(&dir)?;
    let path = layout.candidates_key();
    match read_key(&path) {
        Err(StorageError::Io { source, .. }) if source.kind() == ErrorKind::NotFound => {}
        other => return other,
    }
    let mut bytes = [0u8; KEY_LEN];
    getrandom::fill(&mut bytes).map_err(|e| StorageError::Io {
        op: "draw a random key for",
        path: path.clone(),
        source: std::io::Error::other(e.to_string()),
    })?;
    if create_durable(&path, &bytes)? {
        tracing::info!(path = %path.display(), "created the workspace's candidate signing key");
        Ok(Key(bytes))
    } else {
        // Another process created it first: use theirs.
        read_key(&path)
    }
}

/// Reads the key at `path` (not following a symbolic link), tightening a wider mode to 0600.
fn read_key(path: &Path) -> Result<Key, StorageError> {
    let mut file = File::options()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
        .map_err(io("open key", path))?;
    let meta = file.metadata().map_err(io("stat", path))?;
    if meta.mode() & 0o7777 != crate::perms::FILE_MODE {
        tracing::info!(path = %path.display(), "tightening the signing key to 0600");
        make_private(&file, path)?;
    }
    let mut bytes = Vec::with_capacity(KEY_LEN);
    (&mut file)
        .take(KEY_LEN as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(io("read key", path))?;
    let key: [u8; KEY_LEN] = bytes.try_into().map_err(|_| StorageError::Io {
        op: "read key",
        path: path.to_path_buf(),
        source: std::io::Error::new(
            ErrorKind::InvalidData,
            format!(
                "a signing key is {KEY_LEN} bytes and this file is not: remove it to make a new key (what \
                 the old one signed is then rejected)"
            ),
        ),
    })?;
    Ok(Key(key))
}

fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    out
}

/// The bytes of a signature in hex (either case), if it is exactly [`SIG_HEX_LEN`] digits.
fn from_hex(hex: &str) -> Option<Vec<u8>> {
    if hex.len() != SIG_HEX_LEN {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16);
    hex.as_bytes()
        .chunks(2)
        .map(|pair| Some((digit(pair[0])? << 4 | digit(pair[1])?) as u8))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use serde_json::json;

    use super::*;

    fn workspace() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        (dir, ws)
    }

    fn mode(path: &Path) -> u32 {
        fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
    }

    fn entries() -> Vec<Value> {
        vec![
            json!({"text": "run cargo fmt before committing", "kind": "rule", "tags": ["fmt"]}),
            json!({"text": "the flaky test needs --test-threads 1", "kind": "lesson", "n": 1.5}),
            json!({"text": "prefer rustix over libc", "kind": "rule", "scope": {"file": "a.rs"}}),
        ]
    }

    fn key_bytes(ws: &Workspace) -> Vec<u8> {
        fs::read(ws.layout().candidates_key()).unwrap()
    }

    #[test]
    fn round_trip() {
        let (_dir, ws) = workspace();
        let store = SignedStore::open(&ws).unwrap();
        assert_eq!(store.load().unwrap(), Loaded::default(), "a missing file is empty");
        store.save_all(&[], &entries()).unwrap();
        let loaded = store.load().unwrap();
        assert_eq!(loaded.entries, entries());
        assert!(loaded.rejected.is_empty(), "{:?}", loaded.rejected);
        assert_eq!(mode(store.path()), 0o600);
        assert_eq!(store.path(), ws.layout().candidates_file());
        store.save_all(&[], &[]).unwrap();
        assert_eq!(store.load().unwrap(), Loaded::default());
    }

    #[test]
    fn canonical_bytes_sort_keys_at_every_depth() {
        let a: Value = serde_json::from_str(r#"{"b": 1, "a": {"d": [{"z": 1, "y": 2}], "c": null}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a": {"c": null, "d": [{"y": 2, "z": 1}]}, "b": 1}"#).unwrap();
        assert_eq!(
            String::from_utf8(canonical_bytes(&a)).unwrap(),
            r#"{"a":{"c":null,"d":[{"y":2,"z":1}]},"b":1}"#
        );
        assert_eq!(canonical_bytes(&a), canonical_bytes(&b));
    }

    #[test]
    fn key_order_and_spacing_in_the_file_do_not_matter() {
        let (_dir, ws) = workspace();
        let store = SignedStore::open(&ws).unwrap();
        let entry = json!({"text": "x", "kind": "rule"});
        let sig = store.key.sign(&entry);
        let line = format!(
            "{{ \"sig\": \"{}\", \"entry\": {{ \"kind\": \"rule\", \"text\": \"x\" }} }}\n",
            sig.to_uppercase()
        );
        fs::write(store.path(), line).unwrap();
        let loaded = store.load().unwrap();
        assert_eq!(loaded.entries, vec![entry]);
        assert!(loaded.rejected.is_empty());
    }

    #[test]
    fn an_edited_entry_is_rejected_and_the_other_lines_load() {
        let (_dir, ws) = workspace();
        let store = SignedStore::open(&ws).unwrap();
        store.save_all(&[], &entries()).unwrap();
        let text = fs::read_to_string(store.path()).unwrap();
        let edited = text.replacen("flaky", "flakx", 1);
        assert_ne!(text, edited);
        fs::write(store.path(), edited).unwrap();
        let loaded = store.load().unwrap();
        assert_eq!(loaded.entries, vec![entries()[0].clone(), entries()[2].clone()]);
        assert_eq!(loaded.rejected.len(), 1);
        assert_eq!(loaded.rejected[0].line, 2);
        assert!(
            loaded.rejected[0].reason.contains("does not match"),
            "{:?}",
            loaded.rejected
        );
        // The reason never quotes the signature the edited entry would need.
        let expected = store
            .key
            .sign(&json!({"text": "the flakx test needs --test-threads 1", "kind": "lesson", "n": 1.5}));
        assert!(!loaded.rejected[0].reason.contains(&expected));
    }

    #[test]
    fn a_changed_number_is_rejected() {
        let (_dir, ws) = workspace();
        let store = SignedStore::open(&ws).unwrap();
        store.save_all(&[], &entries()[1..2]).unwrap();
        let text = fs::read_to_string(store.path()).unwrap();
        fs::write(store.path(), text.replace("1.5", "2.5")).unwrap();
        let loaded = store.load().unwrap();
        assert!(loaded.entries.is_empty());
        assert_eq!(loaded.rejected.len(), 1);
    }

    #[test]
    fn unsigned_malformed_and_garbage_lines_are_rejected() {
        let (_dir, ws) = workspace();
        let store = SignedStore::open(&ws).unwrap();
        store.save_all(&[], &entries()[..1]).unwrap();
        let mut text = fs::read_to_string(store.path()).unwrap();
        text.push_str("{\"entry\": {\"text\": \"unsigned\"}}\n");
        text.push_str("this is not json\n");
        text.push('\n');
        text.push_str("{\"entry\": {\"text\": \"bad\"}, \"sig\": \"abc\"}\n");
        text.push_str("{\"entry\": {\"text\": \"bad\"}, \"sig\": 7}\n");
        text.push_str("{\"sig\": \"00\"}\n");
        text.push_str("[1, 2]\n");
        fs::write(store.path(), text.as_bytes()).unwrap();
        let mut bytes = fs::read(store.path()).unwrap();
        bytes.extend_from_slice(b"\xff\xfe not utf-8\n");
        fs::write(store.path(), bytes).unwrap();
        let loaded = store.load().unwrap();
        assert_eq!(loaded.entries, entries()[..1].to_vec());
        let got: Vec<(usize, &str)> = loaded.rejected.iter().map(|r| (r.line, r.reason.as_str())).collect();
        assert_eq!(
            got,
            vec![
                (2, "unsigned: no \"sig\" field"),
                (3, "not a JSON object"),
                (5, "malformed signature: \"sig\" is not 64 hex digits"),
                (6, "malformed signature: \"sig\" is not a string"),
                (7, "no \"entry\" field"),
                (8, "not a JSON object"),
                (9, "not a JSON object"),
            ]
        );
    }

    #[test]
    fn a_rewrite_keeps_the_rejected_lines_first_and_verbatim() {
        let (_dir, ws) = workspace();
        let store = SignedStore::open(&ws).unwrap();
        store.save_all(&[], &entries()).unwrap();
        let text = fs::read_to_string(store.path()).unwrap();
        let mut bytes = text.replacen("flaky", "flakx", 1).into_bytes();
        bytes.extend_from_slice(b"forged \xff line\n");
        fs::write(store.path(), &bytes).unwrap();
        let loaded = store.load().unwrap();
        let kept_text: Vec<&[u8]> = loaded.rejected.iter().map(|r| r.text.as_slice()).collect();
        let edited = text.lines().nth(1).unwrap().replacen("flaky", "flakx", 1);
        assert_eq!(kept_text, [edited.as_bytes(), b"forged \xff line"]);

        let new = json!({"text": "a new entry", "kind": "rule"});
        store
            .save_all(&loaded.rejected, &[entries()[0].clone(), new.clone()])
            .unwrap();
        assert_eq!(mode(store.path()), 0o600);
        let written = fs::read(store.path()).unwrap();
        let mut expected = [edited.as_bytes(), b"\n", b"forged \xff line\n"].concat();
        expected.extend_from_slice(text.lines().next().unwrap().as_bytes());
        assert!(written.starts_with(&expected), "{}", String::from_utf8_lossy(&written));
        let again = store.load().unwrap();
        assert_eq!(again.entries, [entries()[0].clone(), new]);
        let got: Vec<(usize, &[u8])> = again.rejected.iter().map(|r| (r.line, r.text.as_slice())).collect();
        assert_eq!(got, [(1, edited.as_bytes()), (2, b"forged \xff line".as_slice())]);
    }

    #[test]
    fn after_the_key_is_replaced_a_rewrite_loses_nothing_the_old_key_signed() {
        let (_dir, ws) = workspace();
        let old = SignedStore::open(&ws).unwrap();
        old.save_all(&[], &entries()).unwrap();
        let old_key = key_bytes(&ws);
        fs::remove_file(ws.layout().candidates_key()).unwrap();
        let new = SignedStore::open(&ws).unwrap();
        let loaded = new.load().unwrap();
        assert!(loaded.entries.is_empty());
        assert_eq!(loaded.rejected.len(), 3);
        let added = json!({"text": "learned after the key was lost", "kind": "rule"});
        new.save_all(&loaded.rejected, std::slice::from_ref(&added)).unwrap();
        // The old key put back: its entries load again, and the new one is kept in turn.
        fs::remove_file(ws.layout().candidates_key()).unwrap();
        fs::write(ws.layout().candidates_key(), &old_key).unwrap();
        fs::set_permissions(ws.layout().candidates_key(), fs::Permissions::from_mode(0o600)).unwrap();
        let restored = SignedStore::open(&ws).unwrap().load().unwrap();
        assert_eq!(restored.entries, entries());
        assert_eq!(restored.rejected.iter().map(|r| r.line).collect::<Vec<_>>(), [4]);
    }

    #[test]
    fn a_file_signed_with_another_workspaces_key_is_rejected_entirely() {
        let (_a, ours) = workspace();
        let (_b, theirs) = workspace();
        let their_store = SignedStore::open(&theirs).unwrap();
        their_store.save_all(&[], &entries()).unwrap();
        fs::copy(their_store.path(), ours.layout().candidates_file()).unwrap();
        let loaded = SignedStore::open(&ours).unwrap().load().unwrap();
        assert!(loaded.entries.is_empty());
        assert_eq!(
            loaded.rejected.iter().map(|r| r.line).collect::<Vec<_>>(),
            vec![1, 2, 3]
        );
        assert_ne!(key_bytes(&ours), key_bytes(&theirs));
        assert_eq!(their_store.load().unwrap().entries, entries());
    }

    #[test]
    fn two_stores_on_one_workspace_share_the_key() {
        let (_dir, ws) = workspace();
        let first = SignedStore::open(&ws).unwrap();
        let key = key_bytes(&ws);
        assert_eq!(key.len(), KEY_LEN);
        first.save_all(&[], &entries()).unwrap();
        let second = SignedStore::open(&ws).unwrap();
        assert_eq!(key_bytes(&ws), key, "opening again keeps the key");
        assert_eq!(second.load().unwrap().entries, entries());
        // Racing creators agree on one key, and leave no temp file behind.
        let (_dir, ws) = workspace();
        let stores: Vec<SignedStore> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8).map(|_| s.spawn(|| SignedStore::open(&ws).unwrap())).collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        stores[0].save_all(&[], &entries()).unwrap();
        for store in &stores {
            assert_eq!(store.load().unwrap().entries, entries());
        }
        let names: Vec<_> = fs::read_dir(ws.layout().keys_dir())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec!["candidates.key"]);
    }

    #[test]
    fn a_key_of_the_wrong_length_is_an_error_that_quotes_nothing_of_it() {
        let (_dir, ws) = workspace();
        create_private_dir_all(&ws.layout().keys_dir()).unwrap();
        fs::write(ws.layout().candidates_key(), "SECRET-short").unwrap();
        let error = SignedStore::open(&ws).unwrap_err();
        let shown = format!("{error} {error:?}");
        assert!(shown.contains("32 bytes"), "{shown}");
        assert!(!shown.contains("SECRET"), "{shown}");
        assert_eq!(
            fs::read(ws.layout().candidates_key()).unwrap(),
            b"SECRET-short",
            "left alone"
        );
    }

    #[test]
    fn the_key_never_shows_in_debug_or_errors() {
        let (_dir, ws) = workspace();
        let store = SignedStore::open(&ws).unwrap();
        let key = key_bytes(&ws);
        let hex = to_hex(&key);
        let debug = format!("{store:?} {:?}", store.key);
        assert!(debug.contains("<redacted>"), "{debug}");
        for shape in [hex.clone(), format!("{key:?}"), format!("{:?}", &key[..4])] {
            assert!(!debug.contains(&shape), "{debug}");
        }
        // An error of the store (its file is a directory) names the path, not the key.
        fs::create_dir(store.path()).unwrap();
        for error in [store.load().unwrap_err(), store.save_all(&[], &entries()).unwrap_err()] {
            let shown = format!("{error} {error:?}");
            assert!(!shown.contains(&hex) && !shown.contains(&format!("{key:?}")), "{shown}");
        }
    }

    #[test]
    fn a_wide_key_is_tightened_and_a_symlinked_key_refused() {
        let (_dir, ws) = workspace();
        drop(SignedStore::open(&ws).unwrap());
        let key = ws.layout().candidates_key();
        fs::set_permissions(&key, fs::Permissions::from_mode(0o644)).unwrap();
        fs::set_permissions(ws.layout().keys_dir(), fs::Permissions::from_mode(0o755)).unwrap();
        SignedStore::open(&ws).unwrap();
        assert_eq!(mode(&key), 0o600);
        assert_eq!(mode(&ws.layout().keys_dir()), 0o700);
        let elsewhere = tempfile::tempdir().unwrap();
        let planted = elsewhere.path().join("k");
        fs::write(&planted, [7u8; KEY_LEN]).unwrap();
        fs::remove_file(&key).unwrap();
        std::os::unix::fs::symlink(&planted, &key).unwrap();
        assert!(SignedStore::open(&ws).is_err(), "a symlinked key is not followed");
    }

    /// Set by [`key_is_private_under_umask_000`] for the copy of itself it runs under umask 000.
    const UMASK_CHILD: &str = "SATCHEL_SIGNED_UMASK_CHILD";

    #[test]
    fn key_is_private_under_umask_000() {
        if let Ok(root) = std::env::var(UMASK_CHILD) {
            // The child: umask 000 is in effect (the control file shows it to the parent).
            fs::write(Path::new(&root).join("control"), "x").unwrap();
            let ws = Workspace::open(&Path::new(&root).join("ws")).unwrap();
            SignedStore::open(&ws).unwrap().save_all(&[], &entries()).unwrap();
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let child = std::process::Command::new("sh")
            .arg("-c")
            .arg("umask 000 && exec \"$0\" \"$@\"")
            .arg(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "signed::tests::key_is_private_under_umask_000",
                "--test-threads",
                "1",
            ])
            .env(UMASK_CHILD, dir.path())
            .output()
            .unwrap();
        assert!(
            child.status.success(),
            "{}{}",
            String::from_utf8_lossy(&child.stdout),
            String::from_utf8_lossy(&child.stderr)
        );
        assert_eq!(
            mode(&dir.path().join("control")),
            0o666,
            "the child ran under umask 000"
        );
        let layout = Layout::new(dir.path().join("ws"));
        assert_eq!(mode(&layout.keys_dir()), 0o700);
        assert_eq!(mode(&layout.candidates_key()), 0o600);
        assert_eq!(mode(&layout.candidates_file()), 0o600);
        assert_eq!(fs::metadata(layout.candidates_key()).unwrap().len(), KEY_LEN as u64);
    }
}
