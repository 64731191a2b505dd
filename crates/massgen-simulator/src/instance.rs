//! Minimal instances of a JSON Schema: the answer to a requested JSON format (structured
//! output, or on demand one the schema rejects) and the arguments of a tool call.
//!
//! The instance has every `required` property (and only those), the first `enum`/`const`
//! value, `minItems` items (`prefixItems` and `contains` honoured, distinct items under
//! `uniqueItems`), strings of `minLength` up to `maxLength` (`format`s date, date-time,
//! time, duration, email, hostname, ipv4, ipv6, uri and uuid get a valid sample), numbers
//! within `minimum`/`maximum` (exclusive forms of drafts 4 and 2020-12 too) on a
//! `multipleOf`, the first branch of `anyOf`/`oneOf` and every branch of `allOf` merged
//! with the keywords beside them, and local `$ref`s (`#/$defs/…`, `#/definitions/…`, `#`)
//! followed. Types are read case-insensitively (Gemini writes `OBJECT`). A `pattern` is
//! not honoured. Depth and size are bounded, so a recursive or huge schema still ends.
//!
//! Markers in the last user message break it: `[sim:invalid_json]` every time,
//! `[sim:invalid_json_once]` for the first such request with the same model string and
//! prompt (a corrective retry then gets a valid instance).

use std::borrow::Cow;

use serde_json::{Map, Value, json};

pub const INVALID: &str = "[sim:invalid_json]";
pub const INVALID_ONCE: &str = "[sim:invalid_json_once]";

/// How deep references and nesting are followed (a recursive schema stops there).
const MAX_DEPTH: usize = 16;
/// Most values and schema merges one instance may take: a schema whose every level
/// requires several copies of itself would otherwise grow exponentially.
const MAX_NODES: usize = 10_000;
/// Most items of one array, and the longest padded string (`minItems`/`minLength` above
/// them cannot be met; no real schema asks for that).
const MAX_ITEMS: u64 = 64;
const MAX_PAD: u64 = 4096;

/// The schema that accepts anything (`true`).
static ANY: Value = Value::Bool(true);

/// The JSON text answering `schema` (`None`: any JSON object), valid unless `broken`.
pub fn answer(schema: Option<&Value>, broken: bool) -> String {
    let Some(schema) = schema else {
        return if broken {
            "[simulated] not JSON".into()
        } else {
            json!({"answer": "[simulated]"}).to_string()
        };
    };
    let mut generator = Generator::new(schema);
    let valid = generator.value(schema, 0, 0, false);
    if !broken {
        return valid.to_string();
    }
    // Leave out the first required property if there is one; otherwise not JSON at all.
    let first_required = generator
        .flatten(schema, 0)
        .get("required")
        .and_then(|r| r.get(0))
        .and_then(Value::as_str)
        .map(str::to_string);
    match (valid, first_required) {
        (Value::Object(mut object), Some(key)) => {
            object.remove(&key);
            Value::Object(object).to_string()
        }
        _ => "[simulated] not JSON".into(),
    }
}

/// A minimal instance of `schema`.
pub fn instance(schema: &Value) -> Value {
    Generator::new(schema).value(schema, 0, 0, false)
}

/// Arguments for a call of a tool whose parameters schema is `schema` (`Null`: none):
/// always a JSON object, as every wire format's tool call needs. With `every_property`
/// the top-level object also fills its optional properties (a fuller-looking call).
pub fn arguments(schema: &Value, every_property: bool) -> Value {
    match Generator::new(schema).value(schema, 0, 0, every_property) {
        Value::Object(object) => Value::Object(object),
        _ => json!({}),
    }
}

struct Generator<'a> {
    root: &'a Value,
    nodes: usize,
}

impl<'a> Generator<'a> {
    fn new(root: &'a Value) -> Self {
        Self { root, nodes: 0 }
    }

    fn spent(&mut self) -> bool {
        self.nodes += 1;
        self.nodes > MAX_NODES
    }

    /// `variant` > 0 asks for a value different from the one of `variant` 0 (for
    /// `uniqueItems`); `every` fills the optional properties of this object too.
    fn value(&mut self, schema: &Value, depth: usize, variant: usize, every: bool) -> Value {
        if depth >= MAX_DEPTH || self.spent() {
            return Value::Null;
        }
        let flat = self.flatten(schema, depth);
        let schema: &Value = &flat;
        if let Some(value) = schema.get("const") {
            return value.clone();
        }
        if let Some(values) = schema
            .get("enum")
            .and_then(Value::as_array)
            .filter(|e| !e.is_empty())
        {
            return values[variant % values.len()].clone();
        }
        match kind(schema).as_str() {
            "null" => Value::Null,
            "boolean" => json!(variant.is_multiple_of(2)),
            "integer" => number(schema, true, variant),
            "number" => number(schema, false, variant),
            "string" => json!(string(schema, variant)),
            "array" => self.array(schema, depth),
            _ => self.object(schema, depth, variant, every),
        }
    }

    /// `schema` with its `$ref`, `allOf` and first `anyOf`/`oneOf` branch merged in, so
    /// that what is left describes the instance directly. Borrowed when nothing merges.
    fn flatten<'s>(&mut self, schema: &'s Value, depth: usize) -> Cow<'s, Value>
    where
        'a: 's,
    {
        let Some(object) = schema.as_object() else {
            return Cow::Borrowed(schema);
        };
        if depth >= MAX_DEPTH || self.spent() {
            return Cow::Borrowed(schema);
        }
        if let Some(reference) = object.get("$ref").and_then(Value::as_str) {
            let root = self.root;
            let target = reference
                .strip_prefix('#')
                .and_then(|pointer| root.pointer(pointer));
            let rest = without(schema, "$ref");
            return match target {
                // Only the reference: the target as it is.
                Some(target) if object.len() == 1 => self.flatten(target, depth + 1),
                Some(target) => {
                    let target = self.flatten(target, depth + 1);
                    Cow::Owned(self.reflatten(merge(&rest, &target), depth))
                }
                None => Cow::Owned(self.reflatten(rest, depth)),
            };
        }
        if let Some(branches) = object.get("allOf").and_then(Value::as_array) {
            let mut merged = without(schema, "allOf");
            for branch in branches {
                let branch = self.flatten(branch, depth + 1);
                merged = merge(&merged, &branch);
            }
            return Cow::Owned(self.reflatten(merged, depth));
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(first) = object.get(key).and_then(|b| b.get(0)) {
                let first = self.flatten(first, depth + 1);
                let merged = merge(&without(schema, key), &first);
                return Cow::Owned(self.reflatten(merged, depth));
            }
        }
        Cow::Borrowed(schema)
    }

    /// A merge can bring back a combinator (a branch's own `anyOf`): flatten again.
    fn reflatten(&mut self, merged: Value, depth: usize) -> Value {
        self.flatten(&merged, depth + 1).into_owned()
    }

    fn array(&mut self, schema: &Value, depth: usize) -> Value {
        // Draft 2020-12 tuples are `prefixItems`; older drafts write `items` as a list.
        let prefix = schema
            .get("prefixItems")
            .or_else(|| schema.get("items").filter(|i| i.is_array()))
            .and_then(Value::as_array);
        let rest = schema
            .get("items")
            .filter(|i| !i.is_array())
            .or_else(|| schema.get("additionalItems").filter(|i| i.is_object()))
            .unwrap_or(&ANY);
        let mut count = schema.get("minItems").and_then(Value::as_u64).unwrap_or(0);
        // With `contains`, every generated item satisfies it as well as `items`.
        let contains = schema.get("contains");
        let rest = match contains {
            Some(contains) => {
                let minimum = schema
                    .get("minContains")
                    .and_then(Value::as_u64)
                    .unwrap_or(1);
                count = count.max(minimum);
                Cow::Owned(merge(rest, contains))
            }
            None => Cow::Borrowed(rest),
        };
        let unique = schema.get("uniqueItems").and_then(Value::as_bool) == Some(true);
        let count = count.min(MAX_ITEMS) as usize;
        let items = (0..count)
            .map(|i| {
                let item = match prefix.and_then(|p| p.get(i)) {
                    Some(item) if contains.is_none() => item,
                    _ => &*rest,
                };
                self.value(item, depth + 1, if unique { i } else { 0 }, false)
            })
            .collect();
        Value::Array(items)
    }

    fn object(&mut self, schema: &Value, depth: usize, variant: usize, every: bool) -> Value {
        let properties = schema.get("properties").and_then(Value::as_object);
        let mut keys: Vec<&str> = Vec::new();
        let required = schema.get("required").and_then(Value::as_array);
        for key in required.into_iter().flatten().filter_map(Value::as_str) {
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
        let wanted = schema
            .get("minProperties")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        for key in properties.into_iter().flat_map(|p| p.keys()) {
            if !every && keys.len() as u64 >= wanted {
                break;
            }
            if !keys.contains(&key.as_str()) {
                keys.push(key);
            }
        }
        let extra = schema
            .get("additionalProperties")
            .filter(|a| a.is_object())
            .unwrap_or(&ANY);
        let mut object = Map::new();
        for key in keys {
            let property = properties.and_then(|p| p.get(key)).unwrap_or(extra);
            let value = self.value(property, depth + 1, variant, false);
            object.insert(key.to_string(), value);
        }
        Value::Object(object)
    }
}

/// The instance's JSON type, lower case: the first non-null of a list, else guessed from
/// the keywords present.
fn kind(schema: &Value) -> String {
    let has = |keys: &[&str]| keys.iter().any(|k| schema.get(k).is_some());
    match schema.get("type") {
        Some(Value::String(t)) => t.to_ascii_lowercase(),
        Some(Value::Array(types)) => types
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_ascii_lowercase)
            .find(|t| t != "null")
            .unwrap_or_else(|| "null".into()),
        _ if has(&["properties", "required", "additionalProperties"]) => "object".into(),
        _ if has(&["items", "prefixItems", "minItems", "contains"]) => "array".into(),
        _ if has(&["minLength", "maxLength", "pattern", "format"]) => "string".into(),
        _ if has(&["minimum", "maximum", "exclusiveMinimum", "multipleOf"]) => "number".into(),
        _ => "object".into(),
    }
}

/// `schema` without `key`.
fn without(schema: &Value, key: &str) -> Value {
    let mut copy = schema.clone();
    if let Some(object) = copy.as_object_mut() {
        object.remove(key);
    }
    copy
}

/// Two schemas an instance must both satisfy, as one: properties and `required` united,
/// the tighter of two bounds, common `enum` values; otherwise `base`'s keyword wins.
fn merge(base: &Value, other: &Value) -> Value {
    let (Some(mine), Some(theirs)) = (base.as_object(), other.as_object()) else {
        // `true` (or a non-schema) adds nothing; keep whichever side says something.
        return match base.as_object() {
            Some(object) if !object.is_empty() => base.clone(),
            _ => other.clone(),
        };
    };
    let mut out = mine.clone();
    for (key, value) in theirs {
        let Some(current) = out.get_mut(key) else {
            out.insert(key.clone(), value.clone());
            continue;
        };
        match key.as_str() {
            "properties" => {
                if let (Some(current), Some(value)) = (current.as_object_mut(), value.as_object()) {
                    for (name, schema) in value {
                        let both = match current.get(name) {
                            Some(existing) => json!({"allOf": [existing, schema]}),
                            None => schema.clone(),
                        };
                        current.insert(name.clone(), both);
                    }
                }
            }
            "required" => {
                if let (Some(current), Some(value)) = (current.as_array_mut(), value.as_array()) {
                    for name in value {
                        if !current.contains(name) {
                            current.push(name.clone());
                        }
                    }
                }
            }
            "minimum" | "exclusiveMinimum" | "minLength" | "minItems" | "minProperties" => {
                tighter(current, value, f64::max);
            }
            "maximum" | "exclusiveMaximum" | "maxLength" | "maxItems" | "maxProperties" => {
                tighter(current, value, f64::min);
            }
            "enum" => {
                if let (Some(current), Some(value)) = (current.as_array_mut(), value.as_array()) {
                    let common: Vec<Value> = current
                        .iter()
                        .filter(|v| value.contains(v))
                        .cloned()
                        .collect();
                    if !common.is_empty() {
                        *current = common;
                    }
                }
            }
            _ => {}
        }
    }
    Value::Object(out)
}

fn tighter(current: &mut Value, other: &Value, pick: fn(f64, f64) -> f64) {
    if let (Some(a), Some(b)) = (current.as_f64(), other.as_f64()) {
        let chosen = pick(a, b);
        *current = if chosen == b {
            other.clone()
        } else {
            current.clone()
        };
    }
}

/// The smallest number the bounds allow (1 when unbounded below, for a natural-looking
/// count), on the `multipleOf` grid; `variant` steps up from it while the bounds allow.
fn number(schema: &Value, integer: bool, variant: usize) -> Value {
    let get = |key: &str| schema.get(key).and_then(Value::as_f64);
    let flag = |key: &str| schema.get(key).and_then(Value::as_bool) == Some(true);
    // Draft 4 writes exclusiveness as a boolean beside `minimum`/`maximum`; later drafts
    // as a number of its own.
    let mut low = get("minimum").map(|m| (m, flag("exclusiveMinimum")));
    if let Some(x) = get("exclusiveMinimum")
        && low.is_none_or(|(m, _)| x >= m)
    {
        low = Some((x, true));
    }
    let mut high = get("maximum").map(|m| (m, flag("exclusiveMaximum")));
    if let Some(x) = get("exclusiveMaximum")
        && high.is_none_or(|(m, _)| x <= m)
    {
        high = Some((x, true));
    }
    let fits = |n: f64| {
        low.is_none_or(|(l, ex)| if ex { n > l } else { n >= l })
            && high.is_none_or(|(h, ex)| if ex { n < h } else { n <= h })
    };
    let step = get("multipleOf").filter(|m| *m > 0.0 && m.is_finite());
    let on_grid = |n: f64| match step {
        Some(m) => (n / m).ceil() * m,
        None if integer => n.ceil(),
        None => n,
    };
    let mut n = match (low, high) {
        (Some((l, false)), _) => on_grid(l),
        (Some((l, true)), _) => match step {
            Some(m) => ((l / m).floor() + 1.0) * m,
            None if integer => l.floor() + 1.0,
            None => l + 1.0,
        },
        (None, Some((h, ex))) => {
            let top = if ex { h - step.unwrap_or(1.0) } else { h };
            let top = match step {
                Some(m) => (top / m).floor() * m,
                None if integer => top.floor(),
                None => top,
            };
            top.min(1.0)
        }
        (None, None) => 1.0,
    };
    if !integer && !fits(n) {
        // A narrow open interval: its middle.
        if let (Some((l, _)), Some((h, _))) = (low, high) {
            n = l + (h - l) / 2.0;
        }
    }
    let stepped = n + variant as f64 * step.unwrap_or(1.0);
    if fits(stepped) {
        n = stepped;
    }
    // A whole number goes out as an integer even for `number`: clients that declare
    // `number` but parse an integer (Codex's `max_output_tokens`) reject `1.0`.
    let whole = n.fract() == 0.0 && n.abs() < 9.0e15;
    if integer || whole {
        json!(n as i64)
    } else {
        json!(n)
    }
}

fn string(schema: &Value, variant: usize) -> String {
    let k = variant;
    let suffix = if k == 0 { String::new() } else { k.to_string() };
    let day = 1 + k % 28;
    let mut s = match schema.get("format").and_then(Value::as_str) {
        Some("date-time") => format!("2026-01-{day:02}T00:00:00Z"),
        Some("date") => format!("2026-01-{day:02}"),
        Some("time") => format!("00:00:{:02}Z", k % 60),
        Some("duration") => format!("P{}D", 1 + k),
        Some("email" | "idn-email") => format!("sim{suffix}@example.com"),
        Some("hostname" | "idn-hostname") => format!("sim{suffix}.example.com"),
        Some("ipv4") => format!("192.0.2.{}", 1 + k % 254),
        Some("ipv6") => format!("2001:db8::{:x}", 1 + k % 0xffff),
        Some("uri" | "url" | "iri" | "uri-reference" | "iri-reference") => {
            format!("https://example.com/{suffix}")
        }
        Some("uuid") => format!("00000000-0000-4000-8000-{:012x}", k),
        _ if k == 0 => "simulated".to_string(),
        _ => format!("simulated-{k}"),
    };
    let min = schema.get("minLength").and_then(Value::as_u64).unwrap_or(0);
    let have = s.chars().count() as u64;
    let pad = min.min(MAX_PAD).saturating_sub(have);
    s.extend(std::iter::repeat_n('x', usize::try_from(pad).unwrap_or(0)));
    if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
        && s.chars().count() as u64 > max
    {
        // Keep the variant's number, so that distinct items stay distinct.
        let keep = if suffix.len() as u64 <= max {
            max as usize - suffix.len()
        } else {
            max as usize
        };
        s = s.chars().take(keep).collect();
        if s.chars().count() as u64 + (suffix.len() as u64) <= max {
            s.push_str(&suffix);
        }
    }
    s
}

#[cfg(test)]
#[path = "instance_tests.rs"]
mod tests;
