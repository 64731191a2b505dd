//! What a JSON Schema may hold before it is compiled: every bound here keeps compiling
//! and checking it cheap, whatever the client sent. One walk over the schema counts its
//! patterns and branches, measures its depth and its size with local `$ref`s expanded,
//! and finds the pattern syntax a linear-time engine cannot run (backreferences,
//! look-around), naming where each problem is as a JSON Pointer into the schema.

use std::collections::HashMap;

use serde_json::{Map, Value};

/// Patterns per schema: `pattern` values and `patternProperties` keys. Each is compiled
/// into its own automaton, and each runs on every string it applies to.
pub const MAX_PATTERNS: usize = 64;
/// Characters per pattern.
pub const MAX_PATTERN_CHARS: usize = 1_000;
/// `anyOf`, `oneOf` and `allOf` entries per schema, all together: each is tried on the
/// value it applies to.
pub const MAX_BRANCHES: usize = 256;
/// How deeply a schema nests (objects and arrays).
pub const MAX_DEPTH: usize = 32;
/// Subschemas a value can meet with every local `$ref` expanded where it stands: a few
/// definitions that each refer twice to the next would otherwise make a small schema
/// cost 2^n checks per value.
pub const MAX_EXPANDED_NODES: u64 = 20_000;
/// `$ref`s followed one inside another (a chain `a → b → c …`). Nesting is bounded by
/// [`MAX_DEPTH`] within the text, but a chain of references nests without it, and both the
/// expansion below and the validator recurse once per link: a chain thousands long would
/// overflow a thread's stack, which aborts the whole server.
pub const MAX_REF_CHAIN: usize = 32;

/// Keywords whose values are data, not subschemas: not expanded, so a large `enum` costs
/// one node (a `$ref` into them is still followed and counted).
const DATA_KEYWORDS: [&str; 4] = ["const", "enum", "default", "examples"];

/// Keywords that name a schema or resolve a reference other than by JSON Pointer from the
/// root. Refused (at the root, `$id` is allowed): with them a `#/…` reference could mean
/// another place than the one measured here, and the expansion bound would not hold.
const RESOLVING_KEYWORDS: [&str; 5] = [
    "$anchor",
    "$dynamicAnchor",
    "$dynamicRef",
    "$recursiveAnchor",
    "$recursiveRef",
];

/// The first problem that makes `schema` refused, in words for the client.
pub fn check(schema: &Value) -> Result<(), String> {
    if let Some(Value::String(draft)) = schema.get("$schema")
        && (draft.contains("draft-03") || draft.contains("draft-04"))
    {
        return Err(format!(
            "`$schema` {draft} is not supported (its `id` would change how references \
             resolve): use draft-06 or later, or leave `$schema` out (2020-12)"
        ));
    }
    let mut walk = Walk::default();
    walk.visit(schema, &mut String::new(), 0)?;
    if walk.patterns > MAX_PATTERNS {
        return Err(format!(
            "it has {} patterns (`pattern` values and `patternProperties` keys); the limit is \
             {MAX_PATTERNS}",
            walk.patterns
        ));
    }
    if walk.branches > MAX_BRANCHES {
        return Err(format!(
            "it has {} `anyOf`/`oneOf`/`allOf` branches in all; the limit is {MAX_BRANCHES}",
            walk.branches
        ));
    }
    let mut expansion = Expansion {
        root: schema,
        done: HashMap::new(),
        open: Vec::new(),
        chain_too_long: false,
    };
    let nodes = expansion.cost(schema);
    if expansion.chain_too_long {
        return Err(format!(
            "it has a chain of more than {MAX_REF_CHAIN} `$ref`s, each leading into the next"
        ));
    }
    if nodes > MAX_EXPANDED_NODES {
        return Err(format!(
            "with its `$ref`s expanded it has over {MAX_EXPANDED_NODES} subschemas, the limit \
             (references that each lead to the same definition several times multiply)"
        ));
    }
    Ok(())
}

#[derive(Default)]
struct Walk {
    patterns: usize,
    branches: usize,
}

impl Walk {
    /// Every object in the document counts, data included: a `$ref` may point anywhere,
    /// and erring towards counting costs nothing a real schema needs.
    fn visit(&mut self, value: &Value, path: &mut String, depth: usize) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err(format!(
                "it nests deeper than {MAX_DEPTH} levels (at {path}); that is the limit"
            ));
        }
        match value {
            Value::Object(object) => {
                self.keywords(object, path)?;
                for (key, child) in object {
                    let len = path.len();
                    push_token(path, key);
                    self.visit(child, path, depth + 1)?;
                    path.truncate(len);
                }
            }
            Value::Array(items) => {
                for (i, child) in items.iter().enumerate() {
                    let len = path.len();
                    path.push('/');
                    path.push_str(&i.to_string());
                    self.visit(child, path, depth + 1)?;
                    path.truncate(len);
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn keywords(&mut self, object: &Map<String, Value>, pointer: &str) -> Result<(), String> {
        let path = if pointer.is_empty() {
            "the root"
        } else {
            pointer
        };
        if let Some(Value::String(reference)) = object.get("$ref")
            && reference != "#"
            && !reference.starts_with("#/")
        {
            return Err(format!(
                "the `$ref` at {path} is \"{reference}\": only references into this schema by \
                 JSON Pointer (`#` or `#/…`) are supported"
            ));
        }
        if let Some(keyword) = RESOLVING_KEYWORDS.iter().find(|k| object.contains_key(**k)) {
            return Err(format!(
                "`{keyword}` (at {path}) is not supported: references resolve only by JSON \
                 Pointer from the root (`#/…`)"
            ));
        }
        if !pointer.is_empty() && object.contains_key("$id") {
            return Err(format!(
                "a nested `$id` (at {path}) is not supported: references resolve only by \
                 JSON Pointer from the root (`#/…`)"
            ));
        }
        if let Some(Value::String(pattern)) = object.get("pattern") {
            self.patterns += 1;
            allowed(pattern, &format!("{pointer}/pattern"))?;
        }
        if let Some(Value::Object(properties)) = object.get("patternProperties") {
            for pattern in properties.keys() {
                self.patterns += 1;
                let mut at = format!("{pointer}/patternProperties");
                push_token(&mut at, pattern);
                allowed(pattern, &at)?;
            }
        }
        for key in ["anyOf", "oneOf", "allOf"] {
            if let Some(Value::Array(branches)) = object.get(key) {
                self.branches += branches.len();
            }
        }
        Ok(())
    }
}

/// A pattern the linear-time engine can take: bounded in length, and without the two
/// ECMA-262 features it has no equivalent for. Anything else it cannot compile is
/// refused when the schema is compiled, at the same path.
fn allowed(pattern: &str, path: &str) -> Result<(), String> {
    let chars = pattern.chars().count();
    if chars > MAX_PATTERN_CHARS {
        return Err(format!(
            "the pattern at {path} has {chars} characters; the limit is {MAX_PATTERN_CHARS}"
        ));
    }
    if let Some(feature) = unsupported(pattern) {
        return Err(format!(
            "the pattern at {path} uses {feature}: patterns run on a linear-time engine \
             (Rust's `regex` syntax), which has no backreferences and no look-around"
        ));
    }
    Ok(())
}

/// A backreference (`\1`, `\k<name>`) or look-around (`(?=`, `(?!`, `(?<=`, `(?<!`)
/// outside a character class, in ECMA-262 syntax.
fn unsupported(pattern: &str) -> Option<&'static str> {
    let mut in_class = false;
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('1'..='9') if !in_class => return Some("a backreference (`\\N`)"),
                Some('k') if !in_class && chars.peek() == Some(&'<') => {
                    return Some("a backreference (`\\k<name>`)");
                }
                _ => {}
            },
            '[' if !in_class => in_class = true,
            ']' if in_class => in_class = false,
            '(' if !in_class => {
                let next: String = chars.clone().take(3).collect();
                if ["?=", "?!", "?<=", "?<!"]
                    .iter()
                    .any(|l| next.starts_with(l))
                {
                    return Some("look-around (`(?=`, `(?!`, `(?<=` or `(?<!`)");
                }
            }
            _ => {}
        }
    }
    None
}

/// What `pointer` leads to, read as the validator's resolver reads it (array indexes as
/// any `usize` parses, `+1` and `01` included): a stricter reading would miss targets
/// the validator follows.
fn resolve<'a>(root: &'a Value, pointer: &str) -> Option<&'a Value> {
    if pointer.is_empty() {
        return Some(root);
    }
    let mut at = root;
    for segment in pointer.strip_prefix('/')?.split('/') {
        at = match at {
            Value::Array(items) => items.get(segment.parse::<usize>().ok()?)?,
            Value::Object(object) => object.get(&segment.replace("~1", "/").replace("~0", "~"))?,
            _ => return None,
        };
    }
    Some(at)
}

/// `%XX` escapes decoded; `None` when the result is not UTF-8.
fn percent_decoded(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// Appends `/token` to a JSON Pointer, escaped.
fn push_token(path: &mut String, token: &str) {
    path.push('/');
    path.push_str(&token.replace('~', "~0").replace('/', "~1"));
}

/// The size of the schema with every local `$ref` (`#` or `#/…`) replaced by what it
/// points to; a reference back into a definition being expanded counts once (recursion
/// follows the value, which is bounded). Other references do not compile (no resolvers).
/// A cost that is over the limit, whatever more is added.
const OVER: u64 = MAX_EXPANDED_NODES + 1;

struct Expansion<'a> {
    root: &'a Value,
    done: HashMap<&'a str, u64>,
    open: Vec<&'a str>,
    /// Set when a chain of references passed [`MAX_REF_CHAIN`] (the walk then stops).
    chain_too_long: bool,
}

impl<'a> Expansion<'a> {
    fn cost(&mut self, value: &'a Value) -> u64 {
        let mut total: u64 = 1;
        match value {
            Value::Object(object) => {
                for (key, child) in object {
                    if DATA_KEYWORDS.contains(&key.as_str()) {
                        continue;
                    }
                    total = total.saturating_add(self.cost(child));
                    if total > MAX_EXPANDED_NODES {
                        return OVER;
                    }
                }
                if let Some(Value::String(reference)) = object.get("$ref") {
                    total = total.saturating_add(self.reference(reference));
                }
            }
            Value::Array(items) => {
                for child in items {
                    total = total.saturating_add(self.cost(child));
                    // Past the limit the answer is known: stop visiting at once (spellings
                    // of one reference are expanded each, so a walk could otherwise be
                    // long before it is refused).
                    if total > MAX_EXPANDED_NODES {
                        return OVER;
                    }
                }
            }
            _ => {}
        }
        total.min(OVER)
    }

    fn reference(&mut self, reference: &'a str) -> u64 {
        if let Some(&cost) = self.done.get(reference) {
            return cost;
        }
        if self.open.contains(&reference) {
            return 1;
        }
        if self.open.len() >= MAX_REF_CHAIN {
            self.chain_too_long = true;
            return OVER;
        }
        // The fragment is percent-decoded before it is read as a pointer, as the
        // validator does; one that leads nowhere does not compile.
        let Some(target) = reference
            .strip_prefix('#')
            .and_then(percent_decoded)
            .and_then(|pointer| resolve(self.root, &pointer))
        else {
            return 1;
        };
        self.open.push(reference);
        let cost = self.cost(target);
        self.open.pop();
        self.done.insert(reference, cost);
        cost
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn backreferences_and_look_around_are_found_outside_classes_only() {
        assert!(unsupported(r"^(a|aa)+\1c$").is_some());
        assert!(unsupported(r"(?<n>a)\k<n>").is_some());
        for pattern in ["(?=a)", "(?!a)", "(?<=a)b", "(?<!a)b"] {
            assert!(
                unsupported(pattern).unwrap().contains("look-around"),
                "{pattern}"
            );
        }
        for pattern in [
            r"^[(?=\1)]+$",
            r"\\1",
            r"\0",
            r"(?<name>a)",
            r"^\d{3}-[a-z]+$",
            r"\(?=x",
        ] {
            assert_eq!(unsupported(pattern), None, "{pattern}");
        }
    }

    #[test]
    fn counts_depth_and_expansion_have_limits_named_in_the_message() {
        let e = check(&json!({"properties": {"a/b": {"anyOf": [{"pattern": "x"},
            {"pattern": "(a)\\1"}]}}}))
        .unwrap_err();
        assert!(e.contains("/properties/a~1b/anyOf/1/pattern"), "{e}");
        let e = check(&json!({"patternProperties": {"^(?!x)": {}}})).unwrap_err();
        assert!(e.contains("/patternProperties/^(?!x)"), "{e}");
        let patterns: Vec<Value> = (0..=MAX_PATTERNS)
            .map(|_| json!({"pattern": "a"}))
            .collect();
        assert!(
            check(&json!({"items": patterns}))
                .unwrap_err()
                .contains("patterns")
        );
        let branches = vec![json!(true); MAX_BRANCHES + 1];
        assert!(
            check(&json!({"oneOf": branches}))
                .unwrap_err()
                .contains("branches")
        );
        let deep = (0..=MAX_DEPTH).fold(json!({}), |inner, _| json!([inner]));
        assert!(check(&deep).unwrap_err().contains("deeper"));

        // Each definition refers twice to the next: 2^20 subschemas from 40 references.
        let mut defs = Map::new();
        for i in 0..20 {
            let next = json!({"$ref": format!("#/$defs/l{}", i + 1)});
            defs.insert(format!("l{i}"), json!({"allOf": [next, next]}));
        }
        defs.insert("l20".into(), json!({"minLength": 1}));
        let doubling = json!({"$ref": "#/$defs/l0", "$defs": defs});
        assert!(check(&doubling).unwrap_err().contains("expanded"));
        // The same by anchors or nested `$id`s, which this bound cannot follow: refused.
        for (keyword, schema) in [
            ("$anchor", json!({"$defs": {"a": {"$anchor": "a"}}})),
            ("$ref", json!({"$defs": {"a": {}}, "$ref": "#a"})),
            ("$id", json!({"$defs": {"a": {"$id": "https://x/a"}}})),
            (
                "$dynamicRef",
                json!({"$dynamicRef": "#/$defs/a", "$defs": {"a": {}}}),
            ),
            (
                "draft-04",
                json!({"$schema": "http://json-schema.org/draft-04/schema#"}),
            ),
        ] {
            let e = check(&schema).unwrap_err();
            assert!(e.contains(keyword), "{keyword}: {e}");
        }
        // A percent-encoded pointer is followed like any other.
        let mut spaced = doubling.clone();
        let defs = spaced["$defs"].as_object_mut().unwrap();
        let first = defs.remove("l0").unwrap();
        defs.insert("l 0".into(), first);
        spaced["$ref"] = json!("#/$defs/l%200");
        assert!(check(&spaced).unwrap_err().contains("expanded"));
        assert_eq!(
            check(&json!({"$id": "https://x/root", "$ref": "#"})),
            Ok(())
        );
        // Array indexes the validator reads leniently are followed too (15 levels: 2^15
        // subschemas over a chain of 30 references, within MAX_REF_CHAIN).
        let mut defs = Map::new();
        for i in 0..15 {
            let (a, b) = (format!("#/$defs/w{i}/01"), format!("#/$defs/w{i}/+1"));
            defs.insert(
                format!("l{i}"),
                json!({"allOf": [{"$ref": a}, {"$ref": b}]}),
            );
            let next = format!("#/$defs/l{}", i + 1);
            defs.insert(format!("w{i}"), json!([{}, {"$ref": next}]));
        }
        defs.insert("l15".into(), json!({"minLength": 1}));
        let lenient = json!({"$ref": "#/$defs/l0", "$defs": defs});
        assert!(check(&lenient).unwrap_err().contains("expanded"));
        // Recursion (a tree) and a big enum are fine.
        let tree = json!({"type": "object", "properties": {"children": {"type": "array",
            "items": {"$ref": "#"}}}});
        assert_eq!(check(&tree), Ok(()));
        let values: Vec<Value> = (0..5_000).map(|i| json!(i)).collect();
        assert_eq!(check(&json!({"enum": values})), Ok(()));
    }

    #[test]
    fn a_long_chain_of_references_is_refused_before_anything_recurses_along_it() {
        let mut defs = serde_json::Map::new();
        for i in 0..2_000 {
            defs.insert(
                format!("d{i}"),
                json!({"$ref": format!("#/$defs/d{}", i + 1)}),
            );
        }
        defs.insert("d2000".into(), json!({"type": "string"}));
        let schema = json!({"$defs": defs, "$ref": "#/$defs/d0"});
        let err = check(&schema).unwrap_err();
        assert!(err.contains("chain of more than 32"), "{err}");
        // A short chain is fine.
        let schema = json!({
            "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"type": "string"}},
            "$ref": "#/$defs/a"
        });
        assert_eq!(check(&schema), Ok(()));
    }
}
