//! Reading the fields of a `tokenizer.json` that the limits need, without
//! building the model: the vocabulary and the added tokens are counted and
//! their longest token measured, the rest is skipped unread.

use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;
use std::fmt;

/// The length in bytes of a token's text, read without keeping it: a string,
/// the first element of an array (a Unigram `[piece, score]`), or the
/// `content` of an object (an added token); 0 for anything else.
struct Piece(usize);

impl<'de> Deserialize<'de> for Piece {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Piece, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Piece;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a token")
            }
            fn visit_str<E>(self, s: &str) -> std::result::Result<Piece, E> {
                Ok(Piece(s.len()))
            }
            fn visit_seq<A: SeqAccess<'de>>(
                self,
                mut s: A,
            ) -> std::result::Result<Piece, A::Error> {
                let first = s.next_element::<Piece>()?.map_or(0, |p| p.0);
                while s.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Piece(first))
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut m: A,
            ) -> std::result::Result<Piece, A::Error> {
                let mut len = 0;
                while let Some(k) = m.next_key::<KeyIs>()? {
                    if k.0 {
                        len = m.next_value::<Piece>()?.0;
                    } else {
                        m.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(Piece(len))
            }
            fn visit_bool<E>(self, _: bool) -> std::result::Result<Piece, E> {
                Ok(Piece(0))
            }
            fn visit_i64<E>(self, _: i64) -> std::result::Result<Piece, E> {
                Ok(Piece(0))
            }
            fn visit_u64<E>(self, _: u64) -> std::result::Result<Piece, E> {
                Ok(Piece(0))
            }
            fn visit_f64<E>(self, _: f64) -> std::result::Result<Piece, E> {
                Ok(Piece(0))
            }
            fn visit_unit<E>(self) -> std::result::Result<Piece, E> {
                Ok(Piece(0))
            }
        }
        d.deserialize_any(V)
    }
}

/// Whether a key is `content`.
struct KeyIs(bool);

impl<'de> Deserialize<'de> for KeyIs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<KeyIs, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = KeyIs;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E>(self, s: &str) -> std::result::Result<KeyIs, E> {
                Ok(KeyIs(s == "content"))
            }
        }
        d.deserialize_str(V)
    }
}

/// The entries of a vocabulary (an array of tokens, or an object whose keys
/// are tokens) and the longest token, read without keeping them.
#[derive(Default)]
pub(super) struct Tokens {
    pub n: usize,
    pub longest: usize,
}

impl<'de> Deserialize<'de> for Tokens {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Tokens, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Tokens;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an array or an object")
            }
            fn visit_seq<A: SeqAccess<'de>>(
                self,
                mut s: A,
            ) -> std::result::Result<Tokens, A::Error> {
                let mut t = Tokens::default();
                while let Some(p) = s.next_element::<Piece>()? {
                    t.n += 1;
                    t.longest = t.longest.max(p.0);
                }
                Ok(t)
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut m: A,
            ) -> std::result::Result<Tokens, A::Error> {
                let mut t = Tokens::default();
                while let Some((p, IgnoredAny)) = m.next_entry::<Piece, IgnoredAny>()? {
                    t.n += 1;
                    t.longest = t.longest.max(p.0);
                }
                Ok(t)
            }
            fn visit_unit<E>(self) -> std::result::Result<Tokens, E> {
                Ok(Tokens::default())
            }
        }
        d.deserialize_any(V)
    }
}

/// The model's fields that the limits need (the rest is skipped unread).
#[derive(Deserialize, Default)]
pub(super) struct ModelHead {
    #[serde(default)]
    pub vocab: Option<Tokens>,
}

/// The top-level fields that the limits need.
#[derive(Deserialize)]
pub(super) struct Head {
    #[serde(default)]
    pub model: Option<ModelHead>,
    #[serde(default)]
    pub added_tokens: Option<Tokens>,
    #[serde(default)]
    pub normalizer: Value,
    #[serde(default)]
    pub pre_tokenizer: Value,
    #[serde(default)]
    pub post_processor: Value,
    #[serde(default)]
    pub decoder: Value,
    #[serde(default)]
    pub padding: Value,
    #[serde(default)]
    pub truncation: Value,
}
