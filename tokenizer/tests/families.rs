//! The three tokenizer families of `testdata/` (made by
//! `testdata/make_tokenizers.py`) against what the Python `tokenizers`
//! package made of the same texts (`testdata/expected.json`), streaming
//! decode against the full decode, the end-of-sequence rule, and bad files.

use etc_tokenizer::{DecodeStream, Error, Tokenizer};
use serde_json::Value;

const FAMILIES: [&str; 3] = ["bpe", "wordpiece", "unigram"];

fn testdata(name: &str) -> String {
    format!("{}/testdata/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn load(family: &str) -> Tokenizer {
    Tokenizer::load(testdata(&format!("{family}.json"))).unwrap_or_else(|e| panic!("{family}: {e}"))
}

fn expected() -> Value {
    serde_json::from_str(&std::fs::read_to_string(testdata("expected.json")).unwrap()).unwrap()
}

fn ids_of(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// Streams `ids` and returns the concatenated pieces, checking that every
/// piece is a whole UTF-8 string (it is a `String`) and that none but the last
/// ends in an incomplete character.
fn stream(tok: &Tokenizer, ids: &[u32], skip_special: bool) -> String {
    let mut s = DecodeStream::new(skip_special);
    let mut out = String::new();
    for &id in ids {
        let piece = s.push(tok, id).unwrap();
        assert!(
            !piece.ends_with('\u{FFFD}'),
            "a piece ends in an incomplete character: {piece:?}"
        );
        out += &piece;
    }
    out += &s.finish(tok).unwrap();
    assert_eq!(s.finish(tok).unwrap(), "", "a second finish emits nothing");
    assert_eq!(s.ids(), ids);
    out
}

#[test]
fn every_family_encodes_and_decodes_as_the_python_package_does() {
    let exp = expected();
    let mut checked = 0;
    for family in FAMILIES {
        let tok = load(family);
        let e = &exp[family];
        assert_eq!(
            tok.vocab_size() as u64,
            e["vocab_size"].as_u64().unwrap(),
            "{family}"
        );
        for case in e["cases"].as_array().unwrap() {
            let text = case["text"].as_str().unwrap();
            let ids = tok.encode(text, false).unwrap();
            assert_eq!(ids, ids_of(&case["ids"]), "{family}: {text:?}");
            assert_eq!(
                tok.encode(text, true).unwrap(),
                ids_of(&case["ids_special"]),
                "{family}: {text:?}"
            );
            assert_eq!(
                tok.decode(&ids, true).unwrap(),
                case["decoded"].as_str().unwrap(),
                "{family}: {text:?}"
            );
            checked += 1;
        }
    }
    assert!(checked >= 15, "only {checked} cases in expected.json");
}

#[test]
fn byte_level_bpe_round_trips_any_text() {
    let tok = load("bpe");
    for text in [
        "naïve café — 東京 🚀 ≥ µs",
        "\u{0}\u{7f} control \u{1b}[31m",
        "",
        " leading",
        "trailing ",
        "日本語",
    ] {
        let ids = tok.encode(text, false).unwrap();
        assert_eq!(tok.decode(&ids, false).unwrap(), text);
    }
    // "é" is two bytes, two tokens here: each alone is not text.
    let ids = tok.encode("é", false).unwrap();
    assert_eq!(
        ids.len(),
        2,
        "this test needs a character split over tokens"
    );
    assert_eq!(tok.decode(&ids[..1], false).unwrap(), "\u{FFFD}");
}

#[test]
fn streaming_equals_the_full_decode_for_every_family() {
    let exp = expected();
    for family in FAMILIES {
        let tok = load(family);
        let eos = tok.eos_ids().to_vec();
        for case in exp[family]["cases"].as_array().unwrap() {
            for key in ["ids", "ids_special"] {
                let mut ids = ids_of(&case[key]);
                ids.extend(&eos); // a generation ends with its end token
                for skip in [true, false] {
                    let full = tok.decode(&ids, skip).unwrap();
                    assert_eq!(
                        stream(&tok, &ids, skip),
                        full,
                        "{family} {key} skip={skip}: {ids:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn streaming_holds_back_a_split_character_until_it_is_complete() {
    let tok = load("bpe");
    let ids = tok.encode("a🚀b", false).unwrap();
    let mut s = DecodeStream::new(true);
    let pieces: Vec<String> = ids.iter().map(|&id| s.push(&tok, id).unwrap()).collect();
    assert_eq!(pieces.concat(), "a🚀b");
    assert!(
        pieces.iter().any(|p| p.is_empty()),
        "the rocket's first bytes emit nothing: {pieces:?}"
    );
    assert!(pieces.iter().any(|p| p.contains('🚀')), "{pieces:?}");
    // Cut off inside the character: finish emits it the way the full decode writes it.
    let mut s = DecodeStream::new(true);
    let cut = &ids[..2];
    let mut text: String = cut.iter().map(|&id| s.push(&tok, id).unwrap()).collect();
    text += &s.finish(&tok).unwrap();
    assert_eq!(text, tok.decode(cut, true).unwrap());
    assert!(text.ends_with('\u{FFFD}'));
}

#[test]
fn end_of_sequence_ids_follow_the_rule() {
    let bpe = load("bpe");
    let want = vec![
        bpe.token_to_id("<|endoftext|>").unwrap(),
        bpe.token_to_id("<|im_end|>").unwrap(),
    ];
    assert_eq!(
        bpe.eos_ids(),
        want,
        "<|im_start|> is special but no end token"
    );
    let unigram = load("unigram");
    assert_eq!(unigram.eos_ids(), [unigram.token_to_id("</s>").unwrap()]);
    // BERT's [SEP] separates segments; it is not an end of generation.
    assert_eq!(load("wordpiece").eos_ids(), [] as [u32; 0]);

    // An end token's text that is not marked special does not count.
    let mut json: Value =
        serde_json::from_str(&std::fs::read_to_string(testdata("bpe.json")).unwrap()).unwrap();
    for t in json["added_tokens"].as_array_mut().unwrap() {
        if t["content"] == "<|endoftext|>" {
            t["special"] = Value::Bool(false);
        }
    }
    let tok = Tokenizer::from_bytes(json.to_string().as_bytes()).unwrap();
    assert_eq!(tok.eos_ids(), [bpe.token_to_id("<|im_end|>").unwrap()]);
}

#[test]
fn bad_files_are_one_clear_error() {
    let dir = std::env::temp_dir().join(format!("etc_tok_test_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = std::fs::read(testdata("bpe.json")).unwrap();
    let cases: [(&str, Vec<u8>); 4] = [
        ("truncated.json", good[..good.len() / 2].to_vec()),
        ("empty.json", Vec::new()),
        ("not_json.json", b"\x7fELF\x02\x01\x01 binary".to_vec()),
        (
            "unknown_model.json",
            br#"{"version":"1.0","added_tokens":[],"model":{"type":"Nope"}}"#.to_vec(),
        ),
    ];
    for (name, bytes) in cases {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        let e = Tokenizer::load(&path).unwrap_err();
        assert!(matches!(e, Error::Malformed(_)), "{name}: {e:?}");
        assert!(
            e.to_string().starts_with("not a tokenizer.json: "),
            "{name}: {e}"
        );
        assert!(!e.to_string().contains('\n'), "{name}: {e}");
    }
    assert!(matches!(
        Tokenizer::load(dir.join("missing.json")),
        Err(Error::Io(_))
    ));
    assert!(
        matches!(Tokenizer::load(&dir), Err(Error::Io(_))),
        "a folder"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
