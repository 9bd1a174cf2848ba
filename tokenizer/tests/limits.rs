//! The limits of src/limits.rs through the Rust API: what loads at a limit
//! works, one past it is refused naming the field, and encode/decode refuse
//! a worst case past their bounds before doing any work.

use etc_tokenizer::limits::*;
use etc_tokenizer::{Error, Tokenizer};
use serde_json::{json, Value};

fn base(name: &str) -> Value {
    let p = format!("{}/testdata/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn load(v: &Value) -> Result<Tokenizer, Error> {
    Tokenizer::from_bytes(&serde_json::to_vec(v).unwrap())
}

fn padded(fixed: u64) -> Value {
    let mut v = base("bpe.json");
    v["padding"] = json!({"strategy": {"Fixed": fixed}, "direction": "Right",
        "pad_to_multiple_of": null, "pad_id": 0, "pad_type_id": 0, "pad_token": "<pad>"});
    v
}

#[test]
fn padding_at_the_limit_works_and_past_it_is_refused() {
    let tok = load(&padded(MAX_SEQUENCE as u64)).unwrap();
    assert_eq!(tok.encode("hi", true).unwrap().len(), MAX_SEQUENCE);
    // The file: every encode asked for 4 TiB and aborted the process.
    let e = load(&padded(1 << 40)).unwrap_err().to_string();
    assert_eq!(
        e,
        "tokenizer.json refused: padding.strategy.Fixed: 1099511627776, at most 131072"
    );
}

#[test]
fn a_long_replacement_is_refused_and_a_short_one_loads() {
    let mut v = base("bpe.json");
    v["normalizer"] =
        json!({"type": "Replace", "pattern": {"String": " "}, "content": "x".repeat(100_000)});
    let e = load(&v).unwrap_err().to_string();
    assert!(
        e.starts_with("tokenizer.json refused: normalizer: its text may grow 100000-fold"),
        "{e}"
    );
    // Llama 2's normalizer: a prepended "▁", spaces replaced by "▁".
    let mut v = base("unigram.json");
    v["normalizer"] = json!({"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "▁"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]});
    v["pre_tokenizer"] = Value::Null;
    let tok = load(&v).unwrap();
    assert!(!tok.encode("hello world", true).unwrap().is_empty());
}

#[test]
fn encode_and_decode_refuse_a_worst_case_past_their_bound() {
    let tok = Tokenizer::from_bytes(&serde_json::to_vec(&base("bpe.json")).unwrap()).unwrap();
    // bpe.json: a ByteLevel pre-tokenizer (each byte may become 2, plus a
    // space a piece): a worst case of 5 ids a byte.
    let ok = "a".repeat(100_000);
    assert!(!tok.encode(&ok, false).unwrap().is_empty());
    let long = "a".repeat(MAX_ENCODE_IDS / 4);
    let e = tok.encode(&long, false).unwrap_err();
    assert!(matches!(e, Error::Encode(_)), "{e:?}");
    assert!(
        e.to_string()
            .contains(&format!("more than the limit of {MAX_ENCODE_IDS}")),
        "{e}"
    );
    let ids = vec![40u32; MAX_DECODE_BYTES / 8];
    let e = tok.decode(&ids, false).unwrap_err();
    assert!(matches!(e, Error::Decode(_)), "{e:?}");
    assert!(
        e.to_string()
            .contains(&format!("more than the limit of {MAX_DECODE_BYTES}")),
        "{e}"
    );
    assert!(!tok.decode(&ids[..10_000], false).unwrap().is_empty());
}

#[test]
fn truncation_overflow_is_bounded() {
    // Truncation to 3 ids with a stride makes overflow pieces of the whole
    // text, each padded to 2^17: refused for all but short texts.
    let mut v = padded(MAX_SEQUENCE as u64);
    v["truncation"] =
        json!({"direction": "Right", "max_length": 3, "strategy": "LongestFirst", "stride": 1});
    let tok = load(&v).unwrap();
    assert_eq!(tok.encode("hi", false).unwrap().len(), MAX_SEQUENCE);
    let e = tok
        .encode(&"word ".repeat(200), false)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("cannot encode: a text of 1000 bytes may make up to"),
        "{e}"
    );
}
