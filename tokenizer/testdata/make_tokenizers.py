#!/usr/bin/env python3
"""Makes the tokenizer test data, without downloading any model: three small
tokenizer.json files trained on this repository's own documentation, one per
model family, and expected.json, what the Python `tokenizers` package makes
of a few texts with them (the Rust tests check the crate gives the same).

    python3 -m pip install tokenizers==0.22.2   # the version the crate uses
    python3 tokenizer/testdata/make_tokenizers.py

Files (commit them together; retraining on changed documentation changes the
vocabularies, so expected.json must be regenerated with them):
  bpe.json        byte-level BPE, as GPT-2 and Qwen: every byte encodable;
                  specials <|endoftext|>, <|im_start|>, <|im_end|>
  wordpiece.json  WordPiece, as BERT: lower-cased, [CLS] ... [SEP] added
  unigram.json    Unigram with SentencePiece's Metaspace, as T5/Llama 2:
                  <s> added in front; specials <unk>, <s>, </s>
"""

import json
import os

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CORPUS = ["kernels/README.md", "bench/README.md", "runner/README.md"]
VOCAB = 500

# Texts the tests encode and decode: ASCII, punctuation, and (for the
# byte-level tokenizer) characters that are several UTF-8 bytes, split over
# several tokens.
TEXTS = [
    "The runner loads a program and checks every case.",
    "stream-ordered memory pool, pinned staging; one wait per execute!",
    "kernels/README.md: int4 matmul (sm_90) -> 1.5 ms",
    "  two  spaces\tand a tab\nnew line",
]
UNICODE_TEXTS = ["naïve café — 東京 🚀 ≥ µs", "é", "🚀🚀"]


def corpus():
    lines = []
    for f in CORPUS:
        with open(os.path.join(ROOT, f), encoding="utf-8") as fh:
            lines += [line for line in fh.read().splitlines() if line.strip()]
    return lines


def bpe(lines):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        min_frequency=2,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(lines, trainer)
    return tok


def wordpiece(lines):
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    trainer = trainers.WordPieceTrainer(
        vocab_size=VOCAB, special_tokens=["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"], show_progress=False
    )
    tok.train_from_iterator(lines, trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    return tok


def unigram(lines):
    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(
        vocab_size=VOCAB, special_tokens=["<unk>", "<s>", "</s>"], unk_token="<unk>", show_progress=False
    )
    tok.train_from_iterator(lines, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    return tok


def main():
    lines = corpus()
    expected = {}
    for name, make in [("bpe", bpe), ("wordpiece", wordpiece), ("unigram", unigram)]:
        tok = make(lines)
        tok.save(os.path.join(HERE, f"{name}.json"), pretty=False)
        texts = TEXTS + (UNICODE_TEXTS if name == "bpe" else [])
        cases = []
        for text in texts:
            ids = tok.encode(text, add_special_tokens=False).ids
            cases.append(
                {
                    "text": text,
                    "ids": ids,
                    "ids_special": tok.encode(text, add_special_tokens=True).ids,
                    "decoded": tok.decode(ids, skip_special_tokens=True),
                }
            )
        expected[name] = {"vocab_size": tok.get_vocab_size(with_added_tokens=True), "cases": cases}
    # One case per line: reviewable diffs.
    parts = []
    for name, e in expected.items():
        cases = ",\n".join("   " + json.dumps(c, ensure_ascii=False) for c in e["cases"])
        parts.append(f' "{name}": {{"vocab_size": {e["vocab_size"]}, "cases": [\n{cases}\n ]}}')
    with open(os.path.join(HERE, "expected.json"), "w", encoding="utf-8") as fh:
        fh.write("{\n" + ",\n".join(parts) + "\n}\n")


if __name__ == "__main__":
    main()
