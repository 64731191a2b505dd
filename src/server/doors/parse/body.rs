//! A door's body read in one pass as its two parts: the door's own serde-derived fields
//! (`D`) and the fields every door shares ([`Shared`], with the door's bounds `B`). Not
//! `#[serde(flatten)]`: a flattened struct makes serde keep every key the outer struct
//! does not name, so an unknown field of a 10 MB body (`"x": [0,0,…]`) cost 400 MB held as
//! serde's `Content` (measured with a counting allocator), where ignoring it costs nothing.
//! Here the shared keys are set aside as they pass (as JSON, as the door bodies held them
//! before), everything else goes on to the door's struct, and its paths stay whole.

use std::fmt;
use std::marker::PhantomData;

use serde::de::value::MapAccessDeserializer;
use serde::de::{self, DeserializeOwned, DeserializeSeed, IntoDeserializer, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

use super::Shared;
use crate::server::doors::json;

/// A door's body: its own fields and the shared ones.
#[derive(Debug)]
pub struct WithShared<D, B> {
    pub door: D,
    pub shared: Shared<B>,
}

impl<'de, D, B> Deserialize<'de> for WithShared<D, B>
where
    D: Deserialize<'de>,
    B: DeserializeOwned + Default,
{
    fn deserialize<De: Deserializer<'de>>(deserializer: De) -> Result<Self, De::Error> {
        deserializer.deserialize_map(Both(PhantomData))
    }
}

struct Both<D, B>(PhantomData<(D, B)>);

impl<'de, D, B> Visitor<'de> for Both<D, B>
where
    D: Deserialize<'de>,
    B: DeserializeOwned + Default,
{
    type Value = WithShared<D, B>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        let mut split = Split {
            map,
            shared: keys::<Shared<B>>(),
            bounds: keys::<B>(),
            shared_values: Map::new(),
            bound_values: Map::new(),
        };
        // A derived struct reads its map to the end: every shared key is set aside by then.
        let door = D::deserialize(MapAccessDeserializer::new(&mut split))?;
        let mut shared: Shared<B> = from_values(split.shared_values)?;
        shared.bounds = from_values(split.bound_values)?;
        Ok(WithShared { door, shared })
    }
}

/// The body's map as the door's struct sees it: without the shared keys, which are kept
/// aside as they pass.
struct Split<A> {
    map: A,
    shared: &'static [&'static str],
    bounds: &'static [&'static str],
    shared_values: Map<String, Value>,
    bound_values: Map<String, Value>,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Split<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        // One key of the body per turn: the loop ends with the body's map.
        while let Some(key) = self.map.next_key::<String>()? {
            let (name, values) = if let Some(name) = self.shared.iter().find(|k| **k == key) {
                (*name, &mut self.shared_values)
            } else if let Some(name) = self.bounds.iter().find(|k| **k == key) {
                (*name, &mut self.bound_values)
            } else {
                return seed.deserialize(key.into_deserializer()).map(Some);
            };
            let value: Value = self.map.next_value()?;
            if values.insert(key, value).is_some() {
                return Err(de::Error::duplicate_field(name));
            }
        }
        Ok(None)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        self.map.next_value_seed(seed)
    }
}

/// `T` from the values set aside for it.
fn from_values<T: DeserializeOwned, E: de::Error>(values: Map<String, Value>) -> Result<T, E> {
    serde_path_to_error::deserialize(Value::Object(values))
        .map_err(|e| json::refault(e.path().to_string(), &e.into_inner()))
}

/// The keys both a door's own fields `D` and the shared ones (with its bounds `B`) name:
/// the door's would never be read. Each door's tests check there are none.
#[cfg(test)]
pub fn overlap<D: DeserializeOwned, B: DeserializeOwned + Default>() -> Vec<&'static str> {
    let shared = [keys::<Shared<B>>(), keys::<B>()].concat();
    keys::<D>()
        .iter()
        .copied()
        .filter(|k| shared.contains(k))
        .collect()
}

/// The keys a serde-derived struct reads: derive hands them to `deserialize_struct` (a
/// struct behind `#[serde(try_from)]`: its source's). None for any other type.
pub(super) fn keys<T: DeserializeOwned>() -> &'static [&'static str] {
    let mut keys: &'static [&'static str] = &[];
    let _ = T::deserialize(Keys(&mut keys));
    keys
}

/// A deserializer that only takes a struct's keys and reads nothing.
struct Keys<'a>(&'a mut &'static [&'static str]);

impl<'de> Deserializer<'de> for Keys<'_> {
    type Error = de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(de::Error::custom("not a struct"))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Self::Error> {
        *self.0 = fields;
        Err(de::Error::custom("keys only"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::error::ApiError;
    use serde_json::json;

    #[derive(Debug, Deserialize)]
    struct Door {
        model: Option<String>,
        #[serde(default)]
        items: Vec<Item>,
    }

    #[derive(Debug, Deserialize)]
    struct Item {
        #[allow(dead_code)]
        text: String,
    }

    #[derive(Debug, Default, Deserialize)]
    #[serde(default)]
    struct Bounds {
        #[serde(deserialize_with = "max_tokens")]
        max_tokens: Option<u64>,
    }

    fn max_tokens<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        super::super::count(d, "max_tokens")
    }

    fn read(v: Value) -> Result<WithShared<Door, Bounds>, ApiError> {
        json::read(v.to_string().as_bytes())
    }

    #[derive(Debug, Deserialize)]
    struct Clashing {
        #[allow(dead_code)]
        seed: Option<String>,
    }

    #[test]
    fn keys_are_what_derive_names() {
        assert!(overlap::<Door, Bounds>().is_empty());
        assert_eq!(overlap::<Clashing, Bounds>(), ["seed"]);
        assert_eq!(
            keys::<Shared<Bounds>>(),
            ["massgen", "temperature", "top_p", "seed"]
        );
        assert_eq!(keys::<Bounds>(), ["max_tokens"]);
        assert_eq!(keys::<Door>(), ["model", "items"]);
        assert!(keys::<String>().is_empty());
    }

    #[test]
    fn each_part_reads_its_keys_from_one_body() {
        let body = read(json!({"model": "m", "temperature": 0.5, "x": [1, 2],
            "items": [{"text": "a"}], "max_tokens": 7, "massgen": {"deliberation": "off"}}))
        .unwrap();
        assert_eq!(body.door.model.as_deref(), Some("m"));
        assert_eq!(body.door.items.len(), 1);
        assert_eq!(body.shared.temperature, Some(0.5));
        assert_eq!(body.shared.bounds.max_tokens, Some(7));
        let value = json!({"model": "m", "seed": 3});
        let body: WithShared<Door, Bounds> = json::read_value_in(value, "items").unwrap();
        assert_eq!(body.shared.seed, Some(3));
    }

    #[test]
    fn faults_keep_their_paths_and_their_own_words() {
        let e = read(json!({"items": [{"text": "a"}, {"text": 5}], "top_p": 0.5})).unwrap_err();
        assert_eq!(e.param(), Some("items[1].text"));
        assert!(e.message().starts_with("'items[1].text': invalid type"));
        let e = read(json!({"model": "m", "max_tokens": 0})).unwrap_err();
        assert_eq!(
            (e.param(), e.message().as_str(), e.code()),
            (
                Some("max_tokens"),
                "'max_tokens' must be a whole number of at least 1",
                "invalid_value"
            )
        );
        let e = json::read::<WithShared<Door, Bounds>>(br#"{"seed": 1, "seed": 2}"#).unwrap_err();
        assert!(
            e.message().contains("duplicate field `seed`"),
            "{}",
            e.message()
        );
        let e = json::read::<WithShared<Door, Bounds>>(br#"{"seed": 1, "model": "#).unwrap_err();
        assert_eq!(e.code(), "invalid_json");
    }
}
