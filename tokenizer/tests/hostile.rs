//! Hostile `tokenizer.json` files: the cases of issue 31 (a padding of 2^40,
//! a 100 KB `Replace`, a charsmap that declares a 4 GiB trie, ...), more
//! hand-made ones, truncations, and seeded random mutations of the test
//! tokenizers. Each file goes to `etc_tok_probe` (src/bin) in a child process
//! of its own, which loads it through the C API and, when it loads, encodes,
//! decodes and streams a few texts. Every file must end in `LOADED` or
//! `REFUSED` with a message: no abort (a signal), no hang (a child still
//! running after 5 s is killed and counted), no broken contract.
//! `ETC_TOK_HOSTILE_KEEP=<dir>` keeps the files there.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn base(name: &str) -> Value {
    let p = format!("{}/testdata/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn with(mut v: Value, pointer: &str, new: Value) -> Value {
    *v.pointer_mut(pointer).unwrap() = new;
    v
}

fn replace(pattern: Value, content: &str) -> Value {
    json!({"type": "Replace", "pattern": pattern, "content": content})
}

/// A SentencePiece charsmap: a trie size, then `rest`, in base64.
fn charsmap(trie: u32, rest: &[u8]) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut bytes = trie.to_le_bytes().to_vec();
    bytes.extend_from_slice(rest);
    let mut out = String::new();
    for c in bytes.chunks(3) {
        let n = c
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..=c.len() {
            out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
        out.push_str(&"=".repeat(3 - c.len()));
    }
    out
}

/// The hand-made cases: (name, contents).
fn cases() -> Vec<(String, Vec<u8>)> {
    let (bpe, uni, wp) = (
        base("bpe.json"),
        base("unigram.json"),
        base("wordpiece.json"),
    );
    let big = "x".repeat(100_000);
    let mut c: Vec<(&str, Value)> = vec![
        (
            "pad_fixed_2p40",
            with(
                bpe.clone(),
                "/padding",
                json!({"strategy": {"Fixed": 1u64 << 40}, "direction": "Right", "pad_to_multiple_of": null, "pad_id": 0, "pad_type_id": 0, "pad_token": "<pad>"}),
            ),
        ),
        (
            "pad_fixed_limit_plus_1",
            with(
                bpe.clone(),
                "/padding",
                json!({"strategy": {"Fixed": 131073}, "direction": "Left", "pad_to_multiple_of": null, "pad_id": 0, "pad_type_id": 0, "pad_token": "<pad>"}),
            ),
        ),
        (
            "pad_fixed_limit",
            with(
                bpe.clone(),
                "/padding",
                json!({"strategy": {"Fixed": 131072}, "direction": "Right", "pad_to_multiple_of": null, "pad_id": 0, "pad_type_id": 0, "pad_token": "<pad>"}),
            ),
        ),
        (
            "pad_multiple_2p40",
            with(
                bpe.clone(),
                "/padding",
                json!({"strategy": "BatchLongest", "direction": "Right", "pad_to_multiple_of": 1u64 << 40, "pad_id": 0, "pad_type_id": 0, "pad_token": "<pad>"}),
            ),
        ),
        (
            "pad_multiple_0",
            with(
                bpe.clone(),
                "/padding",
                json!({"strategy": "BatchLongest", "direction": "Right", "pad_to_multiple_of": 0, "pad_id": 0, "pad_type_id": 0, "pad_token": "<pad>"}),
            ),
        ),
        (
            "pad_token_1mb",
            with(
                bpe.clone(),
                "/padding",
                json!({"strategy": {"Fixed": 8}, "direction": "Right", "pad_to_multiple_of": null, "pad_id": 0, "pad_type_id": 0, "pad_token": "p".repeat(1 << 20)}),
            ),
        ),
        (
            "pad_negative",
            with(
                bpe.clone(),
                "/padding",
                json!({"strategy": {"Fixed": -1}, "direction": "Right", "pad_to_multiple_of": null, "pad_id": 0, "pad_type_id": 0, "pad_token": "<pad>"}),
            ),
        ),
        (
            "trunc_2p40",
            with(
                bpe.clone(),
                "/truncation",
                json!({"direction": "Right", "max_length": 1u64 << 40, "strategy": "LongestFirst", "stride": 0}),
            ),
        ),
        (
            "trunc_stride_max_minus_1",
            with(
                bpe.clone(),
                "/truncation",
                json!({"direction": "Right", "max_length": 100, "strategy": "LongestFirst", "stride": 99}),
            ),
        ),
        (
            "trunc_1_with_template",
            with(
                wp.clone(),
                "/truncation",
                json!({"direction": "Right", "max_length": 1, "strategy": "LongestFirst", "stride": 0}),
            ),
        ),
        (
            "trunc_3_pad_limit",
            with(
                with(
                    wp.clone(),
                    "/truncation",
                    json!({"direction": "Right", "max_length": 3, "strategy": "LongestFirst", "stride": 1}),
                ),
                "/padding",
                json!({"strategy": {"Fixed": 131072}, "direction": "Right", "pad_to_multiple_of": null, "pad_id": 0, "pad_type_id": 0, "pad_token": "[PAD]"}),
            ),
        ),
        (
            "trunc_ok",
            with(
                bpe.clone(),
                "/truncation",
                json!({"direction": "Left", "max_length": 16, "strategy": "LongestFirst", "stride": 4}),
            ),
        ),
        (
            "replace_100kb",
            with(
                bpe.clone(),
                "/normalizer",
                replace(json!({"String": " "}), &big),
            ),
        ),
        (
            "replace_regex_empty_100kb",
            with(
                bpe.clone(),
                "/normalizer",
                replace(json!({"Regex": ""}), &big),
            ),
        ),
        (
            "replace_regex_empty_100",
            with(
                bpe.clone(),
                "/normalizer",
                replace(json!({"Regex": "x*"}), &"y".repeat(100)),
            ),
        ),
        (
            "replace_string_empty",
            with(
                bpe.clone(),
                "/normalizer",
                replace(json!({"String": ""}), "ab"),
            ),
        ),
        (
            "replace_chain_30",
            with(
                bpe.clone(),
                "/normalizer",
                json!({"type": "Sequence", "normalizers": vec![replace(json!({"String": " "}), "  "); 30]}),
            ),
        ),
        (
            "prepend_100kb",
            with(
                uni.clone(),
                "/normalizer",
                json!({"type": "Prepend", "prepend": big}),
            ),
        ),
        (
            "nfkc_chain_8",
            with(
                wp.clone(),
                "/normalizer",
                json!({"type": "Sequence", "normalizers": vec![json!({"type": "NFKC"}); 8]}),
            ),
        ),
        (
            "bytelevel_pretok_chain_20",
            with(
                bpe.clone(),
                "/pre_tokenizer",
                json!({"type": "Sequence", "pretokenizers": vec![json!({"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true}); 20]}),
            ),
        ),
        (
            "precompiled_trie_4gib",
            with(
                uni.clone(),
                "/normalizer",
                json!({"type": "Precompiled", "precompiled_charsmap": charsmap(u32::MAX, b"abc\0")}),
            ),
        ),
        (
            "precompiled_long_entry",
            with(
                uni.clone(),
                "/normalizer",
                json!({"type": "Precompiled", "precompiled_charsmap": charsmap(0, &[b'q'; 5000])}),
            ),
        ),
        (
            "precompiled_not_base64",
            with(
                uni.clone(),
                "/normalizer",
                json!({"type": "Precompiled", "precompiled_charsmap": "!!!*"}),
            ),
        ),
        (
            "precompiled_empty",
            with(
                uni.clone(),
                "/normalizer",
                json!({"type": "Precompiled", "precompiled_charsmap": ""}),
            ),
        ),
        (
            "precompiled_garbage_trie",
            with(
                uni.clone(),
                "/normalizer",
                json!({"type": "Precompiled", "precompiled_charsmap": charsmap(16, &[0xff; 40])}),
            ),
        ),
        (
            "template_a_1000_times",
            with(
                uni.clone(),
                "/post_processor/single",
                Value::Array(vec![json!({"Sequence": {"id": "A", "type_id": 0}}); 1000]),
            ),
        ),
        (
            "template_5000_ids",
            with(
                uni.clone(),
                "/post_processor/special_tokens/<s>/ids",
                Value::Array(vec![json!(1); 5000]),
            ),
        ),
        (
            "template_missing_special",
            with(uni.clone(), "/post_processor/special_tokens", json!({})),
        ),
        (
            "post_sequence_10_templates",
            with(
                uni.clone(),
                "/post_processor",
                json!({"type": "Sequence", "processors": vec![uni["post_processor"].clone(); 10]}),
            ),
        ),
        (
            "decoder_replace_100kb",
            with(
                uni.clone(),
                "/decoder",
                replace(json!({"String": "▁"}), &big),
            ),
        ),
        (
            "decoder_replace_chain",
            with(
                uni.clone(),
                "/decoder",
                json!({"type": "Sequence", "decoders": vec![replace(json!({"Regex": ""}), "zz"); 12]}),
            ),
        ),
        (
            "metaspace_long_replacement",
            with(uni.clone(), "/pre_tokenizer/replacement", json!("abcdef")),
        ),
        (
            "split_catastrophic",
            with(
                bpe.clone(),
                "/pre_tokenizer",
                json!({"type": "Split", "pattern": {"Regex": "(a+)+$"}, "behavior": "Isolated", "invert": false}),
            ),
        ),
        (
            "split_bad_regex",
            with(
                bpe.clone(),
                "/pre_tokenizer",
                json!({"type": "Split", "pattern": {"Regex": "(("}, "behavior": "Isolated", "invert": false}),
            ),
        ),
        (
            "model_unknown",
            with(bpe.clone(), "/model/type", json!("Quantum")),
        ),
        (
            "unigram_unk_huge",
            with(uni.clone(), "/model/unk_id", json!(1_000_000_000)),
        ),
        (
            "unigram_empty_vocab",
            with(uni.clone(), "/model/vocab", json!([])),
        ),
        (
            "wordpiece_max_chars_huge",
            with(
                wp.clone(),
                "/model/max_input_chars_per_word",
                json!(1u64 << 60),
            ),
        ),
        (
            "wordpiece_unk_missing",
            with(wp.clone(), "/model/unk_token", json!("[NOPE]")),
        ),
        (
            "bpe_merges_unknown",
            with(
                bpe.clone(),
                "/model/merges",
                json!([["zz", "qq"], ["ab", "cd"]]),
            ),
        ),
        (
            "deep_nesting",
            with(
                bpe.clone(),
                "/normalizer",
                (0..200).fold(
                    json!({"type": "NFC"}),
                    |v, _| json!({"type": "Sequence", "normalizers": [v]}),
                ),
            ),
        ),
        ("not_an_object", json!([1, 2, 3])),
        ("null", Value::Null),
    ];
    let mut added = uni.clone();
    let list = added["added_tokens"].as_array_mut().unwrap();
    let first = list[0].clone();
    let mut c2 = Vec::new();
    for (name, f) in [
        ("added_empty_content", json!("")),
        ("added_2000_bytes", json!("a".repeat(2000))),
    ] {
        let mut t = first.clone();
        t["content"] = f;
        t["id"] = json!(9999);
        let mut v = uni.clone();
        v["added_tokens"].as_array_mut().unwrap().push(t);
        c2.push((name, v));
    }
    let mut t = first.clone();
    t["id"] = json!(u32::MAX);
    t["content"] = json!("<huge_id>");
    list.push(t);
    c.push(("added_id_u32_max", added));
    c.extend(c2);
    let mut many = uni.clone();
    many["added_tokens"] = Value::Array(
        (0..70_000)
            .map(|i| json!({"id": 10_000 + i, "content": format!("<t{i}>"), "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}))
            .collect(),
    );
    c.push(("added_70000", many));
    let mut out: Vec<(String, Vec<u8>)> = c
        .into_iter()
        .map(|(n, v)| (n.to_string(), serde_json::to_vec(&v).unwrap()))
        .collect();
    // A vocabulary one past the limit (written by hand: 4M entries as a Value would be slow).
    let mut vocab = String::from(
        "{\"version\":\"1.0\",\"model\":{\"type\":\"WordLevel\",\"unk_token\":\"a0\",\"vocab\":{",
    );
    for i in 0..=(1u32 << 22) {
        vocab += &format!("{}\"a{i}\":{i}", if i == 0 { "" } else { "," });
    }
    vocab += "}}}";
    out.push(("vocab_limit_plus_1".into(), vocab.into_bytes()));
    out
}

/// Every node of `v`, as JSON pointers (arrays past 8 elements: the first 8).
fn pointers(v: &Value, at: String, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                pointers(
                    x,
                    format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                    out,
                )
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate().take(8) {
                pointers(x, format!("{at}/{i}"), out)
            }
        }
        _ => {}
    }
    out.push(at);
}

/// Seeded random mutations: a node of a test tokenizer replaced by a hostile value.
fn mutations(per_base: usize) -> Vec<(String, Vec<u8>)> {
    let hostile = [
        json!(1u64 << 40),
        json!(u64::MAX),
        json!(-1),
        json!(1e308),
        json!(0),
        json!(""),
        json!("y".repeat(100_000)),
        json!(null),
        json!({}),
        json!([]),
        json!(true),
        json!({"type": "Sequence", "normalizers": [], "pretokenizers": [], "decoders": [], "processors": []}),
        json!([[1, 2], ["a", 1e300]]),
        json!({"Fixed": 1u64 << 40}),
        json!({"String": ""}),
        json!({"Regex": "(a*)*b"}),
    ];
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut out = Vec::new();
    for name in ["bpe.json", "unigram.json", "wordpiece.json"] {
        let b = base(name);
        let mut ps = Vec::new();
        pointers(&b, String::new(), &mut ps);
        ps.retain(|p| !p.is_empty());
        for i in 0..per_base {
            let p = &ps[(next() % ps.len() as u64) as usize];
            let h = hostile[(next() % hostile.len() as u64) as usize].clone();
            out.push((
                format!("mut_{name}_{i}"),
                serde_json::to_vec(&with(b.clone(), p, h)).unwrap(),
            ));
        }
        // Truncations.
        let bytes = serde_json::to_vec(&b).unwrap();
        for k in 1..=8 {
            out.push((
                format!("cut_{name}_{k}"),
                bytes[..bytes.len() * k / 9].to_vec(),
            ));
        }
    }
    out
}

/// Runs the probe on `file`: (exit code or None for a signal, stdout, hung).
fn run_probe(file: &Path) -> (Option<i32>, String, bool) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_etc_tok_probe"))
        .arg(file)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            return (
                status.code(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                false,
            );
        }
        if start.elapsed() > Duration::from_secs(5) {
            let _ = child.kill();
            let _ = child.wait();
            return (None, String::new(), true);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn hostile_files_load_or_are_refused_with_a_message() {
    let dir: PathBuf = std::env::temp_dir().join(format!("etc_tok_hostile_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut files = cases();
    files.extend(mutations(30));
    assert!(files.len() >= 100, "{} files", files.len());
    let (mut loaded, mut refused, mut bad) = (0, 0, Vec::new());
    let mut seen = Vec::new();
    for (name, bytes) in &files {
        let path = dir.join(format!("{name}.json"));
        std::fs::write(&path, bytes).unwrap();
        let (code, out, hung) = run_probe(&path);
        let line = out.lines().next().unwrap_or("").to_string();
        match (code, hung) {
            (_, true) => bad.push(format!("{name}: still running after 5 s")),
            (None, _) => bad.push(format!("{name}: killed by a signal (an abort?)")),
            (Some(0), _) if line.starts_with("LOADED ") => loaded += 1,
            (Some(0), _) if line.starts_with("REFUSED ") && line.len() > name.len() + 20 => {
                refused += 1
            }
            (c, _) => bad.push(format!("{name}: exit {c:?}: {line}")),
        }
        seen.push(format!("{name}: {line}"));
        if let Some(keep) = std::env::var_os("ETC_TOK_HOSTILE_KEEP") {
            // Keeps the files (for a look, or as fuzz seeds).
            std::fs::copy(&path, Path::new(&keep).join(format!("{name}.json"))).unwrap();
        }
        std::fs::remove_file(&path).unwrap();
    }
    std::fs::remove_dir_all(&dir).unwrap();
    println!(
        "{} hostile files: {loaded} loaded, {refused} refused",
        files.len()
    );
    assert!(bad.is_empty(), "{bad:#?}");
    // The cases are refused, naming the field.
    let line = |n: &str| {
        seen.iter()
            .find(|l| l.starts_with(&format!("{n}: ")))
            .unwrap()
            .clone()
    };
    for (n, field) in [
        ("pad_fixed_2p40", "padding.strategy.Fixed"),
        ("pad_fixed_limit_plus_1", "padding.strategy.Fixed"),
        ("pad_multiple_2p40", "padding.pad_to_multiple_of"),
        ("pad_token_1mb", "padding.pad_token"),
        ("trunc_2p40", "truncation.max_length"),
        ("trunc_stride_max_minus_1", "truncation.stride"),
        ("trunc_1_with_template", "truncation.max_length"),
        ("replace_100kb", "normalizer"),
        ("replace_regex_empty_100kb", "normalizer"),
        ("replace_chain_30", "normalizer"),
        ("prepend_100kb", "normalizer"),
        ("bytelevel_pretok_chain_20", "pre_tokenizer"),
        ("precompiled_trie_4gib", "normalizer.precompiled_charsmap"),
        ("precompiled_long_entry", "normalizer.precompiled_charsmap"),
        ("template_a_1000_times", "post_processor"),
        ("template_5000_ids", "post_processor"),
        ("decoder_replace_100kb", "decoder"),
        ("decoder_replace_chain", "decoder"),
        ("added_70000", "added_tokens"),
        (
            "template_missing_special",
            "post_processor.single: special token",
        ),
        ("added_2000_bytes", "added_tokens: a token of 2000 bytes"),
        ("vocab_limit_plus_1", "model.vocab"),
    ] {
        let l = line(n);
        assert!(l.contains("REFUSED") && l.contains(field), "{l}");
    }
    for n in [
        "pad_fixed_limit",
        "trunc_ok",
        "replace_regex_empty_100",
        "trunc_3_pad_limit",
    ] {
        assert!(line(n).contains("LOADED"), "{}", line(n));
    }
}
