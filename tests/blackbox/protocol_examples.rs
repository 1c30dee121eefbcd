//! Replays every example of `protocol/examples/` against the real daemon, over stdio and over
//! the Unix socket, each time on a fresh workspace, and checks that:
//!
//! - every response equals the expected one, where the string `"<any>"` matches any value and
//!   `"<any>"` inside a longer string matches any run of characters (e.g. `"dialog/<any>.jsonl"`);
//! - a request param written `"<result of N at /json/pointer>"` is sent as that value of the
//!   result of the earlier request with id N (an id the daemon made up, such as a compaction's);
//! - the notifications the connection received equal the example's `notifications` (none if absent);
//! - each `result` (and each successful request's `params`, and each `context.event`) is valid
//!   against its JSON Schema in `protocol/openrpc.json`, checked by the small validator below;
//! - each error code is one the protocol documents;
//! - together, the examples show every method of `openrpc.json` succeeding.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::support::{Daemon, Framing, SocketClient, wait_for_path};

/// Matches any value, or any run of characters inside a string.
const ANY: &str = "<any>";

fn protocol_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../protocol")
}

fn read_json(path: &Path) -> Value {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every example file, by name.
fn examples() -> Vec<(String, Value)> {
    let dir = protocol_dir().join("examples");
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(files.len() >= 8, "the examples are missing from {}", dir.display());
    files
        .iter()
        .map(|path| {
            (
                path.file_name().unwrap().to_string_lossy().into_owned(),
                read_json(path),
            )
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Matching expected values with placeholders
// ---------------------------------------------------------------------------------------------

/// Why `actual` does not match `expected`, naming the JSON path of the first difference.
fn mismatch(expected: &Value, actual: &Value, path: &str) -> Option<String> {
    match (expected, actual) {
        (Value::String(e), _) if e == ANY => None,
        (Value::String(e), Value::String(a)) if e.contains(ANY) => {
            (!glob_matches(e, a)).then(|| format!("{path}: {a:?} does not match the pattern {e:?}"))
        }
        (Value::Object(e), Value::Object(a)) => {
            for key in a.keys() {
                if !e.contains_key(key) {
                    return Some(format!("{path}/{key}: not expected, got {}", a[key]));
                }
            }
            e.iter().find_map(|(key, e)| match a.get(key) {
                Some(a) => mismatch(e, a, &format!("{path}/{key}")),
                None => Some(format!("{path}/{key}: missing, expected {e}")),
            })
        }
        (Value::Array(e), Value::Array(a)) => {
            if e.len() != a.len() {
                return Some(format!("{path}: {} items, expected {}: {actual}", a.len(), e.len()));
            }
            e.iter()
                .zip(a)
                .enumerate()
                .find_map(|(i, (e, a))| mismatch(e, a, &format!("{path}/{i}")))
        }
        _ => (expected != actual).then(|| format!("{path}: got {actual}, expected {expected}")),
    }
}

/// Whether `text` matches `pattern`, in which each `<any>` stands for any run of characters.
fn glob_matches(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split(ANY).collect();
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first) || text.len() < first.len() + last.len() || !text.ends_with(last) {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

#[test]
fn placeholders_match_what_they_should_and_nothing_else() {
    let expected = serde_json::json!({"a": "<any>", "b": "dialog/<any>.jsonl", "c": [1, {"d": null}]});
    let good = serde_json::json!({"a": {"x": 1}, "b": "dialog/2026-01-02.jsonl", "c": [1, {"d": null}]});
    assert_eq!(mismatch(&expected, &good, ""), None);
    for (bad, why) in [
        (
            serde_json::json!({"a": 1, "b": "dialog/x.json", "c": [1, {"d": null}]}),
            "/b",
        ),
        (
            serde_json::json!({"a": 1, "b": "dialog/x.jsonl", "c": [1, {"d": 0}]}),
            "/c/1/d",
        ),
        (serde_json::json!({"a": 1, "b": "dialog/x.jsonl", "c": [1]}), "/c"),
        (
            serde_json::json!({"a": 1, "b": "dialog/x.jsonl", "c": [1, {"d": null}], "e": 2}),
            "/e",
        ),
        (serde_json::json!({"b": "dialog/x.jsonl", "c": [1, {"d": null}]}), "/a"),
    ] {
        let found = mismatch(&expected, &bad, "").expect("a mismatch");
        assert!(found.starts_with(why), "{why}: {found}");
    }
    assert!(glob_matches("<any>", ""));
    assert!(glob_matches("a<any>b<any>c", "a--b--c"));
    assert!(!glob_matches("a<any>b<any>c", "a--c--b"));
    assert!(!glob_matches("ab<any>ba", "aba"));
}

// ---------------------------------------------------------------------------------------------
// A minimal JSON Schema validator: the keywords schemars emits
// ---------------------------------------------------------------------------------------------

/// Errors of `value` against `schema`; `root` holds the `$defs` that `$ref`s point into.
fn schema_errors(root: &Value, schema: &Value, value: &Value, path: &str, errors: &mut Vec<String>) {
    let Some(schema) = schema.as_object() else {
        if schema == &Value::Bool(false) {
            errors.push(format!("{path}: no value is allowed here"));
        }
        return;
    };
    if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
        let name = reference
            .strip_prefix("#/$defs/")
            .unwrap_or_else(|| panic!("unsupported $ref {reference}"));
        let target = root["$defs"]
            .get(name)
            .unwrap_or_else(|| panic!("$ref {reference} points nowhere"));
        schema_errors(root, target, value, path, errors);
    }
    if let Some(types) = schema.get("type") {
        let allowed: Vec<&str> = match types {
            Value::String(t) => vec![t.as_str()],
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
            other => panic!("unsupported type {other}"),
        };
        if !allowed.iter().any(|t| has_type(value, t)) {
            errors.push(format!("{path}: {value} is not of type {allowed:?}"));
            return;
        }
    }
    if let Some(constant) = schema.get("const")
        && constant != value
    {
        errors.push(format!("{path}: {value} is not {constant}"));
    }
    if let Some(options) = schema.get("enum").and_then(Value::as_array)
        && !options.contains(value)
    {
        errors.push(format!("{path}: {value} is not one of {options:?}"));
    }
    if let (Some(minimum), Some(n)) = (schema.get("minimum").and_then(Value::as_f64), value.as_f64())
        && n < minimum
    {
        errors.push(format!("{path}: {n} is below the minimum {minimum}"));
    }
    let passes = |branch: &Value| {
        let mut branch_errors = Vec::new();
        schema_errors(root, branch, value, path, &mut branch_errors);
        branch_errors.is_empty()
    };
    if let Some(branches) = schema.get("anyOf").and_then(Value::as_array)
        && !branches.iter().any(passes)
    {
        errors.push(format!("{path}: {value} matches none of anyOf"));
    }
    if let Some(branches) = schema.get("oneOf").and_then(Value::as_array) {
        let passing = branches.iter().filter(|b| passes(b)).count();
        if passing != 1 {
            errors.push(format!("{path}: {value} matches {passing} branches of oneOf"));
        }
    }
    if let Some(branches) = schema.get("allOf").and_then(Value::as_array) {
        for branch in branches {
            schema_errors(root, branch, value, path, errors);
        }
    }
    if let Some(object) = value.as_object() {
        object_errors(root, schema, object, path, errors);
    }
    if let (Some(items), Some(array)) = (schema.get("items"), value.as_array()) {
        for (i, item) in array.iter().enumerate() {
            schema_errors(root, items, item, &format!("{path}/{i}"), errors);
        }
    }
}

fn object_errors(
    root: &Value,
    schema: &Map<String, Value>,
    object: &Map<String, Value>,
    path: &str,
    errors: &mut Vec<String>,
) {
    let empty = Map::new();
    let properties = schema.get("properties").and_then(Value::as_object).unwrap_or(&empty);
    for key in schema.get("required").and_then(Value::as_array).into_iter().flatten() {
        let key = key.as_str().expect("required names are strings");
        if !object.contains_key(key) {
            errors.push(format!("{path}: required property {key:?} is missing"));
        }
    }
    for (key, value) in object {
        let at = format!("{path}/{key}");
        match (properties.get(key), schema.get("additionalProperties")) {
            (Some(property), _) => schema_errors(root, property, value, &at, errors),
            (None, Some(Value::Bool(false))) => errors.push(format!("{at}: property not allowed")),
            (None, Some(additional)) => schema_errors(root, additional, value, &at, errors),
            (None, None) => {}
        }
    }
}

fn has_type(value: &Value, name: &str) -> bool {
    match name {
        "null" => value.is_null(),
        "boolean" => value.is_boolean(),
        "string" => value.is_string(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        "number" => value.is_number(),
        "integer" => value.is_i64() || value.is_u64() || value.as_f64().is_some_and(|f| f.fract() == 0.0),
        other => panic!("unknown JSON Schema type {other}"),
    }
}

/// Checks `value` against a root schema, failing with every error found.
fn assert_valid(schema: &Value, value: &Value, what: &str) {
    let mut errors = Vec::new();
    schema_errors(schema, schema, value, "", &mut errors);
    assert!(
        errors.is_empty(),
        "{what} is not valid against its schema:\n{}",
        errors.join("\n")
    );
}

#[test]
fn the_validator_catches_wrong_types_missing_keys_and_bad_enums() {
    let openrpc = read_json(&protocol_dir().join("openrpc.json"));
    let schema = &method(&openrpc, "context.inspect")["result"]["schema"];
    let example = &examples()
        .into_iter()
        .find(|(name, _)| name == "inspect.json")
        .expect("inspect.json")
        .1["responses"][1]["result"];
    assert_valid(schema, example, "inspect.json");
    let broken = |edit: &dyn Fn(&mut Value)| {
        let mut value = example.clone();
        edit(&mut value);
        let mut errors = Vec::new();
        schema_errors(schema, schema, &value, "", &mut errors);
        errors
    };
    assert!(!broken(&|v| v["messages"] = Value::from("4")).is_empty(), "type");
    assert!(!broken(&|v| v["messages"] = Value::from(-1)).is_empty(), "minimum");
    assert!(
        !broken(&|v| {
            v.as_object_mut().unwrap().remove("peak_tokens");
        })
        .is_empty(),
        "required"
    );
    assert!(!broken(&|v| v["pressure"] = Value::from("extreme")).is_empty(), "enum");
    assert!(!broken(&|v| v["tokens"]["total"] = Value::Null).is_empty(), "$ref");
    assert!(
        !broken(&|v| v["offloaded"][0]["file"] = Value::from(7)).is_empty(),
        "items"
    );
    assert!(!broken(&|v| v["format"] = Value::from("xml")).is_empty(), "anyOf");
    assert!(broken(&|v| v["format"] = Value::Null).is_empty(), "null is allowed");
}

// ---------------------------------------------------------------------------------------------
// Replaying the examples
// ---------------------------------------------------------------------------------------------

fn method<'a>(openrpc: &'a Value, name: &str) -> &'a Value {
    openrpc["methods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .unwrap_or_else(|| panic!("{name} is not in openrpc.json"))
}

/// Either connection to the daemon.
enum Connection {
    Stdio(Daemon),
    Socket(Daemon, SocketClient),
}

impl Connection {
    fn start(workspace: &Path, socket: bool) -> Connection {
        if !socket {
            return Connection::Stdio(Daemon::start(workspace, &[]));
        }
        let daemon = Daemon::start_with_args(workspace, &[], &["--socket"]);
        wait_for_path(&workspace.join("run").join("daemon.json"));
        let client = SocketClient::connect(&workspace.join("run").join("satchel.sock"));
        Connection::Socket(daemon, client)
    }

    fn send(&mut self, value: &Value) {
        match self {
            Connection::Stdio(daemon) => daemon.send(value, Framing::Ndjson),
            Connection::Socket(_, client) => client.send(value),
        }
    }

    fn next_frame(&mut self) -> Value {
        match self {
            Connection::Stdio(daemon) => daemon.next_frame().1,
            Connection::Socket(_, client) => client.next_frame().1,
        }
    }

    fn finish(self) {
        match self {
            Connection::Stdio(daemon) | Connection::Socket(daemon, _) => daemon.shutdown(),
        }
    }
}

/// `request` with each `"<result of N at /pointer>"` string replaced by that value of the
/// result of request `N` among `results`.
fn with_references(request: &Value, results: &[(Value, Value)]) -> Value {
    match request {
        Value::String(text) => {
            let Some(reference) = text.strip_prefix("<result of ").and_then(|t| t.strip_suffix('>')) else {
                return request.clone();
            };
            let (id, pointer) = reference.split_once(" at ").expect("<result of N at /pointer>");
            let id: Value = serde_json::from_str(id).expect("a request id");
            let (_, result) = results
                .iter()
                .find(|(i, _)| *i == id)
                .unwrap_or_else(|| panic!("{text}: no result of request {id} yet"));
            result
                .pointer(pointer)
                .unwrap_or_else(|| panic!("{text}: nothing at {pointer} in {result}"))
                .clone()
        }
        Value::Array(items) => Value::Array(items.iter().map(|v| with_references(v, results)).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), with_references(v, results)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Replays one example and checks it; `socket` picks the transport.
fn replay(name: &str, example: &Value, openrpc: &Value, socket: bool) {
    let transport = if socket { "socket" } else { "stdio" };
    let requests = example["requests"].as_array().expect("requests");
    let expected = example["responses"].as_array().expect("responses");
    let expected_notifications = example.get("notifications").cloned().unwrap_or(Value::Array(vec![]));
    assert!(
        example["description"].as_str().is_some_and(|d| !d.is_empty()),
        "{name}: a description"
    );
    let with_id = requests.iter().filter(|r| r.get("id").is_some()).count();
    assert_eq!(expected.len(), with_id, "{name}: one response per request with an id");

    let dir = tempfile::tempdir().unwrap();
    let mut conn = Connection::start(dir.path(), socket);
    let mut responses = expected.iter();
    let mut notifications = Vec::new();
    let mut results: Vec<(Value, Value)> = Vec::new();
    for request in requests {
        let request = &with_references(request, &results);
        conn.send(request);
        let Some(id) = request.get("id") else {
            continue; // a notification: nothing comes back
        };
        let response = loop {
            let frame = conn.next_frame();
            if frame.get("method").is_some() && frame.get("id").is_none() {
                notifications.push(frame);
                continue;
            }
            assert_eq!(
                &frame["id"], id,
                "{name} ({transport}): a reply to another request: {frame}"
            );
            break frame;
        };
        let want = responses.next().expect("counted above");
        if let Some(why) = mismatch(want, &response, "") {
            panic!("{name} ({transport}), request {id}: {why}\nfull response: {response}");
        }
        let method_name = request["method"].as_str().unwrap_or_default();
        if let Some(result) = response.get("result") {
            results.push((id.clone(), result.clone()));
            let spec = method(openrpc, method_name);
            assert_valid(
                &spec["result"]["schema"],
                result,
                &format!("{name} ({transport}): result of request {id} ({method_name})"),
            );
            assert_valid(
                &spec["params"][0]["schema"],
                request.get("params").unwrap_or(&Value::Object(Map::new())),
                &format!("{name}: params of request {id} ({method_name})"),
            );
        } else {
            let error = &response["error"];
            assert!(error["message"].is_string(), "{name}: {response}");
            let documented = openrpc["x-satchel-errors"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["code"] == error["code"]);
            assert!(documented, "{name}: error code {} is not documented", error["code"]);
        }
    }
    // Events published by the last call may trail its reply.
    let wanted = expected_notifications.as_array().map_or(0, Vec::len);
    while notifications.len() < wanted {
        notifications.push(conn.next_frame());
    }
    if let Some(why) = mismatch(&expected_notifications, &Value::Array(notifications.clone()), "") {
        panic!("{name} ({transport}), notifications: {why}");
    }
    let event_schema = openrpc["x-satchel-notifications"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "context.event")
        .expect("context.event is documented")["params"]
        .clone();
    for event in notifications.iter().filter(|n| n["method"] == "context.event") {
        assert_valid(&event_schema, &event["params"], &format!("{name}: context.event"));
    }
    conn.finish();
}

#[test]
fn every_example_replays_exactly_over_stdio_and_the_socket() {
    let openrpc = read_json(&protocol_dir().join("openrpc.json"));
    for (name, example) in examples() {
        for socket in [false, true] {
            replay(&name, &example, &openrpc, socket);
        }
    }
}

#[test]
fn the_examples_show_every_method_succeeding() {
    let openrpc = read_json(&protocol_dir().join("openrpc.json"));
    let methods: BTreeSet<&str> = openrpc["methods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    let mut shown = BTreeSet::new();
    for (_, example) in examples() {
        let ids: Vec<&Value> = example["requests"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r.get("id").is_some())
            .collect();
        for (request, response) in ids.iter().zip(example["responses"].as_array().unwrap()) {
            if response.get("result").is_some() {
                shown.insert(request["method"].as_str().unwrap().to_owned());
            }
        }
    }
    let missing: Vec<&&str> = methods.iter().filter(|m| !shown.contains(**m)).collect();
    assert!(missing.is_empty(), "no example shows {missing:?} succeeding");
}
