//! Shapes the wire types of every door share, for fields serde's derive does not read as
//! clients write them: a string or a list, a string or an object, an object that must not
//! be read from an array, and a field read only when it has the expected shape. Each keeps
//! the path [`json::read`](crate::server::doors::json::read) names in a 400.

use std::fmt;
use std::marker::PhantomData;

use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
use serde::de::{self, DeserializeOwned, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// A field read only when it has the expected shape, and otherwise taken as absent: for
/// fields a door has always read so (an echoed id, a description), where refusing an odd
/// value would break a conversation over something nothing depends on.
#[derive(Debug, Clone, PartialEq)]
pub struct Loose<T>(pub Option<T>);

impl<T> Default for Loose<T> {
    fn default() -> Self {
        Self(None)
    }
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for Loose<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        Ok(Self(T::deserialize(value).ok()))
    }
}

/// An object read as `T`. A derived struct alone also reads an array, by position
/// (`[["user", "hi"]]` as a message): an array where an object belongs is a wrong type.
#[derive(Debug, Clone, PartialEq)]
pub struct Obj<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Obj<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Object<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Object<T> {
            type Value = Obj<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map)).map(Obj)
            }
        }
        deserializer.deserialize_map(Object(PhantomData))
    }
}

/// A string, or a list of `T` (message content as text or parts).
#[derive(Debug, Clone, PartialEq)]
pub enum TextOrList<T> {
    Text(String),
    List(Vec<T>),
}

/// A string, or an object read as `T` (`tool_choice`, `image_url`).
#[derive(Debug, Clone, PartialEq)]
pub enum TextOrObject<T> {
    Text(String),
    Object(T),
}

// By hand rather than `untagged`: an untagged enum's error says only "did not match any
// variant", and loses the path into the list or the object.
impl<'de, T: Deserialize<'de>> Deserialize<'de> for TextOrList<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Either<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Either<T> {
            type Value = TextOrList<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or an array")
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
                Ok(TextOrList::Text(text.to_string()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                Vec::deserialize(SeqAccessDeserializer::new(seq)).map(TextOrList::List)
            }
        }
        deserializer.deserialize_any(Either(PhantomData))
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for TextOrObject<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Either<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Either<T> {
            type Value = TextOrObject<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or an object")
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
                Ok(TextOrObject::Text(text.to_string()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map)).map(TextOrObject::Object)
            }
        }
        deserializer.deserialize_any(Either(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::doors::json;

    #[derive(Debug, Deserialize)]
    struct Body {
        content: Option<TextOrList<Obj<Part>>>,
        choice: Option<TextOrObject<Part>>,
        #[serde(default)]
        id: Loose<String>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Part {
        text: String,
    }

    fn path(body: &str) -> String {
        let e = json::read::<Body>(body.as_bytes()).unwrap_err();
        e.param().unwrap_or_default().to_string()
    }

    #[test]
    fn shapes_read_what_clients_write_and_name_the_path_of_a_fault() {
        let b: Body =
            json::read(br#"{"content": [{"text": "a"}], "choice": "auto", "id": 5}"#).unwrap();
        assert_eq!(
            b.content,
            Some(TextOrList::List(vec![Obj(Part { text: "a".into() })]))
        );
        assert_eq!(b.choice, Some(TextOrObject::Text("auto".into())));
        assert_eq!(b.id, Loose(None), "an odd value is absent");
        let b: Body =
            json::read(br#"{"content": "a", "choice": {"text": "b"}, "id": "c"}"#).unwrap();
        assert_eq!(b.content, Some(TextOrList::Text("a".into())));
        assert_eq!(
            b.choice,
            Some(TextOrObject::Object(Part { text: "b".into() }))
        );
        assert_eq!(b.id, Loose(Some("c".into())));
        assert_eq!(
            path(r#"{"content": [{"text": "a"}, {"text": 7}]}"#),
            "content[1].text"
        );
        assert_eq!(
            path(r#"{"content": [["a"]]}"#),
            "content[0]",
            "not read by position"
        );
        assert_eq!(path(r#"{"content": {}}"#), "content");
        assert_eq!(path(r#"{"choice": {"text": 7}}"#), "choice.text");
        assert_eq!(path(r#"{"choice": ["a"]}"#), "choice");
        let e = json::read::<Body>(br#"{"choice": 5}"#).unwrap_err();
        assert!(
            e.message().contains("expected a string or an object"),
            "{}",
            e.message()
        );
    }
}
